"""The whole job, not only a step: tune wall time and steps per second at degree 1 and 2, extract
throughput at 1 and 2 threads, the cold and warm start of `dxstudio extract`, peak memory.

    python bench/whole_job.py PROJECT [--epochs N] [--degrees 1,2] [--extract-pages 100]
                                      [--start-runs 2] [--skip-tune]

PROJECT is a project folder with labels (e.g. `dxstudio import sroie ../shared/data/sroie-train
/tmp/sroie`). Each tune runs as its own `dxstudio tune PROJECT --out RUN --degree D [--epochs N]`
subprocess into a fresh run folder under a temporary directory, launched through a small Python
wrapper that reports the child's peak resident memory from the kernel
(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss). The runs at different degrees must write the
same model bytes (checked: SHA-256 of model.safetensors). Steps per second = the run's steps /
its wall time (which includes start-up, the held-out scoring after every epoch and writing the
model). Extract throughput is measured in one process on the first tune's model (or a new base
model with --skip-tune) over the project's first --extract-pages pages: one page at a time with
the kernels on 1 and on 2 threads, and two pages at a time on two Python threads with the
serial kernels. The last line of the output is one JSON object of the figures.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402

WRAPPER = ("import json, resource, subprocess, sys, time\n"
           "t0 = time.perf_counter(); p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
           "wall = time.perf_counter() - t0; r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
           "sys.stderr.write(p.stderr)\n"
           "print(json.dumps({'rc': p.returncode, 'wall_s': wall, 'maxrss_kib': r.ru_maxrss,\n"
           "                  'user_s': r.ru_utime, 'sys_s': r.ru_stime, 'stdout': p.stdout}))\n")


def cli() -> list[str]:
    return [sys.executable, "-m", "dxstudio.cli"]


def measured(cmd: list[str], env=None) -> dict:
    """Run cmd through the wrapper: wall time, CPU time and the kernel's peak RSS of the child."""
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True,
                          cwd=C.REPO, env=env)
    if proc.returncode != 0:
        raise C.BenchError(f"wrapper failed: {proc.stderr[-500:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        raise C.BenchError(f"{' '.join(cmd)} failed ({res['rc']}): {proc.stderr[-800:]}")
    return res


def tune_runs(project: Path, tmp: Path, degrees, epochs) -> tuple[dict, list[str]]:
    figures, lines, digests = {}, [], {}
    for d in degrees:
        out = tmp / f"run-degree{d}"
        # one training (--auto-folds 0), as the 12-epoch tune: since the LocalFirst work a tune
        # cross-validates by default (K + 1 trainings, bench/degree_folds.py measures those)
        cmd = cli() + ["tune", str(project), "--out", str(out), "--degree", str(d), "--auto-folds", "0"]
        if epochs:
            cmd += ["--epochs", str(epochs)]
        res = measured(cmd)
        last = json.loads(res["stdout"].strip().splitlines()[-1])
        events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        step_events = [e for e in events if e.get("kind") == "step"]
        steps = len(step_events) or None
        if step_events:  # the trainer's own clock: training only, without start-up and scoring
            figures[f"tune_train_s_d{d}"] = step_events[-1]["seconds"]
            figures[f"tune_train_steps_per_s_d{d}"] = steps / step_events[-1]["seconds"]
        model = Path(last["model"])
        digests[d] = hashlib.sha256(model.read_bytes()).hexdigest()
        figures.update({f"tune_wall_s_d{d}": res["wall_s"], f"tune_cpu_s_d{d}": res["user_s"] + res["sys_s"],
                        f"tune_peak_rss_mib_d{d}": res["maxrss_kib"] / 1024, f"tune_steps_d{d}": steps})
        if steps:
            figures[f"tune_steps_per_s_d{d}"] = steps / res["wall_s"]
        lines.append(f"tune --degree {d}: {res['wall_s']:.1f} s wall, {res['user_s'] + res['sys_s']:.1f} s CPU, "
                     f"{steps} steps ({figures.get(f'tune_steps_per_s_d{d}', float('nan')):.2f} steps/s; training "
                     f"alone {figures.get(f'tune_train_s_d{d}', float('nan')):.1f} s, "
                     f"{figures.get(f'tune_train_steps_per_s_d{d}', float('nan')):.2f} steps/s), "
                     f"peak RSS {res['maxrss_kib'] / 1024:.0f} MiB, model sha256 {digests[d][:16]}")
    same = len(set(digests.values())) == 1
    figures["tune_same_bytes"] = same
    if not same:
        raise C.BenchError(f"the degrees wrote different model bytes: {digests}")
    if len(degrees) > 1:
        d0, d1 = degrees[0], degrees[-1]
        figures[f"tune_speedup_d{d1}"] = figures[f"tune_wall_s_d{d0}"] / figures[f"tune_wall_s_d{d1}"]
        lines.append(f"speed-up degree {d1} over {d0}: {figures[f'tune_speedup_d{d1}']:.2f}x (same model bytes)")
    return figures, lines, (Path(last["model"]) if degrees else None)


def extract_speed(model_path: Path | None, project: Path, n_pages: int, tmp: Path) -> tuple[dict, list[str]]:
    from dxstudio.engine.kernels import runtime as nu
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import load_model, save_model
    import dxstudio.grounding  # noqa: F401 (hands the printing decoding its labelling rule, as the CLI does)
    from dxstudio.engine.extract import predict_page
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.page import load_page
    from dxstudio.engine.params import new_params

    if model_path is None:
        cfg = size_config("base")
        model_path = tmp / "base.safetensors"
        save_model(model_path, cfg, new_params(cfg, 0))
    loaded = load_model(model_path)
    cfg, rt = loaded.cfg, to_runtime(loaded.params)
    paths = sorted((project / "pages").glob("*.json"))[:n_pages]
    pages = [load_page(p) for p in paths]
    words = sum(len(p.words) for p in pages)
    for page in pages[:2]:
        predict_page(cfg, rt, page)  # warm-up

    def one_at_a_time():
        return [predict_page(cfg, rt, p) for p in pages]

    def two_threads():
        out = [None] * len(pages)

        def work(k):
            with nu.serial_kernels():
                for i in range(k, len(pages), 2):
                    out[i] = predict_page(cfg, rt, pages[i])

        ts = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out

    def at_threads(n):
        def run():
            nu.set_threads(n)
            return one_at_a_time()
        return run

    modes = {"kernels_1_thread": at_threads(1), "kernels_2_threads": at_threads(2), "pages_on_2_threads": two_threads}
    times = C.interleaved(modes, 3)
    cpu = {}
    for k, f in modes.items():  # the CPU time of one more round each (the work, without the waiting)
        c0 = time.process_time()
        f()
        cpu[k] = time.process_time() - c0
    preds = {k: f() for k, f in modes.items()}  # the same fields whichever way they ran
    ref = [(p.fields, p.tags.tobytes(), p.tag_probs.tobytes()) for p in preds["kernels_1_thread"]]
    for k, v in preds.items():
        if [(p.fields, p.tags.tobytes(), p.tag_probs.tobytes()) for p in v] != ref:
            raise C.BenchError(f"extract {k} gave different results")
    figures, lines = {}, [f"extract, {len(pages)} pages of {project} ({words / len(pages):.0f} words on average), "
                          f"3 interleaved rounds, median (min-max) per round:"]
    for k, v in times.items():
        pps = len(pages) / C.median(v)
        figures[f"extract_pps_{k}"] = pps
        figures[f"extract_pages_per_cpu_s_{k}"] = len(pages) / cpu[k]
        lines.append(f"  {k:20s} {C.median(v):7.2f} s ({min(v):.2f}-{max(v):.2f})  {pps:7.1f} pages/s  "
                     f"({len(pages) / cpu[k]:.1f} pages per CPU-second)")
    # one `dxstudio extract` over the same pages: peak RSS from the kernel
    res = measured(cli() + ["extract", str(model_path), *map(str, paths)])
    figures["extract_peak_rss_mib"] = res["maxrss_kib"] / 1024
    figures["extract_cli_wall_s"] = res["wall_s"]
    lines.append(f"  `dxstudio extract MODEL` on the {len(pages)} pages: {res['wall_s']:.2f} s wall, "
                 f"peak RSS {res['maxrss_kib'] / 1024:.0f} MiB")
    return figures, lines, model_path, paths


def start_times(model_path: Path, page_path: Path, runs: int, tmp: Path) -> tuple[dict, list[str]]:
    """Cold (empty NUMBA_CACHE_DIR: the page read on the reference kernels while a detached
    process prepares the compiled ones), that preparation's end, and warm start of `dxstudio extract`."""
    cold, prepared, warm, cached, rss = [], [], [], [], []
    for r in range(runs):
        cache = tmp / f"numba-cache-{r}"
        cache.mkdir()
        env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
        env.pop("DXSTUDIO_NUMBA_CACHE", None)
        cmd = cli() + ["extract", str(model_path), str(page_path)]
        t0 = time.perf_counter()
        res = measured(cmd, env)
        cold.append(res["wall_s"])
        prepared.append(C.wait_prepared(cache, t0))
        cached.append(sum(1 for _ in cache.rglob("*.nbi")))
        res = measured(cmd, env)
        warm.append(res["wall_s"])
        rss.append(res["maxrss_kib"] / 1024)
    figures = {"start_cold_s": C.median(cold), "prepared_after_s": C.median(prepared), "start_warm_s": C.median(warm),
               "kernels_cached": max(cached), "start_warm_peak_rss_mib": max(rss)}
    lines = [f"`dxstudio extract MODEL PAGE` start, median of {runs}: cold (empty NUMBA_CACHE_DIR, the reference "
             f"kernels) {C.median(cold):.2f} s ({', '.join(f'{s:.2f}' for s in cold)}); the background preparation "
             f"done {C.median(prepared):.1f} s after the cold start ({max(cached)} kernels compiled and cached); "
             f"warm {C.median(warm):.2f} s "
             f"({', '.join(f'{s:.2f}' for s in warm)}); warm peak RSS {max(rss):.0f} MiB"]
    return figures, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("project", type=Path)
    ap.add_argument("--epochs", type=int, default=None, help="tune epochs (default: the project's settings)")
    ap.add_argument("--degrees", default="1,2", help="tune degrees (default 1,2)")
    ap.add_argument("--extract-pages", type=int, default=100, help="pages for the extract throughput (default 100)")
    ap.add_argument("--start-runs", type=int, default=2, help="cold/warm start pairs (default 2)")
    ap.add_argument("--skip-tune", action="store_true", help="no tune; extract with a new base model")
    args = ap.parse_args(argv)
    figures = {}
    try:
        if not (args.project / "pages").is_dir():
            raise C.BenchError(f"{args.project}: not a project folder (no pages/)")
        degrees = [] if args.skip_tune else [int(x) for x in args.degrees.split(",")]
        print(f"machine: {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}")
        with tempfile.TemporaryDirectory(prefix="dxwhole-") as tmp:
            tmp = Path(tmp)
            model = None
            if degrees:
                f, lines, model = tune_runs(args.project, tmp, degrees, args.epochs)
                figures.update(f)
                print("\n".join(lines), flush=True)
            f, lines, model, paths = extract_speed(model, args.project, args.extract_pages, tmp)
            figures.update(f)
            print("\n".join(lines), flush=True)
            if args.start_runs:
                f, lines = start_times(model, paths[0], args.start_runs, tmp)
                figures.update(f)
                print("\n".join(lines))
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    except C.BenchError as e:
        print(f"bench/whole_job.py: {e}", file=sys.stderr)
        return 2
    print(C.json_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
