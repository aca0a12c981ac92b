"""A run keeps its own snapshot of the label targets (targets.json): review goes on while it is
stopped and resume still gives the bytes of an uninterrupted run. The accepted_only setting and
the breakdown of what trains. On eight receipts of the bundled sample (no ../shared needed)."""
from __future__ import annotations

import json
import shutil

import pytest

from dxstudio.project import Project
from dxstudio.tuning import TuneError, TuneRun
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.pages import NOT_ACCEPTED, training_breakdown

from tests.conftest import set_review


def test_resume_after_review_gives_the_bytes_of_an_uninterrupted_run(small_project, tmp_path):
    full = TuneRun.prepare(Project.open(small_project), tmp_path / "full", {})
    assert full.train() and full.total_steps >= 4
    full.finish()
    want = (tmp_path / "full" / "model.safetensors").read_bytes()

    part_dir = small_project / "runs" / "part"
    part = TuneRun.prepare(Project.open(small_project), part_dir, {})
    assert part.train(stop_after=2) is False
    snap = json.loads((part_dir / "targets.json").read_text())
    trained = sorted(r[0] for r in part.train_pages + part.heldout_pages)
    assert sorted(snap["labels"]) == trained
    # review goes on: a page trained on is excluded, another one gets a fix
    set_review(small_project, part.train_pages[0][0], state="excluded")
    set_review(small_project, part.heldout_pages[0][0], fixes={"total": [0]})
    assert RunDir(part_dir).resume_problem() is None
    resumed = TuneRun.prepare(Project.open(small_project), part_dir, {}, resume=True)
    assert resumed.fingerprint == part.fingerprint
    assert resumed.train(resume=True)
    resumed.finish()
    assert (part_dir / "model.safetensors").read_bytes() == want
    # a new run reads the labels as they are now
    fresh = TuneRun.prepare(Project.open(small_project), tmp_path / "fresh", {})
    assert fresh.fingerprint != part.fingerprint
    assert part.train_pages[0][0] not in [r[0] for r in fresh.train_pages + fresh.heldout_pages]


def test_a_tampered_snapshot_is_refused_and_resume_problem_says_why(small_project, tmp_path):
    run_dir = tmp_path / "r"
    run = TuneRun.prepare(Project.open(small_project), run_dir, {})
    run.train(stop_after=1)
    rd = RunDir(run_dir)
    assert rd.resume_problem() is None
    snap = json.loads(rd.snapshot_path.read_text())
    pid = sorted(snap["labels"])[0]
    d = json.loads(snap["labels"][pid])
    d["review"]["state"] = "accepted"
    snap["labels"][pid] = json.dumps(d)
    rd.snapshot_path.write_text(json.dumps(snap))
    again = TuneRun.prepare(Project.open(small_project), run_dir, {}, resume=True)
    with pytest.raises(TuneError, match="label files changed"):
        again.train(resume=True)
    # a checkpoint of another run than settings.json: Resume cannot work, and says so
    other = TuneRun.prepare(Project.open(small_project), tmp_path / "o", {"seed": 7})
    other.train(stop_after=1)
    shutil.copy(tmp_path / "o" / "checkpoint.safetensors", rd.checkpoint_path)
    assert "not the one of settings.json" in rd.resume_problem()
    rd.checkpoint_path.unlink()
    assert rd.resume_problem() == "it never reached a checkpoint"


def test_accepted_only_trains_on_accepted_pages_and_is_fingerprinted(small_project, tmp_path):
    ids = Project.open(small_project).page_ids()
    for pid in ids[:3]:
        set_review(small_project, pid, state="accepted")
    set_review(small_project, ids[3], state="excluded")
    before = training_breakdown(Project.open(small_project))
    assert before["accepted"] == 3 and before["excluded"] == 1
    assert before["usable"] == 3 + before["fixed"] + before["unreviewed"]
    only = training_breakdown(Project.open(small_project), accepted_only=True)
    assert only["usable"] == 3 and only["not_accepted"] == before["fixed"] + before["unreviewed"]

    run = TuneRun.prepare(Project.open(small_project), tmp_path / "a", {"accepted_only": True})
    assert sorted(r[0] for r in run.train_pages + run.heldout_pages) == ids[:3]
    assert sum(reason == NOT_ACCEPTED for _, reason in run.excluded) == only["not_accepted"]
    default = TuneRun.prepare(Project.open(small_project), tmp_path / "b", {})
    assert len(default.train_pages + default.heldout_pages) == before["usable"]
    assert run.components["settings"] != default.components["settings"]
    # one accepted page is too few, and the message names the setting
    for pid in ids[1:3]:
        set_review(small_project, pid, state="unreviewed")
    with pytest.raises(TuneError, match="accepted_only"):
        TuneRun.prepare(Project.open(small_project), tmp_path / "c", {"accepted_only": True})
