"""The Train and Results tabs, offscreen, on 16 CORD receipts of the bundled sample with a tiny model."""
from __future__ import annotations

import json
import shutil

import pytest
from PySide6.QtCore import Qt, QTimer

from dxstudio.project import Project
from dxstudio.tuning import TuneRun
from dxstudio.ui import results_tab
from dxstudio.ui.page_view import field_colours
from dxstudio.ui.results_tab import ResultsPanel, page_tally, threshold_sentence
from dxstudio.ui.train_tab import TrainingPanel, WholeNumberAxis, checkpoint_step, format_duration, unfinished_run
from tests.ui.conftest import cancel_after_step

WAIT_MS = 60_000  # generous: the machine is shared and slow; a run takes about a second


def make_panels(qtbot, root):
    panel = TrainingPanel(root)
    panel.show_dialogs = False
    results = ResultsPanel()
    results.show_dialogs = False
    qtbot.addWidget(panel)
    qtbot.addWidget(results)
    panel.finished.connect(lambda report, run_dir: results.show_run(report, run_dir, root))
    return panel, results


def set_epochs(panel, n):
    panel.inputs["epochs"].setValue(n)


def test_fine_tune_fills_plots_table_and_keeps_the_event_loop_turning(qtbot, receipts_project):
    panel, results = make_panels(qtbot, receipts_project)
    set_epochs(panel, 4)
    ticks_while_running = []
    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(lambda: panel.is_running and ticks_while_running.append(len(panel.loss_steps)))
    timer.start()

    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS) as finished:
        qtbot.mouseClick(panel.fine_tune_button, Qt.MouseButton.LeftButton)
        assert panel.is_running and not panel.fine_tune_button.isEnabled()
    timer.stop()
    report, run_dir = finished.args

    # the form's settings were saved into dxproject.json before the run
    assert Project.open(receipts_project).settings["epochs"] == 4
    assert json.loads((receipts_project / run_dir / "settings.json").read_text())["settings"]["epochs"] == 4
    # the GUI thread kept turning while the worker trained (the worker's thread was alive)
    assert len(ticks_while_running) >= 3, ticks_while_running

    # loss per step: every step, in order, the values the run logged
    total = panel.total_steps
    assert total > 4 and panel.loss_steps == list(range(1, total + 1))
    xs, ys = panel.loss_curve.getData()
    assert len(xs) == total
    logged = [json.loads(l) for l in (receipts_project / run_dir / "metrics.jsonl").read_text().splitlines()]
    assert list(ys) == [r["loss"] for r in logged if r["kind"] == "step"]
    # agreement per epoch: one line per field, one point per epoch (4 epochs)
    fields = Project.open(receipts_project).field_names
    assert set(panel.agreement_curves) == set(fields)
    for name in fields:
        ex, ey = panel.agreement_curves[name].getData()
        assert list(ex) == [1, 2, 3, 4]
        # drawn a hair apart from the other fields (panel._dodge), the value itself kept
        want = report["fields"][name]["agreement"]
        assert list(ey)[-1] - panel._dodge(name, want, 4) == pytest.approx(want) and 0 <= list(ey)[-1] <= 1
        assert panel.agreement[name][1][-1] == pytest.approx(report["fields"][name]["agreement"])
    assert panel.progress.value() == panel.progress.maximum() == total
    assert panel.resume_button.isEnabled() is False and panel.fine_tune_button.isEnabled()

    # the results table holds the report's numbers, field order kept
    qtbot.waitUntil(lambda: results.report is not None, timeout=WAIT_MS)
    rows = results.table_rows()
    assert list(rows) == fields + ["all fields"]
    for name in fields:
        f = report["fields"][name]
        fmt = lambda v: "-" if v is None else f"{v:.3f}"
        assert rows[name]["Recall"] == fmt(f["recall"])
        assert rows[name]["Agreement"] == fmt(f["agreement"])
        assert rows[name]["Threshold"] == results_tab.format_threshold(f["threshold"])
    from dxstudio.tuning.localfirst import promise_sentence

    # the Results tab leads with the one sentence; the rule's wording is its tooltip
    assert results.threshold_label.text() == promise_sentence(report)
    assert threshold_sentence(report) in results.threshold_label.toolTip()
    assert results.export_button.isEnabled()


