"""The settings table drives the defaults, the validation, the tune/eval options and the form."""
from __future__ import annotations

import argparse

import pytest

from dxstudio.cli.main import build_parser
from dxstudio.tuning import settings as st
from dxstudio.tuning.settings import (DEFAULTS, NOT_FINGERPRINTED, SETTINGS, Setting, TuneError,
                                      add_arguments, overrides_from_args, resolve_settings, rows)


def test_defaults_and_fingerprint_come_from_the_table():
    assert list(DEFAULTS) == [s.name for s in rows("tune")] == [s.name for s in rows("eval")]
    assert DEFAULTS["epochs"] == 12 and DEFAULTS["lr"] == 2e-3 and DEFAULTS["field_weight"] is None
    # auto_folds: the folds it picks are in the fingerprint as folds (issue 21)
    assert set(NOT_FINGERPRINTED) == {"degree", "kernels", "checkpoint_every", "auto_folds"}
    # the machine's cores, never less than one; the bytes do not depend on it
    assert DEFAULTS["degree"] == st.usable_cores() >= 1
    # share and min_values are defined once: the scorer's defaults are the table's
    from dxstudio.tuning import scoring

    assert (scoring.DEFAULT_SHARE, scoring.DEFAULT_MIN_VALUES) == (DEFAULTS["share"], DEFAULTS["min_values"])


@pytest.mark.parametrize("name, bad, words", [
    ("epochs", 0, ">= 1"), ("epochs", 2.5, "an integer"), ("epochs", True, "an integer"),
    ("lr", 0, "> 0"), ("lr", float("nan"), "a number"), ("share", 1.5, "< 1"), ("share", 1.0, "< 1"), ("threshold_rule", "median", "bound or seed"),
    ("seed", 2**64, "<= 2^64-1"), ("seed", -1, ">= 0"), ("kernels", "turbo", "fast or reference"),
    ("clip", -1.0, "> 0"), ("heldout_fraction", 2.0, "<= 1"),
])
def test_validation_names_the_setting_and_the_range(name, bad, words):
    with pytest.raises(TuneError, match=f"setting {name} must be .*{words.replace('^', '.')}"):
        resolve_settings({}, {name: bad})


def test_project_settings_then_overrides():
    s = resolve_settings({"epochs": 3, "batch": None}, {"epochs": 5})
    assert s["epochs"] == 5 and s["batch"] == DEFAULTS["batch"]


def test_an_unknown_setting_is_refused_with_the_nearest_known_one(tmp_path):
    # issue 25: {"learning_rate": 5} in dxproject.json used to run at lr 0.002, silently
    pf = tmp_path / "dxproject.json"
    with pytest.raises(TuneError, match=f"^{pf}: \"settings\": unknown tuning setting 'learning_rate'; "
                                        "did you mean 'lr'\\?$"):
        resolve_settings({"learning_rate": 5}, source=pf)
    with pytest.raises(TuneError, match="^dxproject.json \"settings\": unknown tuning setting 'epoch'; "
                                        "did you mean 'epochs'"):
        resolve_settings({"epoch": 5})
    with pytest.raises(TuneError, match="^unknown tuning setting 'weightdecay'; did you mean 'weight_decay'"):
        resolve_settings({}, {"weightdecay": 0.1})  # an override: no file to name
    with pytest.raises(TuneError, match="unknown tuning setting 'window'; did you mean"):
        resolve_settings({"window": 64})  # pretraining's, not fine-tuning's
    with pytest.raises(TuneError, match="unknown pretraining setting 'backbone_scale'"):
        resolve_settings(None, {"backbone_scale": 1.0}, command="pretrain")


def test_a_project_with_an_unknown_setting_does_not_start(small_project, tmp_path):
    """The run says which key in which file (the CLI and the app show the TuneError)."""
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun

    project = Project.open(small_project)
    project.settings["learning_rate"] = 5
    project.save()
    with pytest.raises(TuneError, match=f"{project.project_file}: .*'learning_rate'; did you mean 'lr'"):
        TuneRun.prepare(Project.open(small_project), tmp_path / "run")


def test_pretraining_settings_are_rows_of_their_command():
    from dxstudio.tuning import pretrain

    # the defaults pretraining had before its rows moved into the table (the fingerprint covers them)
    assert pretrain.DEFAULTS == {
        "size": "base", "input_layout": 2, "seed": 1, "epochs": 1, "steps": None, "batch": 8, "lr": 1e-3,
        "warmup": 50, "window": 256, "limit": None, "clip": 1.0, "weight_decay": 0.01, "field_weight": 3.0,
        "loss_tag": 1.0, "loss_role": 0.5, "loss_doc": 0.25, "loss_items": 0.25, "loss_kv": 0.25,
        "degree": 1, "kernels": "fast", "checkpoint_every": 100}
    assert set(pretrain.NOT_FINGERPRINTED) == {"degree", "kernels", "checkpoint_every"}
    # one row per name and command; the rows both commands share are one row
    for c in ("tune", "pretrain"):
        names = [r.name for r in rows(c)]
        assert len(names) == len(set(names)), c
    shared = [r.name for r in SETTINGS if {"tune", "pretrain"} <= set(r.commands)]
    assert shared == ["seed", "clip", "weight_decay", "size", "input_layout", "kernels"]
    with pytest.raises(TuneError, match="setting steps must be an integer >= 1 or null, not 0"):
        pretrain.resolve({"steps": 0})
    with pytest.raises(TuneError, match="setting field_weight must be a number > 0, not 0"):
        pretrain.resolve({"field_weight": 0})
    assert pretrain.resolve({"lr": 0.5, "steps": None})["lr"] == 0.5


