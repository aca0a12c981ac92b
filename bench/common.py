"""Shared helpers of the benchmarks: pages, the PyTorch mirror, interleaved timing, FLOP counts.

    pages = bench_pages((50, 150, 400))          # {words: Page}, real FUNSD forms cut to size
    mirror = load_torch_mirror()                  # training/parity/docextract_backward.py
    times = interleaved({"a": fa, "b": fb}, 5)    # {name: [seconds, ...]}, runs side by side

PyTorch is a development extra (pip install -e .[parity]); only the PyTorch parts need it.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as `python bench/forward.py` from a checkout
    sys.path.insert(0, str(REPO))

from dxstudio.engine.config import ModelConfig  # noqa: E402
from dxstudio.engine.inputs import WindowInputs  # noqa: E402
from dxstudio.engine.kernels.rng import SplitMix64  # noqa: E402
from dxstudio.engine.page import Page, Word  # noqa: E402

DATA = Path(os.environ.get("DXSTUDIO_DATA", REPO.parent / "shared" / "data"))
FUNSD_DIRS = (DATA / "funsd" / "training_data" / "annotations", DATA / "funsd" / "testing_data" / "annotations")
MIRROR_PATH = REPO / "training" / "parity" / "docextract_backward.py"

DEFAULT_SIZES = (50, 150, 400)
THREADS = 2  # Numba and PyTorch alike: the machine has 2 cores
MODEL_SEED = 0  # the benchmarked model: new_params(size_config("base"), MODEL_SEED)


class BenchError(RuntimeError):
    """A benchmark that cannot run; str() says what is missing or wrong."""


def copy_subproject(src: Path, dst: Path, page_ids, settings: dict | None) -> None:
    """A new project at dst (replaced if there) with src's schema, these of its pages and their
    labels; the project's settings become `settings` (None: the defaults)."""
    import shutil
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "pages").mkdir(parents=True)
    (dst / "labels").mkdir()
    d = json.loads((src / "dxproject.json").read_text(encoding="utf-8"))
    d.pop("settings", None)
    if settings is not None:
        d["settings"] = settings
    d["name"] = dst.name
    (dst / "dxproject.json").write_text(json.dumps(d, indent=2), encoding="utf-8")
    for pid in page_ids:
        shutil.copy(src / "pages" / f"{pid}.json", dst / "pages")
        label = src / "labels" / f"{pid}.json"
        if label.exists():
            shutil.copy(label, dst / "labels")


def run_main(main, name: str) -> None:
    """Exit with main()'s status; a BenchError is one line "NAME: message" on stderr, exit 2."""
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(2)


# ---------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------
def parse_sizes(text: str) -> tuple[int, ...]:
    """'50,150,400' -> (50, 150, 400); every size a word count in 1..512."""
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise BenchError(f"--sizes: expected comma-separated word counts, not {text!r}") from None
    if not sizes or any(not 1 <= s <= 512 for s in sizes):
        raise BenchError(f"--sizes: every size must be a word count in 1..512, not {text!r}")
    return sizes


def _funsd_pages() -> list[Page]:
    from dxstudio.importers import funsd_page  # the project's own FUNSD reader (reading order)

    paths = sorted(p for d in FUNSD_DIRS if d.is_dir() for p in d.glob("*.json"))
    return [funsd_page(p) for p in paths]


def cut_or_tile(page: Page, n_words: int, page_id: str) -> Page:
    """The page's first n_words words in reading order. A page with fewer words is tiled:
    copies stacked below it, the page height growing with each copy, until there are enough."""
    words = list(page.words)
    copies = 1
    while len(words) < n_words:
        dy = page.height * copies
        words += [Word(w.text, (w.box[0], w.box[1] + dy, w.box[2], w.box[3] + dy)) for w in page.words]
        copies += 1
    return Page(page_id, page.width, page.height * copies, tuple(words[:n_words]), None)


