"""Run folders: unique names, no silent overwrite, one writer at a time, orphaned temporary
files cleaned, a run list with statuses, and a fingerprint of the bytes that were read.
Built on a few pages of the bundled sample (no ../shared needed)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dxstudio.cli import main as cli_main
from dxstudio.project import Project
from dxstudio.tuning import TuneError, TuneRun
from dxstudio.tuning.rundir import RunDir, RunLockedError
from tests.conftest import sample_project

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def small_project(tmp_path):
    """Eight sample receipts, a tiny model, one epoch of two steps."""
    return sample_project(tmp_path / "p", 8, {"size": "tiny", "auto_folds": 0, "epochs": 1,
                                             "batch": 4, "warmup": 1, "heldout_fraction": 0.25, "checkpoint_every": 1})


def test_create_gives_unique_names(tmp_path):
    a = RunDir.create(tmp_path / "runs", stem="20260101-000000")
    b = RunDir.create(tmp_path / "runs", stem="20260101-000000")
    assert a.path.name == "20260101-000000" and b.path.name == "20260101-000000-2"
    assert a.path.is_dir() and b.path.is_dir()


def test_an_existing_run_is_refused_unless_resume_or_overwrite(small_project, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["tune", str(small_project), "--out", str(out)]) == 0
    model = (out / "model.safetensors").read_bytes()
    cap = capsys.readouterr()
    assert "\x1b" not in cap.err and "\r" not in cap.err  # stderr is no terminal here: no bar, no escapes
    assert "epoch 1:" in cap.err and json.loads(cap.out)["run"] == str(out)
    assert cli_main(["tune", str(small_project), "--out", str(out), "--lr", "0.5"]) == 2
    err = capsys.readouterr().err
    assert f"{out}: already holds a run" in err and "--overwrite" in err and "Traceback" not in err
    assert (out / "model.safetensors").read_bytes() == model  # untouched
    assert json.loads((out / "settings.json").read_text())["settings"]["lr"] != 0.5
    # the API refuses it too
    run = TuneRun.prepare(Project.open(small_project), out, {})
    with pytest.raises(TuneError, match="already holds a run"):
        run.train()
    # --overwrite replaces it: the old files go before the new run writes
    assert cli_main(["tune", str(small_project), "--out", str(out), "--overwrite", "--stop-after", "1"]) == 0
    assert not (out / "model.safetensors").exists() and not (out / "report.json").exists()
    assert RunDir(out).status() == "stopped"


def test_resume_into_a_new_folder_leaves_nothing_behind(small_project, tmp_path, capsys):
    new = tmp_path / "new"
    assert cli_main(["tune", str(small_project), "--resume", "--out", str(new)]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err
    assert not new.exists()


@pytest.mark.parametrize("out", ["/proc/dxstudio-run", "/etc/passwd"])
def test_an_unwritable_out_is_one_line(small_project, out, capsys):
    assert cli_main(["tune", str(small_project), "--out", out]) == 2
    err = capsys.readouterr().err
    assert out in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_a_second_writer_gets_a_clear_error(small_project, tmp_path):
    out = tmp_path / "run"
    holder = RunDir(out)
    holder.acquire()
    try:
        run = TuneRun.prepare(Project.open(small_project), out, {})
        with pytest.raises(RunLockedError, match=r"another dxstudio process \(pid \d+\) is writing"):
            run.train()
        assert not (out / "settings.json").exists()
        assert RunDir(out).status() == "running"
        # another process too (flock is per open file, so the same holds across processes)
        code = textwrap.dedent(f"""
            import sys
            from dxstudio.tuning.rundir import RunDir, RunLockedError
            try:
                RunDir({str(out)!r}).acquire()
            except RunLockedError as e:
                print(e); sys.exit(3)
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 3 and "is writing this run folder" in proc.stdout
    finally:
        holder.release()
    assert run.train() is True  # released: the run goes on
    run.finish()
    assert RunDir(out).status() == "finished"


