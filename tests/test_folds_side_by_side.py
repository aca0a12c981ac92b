"""A cross-validated run's parts side by side in one process (issue 26, item 4): at degree > 1
the folds and the final model train at the same time on their own threads, sharing the
process's compiled kernels and one reading of the pages and their model inputs, and give the
bytes of the parts trained one at a time (degree 1): model file, every part's checkpoint and
held-out predictions, the pooled report. A cancel stops every running part at a checkpoint and
the run resumes to the same bytes; a part that fails stops the others and its error is raised.
Tiny model, 16 receipts: seconds."""
from __future__ import annotations

import threading

import pytest

from dxstudio.project import Project
from dxstudio.tuning import TuneError
from dxstudio.tuning.folds import FoldedRun, prepare_run
from dxstudio.tuning.run import TuneRun

PARTS = ("final", "folds/1", "folds/2")


def _folded(project_dir, run_dir, **overrides):
    run = prepare_run(Project.open(project_dir), run_dir, {"folds": 2, **overrides})
    assert isinstance(run, FoldedRun)
    return run


def _files(run_dir):
    out = {"model": (run_dir / "model.safetensors").read_bytes()}
    for part in PARTS:
        out[f"{part} checkpoint"] = (run_dir / part / "checkpoint.safetensors").read_bytes()
        if part != "final":
            out[f"{part} heldout"] = (run_dir / part / "heldout.json").read_bytes()
    return out


def test_parts_side_by_side_give_the_bytes_of_one_at_a_time(receipts_project, tmp_path, monkeypatch):
    one = _folded(receipts_project, tmp_path / "d1", degree=1)
    assert one.train()
    report1 = one.finish()

    # at degree 2 the parts train on two threads at once: the first steps of the first two
    # parts meet at a barrier (a BrokenBarrierError after the timeout if they ran in turn)
    from dxstudio.tuning import run as run_module

    real = run_module.train_step
    seen, barrier, met = [], threading.Barrier(2, timeout=60), set()

    def spy(state, examples, lr):
        me = threading.current_thread().name
        seen.append(me)
        if me not in met and len(met) < 2:
            met.add(me)
            barrier.wait()
        return real(state, examples, lr)

    monkeypatch.setattr(run_module, "train_step", spy)
    two = _folded(receipts_project, tmp_path / "d2", degree=2)
    events = []
    assert two.train(lambda ev: events.append(ev))
    report2 = two.finish()
    assert threading.current_thread().name not in seen and len(set(seen)) == 2
    assert len(seen) == one.total_steps == two.total_steps
    # the same bytes: model, every part's checkpoint and held-out predictions, the pooled scores
    assert _files(tmp_path / "d1") == _files(tmp_path / "d2")
    assert report1["fields"] == report2["fields"] and report1["threshold"] == report2["threshold"]
    # steps count across the parts, one event per step, ending at the total
    steps = [ev.step for ev in events if ev.kind == "step"]
    assert steps == list(range(1, two.total_steps + 1))


def test_the_parts_read_the_pages_once_and_share_their_inputs(receipts_project, tmp_path, monkeypatch):
    from dxstudio.tuning import run as run_module

    calls = []
    real = run_module.project_targets
    monkeypatch.setattr(run_module, "project_targets", lambda *a, **k: calls.append(1) or real(*a, **k))
    run = _folded(receipts_project, tmp_path / "r", degree=2)
    assert len(calls) == 1  # once for the final model and both folds
    final = {id(ex.inputs) for ex in run.final.examples}
    for fold in run.folds:
        assert fold.examples and {id(ex.inputs) for ex in fold.examples} <= final
    # a run prepared alone still reads its own
    TuneRun.prepare(Project.open(receipts_project), tmp_path / "alone", {"folds": 2}, fold=(0, 2))
    assert len(calls) == 1


def _both_running(monkeypatch):
    """The first steps of the first two parts meet at a barrier: both parts are running."""
    from dxstudio.tuning import run as run_module

    real = run_module.train_step
    barrier, met, lock = threading.Barrier(2, timeout=60), set(), threading.Lock()

    def spy(state, examples, lr):
        me = threading.current_thread().name
        with lock:
            first = me not in met and len(met) < 2
            met.add(me)
        if first:
            barrier.wait()
        return real(state, examples, lr)

    monkeypatch.setattr(run_module, "train_step", spy)


def test_a_cancel_stops_every_part_and_the_run_resumes_to_the_same_bytes(receipts_project, tmp_path,
                                                                        monkeypatch):
    full = _folded(receipts_project, tmp_path / "full", degree=1)
    assert full.train()
    full.finish()

    _both_running(monkeypatch)
    cancel = threading.Event()

    def on_event(ev):
        if ev.kind == "step" and ev.step >= 5:
            cancel.set()

    part = _folded(receipts_project, tmp_path / "part", degree=2)
    assert part.train(on_event, cancel=cancel) is False
    from dxstudio.tuning.folds import folded_step
    from dxstudio.tuning.checkpoint import checkpoint_step

    done = [checkpoint_step(tmp_path / "part" / p / "checkpoint.safetensors") for p in PARTS]
    ran = [s for s in done if s is not None]
    assert done[0] and len(ran) >= 2  # the final model and at least fold 1 ran (and stopped, or finished)
    assert done[0] < full.final.total_steps  # the final model was stopped at a checkpoint
    assert sum(ran) == folded_step(tmp_path / "part") >= 5
    stopped_at = folded_step(tmp_path / "part")
    again = _folded(receipts_project, tmp_path / "part", degree=2)
    steps = []
    assert again.train(lambda ev: steps.append(ev.step) if ev.kind == "step" else None, resume=True)
    assert steps[0] == stopped_at + 1
    assert steps[-1] == again.total_steps
    again.finish()
    assert _files(tmp_path / "part") == _files(tmp_path / "full")


def test_a_failing_part_stops_the_others_and_its_error_is_raised(receipts_project, tmp_path, monkeypatch):
    run = _folded(receipts_project, tmp_path / "r", degree=2)

    failed = threading.Event()

    def broken():
        failed.set()
        raise TuneError("fold 1 could not start")

    real = run.final.example

    def after_the_failure(i, step):  # the final model is training when the fold fails
        assert failed.wait(60)
        return real(i, step)

    monkeypatch.setattr(run.folds[0], "train_settings", broken)
    monkeypatch.setattr(run.final, "example", after_the_failure)
    with pytest.raises(TuneError, match="fold 1 could not start"):
        run.train()
    # the final model (the first part, on the other thread) stopped at a checkpoint, resumable,
    # instead of running to its end; fold 2 never started
    from dxstudio.tuning.checkpoint import checkpoint_step

    step = checkpoint_step(tmp_path / "r" / "final" / "checkpoint.safetensors")
    assert step is not None and step < run.final.total_steps
    assert not (tmp_path / "r" / "folds" / "2" / "checkpoint.safetensors").exists()


def test_more_cores_than_parts_give_each_part_threads_and_the_same_bytes(receipts_project, tmp_path, monkeypatch):
    # degree 6, three parts: each part side by side on its own thread, its examples on 2 threads
    from dxstudio.engine import training

    one = _folded(receipts_project, tmp_path / "d1", degree=1)
    assert one.train()
    one.finish()
    real = training.example_gradients
    workers = set()

    def spy(*a, **k):
        workers.add(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(training, "example_gradients", spy)
    six = _folded(receipts_project, tmp_path / "d6", degree=6)
    assert six.train()
    six.finish()
    assert workers and all(name.startswith("dx-degree2") for name in workers)
    assert _files(tmp_path / "d1") == _files(tmp_path / "d6")
