"""The first use on a new machine (issue 24): with the compiled kernels not prepared, a small
extract runs on the reference kernels at once and says so, giving the bytes the compiled ones
give; a larger job prepares them first, saying so, with progress; the marker says when they
are ready."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dxstudio.cli.main import main as cli_entry
from dxstudio.engine import readiness

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "resources" / "sample"
BASE = REPO / "resources" / "models" / "docextract-v0-base.safetensors"
PAGE = SAMPLE / "pages" / "receipt_00000.json"


@pytest.fixture
def unprepared(tmp_path, monkeypatch):
    """This process's engine as on a new machine: no marker in its (temporary) cache folder."""
    monkeypatch.delenv("DXSTUDIO_ENGINE_PREPARED", raising=False)
    monkeypatch.setenv("DXSTUDIO_BACKGROUND_PREPARE", "0")
    monkeypatch.setattr(readiness, "_cache_dir", lambda: tmp_path / "cache")
    return tmp_path / "cache"


def test_the_marker_says_when_the_engine_is_prepared(unprepared):
    assert not readiness.is_prepared()
    readiness.mark_prepared()
    assert readiness.is_prepared()
    (marker,) = unprepared.iterdir()
    from dxstudio.engine.kernels.runtime import engine_source_digest
    assert engine_source_digest()[:16] in marker.name  # an edit of the engine asks again


@pytest.mark.skipif(not BASE.is_file(), reason="no shipped base model")
def test_a_first_extract_in_a_fresh_cache_runs_at_once_with_the_same_bytes(tmp_path, capsys):
    env = {k: v for k, v in os.environ.items() if k != "DXSTUDIO_ENGINE_PREPARED"}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "empty-cache"), DXSTUDIO_BACKGROUND_PREPARE="0",
               PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "dxstudio.cli", "extract", str(BASE), str(PAGE)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "not prepared on this machine yet; 1 page on the reference kernels (the same bytes)" in r.stderr
    # nothing was compiled: no kernel in the empty cache
    assert not list((tmp_path / "empty-cache").rglob("*.nbc"))
    assert cli_entry(["extract", "--kernels", "fast", str(BASE), str(PAGE)]) == 0  # this tree's prepared kernels
    assert json.loads(r.stdout) == json.loads(capsys.readouterr().out)


def test_a_larger_first_job_prepares_first_with_progress(unprepared, monkeypatch, capsys):
    from dxstudio.cli.model import engine_ready

    calls = []

    def fake_prepare(progress=None):
        for i, label in enumerate(readiness.STAGES, 1):
            progress(i, len(readiness.STAGES), label)
        calls.append(1)
        readiness.mark_prepared()
        return 12.0

    monkeypatch.setattr(readiness, "prepare", fake_prepare)
    assert engine_ready("fast", 40) == "fast"
    err = capsys.readouterr().err
    assert "preparing the engine for this CPU, once: about" in err
    assert f"prepared a training step ({len(readiness.STAGES)}/{len(readiness.STAGES)})" in err
    assert calls == [1] and readiness.is_prepared()
    assert engine_ready("fast", 40) == "fast" and capsys.readouterr().err == ""  # not asked again
    assert engine_ready("reference", 1) == "reference"


def test_a_small_first_job_takes_the_reference_kernels(unprepared, capsys):
    from dxstudio.cli.model import engine_ready

    assert engine_ready("fast", 2) == "reference"
    assert "2 pages on the reference kernels (the same bytes)" in capsys.readouterr().err


def test_one_background_preparation_at_a_time(unprepared, monkeypatch):
    started = []
    monkeypatch.setenv("DXSTUDIO_BACKGROUND_PREPARE", "1")
    monkeypatch.setattr(readiness.subprocess, "Popen", lambda *a, **k: started.append(a[0]))
    assert readiness.start_background_prepare() and readiness.start_background_prepare()
    assert len(started) == 1 and started[0][1:] == ["-m", "dxstudio.engine.readiness"]


def test_a_killed_background_preparation_does_not_hold_the_next_one_back(unprepared, monkeypatch):
    """The busy file names the preparing process; one that is gone (killed during its compile)
    no longer stops the next command from starting another."""
    import subprocess
    import sys

    started = []
    monkeypatch.setenv("DXSTUDIO_BACKGROUND_PREPARE", "1")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setattr(readiness.subprocess, "Popen", lambda *a, **k: started.append(a[0]) or gone)
    assert readiness.start_background_prepare()
    assert readiness._busy_file().read_text().strip() == str(gone.pid)
    assert readiness.start_background_prepare()  # that pid has ended: started again
    assert len(started) == 2