def test_orphaned_tmp_files_are_removed_on_the_next_start(small_project, tmp_path):
    out = tmp_path / "run"
    run = TuneRun.prepare(Project.open(small_project), out, {})
    assert run.train(stop_after=1) is False
    orphan = out / ".checkpoint.safetensors.abc123.tmp"
    orphan.write_bytes(b"half a checkpoint")
    keep = out / "notes.txt"
    keep.write_text("mine")
    again = TuneRun.prepare(Project.open(small_project), out, {})
    assert again.train(resume=True)
    again.finish()
    assert not orphan.exists() and keep.exists()


def test_run_list_shows_status_steps_and_scores(small_project, tmp_path):
    project = Project.open(small_project)
    done = TuneRun.prepare(project, project.runs_dir / "a", {})
    done.train()
    done.finish()
    part = TuneRun.prepare(project, project.runs_dir / "b", {})
    part.train(stop_after=1)
    (project.runs_dir / "c").mkdir()
    infos = {i.name: i for i in RunDir.list(project.runs_dir)}
    assert infos["a"].status == "finished" and infos["a"].scores["fields"].keys() == set(project.field_names)
    assert infos["b"].status == "stopped" and infos["b"].step == 1 and infos["b"].total_steps == part.total_steps
    assert infos["c"].status == "empty" and infos["c"].scores is None
    assert RunDir.unfinished(project.runs_dir).path == project.runs_dir / "b"


def test_the_fingerprint_covers_the_label_bytes_that_were_read(small_project, tmp_path, monkeypatch):
    """A label file edited between reading the labels and hashing them: the fingerprint is the
    one of the labels the run trained on."""
    first = TuneRun.prepare(Project.open(small_project), tmp_path / "a", {})
    project = Project.open(small_project)
    real = Project.read_labels
    edited = []

    def read_then_edit(self, page_id):
        labels, raw = real(self, page_id)
        if raw and not edited:  # someone saves a fix right after the tuner read the file
            edited.append(page_id)
            d = json.loads(raw)
            d["review"]["state"] = "excluded"
            self.label_path(page_id).write_text(json.dumps(d))
        return labels, raw

    monkeypatch.setattr(Project, "read_labels", read_then_edit)
    second = TuneRun.prepare(project, tmp_path / "b", {})
    assert edited and second.fingerprint == first.fingerprint
    monkeypatch.undo()
    third = TuneRun.prepare(Project.open(small_project), tmp_path / "c", {})
    assert third.fingerprint != first.fingerprint  # the edit is seen by the next run


def test_ctrl_c_stops_at_a_step_with_a_checkpoint_and_resume_gives_the_same_bytes(small_project, tmp_path):
    import os
    import signal
    import time

    ref = tmp_path / "ref"
    assert cli_main(["tune", str(small_project), "--out", str(ref), "--epochs", "20"]) == 0
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "dxstudio.cli", "tune", str(small_project), "--out", str(out),
                             "--epochs", "20", "--checkpoint-every", "1000"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and f"--resume --out {out}" in stderr
    step = RunDir(out).checkpoint_step()
    assert json.loads(stdout)["step"] == step and 0 < step < 20 * 2
    assert not RunDir(out).report_path.exists()
    assert cli_main(["tune", str(small_project), "--out", str(out), "--resume", "--epochs", "20"]) == 0
    assert (out / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()


def test_the_run_folder_knows_no_trainer():
    """issue 25: folds.py -> run.py -> rundir.py -> folds.py was a circle (RunDir asked the
    trainer for metrics rows and checkpoints). rundir.py imports neither run.py, folds.py nor
    pretrain.py, at the top or inside a function."""
    import ast
    from pathlib import Path

    import dxstudio.tuning.rundir as rundir_mod

    tree = ast.parse(Path(rundir_mod.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "dxstudio.tuning.checkpoint" in imported  # the checkpoint through its own module
    for trainer in ("dxstudio.tuning.run", "dxstudio.tuning.folds", "dxstudio.tuning.pretrain"):
        assert trainer not in imported, trainer
