"""ReviewSession.reload off the GUI thread (issue 23: no call there over 50 ms).

    reloader = SessionReloader(session)
    reloader.request(then=callback)   # F5, an import, the end of Label pages, Extract's Add page
    reloader.reloaded.connect(...)    # after the result is applied (the session notified)
    reloader.busy                     # a scan is running or waiting to run

The scan (the page list, every page's and label file's stat, the status of each page whose
files changed, their label words for the queue) runs on a Job's thread; its result is applied
on the GUI thread (ReviewSession.reload_apply), which then reads nothing but the current page.
A request made while a scan runs is served by one more scan after it (files may have changed
since the running one looked), and every `then` given meanwhile is called once, after the last
one is applied. A scan made stale by a schema edit that landed meanwhile is simply run again.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from dxstudio.ui.jobs import Job


class SessionReloader(QObject):
    reloaded = Signal()
    failed = Signal(str)  # the scan's error (a project folder that cannot be read): one line

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self._job: Job | None = None
        self._again = False  # asked again while a scan ran
        self._reopen = False  # the next scan reads dxproject.json again too
        self._then: list = []
        self.scans = 0  # scans started (tests read it)

    @property
    def busy(self) -> bool:
        return self._job is not None

    def request(self, then=None, reopen: bool = False) -> None:
        """Reload the session from disk in the background; then() after it is applied.
        reopen: read dxproject.json again too (an import may have added fields)."""
        if then is not None:
            self._then.append(then)
        self._reopen = self._reopen or reopen
        if self._job is not None:
            self._again = True
            return
        self._start()

    def _start(self) -> None:
        scan = self.session.reload_scan(reopen=self._reopen)
        self._reopen = self._again = False
        self.scans += 1
        self._job = Job(lambda job: scan(), name="dxstudio-reload", pooled=True).connect(
            on_success=self._on_scanned, on_failure=self._on_failed)
        self._job.start()

    def _finish_job(self) -> None:
        if self._job is not None:
            self._job.join()
            self._job.deleteLater()
        self._job = None

    def _on_scanned(self, scan) -> None:
        self._finish_job()
        try:
            applied = not self._again and self.session.reload_apply(scan)
        except (ValueError, OSError) as e:  # (the session's errors are ValueErrors that name the file)
            self.failed.emit(str(e))
            applied = True
        if not applied:
            self._start()  # asked again meanwhile, or stale: the files once more
            return
        self._done()

    def _on_failed(self, message: str) -> None:
        self._finish_job()
        if self._again:
            self._start()
            return
        self.failed.emit(message)
        self._done()

    def _done(self) -> None:
        then, self._then = self._then, []
        for fn in then:
            fn()
        self.reloaded.emit()

    def shutdown(self, timeout: float = 30.0) -> None:
        """The window closes: the scan is left to end (it writes nothing), its result unused."""
        if self._job is not None:
            self._job.cancel()
            self._job.wait(timeout)
