"""Issue 12 in the Train tab, driven with input events, offscreen, on eight receipts of the
bundled sample (no ../shared needed): what trains, accepted pages only, Resume after review,
a reopened run's step count and plots, the time estimate."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtCore import Qt

from dxstudio.project import Project
from dxstudio.tuning import TuneRun
from dxstudio.tuning.rundir import RunDir
from dxstudio.ui import train_tab
from dxstudio.ui.train_tab import TrainingPanel

from tests.conftest import set_review
from tests.ui.conftest import cancel_after_step

WAIT_MS = 60_000


def panel_on(qtbot, root):
    panel = TrainingPanel(root)
    panel.show_dialogs = False
    qtbot.addWidget(panel)
    panel.resize(1200, 800)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_the_train_tab_says_what_trains_and_accepted_only_is_a_setting(qtbot, small_project):
    ids = Project.open(small_project).page_ids()
    set_review(small_project, ids[0], state="accepted")
    set_review(small_project, ids[1], state="accepted")
    set_review(small_project, ids[2], state="excluded")
    panel = panel_on(qtbot, small_project)
    text = panel.breakdown_label.text()
    c = panel.breakdown
    assert c["accepted"] == 2 and c["excluded"] == 1 and c["usable"] == 2 + c["fixed"] + c["unreviewed"]
    assert f"Trains on {c['usable']} pages" in text and "2 accepted" in text and "1 excluded" in text
    assert "reviewed labels" not in panel.status_label.text()
    # a click on "Accepted pages only" changes the sentence and is saved with the run
    box = panel.inputs["accepted_only"]
    box.setFocus()
    qtbot.keyClick(box, Qt.Key.Key_Space)
    assert box.isChecked()
    qtbot.waitUntil(lambda: not panel.counting(), timeout=WAIT_MS)  # (recounted in the worker process)
    assert "Trains on 2 pages" in panel.breakdown_label.text() and "accepted in Review only" in panel.breakdown_label.text()
    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS) as done:
        qtbot.mouseClick(panel.fine_tune_button, Qt.MouseButton.LeftButton)
    report, run_dir = done.args
    assert Project.open(small_project).settings["accepted_only"] is True
    settings = json.loads((Path(run_dir) / "settings.json").read_text())
    assert sorted(settings["train_pages"] + settings["heldout_pages"]) == ids[:2]
    assert report["run"]["train_pages"] + report["run"]["heldout_pages"] == 2


def test_review_during_a_stopped_run_then_resume_gives_the_bytes_of_an_uninterrupted_run(qtbot, small_project, tmp_path,
                                                                                         monkeypatch):
    reference_root = tmp_path / "ref"
    shutil.copytree(small_project, reference_root)
    ref = TuneRun.prepare(Project.open(reference_root), reference_root / "runs" / "ref", {})
    ref.train()
    ref.finish()
    want = (reference_root / "runs" / "ref" / "model.safetensors").read_bytes()

    panel = panel_on(qtbot, small_project)
    assert not panel.resume_button.isEnabled()
    real = cancel_after_step(monkeypatch, 2)
    with qtbot.waitSignal(panel.stopped, timeout=WAIT_MS):
        qtbot.mouseClick(panel.fine_tune_button, Qt.MouseButton.LeftButton)
    monkeypatch.setattr(train_tab, "tune_work", real)
    run_dir = panel.run_dir
    step = RunDir(run_dir).checkpoint_step()
    assert step == 2 < panel.total_steps
    assert panel.resume_button.isEnabled()
    # a person goes on reviewing: a trained page is excluded, another gets a fix
    trained = json.loads((run_dir / "settings.json").read_text())["train_pages"]
    set_review(small_project, trained[0], state="excluded")
    set_review(small_project, trained[1], fixes={"total": [0]})
    assert panel.update_breakdown()["excluded"] == 1
    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS):
        qtbot.mouseClick(panel.resume_button, Qt.MouseButton.LeftButton)
    assert panel.last_error is None
    assert RunDir(run_dir).model_path.read_bytes() == want
    assert not panel.resume_button.isEnabled()  # a finished run has nothing to resume
    assert "finished" in panel.resume_button.toolTip()


def test_resume_is_disabled_when_it_cannot_work(qtbot, small_project):
    run_dir = small_project / "runs" / "20260101-000000"
    run = TuneRun.prepare(Project.open(small_project), run_dir, {})
    run.train(stop_after=1)
    other = TuneRun.prepare(Project.open(small_project), small_project / "runs" / "x", {"seed": 9})
    other.train(stop_after=1)
    shutil.copy(other.rundir.checkpoint_path, run.rundir.checkpoint_path)  # not this run's checkpoint
    shutil.rmtree(small_project / "runs" / "x")
    panel = panel_on(qtbot, small_project)
    assert panel.run_dir == run_dir
    assert not panel.resume_button.isEnabled() and "not the one of settings.json" in panel.resume_button.toolTip()
    # the run's own checkpoint back: Resume can work; then a field is added to the schema: it cannot
    run.save_checkpoint()
    panel.show_run_history(run_dir)
    assert panel.resume_button.isEnabled()
    data = json.loads((small_project / "dxproject.json").read_text())
    data["schema"].append({"name": "date", "description": "the date", "weight": 3.0})
    (small_project / "dxproject.json").write_text(json.dumps(data))
    panel.show_run_history(run_dir)
    assert not panel.resume_button.isEnabled() and "schema" in panel.resume_button.toolTip()


def test_a_reopened_run_shows_its_steps_and_plots(qtbot, small_project):
    run_dir = small_project / "runs" / "20260101-000000"
    run = TuneRun.prepare(Project.open(small_project), run_dir, {})
    run.train()
    run.finish()
    panel = panel_on(qtbot, small_project)  # as after a restart
    assert panel.total_steps == run.total_steps > 1
    assert panel.progress.maximum() == run.total_steps and panel.progress.value() == run.total_steps
    assert panel.loss_steps == list(range(1, run.total_steps + 1))
    xs, _ = panel.loss_curve.getData()
    assert len(xs) == run.total_steps
    assert set(panel.agreement) == set(run.cfg.fields) and all(len(x) == 2 for x, _ in panel.agreement.values())
    assert "finished" in panel.status_label.text()
    # the legend is a line under the plot, not over the curves
    assert not panel.agreement_legend.geometry().intersects(panel.agreement_plot.geometry())
    for f in run.cfg.fields:
        assert f in panel.agreement_legend.text()


def test_fields_at_the_same_value_are_drawn_apart_inside_the_plot(qtbot, small_project):
    panel = panel_on(qtbot, small_project)
    panel._clear_plots()
    panel._add_agreement(1, {"total": 0.0, "tax": 0.0, "cash": 0.0, "change": 1.0, "subtotal": 1.0})
    panel._add_agreement(2, {"total": 0.25, "tax": 0.0, "cash": 0.5, "change": 1.0, "subtotal": 0.75})
    drawn = {f: list(c.getData()[1]) for f, c in panel.agreement_curves.items()}
    at0 = [drawn[f][0] for f in ("total", "tax", "cash")]
    assert len(set(at0)) == 3 and all(0 <= y <= 0.07 for y in at0)  # apart, upwards from 0
    assert drawn["change"][0] != drawn["subtotal"][0] and all(0.93 <= drawn[f][0] <= 1 for f in ("change", "subtotal"))
    # a field alone at its value is drawn exactly; the data stay as they were
    assert [drawn[f][1] for f in ("total", "tax", "cash", "change", "subtotal")] == [0.25, 0.0, 0.5, 1.0, 0.75]
    assert panel.agreement["tax"][1] == [0.0, 0.0]


def test_no_time_estimate_until_a_few_steps_have_run(qtbot, small_project, monkeypatch):
    panel = panel_on(qtbot, small_project)
    panel.total_steps = 1000
    clock = [100.0]
    monkeypatch.setattr("dxstudio.ui.train_tab.time.monotonic", lambda: clock[0])
    panel._session_start = (100.0, 0)
    panel._first_step = None
    clock[0] = 130.0  # the first step took 30 s (compiling kernels)
    assert panel._time_left(1) == "estimating..."
    for step in (2, 3):
        clock[0] += 1.0  # then 1 s a step
        assert panel._time_left(step) == "estimating..."
    clock[0] += 1.0
    # issue 23: from measured steps only (3 steps of 1 s), not the 30 s of compiling: 996 s left,
    # where the elapsed time from the start (33 s for 4 steps) said 2 h 17 min
    assert panel._time_left(4) == "16 min 36 s left"
