"""A tune's steps on a local Ray instance: every example's gradient set sent back (before issue
26 item 5) against one partial sum per task (each task continuing the previous task's sum in
example order), beside degree D in one process.

    python bench/degree_ray.py PROJECT [--steps 8] [--cpus 2] [--degree 2] [--batch 8]

The run's own examples, settings and starting model (TuneRun.prepare, nothing written), its
batches in schedule order. Contestants, each with its own TrainState, one step each per round:
`degree` (D threads in this process), `ray-sets` (RayGradients(summed=False): every set back),
`ray-sums` (RayGradients(summed=True), the default since 7 December 2026). After every round all
weights must be the same bytes (checked). Figures: docs/scale.md, "One partial sum a task".
Per step: wall (indicative on a loaded machine), the CPU seconds of this process and every
process it started (Ray's raylet, object store and workers; read from /proc), and the gradient
bytes that crossed processes (the runner's count). The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of `root` and every live process below it."""
    stats = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2:].split()
        stats[int(name)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK)
    below, total, todo = set(), 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in below or pid not in stats:
            continue
        below.add(pid)
        total += stats[pid][1]
        todo.extend(p for p, (ppid, _) in stats.items() if ppid == pid)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("project")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--degree", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)

    from dxstudio.engine import training
    from dxstudio.project import Project
    from dxstudio.scale import cluster
    from dxstudio.tuning import schedule
    from dxstudio.tuning.run import TuneRun

    project = Project.open(args.project)
    with tempfile.TemporaryDirectory() as tmp:
        run = TuneRun.prepare(project, Path(tmp) / "run", {"batch": args.batch})
    s = run.settings
    n = len(run.train_pages)
    t0 = time.perf_counter()
    cluster.connect("local", num_cpus=args.cpus)
    print(f"Ray local with {args.cpus} CPUs started in {time.perf_counter() - t0:.1f} s")
    try:
        names = ["degree", "ray-sets", "ray-sums"]
        runners = {"degree": None, "ray-sets": cluster.RayGradients(summed=False), "ray-sums": cluster.RayGradients(summed=True)}
        states = {}
        for name in names:
            st = run.train_settings()
            st.degree = args.degree if name == "degree" else 1
            states[name] = training.TrainState.start(run.cfg, run.start_params, st)
            states[name].runner = runners[name]
        res = {name: [] for name in names}
        me = os.getpid()
        for r in range(args.steps + 1):  # the first round untimed (workers start, kernels load)
            idx = schedule.batch_for_step(n, s["seed"], s["batch"], s["epochs"], r)
            lr = schedule.learning_rate(r, run.total_steps, s["warmup"], float(s["lr"]))
            examples = [run.example(i, r) for i in idx]
            k = r % len(names)
            for name in names[k:] + names[:k]:
                w0, c0 = time.perf_counter(), tree_cpu(me)
                training.train_step(states[name], examples, lr)
                wall, cpu = time.perf_counter() - w0, tree_cpu(me) - c0
                runner = runners[name]
                if r:
                    res[name].append(dict(wall=wall, cpu=cpu, back=runner.bytes_back if runner else 0,
                                          out=runner.bytes_out if runner else 0))
            for name in names[1:]:
                for key, p in states[names[0]].params.items():
                    if p.tobytes() != states[name].params[key].tobytes():
                        raise C.BenchError(f"round {r}: {name} differs from {names[0]} at {key}")
    finally:
        cluster.shutdown()
    out = {"steps": args.steps, "batch": args.batch, "cpus": args.cpus, "degree": args.degree,
           "words_mean": sum(e.inputs.n for e in run.examples) / n}
    print(f"{args.steps} steps of batch {args.batch}; the same weights bytes after every round")
    print(f"{'':>9} {'wall ms':>9} {'cpu ms (all processes)':>23} {'gradient bytes crossing':>24} {'weights out':>12}")
    for name in names:
        rs = res[name]
        row = {k: statistics.median(x[k] for x in rs) for k in ("wall", "cpu", "back", "out")}
        for k, v in row.items():
            out[f"{k}_{name}"] = v
        print(f"{name:>9} {1e3 * row['wall']:9.1f} {1e3 * row['cpu']:23.1f} {int(row['back']):24d} {int(row['out']):12d}")
    print(C.json_line(out))
    return 0


if __name__ == "__main__":
    C.run_main(main, "degree_ray.py")
