"""Past one process (dxstudio/scale, docs/scale.md): extract and route on local worker
processes and on a local Ray instance (127.0.0.1 only), tune --ray; always the bytes of one
process. The Ray tests skip when the cluster extra is not installed."""
from __future__ import annotations

import functools
import io
import json
import os
import re
import signal
import shutil
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dxstudio import cli
from dxstudio.scale.pages import chunks, count_pages, extract_chunk, page_items

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "resources" / "sample"
FIELDS = "total,subtotal,tax,cash,change"  # the bundled sample's schema
# seconds for one Ray test, or Ray's start or stop (all of them take about 30 s when idle): past
# pytest-timeout's 600 s, which names the test first; this watchdog ends the run only where
# that cannot (Ray holding the interpreter). It was 300 s for the module's Ray tests together,
# which at load 15 on 2 cores ran over and ended the whole suite with its traceback captured
# (nothing on the terminal).
RAY_TEST_LIMIT = 900


def sample_pages(n):
    return sorted((SAMPLE / "pages").glob("*.json"))[:n]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.safetensors"
    assert cli.main(["new-model", str(path), "--size", "tiny", "--fields", FIELDS]) == 0
    return path


@pytest.fixture
def inputs(tmp_path):
    """A folder of 6 pages, a JSON-lines file of 5 more with one bad line, and a missing file."""
    folder = tmp_path / "folder"
    folder.mkdir()
    for p in sample_pages(6):
        shutil.copy(p, folder)
    lines = [p.read_text() for p in sample_pages(11)[6:]]
    lines = [json.dumps(json.loads(t)) for t in lines]
    lines.insert(2, '{"id": "broken", "width": 10}')
    (tmp_path / "more.jsonl").write_text("\n".join(lines) + "\n\n")
    return [str(folder), str(tmp_path / "more.jsonl"), str(tmp_path / "missing.json")]


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_page_items_reads_folders_jsonl_and_stdin_in_order(inputs):
    items = list(page_items(inputs))
    assert count_pages(inputs) == len(items) == 6 + 6 + 1
    assert [label for label, _, _ in items[6:9]] == [f"{inputs[1]} line {n}" for n in (1, 2, 3)]
    assert items[-1][1] is None and items[-1][2].startswith(f"{inputs[2]}: ")
    stdin = io.BytesIO(b'{"id": "a"}\n\n{"id": "b"}\n')
    assert [label for label, _, _ in page_items(["-"], stdin=stdin)] == ["<stdin> line 1", "<stdin> line 3"]
    assert [len(c) for c in chunks(range(7), 3)] == [3, 3, 1]


def test_extract_workers_gives_the_serial_bytes_and_reports_bad_pages(model, inputs, capsys):
    code, serial, err = run_cli(["extract", str(model), *inputs], capsys)
    assert code == 1  # partial: two bad pages, each named
    assert f"{inputs[1]} line 3: missing 'width' or 'height'" in err and f"{inputs[2]}: " in err
    assert len(serial.splitlines()) == 11
    assert [json.loads(l)["id"] for l in serial.splitlines()][:6] == [p.stem for p in sample_pages(6)]
    code, parallel, _ = run_cli(["extract", str(model), *inputs, "--workers", "2", "--chunk", "2"], capsys)
    assert code == 1 and parallel == serial


