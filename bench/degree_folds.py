"""A cross-validated tune's parts in turn (degree 1) and side by side (degree D), and what the
shared reading of the pages saves (issue 26, item 4).

    python bench/degree_folds.py PROJECT [--folds 3] [--epochs 3] [--degree 2] [--prepare-rounds 3]

1. Preparing the run: FoldedRun.prepare (the pages read and their model inputs built once for
   the K folds and the final model) against preparing each of the K + 1 parts on its own
   (TuneRun.prepare without `shared`, as before), interleaved, CPU clock, medians.
2. `NUMBA_NUM_THREADS=1 dxstudio tune PROJECT --folds K --epochs N --degree 1` (the parts in
   turn on one core: its CPU time is the work), then `--degree D`, each its own
   subprocess (bench/whole_job.py's wrapper: wall, CPU of the child). The model file, every
   part's checkpoint and every fold's held-out predictions must be the same bytes (checked).
   On a loaded machine the wall times say little; the CPU times do, and from them the wall
   time on an idle machine with D cores: degree 1 on one thread = its CPU; degree D = the makespan of the
   parts handed to D threads longest first, each part's CPU taken as its share of the steps.

The last line is one JSON object of the figures.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402
from bench.whole_job import cli, measured  # noqa: E402
from bench.degree import makespan  # noqa: E402


def digests(run: Path) -> dict:
    out = {}
    for path in sorted(run.rglob("*")):
        if path.suffix in (".safetensors", ".json") and path.name in ("model.safetensors", "checkpoint.safetensors",
                                                                     "heldout.json"):
            out[str(path.relative_to(run))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("project", type=Path)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--degree", type=int, default=2)
    ap.add_argument("--prepare-rounds", type=int, default=3)
    args = ap.parse_args(argv)

    from dxstudio.project import Project
    from dxstudio.tuning.folds import FoldedRun
    from dxstudio.tuning.rundir import RunDir
    from dxstudio.tuning.run import TuneRun

    over = {"folds": args.folds, "epochs": args.epochs}
    project = Project.open(args.project)
    out = {"folds": args.folds, "epochs": args.epochs, "degree": args.degree}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shared_s, alone_s = [], []
        for r in range(args.prepare_rounds):
            for kind in (("shared", "alone") if r % 2 == 0 else ("alone", "shared")):
                c0 = time.process_time()
                if kind == "shared":
                    run = FoldedRun.prepare(project, tmp / "p", over)
                    shared_s.append(time.process_time() - c0)
                else:
                    rd = RunDir(tmp / "q")
                    TuneRun.prepare(project, rd.final_part().path, over, fold=(None, args.folds))
                    for k in range(args.folds):
                        TuneRun.prepare(project, rd.fold_part(k).path, over, fold=(k, args.folds))
                    alone_s.append(time.process_time() - c0)
        steps = [p.total_steps for p in run.parts]
        out.update(prepare_shared_s=statistics.median(shared_s), prepare_alone_s=statistics.median(alone_s),
                   part_steps=steps, usable_pages=len(run.train_pages))
        print(f"prepare, CPU s (median of {args.prepare_rounds}): parts sharing the pages {out['prepare_shared_s']:.2f}, "
              f"each part on its own {out['prepare_alone_s']:.2f}; {len(run.train_pages)} usable pages, steps {steps}")

        figures = {}
        for d in (1, args.degree):
            dest = tmp / f"run-d{d}"
            res = measured(cli() + ["tune", str(args.project), "--folds", str(args.folds), "--epochs", str(args.epochs),
                                    "--degree", str(d), "--out", str(dest)],
                           env={**os.environ, **({"NUMBA_NUM_THREADS": "1"} if d == 1 else {})})
            figures[d] = dict(wall=res["wall_s"], cpu=res["user_s"] + res["sys_s"], digests=digests(dest))
            print(f"degree {d}: wall {res['wall_s']:.1f} s, CPU {figures[d]['cpu']:.1f} s, "
                  f"{len(figures[d]['digests'])} files")
        one, many = figures[1], figures[args.degree]
        if one["digests"] != many["digests"]:
            diff = [k for k in one["digests"] if one["digests"][k] != many["digests"].get(k)]
            raise C.BenchError(f"degree {args.degree} differs from degree 1 in {diff}")
        total = sum(steps)
        shares = sorted((one["cpu"] * s / total for s in steps), reverse=True)
        model_d = makespan(shares, args.degree)
        out.update(wall_s_d1=one["wall"], cpu_s_d1=one["cpu"], wall_s_dD=many["wall"], cpu_s_dD=many["cpu"],
                   cpu_ratio=many["cpu"] / one["cpu"], model_wall_s_d1=one["cpu"], model_wall_s_dD=model_d,
                   model_speedup=one["cpu"] / model_d, same_bytes=True, files=len(one["digests"]))
        print(f"the same bytes at both degrees ({len(one['digests'])} files: model, checkpoints, held-out predictions)")
        print(f"CPU degree {args.degree} / degree 1: {out['cpu_ratio']:.2f}; idle-machine model: degree 1 "
              f"{one['cpu']:.1f} s, degree {args.degree} {model_d:.1f} s ({out['model_speedup']:.2f}x)")
    print(C.json_line(out))
    return 0


if __name__ == "__main__":
    C.run_main(main, "degree_folds.py")
