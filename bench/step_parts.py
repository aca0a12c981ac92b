"""Where one training step of ours goes, part by part (the split bench/README.md tables).

    python bench/step_parts.py [--sizes 150,400] [--repeats 9] [--clock cpu|wall] [--threads 1]

The step is bench/train_step.py's (`OurStep`: the base model, one FUNSD page, the tag loss with
backbone_scale 1, AdamW). A timer wraps, on their modules, each forward section (characters,
embedding, pair MLP, every block, the heads), each backward section (the heads with the final
layer norm, every block, the pair MLP, the embedding with the characters) and AdamW, for
`--repeats` steps after one warm-up step; each part's mean per step is printed beside the
whole step's median (the wrappers cost about a microsecond a call). The attention's adjoints run
inside each block's one compiled call, so they are timed apart: the block's own compiled kernel
(`_attention_bwd_ser`, or `_par` with more than one thread) on the step's saved activations of
every block, once per repeat, and their sum printed beside the blocks' backward. Timing only:
nothing here changes a byte (the wrappers call the same functions with the same arguments).
The last line is one JSON object of the figures.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402
from bench.train_step import OurStep  # noqa: E402
from dxstudio.engine import model as M  # noqa: E402
from dxstudio.engine import training as T  # noqa: E402
from dxstudio.engine.blocks import transformer as TB  # noqa: E402
from dxstudio.engine.config import size_config  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.params import new_params  # noqa: E402

# (module, attribute, part): the functions wrapped, each looked up on its module at every call
PARTS = (
    (M, "charconv_section", "forward: characters"),
    (M, "embed_section", "forward: embedding"),
    (M, "pair_bias_section", "forward: pair MLP"),
    (TB, "forward", "forward: blocks"),
    (M, "heads_section", "forward: heads"),
    (M, "heads_backward_section", "backward: heads and final layer norm"),
    (TB, "backward", "backward: blocks"),
    (M, "pair_bias_backward_section", "backward: pair MLP"),
    (M, "embed_backward_section", "backward: embedding and characters"),
    (T, "adamw_update", "AdamW"),
    (T, "forward", "forward (whole)"),
    (T, "backward", "backward (whole)"),
)


def _wrap(fn, part, spent, clock):
    def timed(*args, **kwargs):
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[part] += clock() - t0

    return timed


def attention_adjoints(cfg, state, inp, repeats, clock) -> list[float]:
    """Each repeat's time of the attention's adjoints of every block, on a forward's saved
    activations (the kernel the block's backward calls; da of the right shape, values arbitrary)."""
    from dxstudio.engine.layers import Ops

    out = M.forward(cfg, state.params, inp, Ops("fast"), keep=True)
    n, d = inp.n, cfg.d_model
    rng = np.random.default_rng(3)
    da = rng.standard_normal((n, d)).astype(np.float32) * np.float32(1e-2)
    scale = np.float32(TB._scale(np.float32, cfg.head_dim))
    kern = TB._attention_bwd_par if C_THREADS > 1 else TB._attention_bwd_ser
    dpbias_t = np.empty((cfg.layers * cfg.heads, n * n), np.float32)
    dqkv = np.empty((n, 3 * d), np.float32)
    acts = []
    for bc in out.cache.blocks:
        probs = bc.probs3 if bc.probs3 is not None else np.stack(bc.probs)
        acts.append((np.ascontiguousarray(bc.qkv, np.float32), np.ascontiguousarray(probs, np.float32)))
    times = []
    for _ in range(repeats + 1):
        t0 = clock()
        for l, (qkv, probs) in enumerate(acts):
            kern(da, qkv, probs, cfg.heads, scale, dqkv, dpbias_t, l * cfg.heads)
        times.append(clock() - t0)
    return times[1:]  # the first: a warm-up


C_THREADS = 1


def main(argv=None) -> int:
    global C_THREADS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="150,400", help="page sizes in words (default 150,400)")
    ap.add_argument("--repeats", type=int, default=9, help="timed steps per size (default 9)")
    ap.add_argument("--threads", type=int, default=1, help="Numba threads (default 1)")
    ap.add_argument("--clock", choices=sorted(C.CLOCKS), default="cpu", help="cpu (default) or wall")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        print("bench/step_parts.py: --repeats and --threads must be >= 1", file=sys.stderr)
        return 2
    C.CLOCK = args.clock
    C_THREADS = args.threads
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    try:
        sizes = C.parse_sizes(args.sizes)
        threads = C.set_threads(args.threads, torch_too=False)
        cfg = size_config("base")
        params = new_params(cfg, C.MODEL_SEED)
        pages, source = C.bench_pages(sizes)
    except C.BenchError as e:
        print(f"bench/step_parts.py: {e}", file=sys.stderr)
        return 2
    print(f"pages: {source}")
    print(C.target_line())
    print(f"threads: Numba {threads['numba']}; {args.repeats} steps after one warm-up, {args.clock} clock; "
          "each part's mean per step (ms)")
    figures: dict = {}
    for size in sizes:
        page = pages[size]
        n = len(page.words)
        inp = window_inputs(page, cfg, 0, n)
        ours = OurStep(cfg, params, inp, C.tag_targets(cfg, n))
        ours()  # warm-up (kernels loaded or compiled)
        spent: dict = defaultdict(float)
        saved = [(mod, name, getattr(mod, name)) for mod, name, _ in PARTS]
        steps = []
        try:
            for (mod, name, part), (_, _, fn) in zip(PARTS, saved):
                setattr(mod, name, _wrap(fn, part, spent, clock))
            for _ in range(args.repeats):
                t0 = clock()
                ours()
                steps.append(clock() - t0)
        finally:
            for mod, name, fn in saved:
                setattr(mod, name, fn)
        att = attention_adjoints(cfg, ours.state, inp, args.repeats, clock)
        step_ms = 1e3 * C.median(steps)
        parts = {part: 1e3 * spent[part] / args.repeats for _, _, part in PARTS}
        parts["backward: the attention's adjoints, all blocks (apart, median)"] = 1e3 * C.median(att)
        print(f"\n{size} words{'' if n == size else f' ({n})'}: the whole step, median (min-max): {C.spread(steps).strip()}")
        for part, ms in parts.items():
            print(f"  {part:<66} {ms:8.2f}")
        figures[f"step_ms_{size}"] = step_ms
        figures[f"parts_{size}"] = parts
        figures[f"loss_{size}"] = float(ours.loss)
    figures.update(threads=args.threads, repeats=args.repeats, clock=args.clock, tile=C.target_tile())
    print(C.json_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
