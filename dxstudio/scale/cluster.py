"""Ray: connecting, the tasks of extract and route, and the gradient sets of a training step.

Imported only when a command gets --ray; it imports ray (the cluster extra) at once.

    connect("local", num_cpus=2)    # a Ray instance on this machine, on 127.0.0.1
    connect("10.0.0.5:6379")        # a running cluster; dxstudio travels as a py_module
    with RayTasks(fn, model, ...):  # fn(model, chunk, ...) as tasks, the model ray.put once
    state.runner = RayGradients()   # a training step's examples as tasks, one partial sum a task in order

A task whose worker dies (killed, out of memory, its node lost) is run again by Ray
(max_retries); its result is taken once, so no output line is lost or doubled.
"""
from __future__ import annotations

import os
from pathlib import Path

from dxstudio.console import results_stream
from dxstudio.scale import ScaleError, import_ray

ray = import_ray()

TASK_RETRIES = 3  # a lost worker's task is run again up to this many times


def connect(address: str, num_cpus: int | None = None) -> bool:
    """Join the cluster at `address` ("local": start one here, on 127.0.0.1, with `num_cpus`
    CPUs, default all). True when this call started or joined it (the caller shuts it down);
    False when this process was already connected."""
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 configure_logging=True)
    _probe(address)
    # no usage report, and with it no cloud metadata lookups (169.254.169.254 and the like);
    # set before the first Ray process starts, so every one of them inherits it
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    _lend_stdout()
    try:
        if address == "local":
            ray.init(address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", **quiet)
        else:
            # the same dxstudio code on every node as here: the package travels with the job
            pkg = str(Path(__file__).resolve().parents[1])
            ray.init(address=address, runtime_env={"py_modules": [pkg]}, **quiet)
    except Exception as e:  # ConnectionError, ValueError, RuntimeError, TimeoutError ...
        _restore_stdout()
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ScaleError(f"cannot connect to the Ray cluster at {address!r}: {first}") from None
    return True


_saved_stdout = []


def _lend_stdout() -> None:
    """While Ray runs, sys.stdout is stderr: the lines Ray prints (a dead worker's raylet
    message, coloured) go there; the command's JSON lines keep the real stdout (emit_json)."""
    import sys

    if not _saved_stdout:
        _saved_stdout.append(sys.stdout)
        results_stream(sys.stdout)
        sys.stdout = sys.stderr


def _restore_stdout() -> None:
    import sys

    if _saved_stdout:
        sys.stdout = _saved_stdout.pop()
        results_stream(None)


def _probe(address: str, timeout: float = 5.0) -> None:
    """A host:port address that does not answer is said in seconds (ray.init would wait
    minutes); other forms (auto, ray://...) are left to Ray."""
    import socket

    host, sep, port = address.rpartition(":")
    if address == "local" or not sep or "/" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ScaleError(f"cannot reach the Ray cluster at {address!r} ({e.strerror or e}); "
                         f"start one with `ray start --head` there, or use --ray local") from None


def shutdown() -> None:
    try:
        ray.shutdown()
    finally:
        _restore_stdout()


def cluster_cpus() -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def writable(obj):
    """obj with every NumPy array in it a writable copy (deep: the model's dicts, the examples'
    windows; the same values). A task's arguments come out of Ray's object store as read-only
    arrays, and Numba takes a read-only array for another type than a writable one: every
    compiled kernel they reach was compiled again, for the read-only type, in every worker
    process (none of it in the cache the engine's preparation fills), minutes of CPU before
    a first chunk or step. The copies are a few MB at the base size, once per task."""
    import copy

    return copy.deepcopy(obj)


def _run_chunk(fn, shared, chunk, args):
    return fn(writable(shared), chunk, *args)


_remote_chunk = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_run_chunk)


class RayTasks:
    """The ordered-map backend on Ray: the shared object put in the object store once; every
    chunk one task that reads it from there (zero-copy for the arrays on the same node)."""

    def __init__(self, fn, shared, *args, inflight: int | None = None):
        self.fn, self.args = fn, args
        self.ref = ray.put(shared)
        self.inflight = inflight or 2 * cluster_cpus()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, chunk):
        return _remote_chunk.remote(self.fn, self.ref, chunk, self.args)

    def result(self, handle):
        try:
            return ray.get(handle)
        except ray.exceptions.RayError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ScaleError(f"a Ray task failed after {TASK_RETRIES} retries: {first}") from None


