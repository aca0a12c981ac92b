"""The Runs tab and results that survive a restart, driven with input events, offscreen, on
eight receipts of the bundled sample (no ../shared needed)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from dxstudio.project import Project
from dxstudio.tuning import TuneRun
from dxstudio.ui.runs_panel import RunsPanel, settings_text
from dxstudio.ui.results_tab import FEW_HELDOUT_PAGES, ResultsPanel, threshold_sentence
from tests.conftest import sample_project

SAMPLE = Path(__file__).resolve().parents[2] / "resources" / "sample"


@pytest.fixture(scope="module")
def runs_template(tmp_path_factory):
    """A project with two finished runs (A older, seed 1; B newer, lr 0.01) and a stopped one."""
    root = sample_project(tmp_path_factory.mktemp("runs") / "p", 8, {"size": "tiny", "auto_folds": 0, "epochs": 2,
                                                                    "batch": 2, "warmup": 1, "heldout_fraction": 0.25})
    for i, (name, overrides, finish) in enumerate([("20260101-000000", {}, True),
                                                   ("20260102-000000", {"lr": 0.01}, True),
                                                   ("20260103-000000", {"epochs": 3}, False)]):
        run = TuneRun.prepare(Project.open(root), root / "runs" / name, overrides)
        if finish:
            run.train()
            run.finish()
        else:
            run.train(stop_after=1)
        for f in (root / "runs" / name).iterdir():  # file times in run order (RunDir.list sorts by them)
            os.utime(f, (1_700_000_000 + i * 100, 1_700_000_000 + i * 100))
    return root


@pytest.fixture
def project(runs_template, tmp_path):
    dst = tmp_path / "p"
    shutil.copytree(runs_template, dst)
    return dst


def click_row(qtbot, table, row, modifier=Qt.KeyboardModifier.NoModifier):
    rect = table.visualItemRect(table.item(row, 0))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, modifier, rect.center())


def panel_on(qtbot, root):
    panel = RunsPanel(root)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    panel.resize(1100, 700)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_the_list_shows_every_run_with_status_steps_settings_and_scores(qtbot, project):
    panel = panel_on(qtbot, project)
    assert [r.name for r in panel.runs] == ["20260103-000000", "20260102-000000", "20260101-000000"]
    t = panel.table
    rows = {t.item(r, 0).text(): [t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())}
    stopped, b, a = rows["20260103-000000"], rows["20260102-000000"], rows["20260101-000000"]
    assert stopped[1].startswith("stopped") and stopped[2].startswith("1 of ")
    assert b[1] == a[1] == "finished" and b[2].split(" of ")[0] == b[2].split(" of ")[1]
    assert "lr 0.01" in b[3] and "epochs 3" in stopped[3] and "lr" not in a[3]
    assert a[4] != "-" and stopped[4] == "-"
    assert settings_text({"lr": 0.01, "degree": 7, "epochs": 12}) == "lr 0.01"  # a machine's setting is no difference


def test_open_compare_and_use_a_model_with_the_mouse_and_keys(qtbot, project):
    panel = panel_on(qtbot, project)
    opened = []
    panel.open_results.connect(lambda report, run_dir: opened.append((report, run_dir)))
    # the stopped run: nothing to open, compare or use
    click_row(qtbot, panel.table, 0)
    assert panel.selected_names() == ["20260103-000000"]
    assert not panel.open_button.isEnabled() and not panel.use_button.isEnabled()
    # a finished run opens with Enter and with the button
    click_row(qtbot, panel.table, 2)
    qtbot.keyClick(panel.table, Qt.Key.Key_Return)
    qtbot.mouseClick(panel.open_button, Qt.MouseButton.LeftButton)
    assert len(opened) == 2 and Path(opened[0][1]).name == "20260101-000000"
    assert opened[0][0] == json.loads((project / "runs" / "20260101-000000" / "report.json").read_text())
    # Ctrl+click a second finished run, then Compare: field by field, A the older
    click_row(qtbot, panel.table, 1, Qt.KeyboardModifier.ControlModifier)
    assert sorted(panel.selected_names()) == ["20260101-000000", "20260102-000000"]
    assert panel.compare_button.isEnabled()
    qtbot.mouseClick(panel.compare_button, Qt.MouseButton.LeftButton)
    ra = json.loads((project / "runs" / "20260101-000000" / "report.json").read_text())
    rb = json.loads((project / "runs" / "20260102-000000" / "report.json").read_text())
    ct = panel.compare_table
    shown = {ct.item(r, 0).text(): [ct.item(r, c).text() for c in range(1, ct.columnCount())]
             for r in range(ct.rowCount())}
    assert list(shown)[:len(ra["fields"])] == list(ra["fields"])
    for f, v in ra["fields"].items():
        fmt = lambda x: "-" if x is None else f"{x:.3f}"
        assert shown[f][0] == fmt(v["recall"]) and shown[f][2] == fmt(v["agreement"])
        assert shown[f][1].startswith(fmt(rb["fields"][f]["recall"]))
    assert "A: 20260101-000000" in panel.compare_title.text() and "lr 0.002 → 0.01" in panel.compare_title.text()
    # Use this model: dxproject.json names it (written atomically, nothing else lost)
    before = json.loads((project / "dxproject.json").read_text())
    click_row(qtbot, panel.table, 1)
    chosen = []
    panel.model_chosen.connect(chosen.append)
    qtbot.mouseClick(panel.use_button, Qt.MouseButton.LeftButton)
    after = json.loads((project / "dxproject.json").read_text())
    assert after["model"] == "runs/20260102-000000/model.safetensors"
    assert {k: v for k, v in after.items() if k != "model"} == before
    assert Project.open(project).model == project / "runs" / "20260102-000000" / "model.safetensors"
    assert chosen and panel.table.item([r.name for r in panel.runs].index("20260102-000000"), 5).text() == "yes"
    assert not list(project.glob(".*.tmp"))


def test_a_model_of_another_schema_is_refused(qtbot, project):
    data = json.loads((project / "dxproject.json").read_text())
    data["schema"] = data["schema"][:2]
    (project / "dxproject.json").write_text(json.dumps(data))
    panel = panel_on(qtbot, project)
    click_row(qtbot, panel.table, 1)
    qtbot.mouseClick(panel.use_button, Qt.MouseButton.LeftButton)
    assert "not the project's schema" in panel.last_error
    assert "model" not in json.loads((project / "dxproject.json").read_text())


def test_results_reappear_on_restart_with_help_and_a_caveat(qtbot, project, tmp_path, monkeypatch):
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from dxstudio.ui.app import MainWindow

    w = MainWindow(project)
    qtbot.addWidget(w)
    w.resize(1280, 900)
    w.show()
    qtbot.waitExposed(w)
    results = w.results_panel
    assert results.run_dir is not None and results.run_dir.name == "20260102-000000"  # the newest finished
    report = json.loads((project / "runs" / "20260102-000000" / "report.json").read_text())
    assert set(results.table_rows()) >= set(report["fields"])
    held = report["run"]["heldout_pages"]
    assert held < FEW_HELDOUT_PAGES and not results.caveat_label.isHidden()
    assert f"Only {held} held-out page" in results.caveat_label.text()
    for c, name in enumerate(results.COLUMNS):
        if name in ("Recall", "Agreement", "Threshold"):
            assert len(results.table.horizontalHeaderItem(c).toolTip()) > 40
    assert "Agreement" in results.help_label.text()
    # the Train tab shows the newest run's real steps, the Runs tab lists every run
    assert w.training_panel.total_steps > 1 and w.training_panel.loss_steps
    tabs = [w.tabs.tabText(i) for i in range(w.tabs.count())]
    assert "Runs" in tabs
    w.tabs.setCurrentWidget(w.runs_panel)
    click_row(qtbot, w.runs_panel.table, 2)
    qtbot.keyClick(w.runs_panel.table, Qt.Key.Key_Return)
    assert w.tabs.currentWidget() is w.results_area and results.run_dir.name == "20260101-000000"


def test_export_keeps_the_run_title(qtbot, project, tmp_path):
    results = ResultsPanel()
    results.show_dialogs = False
    qtbot.addWidget(results)
    run_dir = project / "runs" / "20260101-000000"
    results.show_run(json.loads((run_dir / "report.json").read_text()), run_dir, project)
    title = results.title.text()
    from unittest import mock

    with mock.patch("dxstudio.ui.results_tab.QFileDialog.getSaveFileName",
                    return_value=(str(tmp_path / "m.safetensors"), "")):
        qtbot.mouseClick(results.export_button, Qt.MouseButton.LeftButton)
    assert results.title.text() == title and "m.safetensors" in results.export_label.text()
    assert (tmp_path / "m.safetensors").read_bytes() == (run_dir / "model.safetensors").read_bytes()


def test_the_threshold_sentence_never_contradicts_the_table():
    report = {"threshold": None, "share": 0.99, "threshold_statement": "No LocalFirst threshold can be suggested: x.",
              "fields": {"total": {"threshold": 0.91}, "tax": {"threshold": None}}}
    text = threshold_sentence(report)
    assert "can be suggested" not in text and "total has one of its own" in text and "For tax" in text
    report["fields"]["total"]["threshold"] = None
    assert threshold_sentence(report).startswith("No LocalFirst threshold can be suggested")
    # a threshold just below 1 is not shown as 1, in the sentence and in the table alike
    from dxstudio.ui.results_tab import format_threshold

    assert format_threshold(0.999851) == "0.9999" and format_threshold(0.93) == "0.93" and format_threshold(None) == "-"
    report["threshold"] = 0.999851
    assert "(reported, not used to route): 0.9999." in threshold_sentence(report)
