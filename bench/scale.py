"""Throughput of extract and of a training step in one process, on local worker processes and
on a local Ray instance (docs/scale.md). Start-up (spawning workers, starting Ray, the first
compile) is timed apart from the steady run. Needs the cluster extra for the Ray rows.

    python bench/scale.py [--pages 2000] [--steps 6] [--workers 1,2]

Pages: the bundled sample's 200 receipts repeated (new ids) to --pages; model: a new base
model on the sample's schema. Training: 48 sample pages, the sample's settings (base model,
batch 8, backbone scale 1.0), --steps steps. Prints figures, then one JSON line.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dxstudio.engine.config import size_config  # noqa: E402
from dxstudio.engine.params import new_params  # noqa: E402
from dxstudio.engine.model import to_runtime  # noqa: E402
from dxstudio.scale.ordered import Processes, Serial, ordered_map  # noqa: E402
from dxstudio.scale.pages import chunks, extract_chunk  # noqa: E402

SAMPLE = REPO / "resources" / "sample"


def items(n):
    pages = [json.loads(p.read_text()) for p in sorted((SAMPLE / "pages").glob("*.json"))]
    out = []
    for i in range(n):
        d = dict(pages[i % len(pages)], id=f"{pages[i % len(pages)]['id']}-{i // len(pages)}")
        out.append((f"page {i}", json.dumps(d).encode(), None))
    return out


def timed(make, its, chunk=8):
    t0 = time.perf_counter()
    with make() as b:
        list(ordered_map(b, chunks(its[:chunk * 4], chunk)))  # start-up and the first compile
        t1 = time.perf_counter()
        out = [r for rs in ordered_map(b, chunks(its, chunk)) for r in rs]
        t2 = time.perf_counter()
    return out, t1 - t0, len(its) / (t2 - t1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--workers", default="1,2")
    a = ap.parse_args()
    fields = [f["name"] for f in json.loads((SAMPLE / "dxproject.json").read_text())["schema"]]
    cfg = size_config("base", fields)
    shared = (cfg, to_runtime(new_params(cfg, 0)), None)
    its = items(a.pages)
    res = {"pages": a.pages}
    want, start, rate = timed(lambda: Serial(extract_chunk, shared, "fast"), its)
    res["serial_pages_per_s"] = rate
    print(f"extract serial: {rate:.0f} pages/s (start-up {start:.1f} s)")
    ws = [int(w) for w in a.workers.split(",")]
    for w in ws:
        got, start, rate = timed(lambda: Processes(w, extract_chunk, shared, "fast"), its)
        assert got == want, "processes gave other output"
        res[f"processes_{w}_pages_per_s"] = rate
        print(f"extract --workers {w}: {rate:.0f} pages/s (start-up {start:.1f} s)")
    try:
        import ray
    except ImportError:
        ray = None
        print("ray is not installed: no Ray rows")
    if ray is not None:
        from dxstudio.scale.cluster import RayGradients, RayTasks
        for w in ws:
            t0 = time.perf_counter()
            ray.init(address="local", include_dashboard=False, num_cpus=w, _node_ip_address="127.0.0.1",
                     log_to_driver=False, logging_level="ERROR")
            up = time.perf_counter() - t0
            got, start, rate = timed(lambda: RayTasks(extract_chunk, shared, "fast"), its)
            assert got == want, "Ray gave other output"
            res[f"ray_{w}_pages_per_s"] = rate
            res[f"ray_{w}_start_s"] = up
            print(f"extract --ray local, {w} CPUs: {rate:.0f} pages/s (Ray start {up:.1f} s, first tasks {start:.1f} s)")
            ray.shutdown()
    # training steps
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun

    tmp = Path(tempfile.mkdtemp())
    proj = tmp / "p"
    (proj / "pages").mkdir(parents=True)
    (proj / "labels").mkdir()
    for p in sorted((SAMPLE / "pages").glob("*.json"))[:48]:
        shutil.copy(p, proj / "pages")
        shutil.copy(SAMPLE / "labels" / p.name, proj / "labels")
    d = json.loads((SAMPLE / "dxproject.json").read_text())
    d["settings"].update({"checkpoint_every": 1000, "epochs": 20})
    (proj / "dxproject.json").write_text(json.dumps(d))
    project = Project.open(proj)

    def steps(runner, name, degree=1):
        run = TuneRun.prepare(project, tmp / name, {"degree": degree})
        run.runner = runner
        times = []
        last = [time.perf_counter()]

        def on(ev):
            if ev.kind == "step":
                now = time.perf_counter()
                times.append(now - last[0])
                last[0] = now
        run.train(on, stop_after=a.steps + 1)
        per = sorted(times[1:])[len(times[1:]) // 2]  # median, the first step apart
        return 1.0 / per, (tmp / name / "checkpoint.safetensors").read_bytes()

    rate1, ck1 = steps(None, "one")
    res["train_steps_per_s_degree1"] = rate1
    print(f"training, one process, degree 1: {rate1:.2f} steps/s")
    rate_t, ck_t = steps(None, "threads", degree=2)
    assert ck_t == ck1
    res["train_steps_per_s_degree2"] = rate_t
    print(f"training, one process, degree 2 (threads): {rate_t:.2f} steps/s")
    if ray is not None:
        ray.init(address="local", include_dashboard=False, num_cpus=2, _node_ip_address="127.0.0.1",
                 log_to_driver=False, logging_level="ERROR")
        g = RayGradients()
        rate2, ck2 = steps(g, "ray")
        ray.shutdown()
        assert ck2 == ck1, "Ray training gave other bytes"
        res.update(train_steps_per_s_ray2=rate2, gradient_bytes_per_step=g.bytes_back,
                   weight_bytes_per_step=g.bytes_out)
        print(f"training, --ray local with 2 CPUs: {rate2:.2f} steps/s; per step {g.bytes_back} gradient "
              f"bytes back, {g.bytes_out} weight bytes out (same checkpoint bytes as degree 1)")
    shutil.rmtree(tmp)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
