"""Fixtures for the app's tests (offscreen Qt)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def show_active(qtbot, w):
    """Show a window and make it the active one: window shortcuts (A, J, 1-9) need that."""
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    w.activateWindow()
    w.windowHandle().requestActivate()
    qtbot.waitUntil(w.isActiveWindow, timeout=10000)
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