def synthetic_page(n_words: int, seed: int = 31) -> Page:
    """A form-like page on a grid when the real data is missing: receipt and form words from
    SplitMix64(seed), on lines of 4-8 words, 1000 x 1400 units."""
    vocab = ("TOTAL", "Total:", "RM12.50", "$1,234.56", "03/01/2019", "Invoice", "No:", "#4471",
             "Tax", "6%", "Qty", "Date:", "SUBTOTAL", "Name", "Address", "Phone:", "Signature",
             "Company", "Street", "12", "(3.00)", "Bhd.", "Price", "Amount", "Reference", "of")
    rng = SplitMix64(seed)
    words, x, y, on_line, line_len = [], 40.0, 40.0, 0, 6
    row_height = max(10.0, min(24.0, 1300.0 / (n_words / 5 + 1)))
    for _ in range(n_words):
        text = vocab[rng.next_u64() % len(vocab)]
        w = 11.0 * len(text)
        if on_line == line_len or x + w > 960:
            x, y, on_line = 40.0, y + row_height, 0
            line_len = 4 + rng.next_u64() % 5
        words.append(Word(text, (x, y, x + w, y + 0.7 * row_height)))
        x += w + 14.0
        on_line += 1
    return Page(f"synthetic-{n_words}", 1000.0, max(1400.0, y + 40.0), tuple(words), None)


def bench_pages(sizes) -> tuple[dict, str]:
    """({words: Page}, where they came from). For each size the FUNSD form with the fewest words
    at or above it, cut to that size; if every form is shorter, the longest one tiled; without
    the FUNSD data, synthetic pages."""
    try:
        real = _funsd_pages()
    except Exception as e:  # a broken data folder must not stop the benchmark: say so, go on
        print(f"note: cannot read FUNSD from {DATA} ({e}); using synthetic pages", file=sys.stderr)
        real = []
    if not real:
        return {n: synthetic_page(n) for n in sizes}, "synthetic grid pages (FUNSD not found)"
    real.sort(key=lambda p: (len(p.words), p.id))
    pages, used = {}, []
    for n in sizes:
        base = next((p for p in real if len(p.words) >= n), real[-1])
        pages[n] = cut_or_tile(base, n, f"{base.id}-{n}w")
        used.append(f"{n}: {base.id} ({len(base.words)} words{', tiled' if len(base.words) < n else ''})")
    return pages, "FUNSD forms cut to size: " + "; ".join(used)


def tag_targets(cfg: ModelConfig, n: int, seed: int = 5) -> np.ndarray:
    """Plausible BIO targets: about 80% O, the rest B-/I- tags of the schema, from SplitMix64."""
    z = SplitMix64(seed).block(n)
    field_tags = (z >> np.uint64(8)) % np.uint64(cfg.n_tags - 1) + np.uint64(1)
    return np.where(z % np.uint64(10) < 8, 0, field_tags).astype(np.int64)


def tag_class_weights(cfg: ModelConfig, field_weight: float = 3.0) -> tuple:
    """O weighs 1, every B-/I- tag the field weight (the seed's default 3)."""
    return (1.0,) + (field_weight,) * (cfg.n_tags - 1)


# ---------------------------------------------------------------------------------------
# Threads and timing
# ---------------------------------------------------------------------------------------
def set_threads(n: int = THREADS, torch_too: bool = True) -> dict:
    """Numba kernels and PyTorch on the same number of threads; returns what each reports."""
    import numba

    from dxstudio.engine.kernels import runtime as nu

    nu.set_threads(n)
    out = {"numba": numba.get_num_threads()}
    if torch_too:
        import torch

        torch.set_num_threads(n)
        out["torch"] = torch.get_num_threads()
    return out


def target_line() -> str:
    """The CPU the kernels are compiled for, its vector flags and the product tile that runs
    (kernels/isa.py: the one place the instruction set and the shape are decided)."""
    from dxstudio.engine.kernels import isa

    return isa.describe_target()


def target_tile() -> str:
    from dxstudio.engine.kernels import isa

    return isa.TILE


