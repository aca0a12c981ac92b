"""The Train tab on a first run on this machine: 'preparing the engine' with its parts, not a
silent step 0 (dxstudio.engine.readiness)."""
from __future__ import annotations

from dxstudio.engine import readiness


def test_train_tab_says_the_engine_is_being_prepared(qtbot, receipts_project, monkeypatch):
    from dxstudio.ui.train_tab import EnginePreparing, TrainingPanel, prepare_engine

    monkeypatch.setattr(readiness, "is_prepared", lambda: False)
    monkeypatch.setattr(readiness, "prepare",
                        lambda progress=None: [progress(i, 4, s) for i, s in enumerate(readiness.STAGES, 1)] and 1.0)
    events = []
    prepare_engine(events.append)
    assert [(e.done, e.total) for e in events] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert all(isinstance(e, EnginePreparing) for e in events)

    panel = TrainingPanel(receipts_project)
    qtbot.addWidget(panel)
    panel._on_job_event(events[2])
    text = panel.status_label.text()
    assert "Preparing the engine (first run on this machine" in text and "2 of 4 parts" in text

    monkeypatch.setattr(readiness, "is_prepared", lambda: True)
    again = []
    prepare_engine(again.append)
    assert again == []  # prepared: nothing to say, straight to the steps