def test_pretrain_options_are_generated_from_its_rows():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    help_text = sub["pretrain"].format_help()
    for row in rows("pretrain"):
        assert row.option in help_text
    assert "(default 256)" in help_text and "--backbone-scale" not in help_text
    args = parser.parse_args(["pretrain", "synthetic:4", "--out", "o", "--steps", "3", "--loss-kv", "0",
                              "--kernels", "reference"])
    assert overrides_from_args(args, "pretrain") == {"steps": 3, "loss_kv": 0.0, "kernels": "reference"}


def test_size_and_kernel_choices_are_the_engines():
    from dxstudio.engine.config import SIZES
    from dxstudio.engine.kernels.runtime import KERNELS

    assert set(st.BY_NAME["size"].choices) == set(SIZES) and st.SIZE_CHOICES == ("tiny", "base")
    assert set(st.BY_NAME["kernels"].choices) == set(KERNELS) and st.KERNEL_CHOICES[0] == DEFAULTS["kernels"]
    sub = build_parser()._subparsers._group_actions[0].choices
    for command in ("new-model", "extract", "route", "pretrain", "tune"):
        kernels = next(a for a in sub[command]._actions if a.dest == "kernels")
        assert tuple(kernels.choices) == st.KERNEL_CHOICES, command


def test_train_settings_take_weight_decay_clip_and_kernels_from_the_table():
    from dxstudio.engine.training import TrainSettings

    with pytest.raises(TypeError, match="weight_decay"):
        TrainSettings(backbone_scale=1.0)  # the engine keeps no default of its own


def test_the_docs_settings_tables_are_the_generated_ones():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "tuning.md").read_text(encoding="utf-8")
    section = st.doc_section(doc)
    assert section is not None, "docs/tuning.md lost its generated settings tables"
    assert section == st.markdown(), ("docs/tuning.md's settings tables are not the table's: run "
                                      "python -m dxstudio.tuning.settings --write docs/tuning.md")
    for row in SETTINGS:
        assert f"| {row.name} | " in section


def test_cli_options_are_generated_with_defaults_in_help():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    tune_help = sub["tune"].format_help()
    for row in rows("tune"):
        assert row.option in tune_help
    assert "(default 12)" in tune_help and "usable cores" in tune_help and "exit codes:" in tune_help
    eval_opts = {a.dest for a in sub["eval"]._actions}
    assert {"share", "min_values", "seed", "heldout_fraction", "kernels"} <= eval_opts and "epochs" not in eval_opts
    args = parser.parse_args(["tune", "P", "--epochs", "3", "--backbone-scale", "0.5"])
    assert overrides_from_args(args, "tune") == {"epochs": 3, "backbone_scale": 0.5}


def test_a_bad_option_value_is_refused_by_the_parser(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["tune", "P", "--seed", "-1"])
    assert e.value.code == 2 and "--seed: must be an integer >= 0" in capsys.readouterr().err


def test_a_new_row_is_all_a_new_setting_needs(monkeypatch):
    row = Setting("future_flag", "bool", False, "train on a future flag", label="Future flag")
    table = SETTINGS + (row,)
    monkeypatch.setattr(st, "SETTINGS", table)
    monkeypatch.setattr(st, "BY_NAME", {s.name: s for s in table})
    monkeypatch.setattr(st, "DEFAULTS", {s.name: s.default for s in table})
    assert st.resolve_settings({"future_flag": True})["future_flag"] is True
    with pytest.raises(TuneError, match="future_flag must be true or false"):
        st.resolve_settings({"future_flag": "yes"})
    p = argparse.ArgumentParser()
    st.add_arguments(p, "tune")
    assert st.overrides_from_args(p.parse_args(["--future-flag"]), "tune")["future_flag"] is True
    assert "future_flag" not in st.overrides_from_args(p.parse_args([]), "tune")


def test_accepted_only_is_a_real_row_of_the_table():
    assert DEFAULTS["accepted_only"] is False and "accepted_only" not in NOT_FINGERPRINTED
    p = argparse.ArgumentParser()
    add_arguments(p, "tune")
    assert overrides_from_args(p.parse_args(["--accepted-only"]), "tune") == {"accepted_only": True}
    assert overrides_from_args(p.parse_args(["--no-accepted-only"]), "tune") == {"accepted_only": False}
    with pytest.raises(TuneError, match="accepted_only must be true or false"):
        resolve_settings({"accepted_only": 1})
