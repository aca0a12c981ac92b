"""Where a training step's cores go at each degree: CPU per step, the per-example tasks, the
serial part, and what that predicts for an idle machine (a metric that survives a loaded one).

    python bench/degree.py PROJECT [--steps 24] [--contestants 1s,1,2] [--threads 2]

PROJECT: a project with labels (e.g. `dxstudio import sroie ../shared/data/sroie-train /tmp/sroie`).
The run's own examples, settings and starting model (TuneRun.prepare, nothing written) and its
batches in schedule order (from step --first). Contestants, each with its own TrainState from
the same start, one call each per round, the order turned every round:

* `1s`: degree 1, every kernel serial (one core: the work itself);
* `1`:  degree 1, the kernels on Numba's threads (--threads, per-operation parallelism);
* `D` (2, 3, ...): degree D, the examples on D Python threads with the serial kernels;
* `Dold` (2old, ...): the same with the runner before issue 26 item 3 (a thread pool made and
  joined every step, the examples handed out in example order, summed after the last one).

After every round the weights of all contestants must be the same bytes (checked). Per call:
wall, the process's CPU (every thread, time.process_time), and for each example task its
thread's CPU (time.thread_time inside example_gradients) and its wall window. From those:

* `cpu_ms`: CPU seconds per step, all threads; `cpu_over_1s`: against one core's.
* `task_cpu_ms`: the per-example work, summed; `serial_ms`: the caller thread's CPU outside
  the tasks (checks, the in-order sum, the norm, AdamW), measured with time.thread_time.
* `model_ms`: the step's wall time on an idle machine with D cores predicted from the CPU
  figures: serial + the makespan of the tasks' CPU times handed to D threads in the order
  the pool takes them (a thread that frees up takes the next). `model_speedup` = 1s's CPU /
  model_ms. The model leaves out the wait for the GIL (Python between compiled calls):
  `fixed_ms` bounds it, the cost of one example of one word (almost all dispatch, Python and
  allocation), measured apart on the caller's thread.
* `wait_share`: 1 - the tasks' CPU / (D x the wall of the task window), on this machine: the
  share of the task window the worker threads did not run (a core taken by someone else, the
  GIL, one thread idle at the end of the batch). Meaningful on an idle machine only; the
  loaded machine inflates it.

The last line is one JSON object of the medians.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402


def makespan(costs, degree: int) -> float:
    """Finish time of tasks handed out in order to `degree` threads, each free thread taking the next."""
    free = [0.0] * degree
    for c in costs:
        k = min(range(degree), key=lambda i: free[i])
        free[k] += c
    return max(free)


def old_batch_gradients(cfg, params, examples, settings, wanted, runner=None):
    """engine/training.py's batch_gradients at b960b07 (the contestant `Dold`)."""
    from collections import OrderedDict
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from dxstudio.engine import training
    from dxstudio.engine.kernels import runtime

    for i, ex in enumerate(examples):
        training._check_targets(cfg, ex, i)
    b = len(examples)

    def one(ex):
        with runtime.serial_kernels():
            return training.example_gradients(cfg, params, ex, settings, wanted, b)

    with ThreadPoolExecutor(max_workers=settings.degree) as pool:
        results = list(pool.map(one, examples))
    total = OrderedDict()
    loss = 0.0
    for l, g in results:
        loss = loss + l
        for name in wanted:
            if name in g:
                total[name] = g[name] if name not in total else total[name] + g[name]
    for name in wanted:
        if name not in total:
            total[name] = np.zeros_like(params[name])
    return loss / b, total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("project")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--first", type=int, default=0, help="first step of the schedule to run")
    ap.add_argument("--contestants", default="1s,1,2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=12)
    args = ap.parse_args(argv)

    from dxstudio.engine import training
    from dxstudio.engine.kernels import runtime
    from dxstudio.project import Project
    from dxstudio.tuning import schedule
    from dxstudio.tuning.run import TuneRun

    threads = C.set_threads(args.threads, torch_too=False)
    print(C.target_line())
    print(f"threads: {threads}")
    project = Project.open(args.project)
    with tempfile.TemporaryDirectory() as tmp:
        run = TuneRun.prepare(project, Path(tmp) / "run", {"epochs": args.epochs})
    s = run.settings
    n = len(run.train_pages)
    names = [c.strip() for c in args.contestants.split(",") if c.strip()]
    states = {}
    for name in names:
        st = run.train_settings()
        st.degree = 1 if name in ("1", "1s") else int(name.removesuffix("old"))
        states[name] = training.TrainState.start(run.cfg, run.start_params, st)

    records = []  # (thread id, wall0, wall1, cpu) of each task of the current call
    real = training.example_gradients

    def spy(*a, **k):
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return real(*a, **k)
        finally:
            records.append((threading.get_ident(), w0, time.perf_counter(), time.thread_time() - c0))

    training.example_gradients = spy

    def call(name, examples, lr):
        records.clear()
        w0, p0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
        if name == "1s":
            with runtime.serial_kernels():
                training.train_step(states[name], examples, lr)
        elif name.endswith("old"):
            new, training.batch_gradients = training.batch_gradients, old_batch_gradients
            try:
                training.train_step(states[name], examples, lr)
            finally:
                training.batch_gradients = new
        else:
            training.train_step(states[name], examples, lr)
        wall, cpu, own = time.perf_counter() - w0, time.process_time() - p0, time.thread_time() - t0
        me = threading.get_ident()
        tasks = list(records)
        task_cpu = sum(r[3] for r in tasks)
        serial = own - sum(r[3] for r in tasks if r[0] == me)
        d = states[name].settings.degree
        order = [r[3] for r in sorted(tasks, key=lambda r: r[1])]  # as the threads took them
        model = serial + makespan(order, d)
        window = (max(r[2] for r in tasks) - min(r[1] for r in tasks)) if tasks else 0.0
        wait = 1.0 - task_cpu / (d * window) if window > 0 else 0.0
        return dict(wall=wall, cpu=cpu, task_cpu=task_cpu, serial=serial, model=model, wait=wait)

    def batch(step):
        idx = schedule.batch_for_step(n, s["seed"], s["batch"], s["epochs"], step)
        lr = schedule.learning_rate(step, run.total_steps, s["warmup"], float(s["lr"]))
        return [run.example(i, step) for i in idx], lr

    # one untimed round (the first compile, caches), then the timed rounds
    results = {name: [] for name in names}
    for r in range(args.steps + 1):
        step = args.first + r
        examples, lr = batch(step)
        k = r % len(names)
        for name in names[k:] + names[:k]:
            res = call(name, examples, lr)
            if r:
                results[name].append(res)
        first = states[names[0]].params
        for name in names[1:]:
            for key, p in first.items():
                if p.tobytes() != states[name].params[key].tobytes():
                    raise C.BenchError(f"step {step}: contestant {name} differs from {names[0]} at {key}")
    training.example_gradients = real

    # the fixed cost of one example: one word, the base model, the caller's thread, serial kernels
    ex1 = batch(0)[0][0]
    from dxstudio.engine.inputs import window_inputs
    pid, page, t = run.train_pages[0]
    one = training.Example(window_inputs(page, run.cfg, 0, 1), training.Targets(tags=ex1.targets.tags[:1]))
    wanted = list(training.trainable_scales(run.cfg, states[names[0]].settings))
    fixed = []
    with runtime.serial_kernels():
        for _ in range(7):
            c0 = time.thread_time()
            training.example_gradients(run.cfg, states[names[0]].params, one, states[names[0]].settings, wanted, 4)
            fixed.append(time.thread_time() - c0)
    fixed_ms = 1e3 * statistics.median(fixed)
    out = {}

    # the held-out scoring after each epoch: every held-out page, one core (serial kernels, the
    # caller's thread) against run.py's predict_pages on D threads (each page's thread CPU)
    from dxstudio.engine import extract
    from dxstudio.tuning import run as run_module

    pages = [r[1] for r in run.heldout_pages]
    params = states[names[0]].params
    real_predict = extract.predict_page
    page_cpu = []

    def timed_predict(*a, **k):
        c0 = time.thread_time()
        try:
            return real_predict(*a, **k)
        finally:
            page_cpu.append(time.thread_time() - c0)

    run_module.predict_page = timed_predict
    score = {"one": [], "many": [], "model": []}
    degree = max([int(x.removesuffix("old")) for x in names if x not in ("1", "1s")] or [2])
    try:
        for r in range(3):
            page_cpu.clear()
            c0 = time.process_time()
            with runtime.serial_kernels():
                one_preds = run_module.predict_pages(run.cfg, params, pages, s["kernels"], s["decoding"], 1)
            score["one"].append(time.process_time() - c0)
            page_cpu.clear()
            c0 = time.process_time()
            many = run_module.predict_pages(run.cfg, params, pages, s["kernels"], s["decoding"], degree)
            score["many"].append(time.process_time() - c0)
            score["model"].append(makespan(list(page_cpu), degree))
            if [p.tags.tobytes() for p in many] != [p.tags.tobytes() for p in one_preds]:
                raise C.BenchError("the held-out pages side by side predicted other tags")
    finally:
        run_module.predict_page = real_predict

    med = lambda xs: 1e3 * statistics.median(xs)  # noqa: E731
    out.update(score_pages=len(pages), score_cpu_ms_1s=med(score["one"]), score_cpu_ms_many=med(score["many"]),
               score_model_ms_many=med(score["model"]), score_degree=degree)
    print(f"held-out scoring, {len(pages)} pages: one core {out['score_cpu_ms_1s']:.0f} ms CPU; degree {degree}: "
          f"{out['score_cpu_ms_many']:.0f} ms CPU, idle-machine model {out['score_model_ms_many']:.0f} ms")
    out.update({"steps": args.steps, "batch": s["batch"], "words_mean": sum(e.inputs.n for e in run.examples) / n,
                "fixed_ms": fixed_ms})
    base = med([x["cpu"] for x in results["1s"]]) if "1s" in results else None
    print(f"{args.steps} steps of batch {s['batch']} from step {args.first}; the same weights bytes after every round")
    print(f"one example of one word (dispatch, Python, allocation): {fixed_ms:.2f} ms CPU")
    print(f"{'':>4} {'wall':>9} {'cpu':>9} {'cpu/1s':>7} {'tasks cpu':>10} {'serial':>8} {'model':>9} {'speedup':>8} {'wait':>6}")
    for name in names:
        rs = results[name]
        row = {k: med([x[k] for x in rs]) for k in ("wall", "cpu", "task_cpu", "serial", "model")}
        row["wait"] = statistics.median([x["wait"] for x in rs])
        row["cpu_over_1s"] = row["cpu"] / base if base else None
        row["model_speedup"] = base / row["model"] if base else None
        for k, v in row.items():
            out[f"{k}_{'ms_' if k in ('wall', 'cpu', 'task_cpu', 'serial', 'model') else ''}{name}"] = v
        print(f"{name:>4} {row['wall']:9.1f} {row['cpu']:9.1f} {row['cpu_over_1s'] or 0:7.2f} {row['task_cpu']:10.1f} "
              f"{row['serial']:8.2f} {row['model']:9.1f} {row['model_speedup'] or 0:8.2f} {row['wait']:6.2f}")
    print(C.json_line(out))
    return 0


if __name__ == "__main__":
    C.run_main(main, "degree.py")