def test_results_draw_heldout_answers_consistent_with_the_scores(qtbot, receipts_project, tmp_path):
    project = Project.open(receipts_project)
    run = TuneRun.prepare(project, receipts_project / "runs" / "r")
    run.train()
    report = run.finish()
    results = ResultsPanel()
    results.show_dialogs = False
    qtbot.addWidget(results)
    results.show_run(report, receipts_project / "runs" / "r", receipts_project)
    assert sorted(results.heldout_ids) == sorted(pid for pid, _, _ in run.heldout_pages)
    assert results.page_box.count() == len(run.heldout_pages)

    colours = field_colours(project.field_names)
    for row in report["pages"]:
        shown = results.heldout_answers(row["id"])
        for name, outcome in row["outcomes"].items():
            if outcome in ("unscored", "both_null"):
                assert name not in shown.marks
            else:  # right and wrong marks are exactly the scorer's outcomes
                assert shown.marks[name] is (outcome == "correct"), (row["id"], name, outcome)
    # both views draw the labels' tags in the field's colour; the answers view marks every
    # field the scorer counted (right, wrong or missed)
    first = results.heldout_ids[0]
    results.show_heldout_page(first)
    shown = results.heldout_answers(first)
    b_word = next(i for i, t in enumerate(shown.tags) if t > 0 and (t - 1) % 2 == 0)
    name = project.field_names[(shown.tags[b_word] - 1) // 2]
    for view in (results.labels_view, results.answers_view):
        colour = view.word_brush(b_word).color()
        assert colour.rgb() == colours[name].rgb() and colour.alpha() > 0
    assert set(results.answers_view.prediction_marks) == set(shown.marks)
    for name, ok in shown.marks.items():
        assert (results.answers_view.prediction_marks[name] == "right") is ok

    # export: the same bytes, written elsewhere
    out = results.export_model(tmp_path / "exported.safetensors")
    assert out.read_bytes() == (receipts_project / "runs" / "r" / "model.safetensors").read_bytes()

    # a label file broken since the run: a message naming it, nothing raised
    (receipts_project / "labels" / f"{first}.json").write_text("{not json")
    results.show_heldout_page(first)
    assert f"{first}.json" in results.page_summary.text() and "not JSON" in results.page_summary.text()


def test_cancel_then_resume_ends_with_the_uninterrupted_bytes(qtbot, receipts_project, tmp_path, monkeypatch):
    reference_root = tmp_path / "reference"
    shutil.copytree(receipts_project, reference_root)
    reference = TuneRun.prepare(Project.open(reference_root), reference_root / "runs" / "ref")
    reference.train()
    reference.finish()
    expected = (reference_root / "runs" / "ref" / "model.safetensors").read_bytes()

    panel, results = make_panels(qtbot, receipts_project)
    # Cancel deterministically after step 2: on the job's thread, as step 2 is reported, so the
    # cancel lands before step 3.
    cancel_after_step(monkeypatch, 2)
    with qtbot.waitSignal(panel.stopped, timeout=WAIT_MS) as stopped:
        run_dir = panel.fine_tune()
    assert stopped.args[1] == 2 and checkpoint_step(run_dir) == 2
    assert not (run_dir / "model.safetensors").exists()
    assert panel.resume_button.isEnabled() and not panel.cancel_button.isEnabled()
    assert panel.loss_steps == [1, 2]

    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS):
        qtbot.mouseClick(panel.resume_button, Qt.MouseButton.LeftButton)
    assert (run_dir / "model.safetensors").read_bytes() == expected
    assert panel.loss_steps == list(range(1, panel.total_steps + 1))
    qtbot.waitUntil(lambda: results.report is not None, timeout=WAIT_MS)


