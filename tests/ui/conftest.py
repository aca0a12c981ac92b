"""Fixtures for the app's tests (offscreen Qt)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def no_modal_close_and_no_leftover_jobs(monkeypatch):
    """No test waits in a modal or outlives its background work. A window closes without asking
    (MainWindow.confirm_close off; the question a person gets is tested with it on), and
    whatever fine-tuning, labelling or extracting a test started is cancelled and joined when
    the test ends, after pytest-qt has closed its windows (an autouse fixture is torn down after
    the ones a test names). Under load a run can outlive its test; left alone it kept the next
    test's window waiting."""
    from dxstudio.ui import jobs
    from dxstudio.ui.app import MainWindow

    monkeypatch.setattr(MainWindow, "confirm_close", False)
    yield
    stuck = jobs.stop_all(timeout=120)
    close_leftover_windows()
    assert not stuck, f"background work still running 120 s after it was cancelled: {stuck}"


def close_leftover_windows():
    """Close every top-level window a test left shown: a message box that a slow job opened after
    its test ended (under load) is application-modal, and while it is up no later test's window
    can become active: the UI tests failed one after another in show_active at load 13-30."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        return
    for _ in range(3):  # closing a window may open nothing new, but a modal may sit on another
        shown = [w for w in app.topLevelWidgets() if w.isVisible()]
        if not shown:
            return
        for w in shown:
            w.close()
        app.processEvents()


def click_page(qtbot, window, pid):
    """A click on the page's row in the page list (opens it)."""
    from PySide6.QtCore import Qt

    lst = window.page_list.list
    item = window.page_list._items[pid]
    lst.scrollToItem(item)
    qtbot.mouseClick(lst.viewport(), Qt.LeftButton, pos=lst.visualItemRect(item).center())
    assert window.session.current == pid


def show_active(qtbot, w):
    """Show a window and make it the active one: window shortcuts (A, J, 1-9) need that."""
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    from PySide6.QtWidgets import QApplication

    modal = QApplication.activeModalWidget()
    if modal is not None and modal is not w and not w.isAncestorOf(modal):
        modal.close()  # left by an earlier test: it would keep this window from being active
    w.activateWindow()
    w.windowHandle().requestActivate()
    try:
        qtbot.waitUntil(w.isActiveWindow, timeout=10000)
    except AssertionError:
        active = QApplication.activeWindow()
        raise AssertionError(f"{type(w).__name__} did not become the active window in 10 s; active: "
                             f"{type(active).__name__ if active else None}, modal: "
                             f"{type(QApplication.activeModalWidget()).__name__}") from None
    w.view.setFocus()
    return w


@pytest.fixture
def activate(qtbot):
    """show_active bound to this test's qtbot."""
    return lambda w: show_active(qtbot, w)


@pytest.fixture
def window(qtbot, receipts_project, tmp_path, monkeypatch):
    """The main window on a fresh copy of the 16-receipt project, shown and active."""
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from dxstudio.ui.app import MainWindow

    return show_active(qtbot, MainWindow(receipts_project))


@pytest.fixture
def win(qtbot, receipts_project, tmp_path, monkeypatch):
    """The main window on a fresh copy of the 16-receipt project, shown and active, the Train and
    Runs panels' dialogs off, and its background jobs stopped and joined at teardown."""
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from dxstudio.ui.app import MainWindow
    w = show_active(qtbot, MainWindow(receipts_project))
    w.training_panel.show_dialogs = False
    w.runs_panel.show_dialogs = False
    yield w
    w.training_panel.shutdown(60)
    w.model_answers.shutdown()
    w.extract_panel.shutdown()


def click_tab(qtbot, w, widget):
    """Click the tab that holds `widget` (its page or a widget on it), as a person does; it opens."""
    from PySide6.QtCore import Qt

    index = next(i for i in range(w.tabs.count())
                 if w.tabs.widget(i) is widget or w.tabs.widget(i).isAncestorOf(widget))
    bar = w.tabs.tabBar()
    qtbot.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(index).center())
    assert w.tabs.currentIndex() == index


def cancel_after_step(monkeypatch, step: int):
    """Make the Train tab's fine-tuning cancel itself as step `step` is reported (on the job's
    thread, as a person's Cancel would land); returns the real train_tab.tune_work, to put back."""
    from dxstudio.ui import train_tab

    real = train_tab.tune_work

    def cancelling(*args):
        work = real(*args)

        def wrapped(job):
            report = job.report

            def report_then_cancel(obj):
                report(obj)
                if getattr(obj, "kind", None) == "step" and obj.step == step:
                    job.cancel()
            job.report = report_then_cancel
            return work(job)
        return wrapped

    monkeypatch.setattr(train_tab, "tune_work", cancelling)
    return real
