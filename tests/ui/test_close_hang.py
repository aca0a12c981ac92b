"""A close never waits in a modal question where no one can answer it (tests, a headless
platform), and no background work outlives its test. Each test here would have hung on the old
closeEvent (QMessageBox.question during a run); a watchdog answers any modal after 2 s so that,
on a regression, they fail instead of hanging."""
from __future__ import annotations

import threading
import time

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication


def watchdog(seen):
    """Every 200 ms for 2 s: if a modal is up, note its text and close it (a No)."""
    def check():
        box = QApplication.activeModalWidget()
        if box is not None:
            seen.append(getattr(box, "text", lambda: type(box).__name__)())
            box.reject()
    for ms in range(200, 2200, 200):
        QTimer.singleShot(ms, check)


def fake_run(window, monkeypatch):
    panel = window.training_panel
    if panel is None:
        pytest.skip("no training panel")
    monkeypatch.setattr(type(panel), "is_running", property(lambda self: True))
    stopped = []
    monkeypatch.setattr(panel, "shutdown", lambda *a, **k: stopped.append(1) or True)
    return stopped


@pytest.mark.timeout(120)
def test_close_in_a_test_never_asks(window, qtbot, monkeypatch):
    stopped = fake_run(window, monkeypatch)
    assert window.confirm_close is False  # the autouse fixture turned it off
    seen = []
    watchdog(seen)
    window.close()
    assert not seen, f"closing asked {seen}"
    assert not window.isVisible() and stopped == [1]


@pytest.mark.timeout(120)
def test_headless_close_never_asks(window, qtbot, monkeypatch):
    """The window's own default (None: ask only where a person can see the question) on the
    offscreen platform stops the run and closes."""
    assert QApplication.platformName() == "offscreen"
    stopped = fake_run(window, monkeypatch)
    window.confirm_close = None
    seen = []
    watchdog(seen)
    window.close()
    assert not seen, f"a headless close asked {seen}"
    assert not window.isVisible() and stopped == [1]


def test_teardown_stops_and_joins_jobs(qtbot):
    """jobs.stop_all (the fixture's teardown) cancels a job that is still going and joins it."""
    from dxstudio.ui.jobs import Job, stop_all

    began = threading.Event()

    def work(job):
        began.set()
        while not job.cancelled.is_set():
            time.sleep(0.01)
        return "stopped"

    job = Job(work, "dxstudio-test-job").start()
    assert began.wait(10) and job.running
    assert stop_all(timeout=10) == []
    assert not job.running and job.cancelled.is_set()


def test_a_stuck_job_is_named(qtbot):
    from dxstudio.ui.jobs import Job, stop_all

    release = threading.Event()
    job = Job(lambda job: release.wait(30), "dxstudio-stuck-job").start()
    try:
        assert stop_all(timeout=0.2) == ["dxstudio-stuck-job"]
    finally:
        release.set()
        job.wait(10)
