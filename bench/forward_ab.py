"""Two checkouts' forward passes turn about: for comparing two commits.

    python bench/forward_ab.py A_CHECKOUT B_CHECKOUT [--turns 30] [--sizes 50,150,400] [--threads 1] [--one-process]

Each checkout's engine runs in a worker process of its own (its checkout first on the path,
PYTHONPATH too; each prints the engine it imported), both alive for the whole run and pinned to
the same CPU (--cpu; unpinned, each stayed on its own core and took that core's neighbours); the parent
hands them turns of 20 / 8 / 3 calls per size in turn (the order swapped every turn) and each
worker times its calls on its own CPU clock. Prints each side's median (min) ms per forward and
the median of the per-turn ratios B / A with its interquartile range. Pairing the two sides turn
by turn takes out most of the drift that two separate runs of bench/forward_alone.py pick up on a
shared machine (±4-10% between runs, up to 25% on 8 December). The pages and model are the
benches' (bench/common.py: FUNSD forms cut to size, base size, seed 0).

--one-process: both engines in this process (bench.common.engine_copy, as dx_a and dx_b). Not
fair: the engine loaded second takes Numba's slow dispatch on every block call (8 December, Zen
5: identical code read B / A = 1.60 at 50 words). Numba keys its fast argument typing by a
fingerprint that does not tell the two copies' `Weights` named tuples apart, so the second
copy's block_forward misses it and goes through `_compile_for_args` (Python typeof of every
array) each call.
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


def worker(checkout: str, sizes, threads: int, cpu: int) -> int:
    """One side: the checkout's engine imported as dxstudio, its inputs built, then turns read
    from stdin ("N CALLS") and answered with the ms per call on this process's CPU clock.
    cpu >= 0: the process pinned to that CPU (both sides on the same one)."""
    import os

    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})
    sys.path.insert(0, str(Path(checkout).resolve()))
    from bench import common as C
    import dxstudio
    from dxstudio.engine.config import size_config
    from dxstudio.engine.inputs import window_inputs
    from dxstudio.engine.layers import Ops
    from dxstudio.engine.model import forward, to_runtime
    from dxstudio.engine.params import new_params

    C.set_threads(threads, torch_too=False)
    cfg = size_config("base")
    rt = to_runtime(new_params(cfg, 0))
    pages, where = C.bench_pages(sizes)
    ops = Ops("fast")
    inps = {n: window_inputs(pages[n], cfg, 0, n) for n in sizes}
    for n in sizes:
        for _ in range(3):
            forward(cfg, rt, inps[n], ops)
    print(f"ready {Path(dxstudio.__file__).resolve().parent}; pages: {where}", flush=True)
    for line in sys.stdin:
        n, calls = (int(v) for v in line.split())
        t0 = time.process_time()
        for _ in range(calls):
            forward(cfg, rt, inps[n], ops)
        print(f"{(time.process_time() - t0) / calls * 1e3:.6f}", flush=True)
    return 0


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, checkout, sizes, threads, cpu = sys.argv
        return worker(checkout, [int(s) for s in sizes.split(",")], int(threads), int(cpu))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="checkout A (the baseline)")
    ap.add_argument("b", help="checkout B")
    ap.add_argument("--turns", type=int, default=30, help="turns per size (default 30)")
    ap.add_argument("--sizes", default="50,150,400", help="words per page (default 50,150,400)")
    ap.add_argument("--threads", type=int, default=1, help="Numba threads (default 1)")
    ap.add_argument("--cpu", type=int, default=None,
                    help="the CPU both workers are pinned to (default: the last this process may use; "
                         "-1: not pinned). Unpinned, the scheduler kept each worker on its own core and the "
                         "same checkout against itself read up to 1.08 at 400 words on a shared machine")
    ap.add_argument("--one-process", action="store_true",
                    help="both engines in this process (biased against the one loaded second: see above)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if not args.one_process:
        return two_processes(args, sizes)
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

        def side_ms(k):
            fwd, cfg, rt, ops, inps = sides[k]
            t0 = time.process_time()
            for _ in range(calls):
                fwd(cfg, rt, inps[n], ops)
            return (time.process_time() - t0) / calls * 1e3

        alternate(n, args.turns, side_ms)
    return 0


def alternate(n: int, turns: int, side_ms) -> None:
    """Time sides A (0) and B (1) in turns, A first in even turns and B first in odd ones
    (side_ms(k): one side's ms a call), and print the medians and B / A's median and quartiles."""
    ta, tb, ratios = [], [], []
    for t in range(turns):
        ms = [0.0, 0.0]
        for k in ((0, 1) if t % 2 == 0 else (1, 0)):
            ms[k] = side_ms(k)
        ta.append(ms[0])
        tb.append(ms[1])
        ratios.append(ms[1] / ms[0])
    q = statistics.quantiles(ratios, n=4)
    print(f"{n} words: A {statistics.median(ta):.3f} ms (min {min(ta):.3f})  "
          f"B {statistics.median(tb):.3f} ms (min {min(tb):.3f})  "
          f"B / A {statistics.median(ratios):.4f} (quartiles {q[0]:.3f}-{q[2]:.3f})", flush=True)


def two_processes(args, sizes) -> int:
    import os
    import subprocess

    cpu = args.cpu
    if cpu is None:
        cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else -1
    procs = []
    for checkout in (args.a, args.b):
        env = dict(os.environ, PYTHONPATH=str(Path(checkout).resolve()))
        procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", checkout,
                                       ",".join(map(str, sizes)), str(args.threads), str(cpu)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
    for tag, proc in zip("AB", procs):
        print(f"{tag}: {proc.stdout.readline().strip()}", flush=True)
    print(f"{args.turns} turns, CPU clock (each worker's own), {args.threads} thread(s), "
          f"{'both on CPU %d' % cpu if cpu >= 0 else 'not pinned'}; "
          f"A = {args.a}, B = {args.b}", flush=True)

    def turn(k, n, calls):
        procs[k].stdin.write(f"{n} {calls}\n")
        procs[k].stdin.flush()
        return float(procs[k].stdout.readline())

    for n in sizes:
        calls = CALLS.get(n, max(1, 2000 // n))
        alternate(n, args.turns, lambda k: turn(k, n, calls))
    for proc in procs:
        proc.stdin.close()
        proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
