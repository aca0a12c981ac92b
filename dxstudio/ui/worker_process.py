"""A worker process kept for the session, for the pooled jobs whose plain Python is long (issue 23).

A pooled job (dxstudio.ui.jobs) runs on a thread of the app's process, so its Python holds the
interpreter's lock in turns with the GUI thread: every PySide call of the GUI thread gives the
lock up and waits to take it back (up to a switch interval, 5 ms) while the job runs, and an
event that overlapped the Train tab's page count was blocked 45-133 ms of its wall time at load
20 (bench/ui_latency.py --threads). Here that Python runs in another process, started once (on
the first call, so the imports are paid once, by it): the job's thread sends the function's name
and its small arguments down a pipe and waits for the small result, without the lock.

    result = PROCESS.call(training_breakdown_at, root, accepted_only)

`call` runs a module-level function of a module that imports no Qt (the process imports it by
name); its return value, or the exception it raised, comes back as itself. One call at a time
(a lock): the callers are short jobs. If the process died, the call says so (RuntimeError) and
the next call starts a new one. This module imports no Qt: the process imports it too.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import threading
from pathlib import Path


def _serve(conn) -> None:
    """The process: run each (module, name, args) received, send back (True, result) or (False, error).
    Its priority is lowered (nice +10): on a busy machine the GUI thread gets a core first."""
    try:
        os.nice(10)
    except (AttributeError, OSError):
        pass
    while True:
        try:
            module, name, args = conn.recv()
        except (EOFError, OSError):  # the app closed its end (it quit or died): end too
            return
        try:
            answer = (True, getattr(importlib.import_module(module), name)(*args))
        except BaseException as e:  # (sent back to the caller, which raises it)
            answer = (False, e)
        try:
            data = pickle.dumps(answer)
            pickle.loads(data)  # (an exception whose class cannot be rebuilt from its args)
        except Exception as e:
            err = answer[1] if not answer[0] else e
            kind = next((t for t in (ValueError, OSError) if isinstance(err, t)), RuntimeError)
            data = pickle.dumps((False, kind(f"{type(err).__name__}: {err}")))
        try:
            conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            return


class WorkerProcess:
    def __init__(self, name: str = "dxstudio-worker-process"):
        self.name = name
        self._lock = threading.Lock()
        self._process = None
        self._conn = None
        self.started = 0  # processes started (a test reads it: one for the session)
        self.calls = 0

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # (never fork a process that runs Qt threads)
        parent, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child,), name=self.name, daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self.started += 1

    def call(self, fn, *args):
        """fn(*args) in the worker process (fn: a module-level function of a Qt-free module)."""
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._stop()
                self._start()
            try:
                self._conn.send((fn.__module__, fn.__qualname__, args))
                ok, value = pickle.loads(self._conn.recv_bytes())
            except (EOFError, OSError) as e:
                self._stop()
                raise RuntimeError(f"the worker process ended during {fn.__qualname__}: {e}") from None
            self.calls += 1
        if ok:
            return value
        raise value

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.join(1.0)
            if self._process.is_alive():
                self._process.terminate()
            self._process = None

    def shutdown(self) -> None:
        with self._lock:
            self._stop()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None


PROCESS = WorkerProcess()


# -- the functions the app runs there -------------------------------------------------------------
def training_breakdown_at(root: str | Path, accepted_only: bool) -> dict:
    """dxstudio.tuning.pages.training_breakdown of the project at root as it is on disk."""
    from dxstudio.project import Project
    from dxstudio.tuning.pages import training_breakdown
    return training_breakdown(Project.open(root), accepted_only)


def search_text(project, pid: str) -> str:
    """A page's words as the page list's search matches them (lower case, one space apart)."""
    try:
        page = project.load_page(pid)
        return " ".join(w.text for w in page.words).lower()
    except Exception:  # a broken page is still found by its id
        return ""


def page_texts_at(root: str | Path, ids: list) -> dict:
    """{page id: search_text} of the pages ids of the project at root."""
    from dxstudio.project import Project
    project = Project.open(root)
    return {pid: search_text(project, pid) for pid in ids}
