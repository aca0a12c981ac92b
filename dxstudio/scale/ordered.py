"""An ordered map of a chunk function over a stream of chunks, in this process, in local
worker processes or as Ray tasks. At most `inflight` chunks are out at a time (a stream of a
million pages is never all in memory) and the results come back in input order, each once.

    with backend:                      # Serial(), Processes(n, ...), or cluster.RayTasks(...)
        for result in ordered_map(backend, chunks):
            ...

Every backend runs `fn(shared, chunk, *args)`, where `shared` (the model) is sent to each
worker once: the process initializer for Processes, ray.put for RayTasks.
"""
from __future__ import annotations

from collections import deque

from dxstudio.scale import ScaleError


class Serial:
    """Everything in this process, one chunk after another."""

    inflight = 1

    def __init__(self, fn, shared, *args):
        self.fn, self.shared, self.args = fn, shared, args

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, chunk):
        return self.fn(self.shared, chunk, *self.args)

    def result(self, handle):
        return handle


_worker_shared = [None]


def _init_worker(shared):
    _worker_shared[0] = shared


def _run_in_worker(fn, chunk, args):
    return fn(_worker_shared[0], chunk, *args)


class Processes:
    """`n` local worker processes (spawned: a clean interpreter each); the shared object is
    sent once per process, through the pool's initializer."""

    def __init__(self, n: int, fn, shared, *args):
        if n < 1:
            raise ScaleError(f"--workers must be at least 1, not {n}")
        self.n, self.fn, self.shared, self.args = n, fn, shared, args
        self.inflight = 2 * n
        self.pool = None

    def __enter__(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(self.n, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_init_worker, initargs=(self.shared,))
        return self

    def __exit__(self, *exc):
        self.pool.shutdown(wait=True, cancel_futures=True)
        return False

    def submit(self, chunk):
        return self.pool.submit(_run_in_worker, self.fn, chunk, self.args)

    def result(self, handle):
        from concurrent.futures.process import BrokenProcessPool

        try:
            return handle.result()
        except BrokenProcessPool:
            raise ScaleError("a worker process died (killed or out of memory); rerun, or use --ray, "
                             "which retries the lost work") from None


def ordered_map(backend, chunks, with_chunks: bool = False):
    """backend's result for each chunk, in the chunks' order ((chunk, result) with_chunks)."""
    pending = deque()
    for chunk in chunks:
        pending.append((chunk, backend.submit(chunk)))
        while len(pending) >= backend.inflight:
            chunk_, handle = pending.popleft()
            yield (chunk_, backend.result(handle)) if with_chunks else backend.result(handle)
    while pending:
        chunk_, handle = pending.popleft()
        yield (chunk_, backend.result(handle)) if with_chunks else backend.result(handle)
