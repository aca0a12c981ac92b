"""`dxstudio pretrain`: the same bytes at any degree and after a resume, clear errors, and a
tuning run that starts from the base it writes."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dxstudio.cli import main as cli_main
from dxstudio.corpus.generic import GENERIC_FIELDS
from dxstudio.engine.container import load_model
from dxstudio.tuning.pretrain import PretrainRun
from dxstudio.tuning.settings import TuneError

CORPUS = ["synthetic:12:5"]
SMALL = {"size": "tiny", "steps": 6, "batch": 3, "warmup": 2, "lr": 0.01, "window": 48, "checkpoint_every": 2}


def pretrain(run_dir, specs=CORPUS, **overrides):
    run = PretrainRun.prepare(specs, run_dir, {**SMALL, **overrides})
    assert run.train()
    report = run.finish()
    return run, report, (run_dir / "model.safetensors").read_bytes()


def test_same_bytes_at_degree_1_and_2_and_across_a_resume(tmp_path):
    run1, rep1, b1 = pretrain(tmp_path / "d1", degree=1)
    _, rep2, b2 = pretrain(tmp_path / "d2", degree=2)
    assert len(run1.windows) > 12  # long documents gave several windows
    assert b1 == b2 and rep1["sha256"] == rep2["sha256"]
    part = PretrainRun.prepare(CORPUS, tmp_path / "r", {**SMALL, "degree": 2})
    assert part.train(stop_after=3) is False
    assert part.state.step == 3
    again = PretrainRun.prepare(CORPUS, tmp_path / "r", {**SMALL, "degree": 1, "checkpoint_every": 5})
    assert again.train(resume=True)
    again.finish()
    assert (tmp_path / "r" / "model.safetensors").read_bytes() == b1
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]


def test_the_base_holds_every_head_trained_and_the_generic_classes(tmp_path):
    run, report, _ = pretrain(tmp_path / "run")
    m = load_model(tmp_path / "run" / "model.safetensors")
    assert m.cfg.fields == GENERIC_FIELDS and m.summary["base"] is True and m.summary["steps"] == 6
    start = run.start_params
    for name in ("tag_head.weight", "role_head.weight", "doc_head.weight", "rel_q.weight", "blocks.0.qkv.weight"):
        assert not np.array_equal(m.params[name], start[name]), f"{name} did not train"
    assert report["sources"][0]["kind"] == "synthetic" and report["sources"][0]["documents"] == 12
    assert report["first_loss"] > report["final_loss"] > 0


def test_resume_refuses_another_runs_checkpoint_and_says_what_changed(tmp_path):
    run = PretrainRun.prepare(CORPUS, tmp_path / "r", SMALL)
    run.train(stop_after=2)
    other = PretrainRun.prepare(CORPUS, tmp_path / "r", {**SMALL, "lr": 0.02})
    with pytest.raises(TuneError, match="belongs to another run: settings changed"):
        other.train(resume=True)
    other = PretrainRun.prepare(["synthetic:12:6"], tmp_path / "r", SMALL)
    with pytest.raises(TuneError, match="corpus changed"):
        other.train(resume=True)


def test_clear_errors_for_bad_settings_and_corpora(tmp_path):
    with pytest.raises(TuneError, match="setting batch must be an integer >= 1"):
        PretrainRun.prepare(CORPUS, tmp_path / "r", {**SMALL, "batch": 0})
    with pytest.raises(TuneError, match="unknown pretraining setting 'bogus'"):
        PretrainRun.prepare(CORPUS, tmp_path / "r", {"bogus": 1})
    with pytest.raises(TuneError, match="every loss weight is 0"):
        PretrainRun.prepare(CORPUS, tmp_path / "r", {**SMALL, "loss_tag": 0, "loss_role": 0, "loss_doc": 0,
                                                     "loss_items": 0, "loss_kv": 0})
    with pytest.raises(TuneError, match="window 600 is more than"):
        PretrainRun.prepare(CORPUS, tmp_path / "r", {**SMALL, "window": 600})
    empty = tmp_path / "cord" / "json"
    empty.mkdir(parents=True)
    (empty / "receipt_0.json").write_text('{"valid_line": [], "meta": {"image_size": {"width": 9, "height": 9}}}')
    with pytest.raises(TuneError, match="no usable document"):
        PretrainRun.prepare([str(tmp_path / "cord")], tmp_path / "r", SMALL)


def test_cli_pretrain_names_a_bad_file_and_goes_on(tmp_path, capsys):
    root = tmp_path / "cord" / "json"
    root.mkdir(parents=True)
    (root / "receipt_0.json").write_text("{broken")
    (root / "receipt_1.json").write_text(json.dumps({"meta": {"image_size": {"width": 100, "height": 100}}, "valid_line": [
        {"category": "total.total_price", "group_id": 1, "words": [
            {"text": "9.00", "quad": {"x1": 10, "y1": 10, "x2": 40, "y2": 10, "x3": 40, "y3": 20, "x4": 10, "y4": 20}}]}]}))
    out = tmp_path / "run"
    args = ["pretrain", str(tmp_path / "cord"), "synthetic:4", "--size", "tiny", "--steps", "3", "--batch", "2",
            "--window", "64", "--out", str(out)]
    assert cli_main(args + ["--stop-after", "1"]) == 0
    cap = capsys.readouterr()
    assert "receipt_0.json: not JSON" in cap.err and json.loads(cap.out)["finished"] is False
    assert cli_main(args + ["--resume", "--degree", "2"]) == 1  # done, but a file was skipped
    res = json.loads(capsys.readouterr().out)
    assert res["skipped_files"] == 1
    assert res["steps"] == 3 and (out / "model.safetensors").is_file()
    assert cli_main(["pretrain", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_tuning_starts_from_the_base_with_matched_tag_rows(receipts_project, tmp_path):
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun

    _, _, _ = pretrain(tmp_path / "base")
    base = load_model(tmp_path / "base" / "model.safetensors")
    project = Project.open(receipts_project)
    # the bundled sample's receipts: each field's generic class, by name or by description
    generic = {"total": "total", "subtotal": "subtotal", "tax": "tax", "cash": "paid", "change": "change",
               "item": "item_name"}
    assert project.field_names == list(generic)
    run = TuneRun.prepare(project, tmp_path / "tune", {"epochs": 1}, model_path=tmp_path / "base" / "model.safetensors")
    w = run.start_params["tag_head.weight"]
    bw = base.params["tag_head.weight"]
    for c, name in enumerate(project.field_names):
        g = GENERIC_FIELDS.index(generic[name])
        np.testing.assert_array_equal(w[1 + 2 * c:3 + 2 * c], bw[1 + 2 * g:3 + 2 * g])
    np.testing.assert_array_equal(run.start_params["blocks.0.qkv.weight"], base.params["blocks.0.qkv.weight"])
    assert run.train() and run.finish()["run"]["starting_model"].endswith("model.safetensors")
    # a model that is not a base (no "base" in its summary) gets plain drawn rows
    plain = TuneRun.prepare(project, tmp_path / "t2", {"epochs": 1}, model_path=tmp_path / "tune" / "model.safetensors")
    assert plain.start_params["tag_head.weight"].shape == w.shape


def test_tune_uses_the_shipped_base_unless_told_otherwise(receipts_project, tmp_path, monkeypatch):
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun
    from dxstudio.tuning import run as run_mod

    pretrain(tmp_path / "base")
    shipped = tmp_path / "models" / "docextract-v0-base.safetensors"
    shipped.parent.mkdir()
    shutil.copy(tmp_path / "base" / "model.safetensors", shipped)
    monkeypatch.setattr(run_mod, "BASE_MODEL", shipped)
    project = Project.open(receipts_project)  # its settings say size tiny
    assert TuneRun.prepare(project, tmp_path / "a", {}).start_source.startswith("new tiny model")
    assert TuneRun.prepare(project, tmp_path / "b", {"size": "base"}).start_source == str(shipped)
    assert TuneRun.prepare(project, tmp_path / "c", {"size": "base", "start": "new"}).start_source.startswith("new base")
    with pytest.raises(TuneError, match="setting start must be base or new"):
        TuneRun.prepare(project, tmp_path / "d", {"start": "old"})
    # a missing shipped base is a clear error, never a silent start from random weights
    monkeypatch.setattr(run_mod, "BASE_MODEL", tmp_path / "gone" / "docextract-v0-base.safetensors")
    with pytest.raises(TuneError, match="the shipped base model is missing"):
        TuneRun.prepare(project, tmp_path / "e", {"size": "base"})
    assert TuneRun.prepare(project, tmp_path / "f", {"size": "base", "start": "new"}).start_source.startswith("new base")


def test_cli_tune_start_new_and_model_exclude_each_other(receipts_project, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["tune", str(receipts_project), "--start", "new", "--model", str(tmp_path / "m.safetensors"),
                     "--out", str(out)]) == 2
    assert "--start new and --model exclude each other" in capsys.readouterr().err
    assert cli_main(["tune", str(receipts_project), "--start", "new", "--size", "base", "--out", str(out),
                     "--stop-after", "1"]) == 0
    settings = json.loads((out / "settings.json").read_text())
    assert settings["starting_model"] == "new base model, seed 1" and settings["settings"]["start"] == "new"


def test_cli_pretrain_resume_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert cli_main(["pretrain", "synthetic:3", "--size", "tiny", "--steps", "2", "--out", str(tmp_path / "r"),
                     "--resume"]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err


def test_a_null_backbone_scale_means_03_from_a_base_and_1_from_any_other_start(receipts_project, tmp_path):
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun
    from dxstudio.tuning.settings import DEFAULTS

    assert DEFAULTS["backbone_scale"] is None
    pretrain(tmp_path / "base")
    project = Project.open(receipts_project)
    project.settings.pop("backbone_scale", None)  # the fixture sets 0.5: back to the default
    base = TuneRun.prepare(project, tmp_path / "a", {}, model_path=tmp_path / "base" / "model.safetensors")
    new = TuneRun.prepare(project, tmp_path / "b", {})
    assert base.settings["backbone_scale"] is None and new.settings["backbone_scale"] is None
    assert (base.from_base, base.train_settings().backbone_scale) == (True, 0.3)
    assert (new.from_base, new.train_settings().backbone_scale) == (False, 1.0)
    # a value set by a person wins over either default
    set_ = TuneRun.prepare(project, tmp_path / "c", {"backbone_scale": 0.7},
                           model_path=tmp_path / "base" / "model.safetensors")
    assert set_.train_settings().backbone_scale == 0.7

