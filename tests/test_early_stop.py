"""Early stopping on held-back pages and checkpoint averaging (dxstudio/tuning/early_stop.py):
the pages held back, the kept and averaged weights, the same bytes at any degree and after a
resume, bad values named."""
from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from dxstudio.project import Project
from dxstudio.tuning import TuneRun
from dxstudio.tuning.early_stop import average, carve
from dxstudio.tuning.settings import TuneError, resolve_settings

ON = {"epochs": 8, "lr": 0.03, "early_stop": 2, "early_stop_share": 0.25, "average_last": 2}


def _tune(project_dir, run_dir, **overrides):
    run = TuneRun.prepare(Project.open(project_dir), run_dir, overrides)
    assert run.train()
    report = run.finish()
    return run, report, (run_dir / "model.safetensors").read_bytes()


@pytest.mark.parametrize("name,bad", [("early_stop", -1), ("early_stop", 1.5), ("early_stop_share", 0),
                                      ("early_stop_share", 0.6), ("average_last", -2), ("average_last", "3")])
def test_bad_values_are_named(name, bad):
    with pytest.raises(TuneError, match=f"setting {name} must be"):
        resolve_settings({name: bad})


def test_average_is_the_binary64_mean_in_order():
    a = {"w": np.array([1.0, 2.0 ** -24, 3.0], np.float32)}
    b = {"w": np.array([2.0, 1.0, -3.0], np.float32)}
    c = {"w": np.array([4.0, -1.0, 0.5], np.float32)}
    got = average([a, b, c])["w"]
    assert got.dtype == np.float32
    want = ((a["w"].astype(np.float64) + b["w"] + c["w"]) / 3).astype(np.float32)
    assert got.tobytes() == want.tobytes()


def test_carve_holds_back_whole_documents_and_names_the_setting(receipts_project):
    run = TuneRun.prepare(Project.open(receipts_project), receipts_project.parent / "r", {"auto_folds": 0})
    rows = run.train_pages
    assert carve(rows, run.settings) == (rows, [])  # off: nothing held back
    train, stop = carve(rows, dict(run.settings, early_stop=1, early_stop_share=0.25))
    assert len(stop) == round(0.25 * len(rows)) and train + stop != rows and sorted(train + stop) == sorted(rows)
    assert stop == rows[:len(stop)]  # the first of the training order
    with pytest.raises(TuneError, match="setting early_stop_share 0.5: holding back"):
        carve(rows[:1], dict(run.settings, early_stop=1, early_stop_share=0.5))


def test_early_stop_and_averaging_same_bytes_at_any_degree_and_after_resume(receipts_project, tmp_path):
    run1, rep1, b1 = _tune(receipts_project, tmp_path / "d1", degree=1, **ON)
    _, _, b2 = _tune(receipts_project, tmp_path / "d2", degree=2, **ON)
    assert b1 == b2
    es = rep1["run"]["early_stop"]
    # the early-stop pages trained on nothing and are not the run's held-out pages
    assert set(es["pages"]).isdisjoint(r[0] for r in run1.train_pages + run1.heldout_pages)
    assert len(es["pages"]) == 3 and rep1["run"]["train_pages"] == len(run1.train_pages)
    scores = {int(e): tuple(v) for e, v in es["scores"].items()}
    kept = es["kept_epoch"]
    assert max(scores.values()) > (0.0, 0.0)  # the tiny model finds something, so an epoch is chosen
    assert scores[kept] == max(scores.values()) and all(scores[e] < scores[kept] for e in scores if e < kept)
    assert es["last_epoch"] == max(scores) and (es["last_epoch"] == ON["epochs"] or es["last_epoch"] - kept == 2)
    assert es["averaged_epochs"] == list(range(max(1, kept - 1), kept + 1))
    # a run stopped after 4 steps and resumed at another degree ends with the same bytes
    part = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", dict(ON, degree=1))
    assert part.total_steps > 4 and part.train(stop_after=4) is False
    resumed = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", dict(ON, degree=2))
    assert resumed.train(resume=True)
    resumed.finish()
    assert (tmp_path / "part" / "model.safetensors").read_bytes() == b1
    # the fingerprint covers the settings when on, and a run with them off keeps its old one
    plain = TuneRun.prepare(Project.open(receipts_project), tmp_path / "p", {})
    share_only = TuneRun.prepare(Project.open(receipts_project), tmp_path / "p2", {"early_stop_share": 0.4})
    assert plain.fingerprint == share_only.fingerprint != run1.fingerprint
    assert len(plain.train_pages) == len(run1.train_pages) + 3 and [r[0] for r in plain.heldout_pages] == [r[0] for r in run1.heldout_pages]
    assert "early_stop" not in json.dumps(plain.components)


def test_averaging_alone_is_the_mean_of_the_last_epochs(receipts_project, tmp_path):
    run, rep, _ = _tune(receipts_project, tmp_path / "a", epochs=3, average_last=2)
    assert rep["run"]["early_stop"]["averaged_epochs"] == [2, 3]
    assert not run.stop_pages  # nothing held back without early_stop
    folder = tmp_path / "a" / "epochs"
    assert sorted(f.name for f in folder.glob("*.safetensors")) == ["2.safetensors", "3.safetensors"]
    want = average([load_file(folder / "2.safetensors"), load_file(folder / "3.safetensors")])
    for k, v in want.items():
        assert run.state.params[k].tobytes() == v.tobytes()
    # the last epoch alone (averaging off) is another model
    _, _, last = _tune(receipts_project, tmp_path / "l", epochs=3)
    assert last != (tmp_path / "a" / "model.safetensors").read_bytes()


def test_no_signal_yet_never_stops(tmp_path):
    """Scores of 0 (the model tags nothing on the early-stop pages yet: FUNSD's first epochs)
    neither stop the run nor choose an epoch; the first score above 0 does."""
    from types import SimpleNamespace

    from dxstudio.tuning.early_stop import Selection
    from dxstudio.tuning.rundir import RunDir

    run = SimpleNamespace(settings={"early_stop": 2, "average_last": 0}, run_dir=tmp_path, rundir=RunDir(tmp_path))
    sel = Selection(run, 0)
    sel.scores = {1: [1, 0.0, 0.0], 2: [2, 0.0, 0.0], 3: [3, 0.0, 0.0]}
    sel.last_epoch = 3
    assert sel.best() == 3
    sel.scores[4], sel.last_epoch = [4, 0.0, 0.1], 4
    sel.scores[5], sel.last_epoch = [5, 0.0, 0.1], 5
    assert sel.best() == 4  # the tag F1 breaks the tie of agreements; equal scores: the earliest
    sel.scores[6], sel.last_epoch = [6, 0.25, 0.05], 6
    assert sel.best() == 6
