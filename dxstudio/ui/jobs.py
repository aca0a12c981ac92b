"""One way to run work off the GUI thread: the Schema tab's labelling and the Train tab's
fine-tuning both use it.

    job = Job(work, name="dxstudio-tune")      # work(job) -> result, on a plain thread
    job.event.connect(on_event)                # job.report(x) in work -> on_event(x), GUI thread
    job.succeeded.connect(on_result)           # work's return value, GUI thread
    job.failed.connect(on_error)               # one line: an expected error's text, or a bug's
    job.start(); job.cancel(); job.wait(t)

The Job object lives in the GUI thread; `work` runs on a threading.Thread and never touches a
widget: everything it reports crosses as a queued Qt signal, so the handlers run in the GUI
thread, in order, and the event loop keeps turning. `cancel()` sets job.cancelled (a
threading.Event) that `work` checks between its steps; nothing is interrupted mid-write.
When succeeded or failed is handled, the thread is about to return: `join()` waits for it.

A short job asked for often (the Train tab's count on every show, a reload, the search's page
texts, a schema edit) is made with `pooled=True`: it runs on one of the worker threads kept for
the session (`WORKERS`) instead of a new thread, whose start waits until the new thread runs
(3-11 ms of the GUI thread under load). A worker is started only when none is idle; the
long jobs (fine-tuning, labelling, the model's answers, Extract, an import) keep their own.
The count, a schema edit's staging and the page texts do their work in the worker process
(dxstudio.ui.worker_process): their thread only waits for it, not holding Python's lock.
"""
from __future__ import annotations

import queue
import threading
import weakref

from PySide6.QtCore import QObject, Qt, Signal


class Job(QObject):
    # object, not dict: a dict would cross as a QVariantMap and lose its key order
    event = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str)

    def __init__(self, work, name: str = "dxstudio-job", expected: tuple = (ValueError, OSError),
                 parent: QObject | None = None, pooled: bool = False):
        super().__init__(parent)
        self.work = work
        self.name = name
        self.expected = expected  # errors whose text is the message (they name the file)
        self.cancelled = threading.Event()
        self.pooled = pooled
        self._started = False
        self._done = threading.Event()
        self.thread = None if pooled else threading.Thread(target=self._run, name=name, daemon=True)

    def connect(self, on_event=None, on_success=None, on_failure=None) -> "Job":
        """Connect the handlers (queued: they run in the receiver's thread, the GUI thread)."""
        q = Qt.ConnectionType.QueuedConnection
        for signal, slot in ((self.event, on_event), (self.succeeded, on_success), (self.failed, on_failure)):
            if slot is not None:
                signal.connect(slot, q)
        return self

    def start(self) -> "Job":
        _started.add(self)
        self._started = True
        if self.pooled:
            WORKERS.submit(self._run)
        else:
            self.thread.start()
        return self

    def report(self, obj) -> None:
        """From work: hand obj to the GUI thread's event handler."""
        self.event.emit(obj)

    def cancel(self) -> None:
        self.cancelled.set()

    @property
    def running(self) -> bool:
        return self._started and not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until work returns; True if it did (or never started)."""
        if not self._started:
            return True
        if self.thread is not None:
            self.thread.join(timeout)
            return not self.thread.is_alive()
        return self._done.wait(timeout)

    def join(self) -> None:
        self.wait()

    def _run(self) -> None:
        if self.pooled:  # (named after its job, the last one once it is done: bench/ui_latency --threads)
            t = threading.current_thread()
            t.name = f"{t.name.split(' ')[0]} ({self.name})"
        try:
            try:
                result = self.work(self)
            except self.expected as e:
                self.failed.emit(str(e))
            except Exception as e:  # a bug must not vanish silently on a background thread
                self.failed.emit(f"unexpected error: {type(e).__name__}: {e}")
            else:
                self.succeeded.emit(result)
        finally:
            self._done.set()


class Workers:
    """Threads kept for the session, for pooled jobs: a job goes to an idle worker, and a new
    worker is started only when none is idle (so a slow job never holds up a short one). The
    workers are daemon threads that wait on a queue between jobs; `started` counts them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._idle = 0
        self.started = 0

    def submit(self, fn) -> None:
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self.started += 1
            else:
                self._idle -= 1
        self._queue.put(fn)
        if spawn:
            threading.Thread(target=self._loop, name=f"dxstudio-worker-{self.started}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn = self._queue.get()
            try:
                fn()
            except BaseException:  # (Job._run catches what work raises; nothing may end a worker)
                pass
            with self._lock:
                self._idle += 1


WORKERS = Workers()


_started: "weakref.WeakSet[Job]" = weakref.WeakSet()  # every job started and not yet collected


def stop_all(timeout: float = 60.0) -> list[str]:
    """Cancel every job still running and wait for each (tests' teardown): the names of those
    that did not end within timeout seconds."""
    jobs = [j for j in list(_started) if j.running]
    for job in jobs:
        job.cancel()
    return [job.name for job in jobs if not job.wait(timeout)]


def process_events_while(busy, timeout: float) -> bool:
    """For tests and the screenshot command: turn the event loop until busy() is false or
    timeout seconds have passed; True when it ended in time (the job's signals were handled)."""
    import time

    from PySide6.QtWidgets import QApplication
    end = time.monotonic() + timeout
    while busy() and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)
    return not busy()
