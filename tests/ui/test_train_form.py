"""The Train form is made from the settings table; Threads is the machine's, not the project's.
On eight receipts of the bundled sample (no ../shared needed)."""
from __future__ import annotations

import pytest
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox

from dxstudio.project import Project
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.settings import DEFAULTS, FORM_SETTINGS, SETTINGS, Setting, usable_cores
from dxstudio.ui import train_tab
from dxstudio.ui.train_tab import TrainingPanel
from tests.conftest import sample_project


@pytest.fixture
def small_project(tmp_path):
    return sample_project(tmp_path / "p", 8, {"size": "tiny", "auto_folds": 0, "epochs": 1,
                                             "batch": 4, "warmup": 1, "heldout_fraction": 0.25})


def test_every_form_row_of_the_table_is_a_widget_with_its_range_and_help(qtbot, small_project):
    panel = TrainingPanel(small_project)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    assert list(panel.inputs) == [row.name for row in FORM_SETTINGS]
    kinds = {"int": QSpinBox, "float": QDoubleSpinBox, "choice": QComboBox, "bool": QCheckBox}
    for row in FORM_SETTINGS:
        w = panel.inputs[row.name]
        assert isinstance(w, kinds[row.kind]) and row.help in w.toolTip()
        if row.kind == "int" and row.low is not None:
            # the form cannot hold what the validation refuses: its lowest value is the range's,
            # or, for a nullable row whose null sits just below the range (folds: "single
            # split" below 2), the null
            assert w.minimum() == row.form.get("bottom", row.low)
            if w.minimum() < row.low:
                assert row.nullable and w.minimum() == row.low - 1
                w.setValue(w.minimum())
                assert panel.settings_values()[row.name] is None
                w.setValue(int(row.low))
                assert panel.settings_values()[row.name] == row.low
    assert panel.inputs["field_weight"].specialValueText() == "schema"
    assert panel.settings_values()["degree"] == DEFAULTS["degree"] == usable_cores()


def test_a_new_row_appears_in_the_form(qtbot, small_project, monkeypatch):
    row = Setting("future_flag", "bool", False, "train on a future flag", label="Future flag")
    monkeypatch.setattr(train_tab, "FORM_SETTINGS", FORM_SETTINGS + (row,))
    monkeypatch.setitem(train_tab.DEFAULTS, "future_flag", False)
    monkeypatch.setitem(train_tab.BY_NAME, "future_flag", row)
    panel = TrainingPanel(small_project)
    qtbot.addWidget(panel)
    assert isinstance(panel.inputs["future_flag"], QCheckBox)
    panel.set_settings({"future_flag": True})
    assert panel.settings_values()["future_flag"] is True


def test_threads_go_to_the_run_but_not_into_the_project(qtbot, small_project):
    project = Project.open(small_project)
    project.settings["degree"] = 7  # saved by an older version on another machine
    project.save()
    panel = TrainingPanel(small_project)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    panel.inputs["degree"].setValue(1)
    with qtbot.waitSignal(panel.finished, timeout=120_000) as done:
        run_dir = panel.fine_tune()
    assert "degree" not in Project.open(small_project).settings
    assert Project.open(small_project).settings["epochs"] == 1  # the others are saved
    assert RunDir(done.args[1]).read_settings()["settings"]["degree"] == 1
    assert RunDir(run_dir).status() == "finished"
    assert [i.name for i in RunDir.list(Project.open(small_project).runs_dir)] == [run_dir.name]


def test_the_table_and_the_form_agree_on_names():
    assert {row.name for row in FORM_SETTINGS} <= {row.name for row in SETTINGS}