def test_ray_flag_without_ray_says_how_to_install(model, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    monkeypatch.delitem(sys.modules, "dxstudio.scale.cluster", raising=False)
    import dxstudio.scale

    monkeypatch.delattr(dxstudio.scale, "cluster", raising=False)  # an earlier test's import
    code, out, err = run_cli(["extract", str(model), str(sample_pages(1)[0]), "--ray", "local"], capsys)
    assert code == 2 and out == ""
    assert 'pip install "dxstudio[cluster]"' in err
    code, out, err = run_cli(["pretrain", "synthetic:2", "--size", "tiny", "--steps", "1", "--out",
                              str(model.parent / "never"), "--ray", "local"], capsys)
    assert code == 2 and out == "" and 'pip install "dxstudio[cluster]"' in err
    assert not (model.parent / "never").exists()  # said before anything is made


# -- route against a local labelling endpoint that fails and stalls ----------------------------------

from test_labelling import FakeEndpoint  # noqa: E402  (the same server the label tests use)

ANSWERS = {"total": "9.99", "subtotal": "9.00", "tax": "0.99", "cash": None, "change": None}


@pytest.fixture
def route_project(tmp_path):
    proj = tmp_path / "project"
    (proj / "pages").mkdir(parents=True)
    d = json.loads((SAMPLE / "dxproject.json").read_text())
    server = FakeEndpoint([("status", 500), ("slow", 3.0, ANSWERS)], default=("good", ANSWERS))
    d["labelling"] = {"url": server.url, "model": "test-model"}
    (proj / "dxproject.json").write_text(json.dumps(d))
    yield proj, server
    server.close()


def confidences(serial_out):
    return sorted(v["confidence"] for line in serial_out.splitlines()
                  for v in json.loads(line)["fields"].values() if v["value"] is not None)


def check_route(out, serial, threshold, server):
    """`threshold`: one number for every field, or {field: number}."""
    lines = [json.loads(l) for l in out.splitlines()]
    summary = lines.pop()["summary"]
    pages = [json.loads(l) for l in serial.splitlines()]
    assert [p["id"] for p in lines] == [p["id"] for p in pages]
    asked_pages = 0
    for got, want in zip(lines, pages):
        asked = False
        for f, v in want["fields"].items():
            g = got["fields"][f]
            t = threshold[f] if isinstance(threshold, dict) else threshold
            if v["value"] is not None and v["confidence"] >= t:
                assert g == {"value": v["value"], "source": "local", "confidence": v["confidence"]}
            else:
                asked = True
                assert g["source"] == "labelling model"  # grounded as label grounds (issue 27)
                assert (g["value"] == ANSWERS[f]) if g["grounding"] != "absent" else \
                    (g["value"] is None and g["model_value"] == ANSWERS[f])
        asked_pages += asked
    assert summary["pages_asked"] == asked_pages > 0 and summary["pages_local"] == len(pages) - asked_pages
    assert summary["values_local"] > 0 and summary["values_asked"] > 0
    return summary


def test_route_answers_locally_above_the_threshold_and_asks_the_rest(model, route_project, capsys):
    proj, server = route_project
    pages = [str(p) for p in sample_pages(8)]
    _, serial, _ = run_cli(["extract", str(model), *pages], capsys)
    conf = confidences(serial)
    t = conf[len(conf) // 2]  # half the values local
    argv = ["route", str(model), *pages, "--project", str(proj), "--threshold", repr(t),
            "--timeout", "1", "--concurrency", "2"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    summary = check_route(out, serial, t, server)
    # a 500 and a stall past the timeout, both retried: two requests more than pages asked
    assert summary["requests"] == len(server.requests) == summary["pages_asked"] + 2
    # again: every asked page from the same cache as `dxstudio label`, no request
    code, out2, _ = run_cli(argv + ["--workers", "2"], capsys)
    assert code == 0 and json.loads(out2.splitlines()[-1])["summary"]["requests"] == 0
    assert out2.splitlines()[:-1] == out.splitlines()[:-1]


def test_route_uses_the_model_s_stored_thresholds(model, route_project, tmp_path, capsys):
    import inspect

    from dxstudio.engine.container import load_model, save_model

    if "thresholds" not in inspect.signature(save_model).parameters:
        pytest.skip("this checkout's model file stores no thresholds yet")
    m = load_model(model)
    tuned = tmp_path / "tuned.safetensors"
    proj, server = route_project
    server.script = []
    pages = [str(p) for p in sample_pages(8)]
    _, serial, _ = run_cli(["extract", str(model), *pages], capsys)
    conf = confidences(serial)
    cut = conf[0]  # every subtotal and cash value local
    # each field by its own threshold (total: never local); a field without one (tax: null,
    # change: not named) is always asked: the pooled 0 is never used for it (issue 21)
    own = {"subtotal": cut, "cash": cut, "total": 1.0}
    save_model(tuned, m.cfg, m.params, thresholds={"pooled": 0.0, "fields": {**own, "tax": None}})
    code, out, err = run_cli(["route", str(tuned), *pages, "--project", str(proj)], capsys)
    assert code == 0, err
    per_field = {f: float("inf") for f in FIELDS.split(",")} | own
    summary = check_route(out, serial, per_field, server)
    assert summary["requests"] == summary["pages_asked"]
    lines = [json.loads(l) for l in out.splitlines()[:-1]]
    whys = {g.get("why") for p in lines for f, g in p["fields"].items() if f in ("tax", "change")}
    assert whys <= {"no threshold", "no value"} and "no threshold" in whys
    assert set(summary["fields"]) == set(FIELDS.split(","))

def test_route_with_an_endpoint_that_always_fails_reports_each_page(model, route_project, capsys):
    proj, server = route_project
    server.script, server.default = [], ("status", 503)
    pages = [str(p) for p in sample_pages(3)]
    code, out, err = run_cli(["route", str(model), *pages, "--project", str(proj), "--threshold", "1.0",
                              "--retries", "0"], capsys)
    assert code == 2  # every page needed the model and none got an answer
    lines = [json.loads(l) for l in out.splitlines()]
    assert len(lines) == 4 and all("HTTP 503" in p["error"] for p in lines[:3])
    assert all(v["source"] is None for p in lines[:3] for v in p["fields"].values())
    assert err.count("HTTP 503") == 3



def test_route_keeps_at_most_concurrency_requests_in_flight(model, route_project, capsys):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    proj, _ = route_project
    seen = {"now": 0, "most": 0, "n": 0}
    lock = threading.Lock()

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                seen["now"] += 1
                seen["n"] += 1
                seen["most"] = max(seen["most"], seen["now"])
            time.sleep(0.5)
            with lock:
                seen["now"] -= 1
            body = json.dumps({"choices": [{"message": {"content": json.dumps(ANSWERS)}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        d = json.loads((proj / "dxproject.json").read_text())
        d["labelling"]["url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
        (proj / "dxproject.json").write_text(json.dumps(d))
        pages = [str(p) for p in sample_pages(8)]
        code, out, err = run_cli(["route", str(model), *pages, "--project", str(proj), "--threshold", "1.0",
                                  "--concurrency", "3"], capsys)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, err
    assert seen["n"] == 8 and seen["most"] == 3  # every page asked (threshold 1), three at a time

# -- Ray ---------------------------------------------------------------------------------------------

def test_an_address_where_no_cluster_answers_is_said_at_once(model, capsys, monkeypatch):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # a port nobody listens on
    port = s.getsockname()[1]
    s.close()
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is already connected to Ray: the address would not be tried")
    asked = []  # "at once": refused before ray.init, which would wait minutes for the address
    monkeypatch.setattr(ray, "init", lambda *a, **k: asked.append(a or k) or pytest.fail("ray.init was called"))
    t0 = time.process_time()
    code, out, err = run_cli(["extract", str(model), str(sample_pages(1)[0]), "--ray", f"127.0.0.1:{port}"], capsys)
    assert code == 2 and out == "" and f"cannot reach the Ray cluster at '127.0.0.1:{port}'" in err
    assert asked == [] and time.process_time() - t0 < 10  # CPU seconds: a loaded machine cannot fail it


def _ray_watchdog(config):
    """faulthandler ends the process after RAY_TEST_LIMIT s (re-armed by each call), writing
    every thread's traceback (the test's function among them) past pytest's output capture."""
    import faulthandler

    from tests.conftest import terminal_fd

    faulthandler.dump_traceback_later(RAY_TEST_LIMIT, exit=True, file=terminal_fd(config))


@pytest.fixture(scope="module")
def ray_local(request):
    """A Ray instance on 127.0.0.1 with 2 CPUs for this module. Bounded in time: should Ray
    hang, the run stops after RAY_TEST_LIMIT seconds (per test, and for Ray's start and stop)
    with every thread's traceback."""
    import faulthandler

    ray = pytest.importorskip("ray")
    _ray_watchdog(request.config)
    for attempt in (1, 2, 3):  # Ray gives its node 30 s to start (fixed in ray/_private/node.py): on a
        try:  # loaded machine a first start from a cold disk can take longer; the next is quicker
            ray.init(address="local", include_dashboard=False, num_cpus=2, _node_ip_address="127.0.0.1",
                     log_to_driver=False, logging_level="ERROR")
            break
        except Exception as e:
            ray.shutdown()
            if attempt == 3 or "timed out during startup" not in str(e):
                raise
    try:
        yield ray
    finally:
        _ray_watchdog(request.config)
        ray.shutdown()
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _ray_test_watchdog(request):
    """Each test on the Ray instance gets RAY_TEST_LIMIT seconds of its own."""
    if "ray_local" not in request.fixturenames:
        yield
        return
    import faulthandler

    _ray_watchdog(request.config)
    yield
    faulthandler.cancel_dump_traceback_later()


def _descendants(root: int) -> set:
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo.extend(kids)
    return out


def _busy_ray_workers() -> list:
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(b"ray::_run_chunk"):
            pids.append(pid)
    return pids


def test_extract_on_ray_gives_the_serial_bytes(ray_local, model, inputs, capsys):
    _, serial, _ = run_cli(["extract", str(model), *inputs], capsys)
    code, out, err = run_cli(["extract", str(model), *inputs, "--ray", "local", "--chunk", "3"], capsys)
    assert code == 1 and out == serial
    assert ray_local.is_initialized()  # joined the running instance, did not stop it


def test_a_ray_task_hands_the_kernels_writable_copies_of_its_read_only_arrays(monkeypatch):
    """Without a Ray instance: the read-only arrays a task gets from the object store (made so
    here) reach the chunk's function and the gradients as writable copies with the same bytes;
    for Numba a read-only array is another type (every kernel would compile again for it)."""
    import numba
    import numpy as np

    pytest.importorskip("ray")
    from dxstudio.engine import training
    from dxstudio.scale import cluster

    def frozen(a):
        a = np.array(a, np.float32)
        a.setflags(write=False)
        return a

    shared = ("cfg", {"w": frozen([1.5, -0.0, 3.25])}, None)
    seen = []
    cluster._run_chunk(lambda model, chunk, *args: seen.append(model[1]["w"]), shared, [], ())
    examples = [{"x": frozen([2.0, 7.0])}]
    monkeypatch.setattr(training, "example_gradients",
                        lambda cfg, params, ex, *rest: seen.extend([params["w"], ex["x"]]) or (0.0, {}))
    cluster._gradient_chunk("cfg", shared[1], examples, SimpleNamespace(kernels="reference"), ["w"], 1)
    assert len(seen) == 3 and all(a.flags.writeable for a in seen)
    assert [a.tobytes() for a in seen] == [shared[1]["w"].tobytes(), shared[1]["w"].tobytes(), examples[0]["x"].tobytes()]
    assert numba.typeof(shared[1]["w"]) != numba.typeof(seen[0])  # readonly array(float32, 1d, C)


def _readonly_in_a_worker(shared, chunk, params, examples, settings):
    """In a Ray worker (the arguments out of the object store, as a task gets them): whether
    they are read-only; then a chunk extracted and an example's gradients computed as the tasks
    do; then every compiled kernel signature of this process that takes a read-only array."""
    import gc

    from numba.core import types
    from numba.core.dispatcher import Dispatcher

    from dxstudio.scale import cluster

    came_readonly = not shared[1]["char_emb"].flags.writeable and not params["char_emb"].flags.writeable
    lines = cluster._run_chunk(extract_chunk, shared, chunk, ("fast",))
    sets = cluster._gradient_chunk(shared[0], params, examples, settings, list(params), 1)
    sigs = [sig for d in gc.get_objects() if isinstance(d, Dispatcher) for sig in d.signatures]
    readonly = [str(sig) for sig in sigs if any(isinstance(t, types.Array) and not t.mutable for t in sig)]
    return came_readonly, len(lines), len(sets), len(sigs), readonly


def test_ray_tasks_run_the_kernels_on_writable_copies(ray_local, model):
    """Ray hands a task read-only arrays, and Numba compiles a kernel again for a read-only
    array (another type): every kernel, in every worker, minutes of CPU before the first chunk
    or step (the Ray tests took 3 minutes each). The tasks copy them writable first."""
    import numpy as np
    from ray import cloudpickle

    from dxstudio.engine.container import load_model
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.readiness import random_window
    from dxstudio.engine.training import Example, Targets, TrainSettings

    m = load_model(model)
    rng = np.random.default_rng(5)
    examples = [Example(random_window(m.cfg, 6, 11), Targets(
        tags=rng.integers(-1, m.cfg.n_tags, 6), roles=rng.integers(0, len(m.cfg.roles), 6), doc=2,
        items=rng.integers(-1, 6, 6), kv=rng.integers(-1, 6, 6)))]
    settings = TrainSettings(backbone_scale=0.5, loss_role=1.0, loss_doc=1.0, loss_items=0.5, loss_kv=0.5,
                             clip=0.5, kernels="fast", weight_decay=0.01)
    params = to_runtime(m.params)
    chunk = list(page_items([str(sample_pages(1)[0])]))
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # this helper travels by value: tests/ is not on the worker's path
    try:
        probe = ray_local.remote(num_cpus=1)(_readonly_in_a_worker)
        came_readonly, n_lines, n_sets, n_sigs, readonly = ray_local.get(probe.remote(
            ray_local.put((m.cfg, params, None)), chunk, ray_local.put(params), ray_local.put(examples), settings))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert came_readonly, "Ray handed the task writable arrays: the premise of the copy is gone"
    assert n_lines == 1 and n_sets == 1 and n_sigs > 0
    assert readonly == [], f"kernels compiled for read-only arrays in the worker: {readonly[:3]}"


def test_a_killed_ray_worker_is_retried_with_no_lost_or_doubled_line(ray_local, model, monkeypatch):
    from dxstudio.engine.container import load_model
    from dxstudio.engine.model import to_runtime
    from dxstudio.scale.cluster import RayTasks
    from dxstudio.scale.ordered import Serial, ordered_map

    m = load_model(model)
    shared = (m.cfg, to_runtime(m.params), None)
    items = list(page_items([str(SAMPLE / "pages")]))
    with Serial(extract_chunk, shared, "fast") as b:
        want = [r for rs in ordered_map(b, chunks(items, 2)) for r in rs]
    killed = []

    def killer():
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            busy = _busy_ray_workers()
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            time.sleep(0.01)

    puts = []
    real_put = ray_local.put
    monkeypatch.setattr(ray_local, "put", lambda obj, **kw: puts.append(1) or real_put(obj, **kw))
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    with RayTasks(extract_chunk, shared, "fast") as b:
        got = [r for rs in ordered_map(b, chunks(items, 2)) for r in rs]
    t.join(5)
    assert killed, "no busy worker was found to kill"
    assert got == want and len(got) == 200
    assert len(puts) == 1  # the model went into the object store once, for all 100 tasks


@pytest.fixture
def sample_project(tmp_path):
    """16 pages of the bundled sample with their labels, a tiny model, 2 epochs of batch 4."""
    proj = tmp_path / "project"
    (proj / "pages").mkdir(parents=True)
    (proj / "labels").mkdir()
    for p in sample_pages(16):
        shutil.copy(p, proj / "pages")
        shutil.copy(SAMPLE / "labels" / p.name, proj / "labels")
    d = json.loads((SAMPLE / "dxproject.json").read_text())
    d["settings"].update({"size": "tiny", "epochs": 2, "batch": 4, "warmup": 2, "lr": 0.01,
                          "backbone_scale": 0.5, "heldout_fraction": 0.25, "checkpoint_every": 3})
    (proj / "dxproject.json").write_text(json.dumps(d))
    return proj


@pytest.mark.parametrize("summed", [True, False], ids=["a partial sum a task (the default)", "every set back"])
def test_tune_on_ray_gives_the_bytes_of_degree_1_resume_included(ray_local, sample_project, tmp_path, capsys,
                                                                   monkeypatch, summed):
    from dxstudio.scale import cluster

    if not summed:
        monkeypatch.setattr(cluster, "RayGradients", functools.partial(cluster.RayGradients, summed=False))
    code, _, err = run_cli(["tune", str(sample_project), "--out", str(tmp_path / "one"), "--degree", "1"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["tune", str(sample_project), "--out", str(tmp_path / "ray"), "--ray", "local",
                            "--stop-after", "2"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["tune", str(sample_project), "--out", str(tmp_path / "ray"), "--ray", "local",
                            "--resume"], capsys)
    assert code == 0, err
    assert "bytes of gradient sets " + ("between processes" if summed else "back to this process") in err
    one = (tmp_path / "one" / "model.safetensors").read_bytes()
    assert (tmp_path / "ray" / "model.safetensors").read_bytes() == one


def test_route_on_ray_gives_the_lines_of_one_process(ray_local, model, route_project, capsys):
    proj, server = route_project
    server.script = []  # an endpoint that answers at once
    pages = [str(p) for p in sample_pages(6)]
    argv = ["route", str(model), *pages, "--project", str(proj), "--threshold", "0.5"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    code, out_ray, err = run_cli(argv + ["--ray", "local", "--chunk", "2"], capsys)
    assert code == 0, err
    assert out_ray.splitlines()[:-1] == out.splitlines()[:-1]
    first, again = (json.loads(o.splitlines()[-1])["summary"] for o in (out, out_ray))
    assert again["requests"] == 0 and again["cache_hits"] == first["pages_asked"] == first["requests"]


def test_pretrain_on_ray_gives_the_bytes_of_degree_1_resume_included(ray_local, tmp_path, capsys):
    pytest.importorskip("faker")  # the synthetic corpus
    args = ["pretrain", "synthetic:8:5", "--size", "tiny", "--steps", "4", "--batch", "3", "--window", "48"]
    code, _, err = run_cli(args + ["--out", str(tmp_path / "one"), "--degree", "1"], capsys)
    assert code == 0, err
    code, _, err = run_cli(args + ["--out", str(tmp_path / "ray"), "--ray", "local", "--stop-after", "2"], capsys)
    assert code == 0, err
    code, _, err = run_cli(args + ["--out", str(tmp_path / "ray"), "--ray", "local", "--resume"], capsys)
    assert code == 0, err
    assert "bytes of gradient sets" in err
    one = (tmp_path / "one" / "model.safetensors").read_bytes()
    assert (tmp_path / "ray" / "model.safetensors").read_bytes() == one


def test_cross_validated_tune_on_ray_gives_the_bytes_of_one_process(ray_local, sample_project, tmp_path, capsys):
    args = ["tune", str(sample_project), "--folds", "2", "--epochs", "1"]
    code, _, err = run_cli(args + ["--out", str(tmp_path / "one"), "--degree", "1"], capsys)
    assert code == 0, err
    code, _, err = run_cli(args + ["--out", str(tmp_path / "ray"), "--ray", "local"], capsys)
    assert code == 0, err
    total = int(re.search(r"(\d+) steps, from", err).group(1))
    assert f"--ray: {total} steps on the cluster" in err  # every fold's steps and the final model's
    for part in ("final", "folds/1", "folds/2"):
        ck = [(tmp_path / r / part / "checkpoint.safetensors").read_bytes() for r in ("one", "ray")]
        assert ck[0] == ck[1], part
    assert (tmp_path / "ray" / "final" / "model.safetensors").exists() or (tmp_path / "ray" / "model.safetensors").exists()
