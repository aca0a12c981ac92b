"""Issue 21 in the app: the Results tab leads with the one sentence; the Train form says what
folds a run started now uses and what they cost. No training (a synthetic report)."""
from __future__ import annotations

import json
import random

import pytest

from dxstudio.tuning.localfirst import promise_sentence
from dxstudio.tuning.scoring import HeldOutPage, score_pages
from dxstudio.ui.results_tab import ResultsPanel, threshold_sentence
from dxstudio.ui.train_tab import TrainingPanel
from tests.conftest import sample_project


@pytest.fixture
def eight_pages(tmp_path):
    return sample_project(tmp_path / "p", 8, {"size": "tiny", "epochs": 1, "batch": 4, "warmup": 1})  # folds: auto


def test_the_results_tab_leads_with_the_one_sentence(qtbot, tmp_path):
    rng = random.Random(1)
    pages = [HeldOutPage(f"p{i}", {"date": (1,), "total": (2,)},
                         {"date": ((1,), 0.5 + 0.5 * rng.random()),
                          "total": ((2,) if rng.random() < 0.8 else (3,), rng.random())}) for i in range(400)]
    report = score_pages(["date", "total"], pages, rule="bound", by="value")
    results = ResultsPanel()
    results.show_dialogs = False
    qtbot.addWidget(results)
    results.show_run(report, tmp_path / "run", tmp_path)
    text = results.threshold_label.text()
    assert text == promise_sentence(report)
    assert text.startswith("Values of date at or above") and "total has no threshold yet and is always asked" in text
    assert threshold_sentence(report) in results.threshold_label.toolTip() and "Clopper-Pearson" in \
        results.threshold_label.toolTip()
    # first under the title row
    assert results.layout().itemAt(1).widget() is results.threshold_label
    # total has no threshold of its own: nothing marked on its curve, the pooled one is not its route
    assert results.threshold_marks["total"] is None and results.threshold_marks["date"] is not None


def test_the_train_form_shows_the_folds_default_and_its_cost(qtbot, eight_pages):
    panel = TrainingPanel(eight_pages)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    usable = panel.breakdown["usable"]
    assert usable >= 2
    text = panel.breakdown_label.text()
    assert f"{min(5, usable)} folds (the default below 1990 usable pages" in text
    assert "x the time of a single split" in text
    panel.inputs["folds"].setValue(2)
    assert "2 folds (set in the settings)" in panel.breakdown_label.text()
    panel.inputs["folds"].setValue(panel.inputs["folds"].minimum())  # back to auto
    assert "folds (the default below 1990 " in panel.breakdown_label.text()
    data = json.loads((eight_pages / "dxproject.json").read_text())
    data["settings"]["auto_folds"] = 0
    (eight_pages / "dxproject.json").write_text(json.dumps(data))
    panel.update_breakdown()
    assert "Single split (the setting auto_folds is 0)" in panel.breakdown_label.text()