# ---------------------------------------------------------------------------------------
# Another checkout's engine in this process (a before / after in one run)
# ---------------------------------------------------------------------------------------
def engine_copy(checkout: str | Path, tag: str,
                modules=("config", "inputs", "page", "params", "training")):
    """{module: module} of another checkout's engine modules (dxstudio.engine.<module>), loaded
    beside this one as the package dx_<tag> (a copy of its dxstudio package with its own imports
    renamed). The copy is kept under the temporary folder by the digest of its sources, so its
    compile cache survives from one run to the next (the first run compiles its kernels)."""
    import hashlib
    import re
    import shutil
    import tempfile

    src = Path(checkout) / "dxstudio"
    if not (src / "engine" / "model.py").is_file():
        raise BenchError(f"{checkout}: no dxstudio/engine/model.py there (not a dxstudio checkout)")
    name = f"dx_{tag}"
    files = sorted(f for f in src.rglob("*.py") if "__pycache__" not in f.parts and f.relative_to(src).parts[0]
                   not in ("ui", "resources"))
    digest = hashlib.sha256(b"".join(f.relative_to(src).as_posix().encode() + b"\0" + f.read_bytes()
                                     for f in files)).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / "dxstudio-bench-engines" / f"{tag}-{digest}"
    dst = root / name
    if not (root / "complete").is_file():
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "ui", "resources"))
        for path in dst.rglob("*.py"):
            text = path.read_text()
            renamed = re.sub(r"\bdxstudio\.", f"{name}.", text)
            if renamed != text:
                path.write_text(renamed)
        (root / "complete").write_text(str(checkout) + "\n")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return {m: importlib.import_module(f"{name}.engine.{m}") for m in modules}


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = "wall"  # set by the scripts' --clock


def interleaved(contestants: dict, repeats: int, prepare: dict | None = None, calls: int = 1) -> dict:
    """Seconds per call of each contestant, run side by side: one call of each per round, the
    order turned by one every round (A B C, B C A, ...) so no one always follows the same
    neighbour on a busy machine. prepare[name], if given, runs untimed before each call.
    Call each contestant once beforehand to warm it up. The clock is CLOCK: "wall" (elapsed
    time) or "cpu" (this process's CPU time, all its threads: on a machine shared with other
    work it leaves out the time spent waiting for a core; meaningful when each side runs on
    one thread). calls > 1: each turn makes that many calls in a row and records their mean
    (the steady state of a loop over pages, with the contestant's weights warm in the caches;
    one call a turn measures it after the other contestants have evicted them)."""
    clock = CLOCKS[CLOCK]
    names = list(contestants)
    prepare = prepare or {}
    times = {name: [] for name in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            if name in prepare:
                prepare[name]()
            run = contestants[name]
            t0 = clock()
            for _ in range(calls):
                run()
            times[name].append((clock() - t0) / calls)
    return times


def median(xs) -> float:
    return float(statistics.median(xs))


def spread(xs) -> str:
    """'median ms (min-max)' for a list of seconds."""
    return f"{1e3 * median(xs):9.2f} ms ({1e3 * min(xs):.2f}-{1e3 * max(xs):.2f})"


def json_line(obj: dict) -> str:
    """The closing line of a benchmark: one JSON object, floats rounded for reading."""
    def tidy(v):
        if isinstance(v, float):
            return round(v, 4) if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: tidy(x) for k, x in v.items()}
        return v

    return json.dumps(tidy(obj), sort_keys=False)


# ---------------------------------------------------------------------------------------
# FLOPs: 2*M*K*N per matrix product (bias sums, layer norms and elementwise work not counted)
# ---------------------------------------------------------------------------------------
def _products(cfg: ModelConfig, n: int, char_positions: int) -> dict:
    """(M, K, N) of every product of the forward pass, by layer, for an n-word window."""
    d, dh, heads, hp = cfg.d_model, cfg.head_dim, cfg.heads, cfg.pair_hidden
    r = cfg.rel_dim
    return {
        "char_conv": [(char_positions, cfg.char_taps * cfg.char_dim, cfg.char_channels)],
        "char_proj": [(n, cfg.char_channels, d)],
        "feat_proj": [(n, cfg.word_features, d)],
        "pair1": [(n * n, cfg.pair_features, hp)],
        "pair2": [(n * n, hp, cfg.layers * heads)],
        "qkv": [(n, d, 3 * d)] * cfg.layers,
        "attention": [(n, dh, n), (n, n, dh)] * (cfg.layers * heads),  # scores, weighted sum
        "proj": [(n, d, d)] * cfg.layers,
        "fc1": [(n, d, cfg.ffn)] * cfg.layers,
        "fc2": [(n, cfg.ffn, d)] * cfg.layers,
        "tag_head": [(n, d, cfg.n_tags)],
        "role_head": [(n, d, len(cfg.roles))],
        "doc_head": [(1, d, len(cfg.doc_types))],
        "rel": [(n, d, 2 * r)] * 2 + [(n, r, n)] * 2,  # rel_q, rel_k, two pointer score maps
    }


