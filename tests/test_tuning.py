"""The trainer: determinism across degrees, resume to the same bytes, the fingerprint, reports."""
from __future__ import annotations

import json
import threading

import pytest

from dxstudio.cli import main as cli_main
from dxstudio.project import Project
from dxstudio.tuning import TuneError, TuneRun, evaluate_model


def tune(project_dir, run_dir, **overrides):
    run = TuneRun.prepare(Project.open(project_dir), run_dir, overrides)
    assert run.train(), "the run should finish"
    report = run.finish()
    return run, report, (run_dir / "model.safetensors").read_bytes()


def test_same_bytes_at_degree_1_and_2(receipts_project, tmp_path):
    run1, rep1, b1 = tune(receipts_project, tmp_path / "d1", degree=1)
    run2, rep2, b2 = tune(receipts_project, tmp_path / "d2", degree=2)
    assert len(run1.train_pages) >= 8 and run1.total_steps >= 4
    assert b1 == b2
    assert rep1["fields"] == rep2["fields"]
    # the run really trained: the weights moved away from the starting model
    assert b1 != run1.start_bytes


def test_stop_after_then_resume_gives_the_same_bytes(receipts_project, tmp_path):
    _, _, full = tune(receipts_project, tmp_path / "full")
    project = Project.open(receipts_project)
    run = TuneRun.prepare(project, tmp_path / "part", {})
    assert run.total_steps > 3
    assert run.train(stop_after=3) is False
    assert (tmp_path / "part" / "checkpoint.safetensors").exists()
    resumed = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", {"degree": 2})
    assert resumed.train(resume=True)
    resumed.finish()
    assert (tmp_path / "part" / "model.safetensors").read_bytes() == full
    # the metrics file holds every step once
    steps = [json.loads(l)["step"] for l in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()
             if json.loads(l)["kind"] == "step"]
    assert steps == list(range(1, run.total_steps + 1))


def test_layer_decay_is_the_same_bytes_at_any_degree_and_after_resume(receipts_project, tmp_path):
    decayed = dict(layer_decay=0.5, backbone_scale=1.0)
    run1, _, b1 = tune(receipts_project, tmp_path / "d1", degree=1, **decayed)
    _, _, b2 = tune(receipts_project, tmp_path / "d2", degree=2, **decayed)
    plain_run, _, plain = tune(receipts_project, tmp_path / "plain", degree=1, backbone_scale=1.0)
    assert b1 == b2 and b1 != plain and run1.fingerprint != plain_run.fingerprint
    part = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", dict(decayed, degree=1))
    assert part.train(stop_after=3) is False
    resumed = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", dict(decayed, degree=2))
    assert resumed.train(resume=True)
    resumed.finish()
    assert (tmp_path / "part" / "model.safetensors").read_bytes() == b1
    # off (1, the default) leaves the fingerprint of the runs before the setting
    assert TuneRun.prepare(Project.open(receipts_project), tmp_path / "one",
                           {"layer_decay": 1.0, "backbone_scale": 1.0}).fingerprint == plain_run.fingerprint


@pytest.mark.parametrize("bad", [0, 1.5, -0.2, "x"])
def test_bad_layer_decay_is_named(receipts_project, tmp_path, bad):
    with pytest.raises(TuneError, match="setting layer_decay must be"):
        TuneRun.prepare(Project.open(receipts_project), tmp_path / "bad", {"layer_decay": bad})


def test_cancel_mid_epoch_keeps_a_checkpoint_and_resumes_to_the_same_bytes(receipts_project, tmp_path):
    _, _, full = tune(receipts_project, tmp_path / "full")
    cancel = threading.Event()
    seen = []

    def on_event(ev):
        if ev.kind == "step":
            seen.append(ev.step)
            if ev.step == 2:  # batch 4 of 11 training pages: step 2 ends inside epoch 0
                cancel.set()

    run = TuneRun.prepare(Project.open(receipts_project), tmp_path / "c", {})
    assert run.train(on_event, cancel=cancel) is False
    assert seen == [1, 2]
    again = TuneRun.prepare(Project.open(receipts_project), tmp_path / "c", {})
    assert again.train(resume=True)
    again.finish()
    assert (tmp_path / "c" / "model.safetensors").read_bytes() == full


def test_resume_refuses_a_changed_label_file_and_says_which(receipts_project, tmp_path):
    project = Project.open(receipts_project)
    run = TuneRun.prepare(project, tmp_path / "r", {})
    run.train(stop_after=2)
    # a person fixes a label: the training labels changed
    pid = run.train_pages[0][0]
    labels = project.load_labels(pid)
    labels.review["state"] = "accepted"
    project.save_labels(pid, labels)
    # read from the project's label files (not the run's snapshot, targets.json), they differ
    again = TuneRun.prepare(Project.open(receipts_project), tmp_path / "r", {}, resume=False)
    with pytest.raises(TuneError, match="label files changed"):
        again.train(resume=True)
    # and a changed setting is named too
    again = TuneRun.prepare(Project.open(receipts_project), tmp_path / "r", {"lr": 0.5})
    with pytest.raises(TuneError, match="settings"):
        again.train(resume=True)


def test_report_shape_and_eval_gives_the_same_scores(receipts_project, tmp_path):
    run, report, _ = tune(receipts_project, tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "report.json").read_text())
    assert set(on_disk["fields"]) == {"total", "subtotal", "tax", "cash", "change", "item"}
    for f in on_disk["fields"].values():
        assert {"recall", "agreement", "threshold"} <= set(f)
    assert "threshold" in on_disk
    again = evaluate_model(tmp_path / "run" / "model.safetensors", Project.open(receipts_project))
    assert again["fields"] == report["fields"]


def test_too_few_usable_pages_is_a_clear_error(receipts_project, tmp_path):
    project = Project.open(receipts_project)
    for pid in project.page_ids()[1:]:
        labels = project.load_labels(pid)
        labels.review["state"] = "excluded"
        project.save_labels(pid, labels)
    with pytest.raises(TuneError, match="at least 2"):
        TuneRun.prepare(Project.open(receipts_project), tmp_path / "x", {})


def test_cli_tune_stop_and_resume(receipts_project, tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli_main(["tune", str(receipts_project), "--out", str(out), "--stop-after", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["finished"] is False
    assert cli_main(["tune", str(receipts_project), "--out", str(out), "--resume", "--degree", "2"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out / "model.safetensors").exists() and "fields" in res
    assert cli_main(["eval", str(out / "model.safetensors"), str(receipts_project)]) == 0
    assert cli_main(["tune", str(tmp_path / "nope")]) == 2