# -- training ---------------------------------------------------------------------------------

def _gradient_chunk(cfg, params, examples, settings, wanted, batch_size):
    """Each example's (loss, gradient set), as batch_gradients computes it on one thread."""
    from dxstudio.engine.kernels import runtime as nu
    from dxstudio.engine.training import example_gradients

    params, examples = writable(params), writable(examples)  # out of the object store: read-only
    if settings.kernels == "fast":
        with nu.serial_kernels():  # one CPU per task, as one thread of degree > 1
            return [example_gradients(cfg, params, ex, settings, wanted, batch_size) for ex in examples]
    return [example_gradients(cfg, params, ex, settings, wanted, batch_size) for ex in examples]


def _gradient_run(cfg, params, examples, settings, wanted, batch_size, before):
    """A consecutive run of a step's examples: their gradient sets, then added onto the sum of
    every example before the run, in example order (training.add_in_order: the driver's own
    additions), so only one partial sum leaves each task. `before`: [the ObjectRef of the
    previous run's (loss, sums)] (in a list, so Ray does not wait for it before this task
    starts: the examples are computed while the runs before are still running), or None for the
    first run. Returns (loss sum, sums) over every example up to the end of this run."""
    from dxstudio.engine.training import add_in_order

    sets = _gradient_chunk(cfg, params, examples, settings, wanted, batch_size)
    loss, total = (0.0, {}) if before is None else ray.get(before[0])
    total = dict(total)  # the previous run's arrays are read-only in the object store; sums make new ones
    return add_in_order(loss, total, sets, wanted)


_remote_gradients = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_gradient_chunk)
_remote_run = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_gradient_run)


class RayGradients:
    """A TrainState.runner: a step's examples split into consecutive runs, one task each
    (the weights ray.put once per step).

    summed=True (the default since issue 26 item 5): each task adds its examples' gradient sets
    onto the previous task's partial sum, in example order, and hands on one set: the tasks
    compute side by side and only the additions form a chain; the driver gets the last sum
    (batch_gradients takes it as it is). Per step, `tasks` gradient sets cross processes instead
    of one per example (a quarter of the bytes at batch 8 on 2 CPUs). summed=False: every
    example's own set comes back and the driver adds them in example order. Either way the
    additions are those of one process, in example order: the same bytes as degree 1
    (tests/test_degree.py checks the chained arithmetic without Ray, tests/test_scale.py both
    runners on a local Ray instance).
    `bytes_back` counts the gradient bytes that crossed processes in the last step (the partial
    sums handed on and the last one back), `bytes_out` the weights put once."""

    def __init__(self, tasks: int | None = None, summed: bool = True):
        self.tasks = tasks
        self.sums = summed  # batch_gradients: this runner returns (loss sum, gradient sums)
        self.bytes_back = 0
        self.bytes_out = 0
        self.steps = 0  # steps whose gradient sets were computed here

    def _runs(self, examples):
        n = min(self.tasks or cluster_cpus(), len(examples))
        size, extra = divmod(len(examples), n)
        start = 0
        for i in range(n):  # consecutive runs, the first `extra` one longer
            stop = start + size + (1 if i < extra else 0)
            yield examples[start:stop]
            start = stop

    def __call__(self, cfg, params, examples, settings, wanted, batch_size):
        ref = ray.put(params)
        try:
            if self.sums:
                before, n_runs = None, 0
                for run in self._runs(examples):
                    before = [_remote_run.remote(cfg, ref, run, settings, wanted, batch_size, before)]
                    n_runs += 1
                loss, total = writable(ray.get(before[0]))  # the optimizer's kernels take them next
                # each partial sum crosses once: to the next task, the last one to here
                self.bytes_back = n_runs * sum(g.nbytes for g in total.values())
                result = (loss, total)
            else:
                refs = [_remote_gradients.remote(cfg, ref, run, settings, wanted, batch_size)
                        for run in self._runs(examples)]
                result = [r for part in writable(ray.get(refs)) for r in part]
                self.bytes_back = sum(g.nbytes for _, gs in result for g in gs.values())
        except ray.exceptions.RayError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ScaleError(f"a Ray training task failed after {TASK_RETRIES} retries: {first}") from None
        self.bytes_out = sum(p.nbytes for p in params.values())
        self.steps += 1
        return result
