"""Our forward pass alone, many calls in a row: for comparing two commits of the engine.

    python bench/forward_alone.py [--threads 1] [--clock cpu|wall] [--turns 15]
    DXROOT=/path/to/other/checkout python bench/forward_alone.py     # that checkout's engine

The bench's pages (FUNSD forms cut to 50, 150 and 400 words) and model (base size, seed 0);
per size, `--turns` turns of 20 / 8 / 3 calls in a row, and the median (min) ms per forward.
No PyTorch: run it in each checkout, each in its own process, back to back (bench/README.md,
"What changed"). With DXROOT, the engine and bench helpers are imported from that checkout.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("DXROOT") or str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402
from dxstudio.engine.config import size_config  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.layers import Ops  # noqa: E402
from dxstudio.engine.model import forward, to_runtime  # noqa: E402
from dxstudio.engine.params import new_params  # noqa: E402

CALLS = {50: 20, 150: 8, 400: 3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="Numba threads (default 1)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="cpu (default) or wall")
    ap.add_argument("--turns", type=int, default=15, help="turns per size (default 15)")
    args = ap.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    C.set_threads(args.threads, torch_too=False)
    cfg = size_config("base")
    rt = to_runtime(new_params(cfg, 0))
    pages, _ = C.bench_pages(sorted(CALLS))
    ops = Ops("fast")
    out = []
    for n, page in pages.items():
        inp = window_inputs(page, cfg, 0, n)
        for _ in range(3):
            forward(cfg, rt, inp, ops)
        times = []
        for _ in range(args.turns):
            t0 = clock()
            for _ in range(CALLS[n]):
                forward(cfg, rt, inp, ops)
            times.append((clock() - t0) / CALLS[n] * 1e3)
        out.append(f"{n}: {statistics.median(times):.3f} ({min(times):.3f})")
    print("  ".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
