"""A dxproject.json with a setting no row has (issue 25: {"learning_rate": 5} used to train at
lr 0.002 without a word): the Train tab opens, and Fine-tune says which key in which file and
the nearest known one instead of starting (or crashing)."""
from __future__ import annotations

from dxstudio.ui.train_tab import TrainingPanel
from tests.conftest import sample_project


def test_fine_tune_names_the_unknown_setting_and_the_nearest(qtbot, tmp_path):
    root = sample_project(tmp_path / "p", 4, {"size": "tiny", "learning_rate": 5})
    panel = TrainingPanel(root)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    assert panel.fine_tune() is None
    assert str(root / "dxproject.json") in panel.last_error and "'learning_rate'" in panel.last_error
    assert "did you mean 'lr'" in panel.last_error and panel.error_label.text() == panel.last_error
    assert not list((root / "runs").glob("*")) if (root / "runs").exists() else True  # nothing started
