"""Hostile inputs on the new surface (issue 27): route, review beside the CLI, pretrain's
corpus, PDFs, Ray. One test (or a few) per item of the issue, in its order; each failed on
the code before the fix. Fake endpoints listen on 127.0.0.1 only."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dxstudio import cli
from dxstudio.project import Project

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "resources" / "sample"
FIELDS = "total,subtotal,tax,cash,change"  # the bundled sample's schema


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def sample_pages(n):
    return sorted((SAMPLE / "pages").glob("*.json"))[:n]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.safetensors"
    assert cli.main(["new-model", str(path), "--size", "tiny", "--fields", FIELDS]) == 0
    return path


# -- 1. a review session never writes its old copy over newer answers ---------------------------

def test_review_session_refuses_to_overwrite_answers_changed_on_disk(receipts_project):
    from dxstudio.labelling import apply_answers
    from dxstudio.review import ReviewError, ReviewSession

    s = ReviewSession(receipts_project)
    pid = s.current
    old_total = s.labels.answers["total"]
    # meanwhile `label --jsonl` (or a re-import) gives the page new answers
    p = Project.open(receipts_project)
    apply_answers(p, pid, dict(p.load_labels(pid).answers, total="77.77"), "import")
    with pytest.raises(ReviewError, match="changed on disk"):
        s.accept()
    on_disk = p.load_labels(pid)
    assert on_disk.answers["total"] == "77.77" != old_total  # not written back
    assert on_disk.state == "unreviewed"
    assert s.labels.answers["total"] == "77.77"  # the session reloaded what is there now
    s.accept()  # a decision on what is shown now goes through
    assert p.load_labels(pid).state == "accepted" and p.load_labels(pid).answers["total"] == "77.77"
    # an undo after another change on disk is refused the same way, and stays on the stack
    labels = p.load_labels(pid)
    labels.answers["total"] = "88.88"
    p.save_labels(pid, labels)
    with pytest.raises(ReviewError, match="changed on disk"):
        s.undo()
    assert s.can_undo and p.load_labels(pid).answers["total"] == "88.88"


# -- 2. a run folder's .lock that is a link is never followed ----------------------------------

def test_run_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    from dxstudio.tuning import TuneError
    from dxstudio.tuning.rundir import RunDir

    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    os.symlink(victim, rd.lock_path)
    with pytest.raises(TuneError, match="link"):
        rd.acquire()
    assert victim.read_text() == "keep me\n"
    assert not rd.is_locked_elsewhere()
    dangling = RunDir(tmp_path / "run2")
    dangling.path.mkdir()
    os.symlink(tmp_path / "created-by-lock", dangling.lock_path)
    with pytest.raises(TuneError, match="link"):
        dangling.acquire()
    assert not (tmp_path / "created-by-lock").exists()


# -- 3. orphan .tmp files go; a run killed before its first checkpoint starts again -------------

def test_orphan_tmp_files_of_a_killed_writer_are_removed_on_the_next_open(tmp_path):
    from dxstudio.fsutil import write_json_atomic

    p = Project.create(tmp_path / "proj", "x", ["total"])
    # what a writer killed between mkstemp and rename leaves: a dead process's temp file
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    orphans = [p.labels_dir / f".a.json.{dead}-x1y2.tmp", p.pages_dir / f".a.json.{dead}-z3w4.tmp",
               p.cache_dir / "labels" / f".a.json.{dead}-q5r6.tmp"]
    old_style = p.pages_dir / ".b.json.k2j3h4.tmp"  # named before the pid was in the name: by age
    for f in orphans + [old_style]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{half a page")
    os.utime(old_style, (time.time() - 7200, time.time() - 7200))
    live = p.labels_dir / f".c.json.{os.getpid()}-live.tmp"  # a live writer's file stays
    live.write_text("{")
    young = p.pages_dir / ".d.json.k9j8h7.tmp"  # no pid, and young: may be a live writer's
    young.write_text("{")
    Project.open(p.root)
    assert not any(f.exists() for f in orphans + [old_style])
    assert live.exists() and young.exists()
    write_json_atomic(p.labels_dir / "e.json", {"x": 1})  # the writer's own names carry its pid
    assert not list(p.labels_dir.glob(".e.json.*"))


def test_a_tune_killed_before_its_first_checkpoint_starts_again(small_project, tmp_path, capsys):
    from dxstudio.tuning.rundir import RunDir

    out = tmp_path / "run"
    # what a kill before the first checkpoint leaves: settings, snapshot, a metrics line, no checkpoint
    code, _, err = run_cli(["tune", str(small_project), "--out", str(out), "--stop-after", "1"], capsys)
    assert code == 0, err
    (out / "checkpoint.safetensors").unlink()
    assert RunDir(out).has_run() and RunDir(out).checkpoint_step() is None
    code, _, err = run_cli(["tune", str(small_project), "--out", str(out), "--stop-after", "1"], capsys)
    assert code == 0, err  # not "already holds a run"
    assert RunDir(out).checkpoint_step() == 1
    (out / "checkpoint.safetensors").unlink()
    code, _, err = run_cli(["tune", str(small_project), "--out", str(out), "--resume", "--stop-after", "1"], capsys)
    assert code == 0, err  # not "no checkpoint": the run starts again from step 0
    assert "starts again from step 0" in err
    assert RunDir(out).checkpoint_step() == 1
    # a folder with no run at all is still refused by --resume
    code, _, err = run_cli(["tune", str(small_project), "--out", str(tmp_path / "nothing"), "--resume"], capsys)
    assert code == 2 and "no checkpoint" in err
