"""Two checkouts' forward passes in one process, turn about: for comparing two commits.

    python bench/forward_ab.py A_CHECKOUT B_CHECKOUT [--turns 30] [--sizes 50,150,400] [--threads 1]

Each checkout's `dxstudio` package is copied under a name of its own (dx_a, dx_b; its
compile cache with it, under the temporary folder, kept by the digest of its sources:
bench.common.engine_copy), so both engines load side by side. Per size,
`--turns` turns of 20 / 8 / 3 calls of each, the order swapped every turn, CPU clock; prints
each side's median (min) ms per forward and the median of the per-turn ratios B / A with its
interquartile range. Pairing the two sides turn by turn takes out most of the drift that two
separate runs of bench/forward_alone.py pick up on a shared machine (±4-10% between runs;
here the quartiles of B / A are typically within ±1.5%). The pages and model are the benches'
(bench/common.py: FUNSD forms cut to size, base size, seed 0).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALLS = {50: 20, 150: 8, 400: 3}


def load_engine(checkout: str, tag: str):
    """The checkout's engine as dx_<tag> (bench.common.engine_copy), a base-size model of seed 0."""
    from bench import common as C

    mod = C.engine_copy(checkout, tag, ("model", "config", "inputs", "layers", "params", "page"))
    cfg = mod["config"].size_config("base")
    rt = mod["model"].to_runtime(mod["params"].new_params(cfg, 0))
    return mod, cfg, rt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="checkout A (the baseline)")
    ap.add_argument("b", help="checkout B")
    ap.add_argument("--turns", type=int, default=30, help="turns per size (default 30)")
    ap.add_argument("--sizes", default="50,150,400", help="words per page (default 50,150,400)")
    ap.add_argument("--threads", type=int, default=1, help="Numba threads (default 1)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    from bench import common as C

    C.set_threads(args.threads, torch_too=False)
    pages, where = C.bench_pages(sizes)
    print(f"pages: {where}; {args.turns} turns, CPU clock, {args.threads} thread(s); A = {args.a}, B = {args.b}")
    sides = []
    for tag, checkout in (("a", args.a), ("b", args.b)):
        mod, cfg, rt = load_engine(checkout, tag)
        ops = mod["layers"].Ops("fast")
        # the page again as this engine's own Page class
        inps = {n: mod["inputs"].window_inputs(mod["page"].page_from_dict(pages[n].to_dict()), cfg, 0, n)
                for n in sizes}
        sides.append((mod["model"].forward, cfg, rt, ops, inps))
    for n in sizes:
        calls = CALLS.get(n, max(1, 2000 // n))
        for fwd, cfg, rt, ops, inps in sides:
            for _ in range(3):
                fwd(cfg, rt, inps[n], ops)
        ta, tb, ratios = [], [], []
        for turn in range(args.turns):
            order = (0, 1) if turn % 2 == 0 else (1, 0)
            ms = [0.0, 0.0]
            for k in order:
                fwd, cfg, rt, ops, inps = sides[k]
                t0 = time.process_time()
                for _ in range(calls):
                    fwd(cfg, rt, inps[n], ops)
                ms[k] = (time.process_time() - t0) / calls * 1e3
            ta.append(ms[0])
            tb.append(ms[1])
            ratios.append(ms[1] / ms[0])
        q = statistics.quantiles(ratios, n=4)
        print(f"{n} words: A {statistics.median(ta):.3f} ms (min {min(ta):.3f})  "
              f"B {statistics.median(tb):.3f} ms (min {min(tb):.3f})  "
              f"B / A {statistics.median(ratios):.4f} (quartiles {q[0]:.3f}-{q[2]:.3f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
