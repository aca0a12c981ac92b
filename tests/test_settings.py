"""The settings table drives the defaults, the validation, the tune/eval options and the form."""
from __future__ import annotations

import argparse

import pytest

from dxstudio.cli.main import build_parser
from dxstudio.tuning import settings as st
from dxstudio.tuning.settings import (DEFAULTS, NOT_FINGERPRINTED, SETTINGS, Setting, TuneError,
                                      add_arguments, overrides_from_args, resolve_settings)


def test_defaults_and_fingerprint_come_from_the_table():
    assert list(DEFAULTS) == [s.name for s in SETTINGS]
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


def test_project_settings_then_overrides_unknown_names_kept_out():
    s = resolve_settings({"epochs": 3, "future_setting": 1, "batch": None}, {"epochs": 5})
    assert s["epochs"] == 5 and s["batch"] == DEFAULTS["batch"] and "future_setting" not in s


def test_cli_options_are_generated_with_defaults_in_help():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    tune_help = sub["tune"].format_help()
    for row in SETTINGS:
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
