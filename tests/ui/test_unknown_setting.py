"""A dxproject.json with a setting no row has (issue 25: {"learning_rate": 5} used to train at
lr 0.002 without a word): the Train tab opens, and Fine-tune says which key in which file and
the nearest known one instead of starting (or crashing)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from dxstudio.ui.train_tab import TrainingPanel

SAMPLE = Path(__file__).resolve().parents[2] / "resources" / "sample"


def test_fine_tune_names_the_unknown_setting_and_the_nearest(qtbot, tmp_path):
    root = tmp_path / "p"
    (root / "pages").mkdir(parents=True)
    (root / "labels").mkdir()
    for page in sorted((SAMPLE / "pages").glob("*.json"))[:4]:
        shutil.copy(page, root / "pages")
        if (SAMPLE / "labels" / page.name).exists():
            shutil.copy(SAMPLE / "labels" / page.name, root / "labels")
    data = json.loads((SAMPLE / "dxproject.json").read_text())
    data["settings"] = {"size": "tiny", "learning_rate": 5}
    (root / "dxproject.json").write_text(json.dumps(data))
    panel = TrainingPanel(root)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    assert panel.fine_tune() is None
    assert str(root / "dxproject.json") in panel.last_error and "'learning_rate'" in panel.last_error
    assert "did you mean 'lr'" in panel.last_error and panel.error_label.text() == panel.last_error
    assert not list((root / "runs").glob("*")) if (root / "runs").exists() else True  # nothing started