def test_shutdown_during_training_stops_the_worker_and_keeps_the_checkpoint(qtbot, receipts_project):
    panel, _ = make_panels(qtbot, receipts_project)
    set_epochs(panel, 200)  # long enough that it cannot end on its own first
    run_dir = panel.fine_tune()
    qtbot.waitUntil(lambda: len(panel.loss_steps) >= 1, timeout=WAIT_MS)
    assert panel.is_running
    assert panel.shutdown(timeout=60)
    assert not panel.is_running
    step = checkpoint_step(run_dir)
    assert step is not None and 1 <= step < panel.total_steps
    assert not (run_dir / "report.json").exists()
    # a new window offers to resume that run
    assert unfinished_run(receipts_project / "runs") == run_dir
    again = TrainingPanel(receipts_project)
    qtbot.addWidget(again)
    assert again.resume_button.isEnabled() and again.run_dir == run_dir
    assert f"stopped at step {step}" in again.status_label.text()


def test_a_run_that_cannot_start_shows_a_message_naming_the_problem(qtbot, receipts_project):
    for path in (receipts_project / "labels").glob("*.json"):
        path.unlink()  # no labels: no usable page
    panel, _ = make_panels(qtbot, receipts_project)
    with qtbot.waitSignal(panel.failed, timeout=WAIT_MS) as failed:
        panel.fine_tune()
    assert str(receipts_project) in failed.args[0] and "usable page" in failed.args[0]
    assert panel.error_label.text() == failed.args[0] and not panel.error_label.isHidden()
    assert panel.fine_tune_button.isEnabled() and not panel.is_running


def test_a_bad_setting_is_refused_before_anything_runs(qtbot, receipts_project):
    project = Project.open(receipts_project)
    project.settings["kernels"] = "turbo"  # a setting the form does not show, broken by hand
    project.save()
    panel, _ = make_panels(qtbot, receipts_project)
    assert panel.fine_tune() is None
    assert "kernels" in panel.last_error and "turbo" in panel.last_error
    assert not (receipts_project / "runs").exists() or not any((receipts_project / "runs").iterdir())


def test_form_defaults_and_small_helpers(qtbot, receipts_project):
    panel, _ = make_panels(qtbot, receipts_project)
    values = panel.settings_values()
    assert values["size"] == "tiny" and values["epochs"] == 2 and values["field_weight"] is None
    panel.restore_defaults()
    from dxstudio.tuning import DEFAULTS

    assert panel.settings_values() == {k: DEFAULTS[k] for k in values}
    assert format_duration(5) == "5 s" and format_duration(125) == "2 min 05 s"
    assert format_duration(None) == "estimating..."
    text = threshold_sentence({"threshold": 0.93, "share": 0.99})
    # the pooled threshold is reported, never used to route (issue 21)
    assert "at or above 0.93" in text.lower() and "99%" in text and "not used to route" in text


def test_results_layout_helpers(qtbot):
    # a held-out page's tally counts values as the marks do: both-empty and unscored fields are no values
    assert page_tally({"total": "correct", "tax": "wrong", "cash": "both_null", "change": "unscored"}) == \
        "1 of 2 values right"
    assert page_tally({"total": "missed"}) == "0 of 1 value right"
    assert page_tally({"total": "both_null", "tax": "unscored"}) == "no values"
    # epochs and steps are whole numbers: no tick at 1.5
    axis = WholeNumberAxis("bottom")
    assert all(spacing >= 1 for spacing, _ in axis.tickSpacing(1.0, 3.0, 800))
    # the labels and the answers views share the width equally until the person drags the handle
    results = ResultsPanel()
    qtbot.addWidget(results)
    results.resize(1000, 700)
    results.show()
    qtbot.waitExposed(results)
    left, right = (v.width() for v in (results.labels_view, results.answers_view))
    assert abs(left - right) <= 2
    splitter = results.labels_view.parentWidget().parentWidget()
    splitter.moveSplitter(300, 1)
    results.resize(1200, 700)
    qtbot.wait(20)
    assert results.labels_view.width() < results.answers_view.width() - 100