def _flops(triples) -> int:
    return sum(2 * m * k * nn for m, k, nn in triples)


def forward_flops(cfg: ModelConfig, inp: WindowInputs) -> int:
    return sum(_flops(t) for t in _products(cfg, inp.n, int(inp.char_len.sum())).values())


def train_step_flops(cfg: ModelConfig, inp: WindowInputs) -> int:
    """Forward (every output, as both implementations compute it) plus the backward of the tag
    loss with every backbone tensor training: each product y = x W^T gives dX = dY W and
    dW = dY^T x (same 2*M*K*N each), except where x is data (feat_proj, pair1: dW only).
    The role, document and pointer heads get no backward (their losses are off)."""
    prods = _products(cfg, inp.n, int(inp.char_len.sum()))
    backward = {name: 2 * _flops(t) for name, t in prods.items()
                if name not in ("role_head", "doc_head", "rel", "feat_proj", "pair1")}
    backward["feat_proj"] = _flops(prods["feat_proj"])
    backward["pair1"] = _flops(prods["pair1"])
    return forward_flops(cfg, inp) + sum(backward.values())


# ---------------------------------------------------------------------------------------
# The PyTorch mirror (training/parity/docextract_backward.py) and a thin adapter
# ---------------------------------------------------------------------------------------
_MIRROR = None


def load_torch_mirror():
    """The parity script as a module. training/ is not a package, so it is loaded by path."""
    global _MIRROR
    if _MIRROR is None:
        if not MIRROR_PATH.is_file():
            raise BenchError(f"{MIRROR_PATH}: the PyTorch mirror of the model is missing")
        try:
            import torch  # noqa: F401
        except ImportError:
            raise BenchError("PyTorch is not installed: pip install -e .[parity]") from None
        spec = importlib.util.spec_from_file_location("docextract_backward", MIRROR_PATH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MIRROR = module
    return _MIRROR


def torch_leaf_params(params, requires_grad: bool) -> dict:
    """Container tensors (char_conv in Conv1d's (out, channel, tap) layout) as fp32 leaves."""
    import torch

    return {name: torch.tensor(np.asarray(v, np.float32), requires_grad=requires_grad)
            for name, v in params.items()}


def torch_first_max(cfg: ModelConfig, P: dict, inp: WindowInputs) -> list[np.ndarray]:
    """Adapter: the mirror's torch_forward pools the character channels at given first-max
    positions (the parity script takes them from the engine's reference forward, too slow for
    a 400-word benchmark and wrong once PyTorch's weights have taken their own AdamW steps).
    Here PyTorch finds them itself (argmax returns the first maximum), without gradient,
    outside the timed region."""
    import torch
    import torch.nn.functional as F

    out = []
    with torch.no_grad():
        for w in range(inp.n):
            length = int(inp.char_len[w])
            ids = torch.as_tensor(inp.char_ids[w, :length].astype(np.int64))
            seq = F.embedding(ids, P["char_emb"], padding_idx=0)
            h = F.relu(F.conv1d(seq.T[None], P["char_conv.weight"], P["char_conv.bias"], padding=1))[0]
            out.append(h.argmax(dim=1).numpy())
    return out


PREPARE_WAIT_S = 1800  # the longest wait for a first preparation (about 100 s of CPU)


def wait_prepared(cache: Path, t0: float) -> float:
    """Seconds from t0 until the preparation the cold run started has left its marker in the
    cache folder (readiness.mark_prepared) and ended (its busy file gone)."""
    while time.perf_counter() - t0 < PREPARE_WAIT_S:
        found = [f.name for f in cache.rglob("dxstudio-prepared-*")]
        if any(not n.endswith(".preparing") for n in found) and not any(n.endswith(".preparing") for n in found):
            return time.perf_counter() - t0
        time.sleep(0.5)
    raise BenchError(f"the background preparation left no marker in {cache} within {PREPARE_WAIT_S} s")