def test_the_training_kernels_prepared_beside_take_the_reference_forward_and_the_same_gradients(unprepared, monkeypatch):
    """readiness.prepare_training (the test suite's second worker compiles the training step's
    kernels with it while the first prepares the forward): its forward runs on the reference
    kernels, so none of the forward's compiled kernels is compiled there, and the gradients are
    the fast path's bytes; it does not mark the engine prepared."""
    from collections import OrderedDict

    import numpy as np

    from dxstudio.engine import training

    paths, grads_seen = [], []
    forward, example_gradients = training.forward, training.example_gradients

    def recording_forward(cfg, params, inp, ops, keep=False):
        paths.append(ops.kernels)
        return forward(cfg, params, inp, ops, keep=keep)

    def recording_gradients(cfg, params, *rest, **kws):
        loss, grads = example_gradients(cfg, params, *rest, **kws)
        params = OrderedDict((k, v.copy()) for k, v in params.items())  # AdamW updates them in place afterwards
        grads_seen.append(((cfg, params, *rest), kws, loss, grads))
        return loss, grads

    monkeypatch.setattr(training, "forward", recording_forward)
    monkeypatch.setattr(training, "example_gradients", recording_gradients)
    assert readiness.prepare_training() >= 0
    assert paths and set(paths) == {"reference"}
    assert not readiness.is_prepared()
    assert len(grads_seen) == 2  # both windows
    for args, kws, loss, grads in grads_seen:
        assert kws == {"forward_kernels": "reference"}
        fast_loss, fast_grads = example_gradients(*args)  # the settings' own path: fast throughout
        assert paths[-1] == "fast"
        assert fast_loss == loss and list(fast_grads) == list(grads) and len(grads) > 10
        for name in grads:
            assert np.array_equal(fast_grads[name], grads[name]), name
            assert fast_grads[name].tobytes() == grads[name].tobytes(), name
    assert isinstance(grads, OrderedDict)


def test_a_first_preparation_compiles_the_training_step_beside_on_two_cores(unprepared, monkeypatch):
    """prepare(): where the engine is not prepared and two cores are there, a second process
    (`python -m dxstudio.engine.readiness --training`) is started before the first stage, after
    mm_nt's builds (compile_products: both call them, the second loads them), and
    waited for before the training stage, which then loads its kernels; on one core, with
    beside=False (the test suite's first worker, whose partner does that part) or once prepared,
    none."""
    import subprocess
    import sys

    events = []

    class Helper:
        def __init__(self, args, **kws):
            events.append(("start", args[1:]))

        def wait(self):
            events.append(("wait",))

    def stage(done, total, label):
        events.append(("stage", done))

    compile_products = readiness.compile_products
    with monkeypatch.context() as m:
        m.setattr(readiness.subprocess, "Popen", Helper)
        m.setattr(readiness, "_cores", lambda: 2)
        m.setattr(readiness, "compile_products", lambda: events.append(("products",)) or compile_products())
        readiness.prepare(stage)
        assert events == [("products",), ("start", ["-m", "dxstudio.engine.readiness", "--training"]),
                          ("stage", 1), ("stage", 2), ("stage", 3), ("wait",), ("stage", 4)]
        assert readiness.is_prepared()
        for cores, beside, prepared in ((2, True, True), (1, True, False), (2, False, False)):
            if not prepared:
                for marker in unprepared.glob("dxstudio-prepared-*"):
                    marker.unlink()
            events.clear()
            m.setattr(readiness, "_cores", lambda: cores)
            readiness.prepare(stage, beside=beside)
            assert events == [("products",), ("stage", 1), ("stage", 2), ("stage", 3), ("stage", 4)], (cores, beside, prepared)
    # the second process itself: the training step's kernels (loaded from this run's cache here),
    # quiet, and not the whole preparation (which says what it prepared on stderr)
    r = subprocess.run([sys.executable, "-m", "dxstudio.engine.readiness", "--training"], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and r.stderr == "" and r.stdout == "", r.stderr
