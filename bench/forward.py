"""Forward-pass speed: pages per second of the fast path, the reference path and PyTorch fp32.

    python bench/forward.py [--repeats 7] [--sizes 50,150,400] [--start-runs 2] [--seed 0]

The same base model (new_params(size_config("base"), seed)) and the same pages (real FUNSD
forms cut to 50, 150 and 400 words) for all three. The runs are interleaved, one call of each
per round, and the medians are quoted: the machine is shared and noisy. Numba and PyTorch use
the same number of threads (--threads, default 2). Then the start time of `dxstudio extract MODEL PAGE` as a
subprocess, as a person meets it (docs/numerics.md "First use"): cold with an empty NUMBA_CACHE_DIR
(the page read on the reference kernels while a detached process prepares the compiled ones),
the wait until that preparation has finished (its marker in the cache folder), and warm, the next
run with the same cache folder on the compiled kernels. The last line of the output is one JSON
object of the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench import common as C  # noqa: E402
from dxstudio.engine.config import size_config  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.layers import Ops  # noqa: E402
from dxstudio.engine.model import forward, to_runtime  # noqa: E402
from dxstudio.engine.params import new_params  # noqa: E402

OUTPUTS = ("tag_logits", "role_logits", "doc_logits", "item_scores", "kv_scores")


def check_same_model(cfg, rt, inp, P, first_max, mirror) -> float:
    """The fast and reference paths give the same bytes, and PyTorch the same model: returns
    the largest |difference| of PyTorch's outputs from the engine's (fp32 rounding only)."""
    import torch

    fast = forward(cfg, rt, inp, Ops("fast"))
    ref = forward(cfg, rt, inp, Ops("reference"))
    for name in OUTPUTS:
        if not np.array_equal(getattr(fast, name), getattr(ref, name)):
            raise C.BenchError(f"{inp.n} words: the fast and reference paths differ in {name}")
    with torch.no_grad():
        theirs = mirror.torch_forward(cfg, P, inp, first_max, torch.float32)
    worst = max(float(np.max(np.abs(theirs[name].numpy() - getattr(fast, name)))) for name in OUTPUTS)
    if not worst < 1e-3:
        raise C.BenchError(f"{inp.n} words: PyTorch's outputs differ from the engine's by {worst}: "
                           "not the same model")
    return worst


def torch_forward_variants(cfg, params, inp, compile_ok: bool) -> dict:
    """{name: call} of the honest anchor's forward (bench/torch_fast.py) under
    torch.inference_mode(): batched eager, and the same under torch.compile."""
    import torch

    from bench.torch_fast import FastTorchModel, TorchBatch

    model = FastTorchModel(cfg, params).eval()
    for t in model.parameters():
        t.requires_grad_(False)
    args = TorchBatch.of(inp).args()
    out = {}

    def eager():
        with torch.inference_mode():
            return model(*args)

    out["eager"] = eager
    if compile_ok:
        compiled = torch.compile(model)

        def comp():
            with torch.inference_mode():
                return compiled(*args)

        out["compiled"] = comp
    return out


def forward_speed(cfg, params, pages, repeats: int, compile_ok: bool = True, calls: int = 1) -> tuple[dict, list[str]]:
    import torch

    mirror = C.load_torch_mirror()
    rt = to_runtime(params)
    P = C.torch_leaf_params(params, requires_grad=False)
    fast, ref = Ops("fast"), Ops("reference")
    figures, lines = {}, []
    for n, page in pages.items():
        inp = window_inputs(page, cfg, 0, n)
        first_max = C.torch_first_max(cfg, P, inp)  # fixed weights: once, untimed
        worst = check_same_model(cfg, rt, inp, P, first_max, mirror)
        ours = forward(cfg, rt, inp, fast)
        variants = torch_forward_variants(cfg, params, inp, compile_ok)
        for name, run in variants.items():  # the same model: within fp32 rounding of ours
            theirs = run()
            diff = max(float(np.max(np.abs(theirs[k].numpy() - getattr(ours, k)))) for k in OUTPUTS)
            if not diff < 1e-3:
                raise C.BenchError(f"{n} words: PyTorch {name}'s outputs differ from the engine's by {diff}")
            worst = max(worst, diff)

        def run_torch():
            with torch.no_grad():
                mirror.torch_forward(cfg, P, inp, first_max, torch.float32)

        contestants = {"fast": lambda: forward(cfg, rt, inp, fast),
                       "reference": lambda: forward(cfg, rt, inp, ref),
                       "torch": run_torch,  # the mirror: one Conv1d per word
                       **{f"torch_{k}": v for k, v in variants.items()},
                       # context, not a contestant: the mirror runs one Conv1d per word; this
                       # is the same per-word loop alone (the adapter), to show its share
                       "torch_chars": lambda: C.torch_first_max(cfg, P, inp)}
        for run in contestants.values():  # warm-up: compiled kernels, PyTorch's first call
            run()
        times = C.interleaved(contestants, repeats, calls=calls)
        med = {k: C.median(v) for k, v in times.items()}
        chars = times.pop("torch_chars")
        figures[f"ms_torch_chars_{n}"] = 1e3 * med["torch_chars"]
        torch_names = [k for k in times if k.startswith("torch")]
        best = min(torch_names, key=lambda k: med[k])
        gflop = C.forward_flops(cfg, inp) / 1e9
        lines.append(f"{n} words ({gflop:.2f} GFLOP per page; PyTorch max |diff| {worst:.1e}; "
                     f"fastest PyTorch: {best}):")
        for name in times:
            pps = 1.0 / med[name]
            rel = med[best] / med[name]
            lines.append(f"  {name:15s} {C.spread(times[name])}  {pps:8.2f} pages/s  "
                         f"{rel:6.3f} x fastest PyTorch  {gflop / med[name]:6.2f} GFLOP/s")
            figures[f"pps_{name}_{n}"] = pps
            figures[f"ms_{name}_{n}"] = 1e3 * med[name]
            if not name.startswith("torch"):
                figures[f"rel_{name}_{n}"] = rel  # against the fastest PyTorch variant
                figures[f"rel_{name}_mirror_{n}"] = med["torch"] / med[name]
        figures[f"fastest_torch_{n}"] = best
        lines.append(f"  (of the mirror's time, its per-word character Conv1d loop alone: {C.spread(chars)})")
    return figures, lines


def extract_command() -> list[str]:
    """The installed `dxstudio` next to this Python, else `python -m dxstudio.cli`."""
    script = Path(sys.executable).with_name("dxstudio")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "dxstudio.cli"]


def timed_extract(cmd: list[str], cache_dir: Path) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    env.pop("DXSTUDIO_NUMBA_CACHE", None)  # the engine's switch for the on-disk kernel cache: on
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=C.REPO)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise C.BenchError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        answer["fields"]
    except (ValueError, IndexError, KeyError, TypeError):
        raise C.BenchError(f"{' '.join(cmd)}: no JSON line with 'fields' in its output: {proc.stdout[-300:]!r}") from None
    return seconds


def start_times(cfg, params, page, runs: int) -> tuple[dict, list[str]]:
    """Cold (empty kernel cache) and warm (second run, same cache) start of `dxstudio extract`."""
    from dxstudio.engine.container import save_model
    from dxstudio.fsutil import write_json_atomic

    cold, prepared, warm, cached = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="dxbench-") as tmp:
        tmp = Path(tmp)
        model, page_file = tmp / "base.safetensors", tmp / "page.json"
        save_model(model, cfg, params)
        write_json_atomic(page_file, page.to_dict())
        cmd = extract_command() + ["extract", str(model), str(page_file)]
        for r in range(runs):
            cache = tmp / f"numba-cache-{r}"
            cache.mkdir()
            t0 = time.perf_counter()
            cold.append(timed_extract(cmd, cache))
            prepared.append(C.wait_prepared(cache, t0))
            cached.append(sum(1 for f in cache.rglob("*.nbc")))
            if not cached[-1]:  # the preparation must have compiled its kernels into the fresh folder
                raise C.BenchError(f"the preparation wrote no compiled kernels to NUMBA_CACHE_DIR={cache}")
            warm.append(timed_extract(cmd, cache))
            shutil.rmtree(cache, ignore_errors=True)
    figures = {"start_cold_s": C.median(cold), "prepared_after_s": C.median(prepared),
               "start_warm_s": C.median(warm), "kernels_cached": max(cached)}
    lines = [f"`dxstudio extract MODEL PAGE` ({len(page.words)} words, base model), median of {runs}:",
             f"  cold (empty NUMBA_CACHE_DIR, the reference kernels): {figures['start_cold_s']:.2f} s  "
             f"(runs: {', '.join(f'{s:.2f}' for s in cold)})",
             f"  the background preparation done, from the cold run's start: {figures['prepared_after_s']:.1f} s  "
             f"(runs: {', '.join(f'{s:.1f}' for s in prepared)}; {max(cached)} kernels compiled and cached)",
             f"  warm (same cache, 2nd run):   {figures['start_warm_s']:.2f} s  "
             f"(runs: {', '.join(f'{s:.2f}' for s in warm)})"]
    return figures, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds per size (default 7)")
    ap.add_argument("--sizes", default=",".join(map(str, C.DEFAULT_SIZES)),
                    help="page sizes in words (default 50,150,400)")
    ap.add_argument("--start-runs", type=int, default=2,
                    help="cold/warm pairs of the extract start time (default 2; 0 skips it)")
    ap.add_argument("--seed", type=int, default=C.MODEL_SEED, help="model seed (default 0)")
    ap.add_argument("--threads", type=int, default=C.THREADS,
                    help="threads of Numba and of PyTorch alike (default 2, the core count)")
    ap.add_argument("--clock", choices=sorted(C.CLOCKS), default="wall",
                    help="wall: elapsed time (default); cpu: the process's CPU time (a shared machine)")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variant")
    ap.add_argument("--calls", type=int, default=1,
                    help="calls in a row per contestant and turn, timed together (default 1: each call "
                         "after the others; 10: the steady state of a loop over pages, as extract runs)")
    args = ap.parse_args(argv)
    C.CLOCK = args.clock
    try:
        sizes = C.parse_sizes(args.sizes)
        if args.threads < 1:
            raise C.BenchError("--threads must be >= 1")
        if args.repeats < 1 or args.start_runs < 0 or args.calls < 1:
            raise C.BenchError("--repeats and --calls must be >= 1 and --start-runs >= 0")
        threads = C.set_threads(args.threads)
        cfg = size_config("base")
        params = new_params(cfg, args.seed)
        pages, source = C.bench_pages(sizes)
        print(f"docextract-v0 base, seed {args.seed}, {sum(v.size for v in params.values())} parameters")
        print(f"threads: Numba {threads['numba']}, PyTorch {threads['torch']} (set equal)")
        print(f"pages: {source}")
        print(C.target_line())
        print(f"{args.repeats} interleaved rounds of {args.calls} call(s) each; median (min-max) per page, "
              f"{args.clock} clock, forward pass only (inputs built beforehand)")
        figures, lines = forward_speed(cfg, params, pages, args.repeats, not args.no_compile, args.calls)
        print("\n".join(lines))
        if args.start_runs:
            start_page = pages[150] if 150 in pages else pages[sizes[0]]
            start, lines = start_times(cfg, params, start_page, args.start_runs)
            print("\n".join(lines))
            figures.update(start)
    except C.BenchError as e:
        print(f"bench/forward.py: {e}", file=sys.stderr)
        return 2
    figures.update(threads=args.threads, repeats=args.repeats, clock=args.clock, calls=args.calls,
                   tile=C.target_tile())
    print(C.json_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