def test_results_show_value_scores_the_bound_and_a_curve_per_field(qtbot, tmp_path):
    from dxstudio.tuning.scoring import HeldOutPage, score_pages
    from dxstudio.ui.results_tab import bound_html

    pages = []
    for i in range(12):  # field a: right above 0.5, one wrong at 0.45; field b: printed twice, no threshold
        conf = 1.0 - 0.05 * i
        pages.append(HeldOutPage(f"p{i}", {"a": (1,), "b": (4,)},
                                 {"a": ((1,) if i != 11 else (2,), conf), "b": ((5,), conf)},
                                 value_match=frozenset({"b"})))
    report = score_pages(["a", "b"], pages)
    results = ResultsPanel()
    results.show_dialogs = False
    qtbot.addWidget(results)
    results.show_run(report, tmp_path / "run", tmp_path)
    rows = results.table_rows()
    assert rows["b"]["Recall"] == "0.000" and rows["b"]["Value recall"] == "1.000"
    assert rows["a"]["Value agreement"] == f"{11 / 12:.3f}" and rows["a"]["Coverage"] == f"{11 / 12:.3f}"
    # the bound in words, and the plain warning: 12 held-out pages cannot carry a 99% claim
    text = results.bound_label.text()
    assert text == bound_html(report)  # issue 23: only the warning in colour, and no command-line flag
    assert "a: 11 values at or above 0.5, all right: with 95% confidence at least 76%" in text
    assert "<b>Warning</b>: Too few held-out pages" in text and "--folds" not in text
    assert "Folds to 5 in the Train tab" in text and text.count("color:") == 1
    # one plot per field: the report's curve, the threshold marked where the field has one
    assert set(results.curve_plots) == {"a", "b"}
    xs, ys = results.curve_items["a"].getData()
    assert list(xs) == [p[1] for p in report["fields"]["a"]["curve"]]
    assert list(ys) == [p[2] for p in report["fields"]["a"]["curve"]]
    assert results.threshold_marks["a"] == (11 / 12, 1.0)
    assert results.threshold_marks["b"] is None  # never exactly right, no pooled threshold: nothing to mark
    # a field without a threshold of its own routes ask: the pooled one is never marked on it (issue 21)
    report["threshold"] = 0.8
    results.show_run(report, tmp_path / "run", tmp_path)
    assert results.threshold_marks["b"] is None and results.threshold_marks["a"] == (11 / 12, 1.0)
    # thresholds chosen by value (the default rule): the curves show precision by value, so b's
    # printings elsewhere count as right and the dot agrees with the threshold text
    by_value = score_pages(["a", "b"], pages, by="value")
    results.show_run(by_value, tmp_path / "run", tmp_path)
    _, ys = results.curve_items["b"].getData()
    assert list(ys) == [p[3] for p in by_value["fields"]["b"]["curve"]] and set(ys) == {1.0}
    assert results.curve_plots["b"].getPlotItem().getAxis("left").labelText == "precision (value)"


def test_the_form_runs_folds_and_the_results_show_the_pooled_report(qtbot, receipts_project):
    panel, results = make_panels(qtbot, receipts_project)
    panel.inputs["folds"].setValue(2)
    panel.inputs["repeats"].setCurrentText("ignore")
    assert panel.settings_values()["folds"] == 2 and panel.settings_values()["repeats"] == "ignore"
    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS) as finished:
        panel.fine_tune()
    report, run_dir = finished.args
    assert Project.open(receipts_project).settings["folds"] == 2
    assert report["run"]["folds"] == 2 and report["n_pages"] == report["run"]["train_pages"]
    qtbot.waitUntil(lambda: results.report is not None, timeout=WAIT_MS)
    assert set(results.curve_plots) == set(report["fields"])
    panel.inputs["folds"].setValue(1)
    assert panel.settings_values()["folds"] is None  # "auto"
