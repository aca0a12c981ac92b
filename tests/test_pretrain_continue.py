"""bench/pretrain_continue.py: more pretraining from an existing base starts from its weights
(the fingerprint names them), and a file that is no base is refused."""
from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np

from dxstudio.engine.container import load_model, save_model
from dxstudio.tuning.pretrain import PretrainRun

BENCH = Path(__file__).resolve().parents[1] / "bench" / "pretrain_continue.py"
SMALL = ["--size", "tiny", "--steps", "2", "--batch", "2", "--warmup", "1", "--window", "48", "--lr", "0.01"]


def _bench():
    spec = importlib.util.spec_from_file_location("pretrain_continue", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_continues_from_the_base_and_refuses_a_model_that_is_no_base(tmp_path, capsys):
    base_run = PretrainRun.prepare(["synthetic:4:5"], tmp_path / "base",
                                   {"size": "tiny", "steps": 2, "batch": 2, "warmup": 1, "window": 48, "lr": 0.01})
    assert base_run.train()
    base_run.finish()
    base_file = tmp_path / "base" / "model.safetensors"
    assert _bench().main([str(base_file), "synthetic-wide:3", "--out", str(tmp_path / "c"), *SMALL]) == 0
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["started_from"]["model"] == str(base_file)
    fresh = PretrainRun.prepare(["synthetic-wide:3"], tmp_path / "f",
                                {"size": "tiny", "steps": 2, "batch": 2, "warmup": 1, "window": 48, "lr": 0.01})
    # the starting model is the base's weights, not the seed's new model
    assert report["components"]["starting model"] != fresh.components["starting model"]
    base = load_model(base_file)
    run = PretrainRun.prepare(["synthetic-wide:3"], tmp_path / "x",
                              {"size": "tiny", "steps": 2, "batch": 2, "warmup": 1, "window": 48, "lr": 0.01})
    from collections import OrderedDict

    run.start_params = OrderedDict((k, base.params[k]) for k in run.start_params)
    run._fingerprint()
    assert report["components"]["starting model"] == run.components["starting model"]
    out = load_model(tmp_path / "c" / "model.safetensors")
    assert not np.array_equal(out.params["tag_head.weight"], base.params["tag_head.weight"])
    assert report["sha256"] == hashlib.sha256((tmp_path / "c" / "model.safetensors").read_bytes()).hexdigest()

    plain = tmp_path / "plain.safetensors"
    save_model(plain, base.cfg, base.params, {})
    assert _bench().main([str(plain), "synthetic-wide:3", "--out", str(tmp_path / "p"), *SMALL]) == 2
    assert "not a pretrained base" in capsys.readouterr().err
