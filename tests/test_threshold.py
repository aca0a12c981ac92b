"""Issue 10: value scores, repeated printings, the Clopper-Pearson bound, coverage and curve,
ranking confidences, cross-validated thresholds, stored thresholds and routes, eval --all."""
from __future__ import annotations

import json
import math
import shutil
from fractions import Fraction

import numpy as np
import pytest

from dxstudio.cli import main as cli_main
from dxstudio.engine.container import ModelFileError, load_model, model_bytes
from dxstudio.engine.extract import FieldValue, route, tag_confidence
from dxstudio.engine.page import Page, Word
from dxstudio.grounding import page_targets
from dxstudio.project import LabelFile, Project
from dxstudio.tuning import FoldedRun, TuneError, TuneRun, evaluate_model, prepare_run
from dxstudio.tuning import schedule
from dxstudio.tuning.scoring import (CORRECT, WRONG, HeldOutPage, clopper_pearson_lower, confidence_auc,
                                     curve_points, score_pages, values_needed)
from tests.conftest import load_script


# -- the Clopper-Pearson bound ----------------------------------------------------------------

def _tail(right, n, p: Fraction) -> Fraction:
    """P(X >= right | n, p), exactly."""
    return sum(Fraction(math.comb(n, j)) * p ** j * (1 - p) ** (n - j) for j in range(right, n + 1))


def test_clopper_pearson_against_known_values():
    # closed forms: all right -> alpha^(1/n); one right -> 1 - (1 - alpha)^(1/n)
    for n in (1, 5, 23, 100, 299):
        assert clopper_pearson_lower(n, n) == pytest.approx(0.05 ** (1 / n), rel=1e-12)
        assert clopper_pearson_lower(1, n) == pytest.approx(1 - 0.95 ** (1 / n), rel=1e-9)
    # published values (scipy.stats.beta.ppf(0.05, x, n - x + 1))
    assert clopper_pearson_lower(5, 10) == pytest.approx(0.22244110, abs=1e-7)
    assert clopper_pearson_lower(23, 23) == pytest.approx(0.87787661, abs=1e-7)  # the "23 values"
    assert clopper_pearson_lower(0, 7) == 0.0 and clopper_pearson_lower(0, 0) is None
    # the definition, checked in exact arithmetic: the tail at the bound is the 5% of the test
    for right, n in ((3, 8), (24, 34), (42, 44), (7, 7)):
        lower = clopper_pearson_lower(right, n)
        assert float(_tail(right, n, Fraction(lower))) == pytest.approx(0.05, rel=1e-9)
    assert values_needed(0.99) == 299 and clopper_pearson_lower(298, 298) < 0.99 <= clopper_pearson_lower(299, 299)
    with pytest.raises(ValueError):
        clopper_pearson_lower(5, 4)


def test_clopper_pearson_matches_scipy_where_installed():
    from scipy import stats  # in the test extra: this check runs everywhere the tests do
    for n in (1, 2, 9, 40, 250):
        for right in range(1, n + 1, max(1, n // 7)):
            assert clopper_pearson_lower(right, n) == pytest.approx(stats.beta.ppf(0.05, right, n - right + 1), abs=1e-9)


# -- value scores, coverage, curve, AUC ---------------------------------------------------------

def test_value_scores_count_the_other_printing():
    # total printed twice: the label has word 5, the model read word 9 (the same amount elsewhere)
    pages = [HeldOutPage("p1", {"total": (5,)}, {"total": ((9,), 0.9)}, value_match=frozenset({"total"})),
             HeldOutPage("p2", {"total": (5,)}, {"total": ((5,), 0.8)}),
             HeldOutPage("p3", {"total": (5,)}, {"total": ((7,), 0.7)}),  # a wrong amount
             HeldOutPage("p4", {"total": (5,)}, {"total": None})]
    t = score_pages(["total"], pages, min_values=1)["fields"]["total"]
    assert [p for p in t["outcomes"] if t["outcomes"][p]] and t["outcomes"][WRONG] == 2 and t["outcomes"][CORRECT] == 1
    assert t["recall"] == 1 / 4 and t["value_recall"] == 2 / 4
    assert t["agreement"] == 1 / 4 and t["value_agreement"] == 2 / 4
    assert t["confidences"] == [[0.9, False, True], [0.8, True, True], [0.7, False, False]]


def test_threshold_figures_coverage_and_curve():
    pages = []
    confs = [0.99, 0.98, 0.97, 0.96, 0.95, 0.90, 0.50, 0.40]
    right = [True, True, True, True, True, True, False, True]
    for i, (c, ok) in enumerate(zip(confs, right)):
        pages.append(HeldOutPage(f"p{i}", {"a": (1,)}, {"a": ((1,) if ok else (2,), c)}))
    r = score_pages(["a"], pages, share=0.99, min_values=5)
    a = r["fields"]["a"]
    assert a["threshold"] == 0.90 and a["values"] == 6 and a["right"] == 6 and a["precision"] == 1.0
    assert a["precision_lower"] == pytest.approx(0.05 ** (1 / 6))
    assert a["coverage"] == 6 / 8
    assert a["bound_statement"].startswith("6 values at or above 0.9, all right: with 95% confidence at least 60%")
    assert a["curve"][0] == [0.99, 1 / 8, 1.0, 1.0] and a["curve"][-1] == [0.40, 1.0, 7 / 8, 7 / 8]
    assert [p[0] for p in a["curve"]] == sorted(confs, reverse=True)
    assert a["confidence_auc"] == 6 / 7  # the wrong value ranks above one right value (0.40)
    assert r["pooled"]["threshold"] == 0.90 and r["pooled"]["values"] == 6
    assert "Too few held-out pages to trust a 99% claim" in r["warning"] and "About 299" in r["warning"]
    json.loads(json.dumps(r))


def test_threshold_by_value_counts_the_other_printing_as_right():
    # six totals, all the right amount, two of them read where it is printed again
    pages = [HeldOutPage(f"p{i}", {"total": (5,)}, {"total": ((9,) if i < 2 else (5,), 0.9 - 0.01 * i)},
                         value_match=frozenset({"total"}) if i < 2 else frozenset()) for i in range(6)]
    words = score_pages(["total"], pages, by="words")
    value = score_pages(["total"], pages, by="value")
    assert words["threshold"] is None and "exactly right" in words["threshold_statement"]
    assert value["threshold"] == 0.85 and value["threshold_by"] == "value"
    t = value["fields"]["total"]
    assert (t["values"], t["right"], t["precision"], t["value_precision"]) == (6, 6, 1.0, 1.0)
    assert "right (the label's value)" in t["threshold_statement"]
    with pytest.raises(ValueError, match="by must be"):
        score_pages(["total"], pages, by="text")


def test_auc_and_curve_by_hand():
    assert confidence_auc([(0.9, True), (0.8, False), (0.8, True), (0.1, False)]) == 3.5 / 4
    assert confidence_auc([(0.9, True)]) is None
    assert curve_points([(0.5, True), (0.5, False), (0.7, True)]) == [[0.7, 1 / 3, 1.0, 1.0], [0.5, 1.0, 2 / 3, 2 / 3]]


# -- repeated printings --------------------------------------------------------------------------

def _page(*texts):
    return Page("p", 1000.0, 100.0, tuple(Word(t, (10.0 * i, 0.0, 10.0 * i + 9, 10.0)) for i, t in enumerate(texts)))


def test_repeats_ignore_sets_the_other_printings_to_minus_one():
    page = _page("Shop", "Tea", "12.50", "TOTAL", "12.50", "CASH", "12.50", "CHANGE", "0.00")
    labels = LabelFile("p", {"total": "12.50", "vendor": "Shop"}, "llm", {}, {"state": "unreviewed", "fixes": {}})
    o = page_targets(page, labels, ["vendor", "total"])
    ignore = page_targets(page, labels, ["vendor", "total"], repeats="ignore")
    assert o.field_words == ignore.field_words == {"vendor": (0,), "total": (6,)}  # the last after TOTAL
    assert o.tags.tolist() == [1, 0, 0, 0, 0, 0, 3, 0, 0]  # the seed's rule: other printings are O
    assert ignore.tags.tolist() == [1, 0, -1, 0, -1, 0, 3, 0, 0]
    # a person's fix is what the person chose: nothing else is ignored
    fixed = LabelFile("p", {"total": "12.50"}, "llm", {}, {"state": "accepted", "fixes": {"total": [2]}})
    assert page_targets(page, fixed, ["total"], repeats="ignore").tags.tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="repeats"):
        page_targets(page, labels, ["total"], repeats="maybe")


# -- confidences that rank -------------------------------------------------------------------------

def test_binary64_confidences_rank_where_float32_ties():
    # margins of 18, 20 and 25: the binary32 softmax gives 1.0 (or the same value) for all three
    logits = np.array([[0, 18, -5], [0, 20, -5], [0, 25, -5], [1, 2, 0]], np.float32)
    tags = np.argmax(logits, axis=1)
    f32 = np.float32(1) / (np.float32(1) + np.exp(-logits[:3, 1]).astype(np.float32))
    assert len(set(f32.tolist())) == 1  # the binary32 ceiling
    ref, fast = tag_confidence(logits, tags, "reference"), tag_confidence(logits, tags, "fast")
    assert ref.tobytes() == fast.tobytes()
    assert ref[0] < ref[1] < ref[2] < 1.0
    assert ref[0] == pytest.approx(1 / (1 + math.exp(-18) + math.exp(-23)), rel=1e-14)
    assert ref[3] == pytest.approx(1 / (1 + math.exp(-1) + math.exp(-2)), rel=1e-14)


# -- stored thresholds and routes -----------------------------------------------------------------

def _tiny(fields=("a", "b")):
    from dxstudio.engine.config import size_config
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny", list(fields))
    return cfg, new_params(cfg, 3)


def test_thresholds_are_stored_and_malformed_ones_are_refused(tmp_path):
    cfg, params = _tiny()
    path = tmp_path / "m.safetensors"
    path.write_bytes(model_bytes(cfg, params, thresholds={"pooled": 0.9, "fields": {"a": 0.95, "b": None}}))
    assert load_model(path).thresholds == {"pooled": 0.9, "fields": {"a": 0.95, "b": None},
                                           "share": None, "min_values": None}
    with pytest.raises(ValueError, match="thresholds"):
        model_bytes(cfg, params, thresholds={"pooled": 2.0, "fields": {}})
    good = path.read_bytes()
    for bad_text in ('{"pooled": 1.5, "fields": {}}', '{"pooled": 0.5, "fields": {"zz": 0.5}}',
                     '{"fields": {}}', '[1, 2]', 'not json'):
        blob = json.dumps(bad_text)[1:-1]  # as it sits inside the header's JSON string
        old = json.dumps(json.dumps({"fields": {"a": 0.95, "b": None}, "min_values": None, "pooled": 0.9,
                                     "share": None}, sort_keys=True, separators=(",", ":")))[1:-1]
        assert old.encode() in good
        n = int.from_bytes(good[:8], "little")
        header = good[8:8 + n].decode().rstrip().replace(old, blob)
        header = header.encode() + b" " * (-len(header) % 8)
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes(len(header).to_bytes(8, "little") + header + good[8 + n:])
        with pytest.raises(ModelFileError, match="stored thresholds are malformed") as e:
            load_model(bad)
        assert str(bad) in str(e.value) and "\n" not in str(e.value)


def test_routes_against_a_stored_threshold():
    from dxstudio.engine.extract import route_reason

    t = {"pooled": 0.9, "fields": {"a": 0.95, "b": None}}
    v = lambda c: FieldValue((0,), "x", c)
    assert route("a", v(0.95), t) == "local" and route("a", v(0.94), t) == "ask"  # a's own threshold
    # b has no threshold of its own: every value asked, the pooled one is never used for it (issue 21)
    assert route("b", v(0.91), t) == "ask" and route("b", v(1.0), t) == "ask"
    assert route("c", v(1.0), t) == "ask"  # a field the thresholds do not name: none either
    assert route("a", None, t) == "ask" and route("a", v(1.0), None) == "ask"  # no value, no thresholds
    assert route_reason("a", v(0.95), t) is None and route_reason("a", v(0.94), t) == "below threshold"
    assert route_reason("b", v(1.0), t) == "no threshold" and route_reason("a", None, t) == "no value"


def test_extract_marks_routes_and_prints_a_summary(tmp_path, capsys):
    cfg, params = _tiny(("vendor", "date", "total", "invoice_number"))
    page = tmp_path / "p.json"
    page.write_text(json.dumps({"id": "p", "width": 100, "height": 100, "words": [
        {"text": t, "box": [10 * i, 0, 10 * i + 8, 10]} for i, t in enumerate(["Shop", "12.50", "TOTAL", "1/2/20"])]}))
    plain = tmp_path / "plain.safetensors"
    plain.write_bytes(model_bytes(cfg, params))
    assert cli_main(["extract", str(plain), str(page)]) == 0
    rec = json.loads(capsys.readouterr().out)
    confs = sorted(v["confidence"] for v in rec["fields"].values() if v["value"] is not None)
    assert confs, "the random model should give at least one value"
    # a threshold between the values: the ones at or above it are local, the others asked
    cut = confs[len(confs) // 2]
    stored = tmp_path / "stored.safetensors"
    own = {f: cut for f in ("vendor", "date", "total")}  # invoice_number: no threshold of its own
    stored.write_bytes(model_bytes(cfg, params, thresholds={"pooled": 0.0, "fields": own}))
    assert cli_main(["extract", str(stored), str(page)]) == 0
    cap = capsys.readouterr()
    rec = json.loads(cap.out)
    n_local = 0
    for f, v in rec["fields"].items():
        want = "local" if v["value"] is not None and f in own and v["confidence"] >= cut else "ask"
        assert v["route"] == want
        why = ("no value" if v["value"] is None else "no threshold" if f not in own else "below threshold")
        assert v.get("why") == (None if want == "local" else why)
        n_local += want == "local"
    assert f"{n_local} value{'s' if n_local != 1 else ''} answered locally" in cap.err
    assert "per field: " in cap.err and "invoice_number 0 local, 1 asked (" in cap.err
    # the pooled threshold alone (0: every value would clear it) routes nothing local
    pooled_only = tmp_path / "pooled.safetensors"
    pooled_only.write_bytes(model_bytes(cfg, params, thresholds={"pooled": 0.0, "fields": {}}))
    assert cli_main(["extract", str(pooled_only), str(page)]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert all(v["route"] == "ask" and v["why"] in ("no threshold", "no value") for v in rec["fields"].values())


# -- folds ---------------------------------------------------------------------------------------

def test_fold_assignment_holds_every_page_out_once():
    ids = [f"r{i}" for i in range(23)]
    order = schedule.hash_order(ids, 5)
    held_all = []
    for k in range(4):
        train, held = schedule.fold_split(ids, 5, 4, k)
        assert held == order[k::4] and set(train) | set(held) == set(ids) and not set(train) & set(held)
        assert train == [p for p in order if p not in held]
        held_all += held
    assert sorted(held_all) == sorted(ids)
    with pytest.raises(ValueError):
        schedule.fold_split(ids, 5, 1, 0)
    with pytest.raises(ValueError):
        schedule.fold_split(ids[:3], 5, 4, 0)


def _folded(project_dir, run_dir, **overrides):
    run = prepare_run(Project.open(project_dir), run_dir, {"folds": 3, **overrides})
    assert isinstance(run, FoldedRun)
    assert run.train()
    return run, run.finish(), (run_dir / "model.safetensors").read_bytes()


def test_folds_pool_every_page_and_do_not_depend_on_degree(receipts_project, tmp_path):
    run, report, b1 = _folded(receipts_project, tmp_path / "d1", degree=1)
    _, report2, b2 = _folded(receipts_project, tmp_path / "d2", degree=2)
    assert b1 == b2 and report["fields"] == report2["fields"]
    usable = [r[0] for r in run.train_pages]
    assert sorted(p["id"] for p in report["pages"]) == sorted(usable)  # every usable page held out once
    assert report["n_pages"] == len(usable) and report["run"]["folds"] == 3
    # the pooled report is the scorer's on the pooled predictions; the model carries its thresholds
    from dxstudio.tuning.evaluation import score_predictions
    again = score_predictions(list(run.cfg.fields), run.pooled_predictions(), report["share"], 5,
                              report["threshold_by"], report["threshold_rule"])
    assert again["fields"] == report["fields"]
    stored = load_model(tmp_path / "d1" / "model.safetensors").thresholds
    assert stored["pooled"] == report["threshold"]
    assert stored["fields"] == {k: v["threshold"] for k, v in report["fields"].items()}
    # the final model trained on every usable page, not on a fold's
    final = TuneRun.prepare(Project.open(receipts_project), tmp_path / "x", {"folds": 3}, fold=(None, 3))
    assert len(final.train_pages) == len(usable) and final.heldout_pages == []


def test_folds_resume_to_the_same_bytes(receipts_project, tmp_path):
    _, full_report, full = _folded(receipts_project, tmp_path / "full")
    run = prepare_run(Project.open(receipts_project), tmp_path / "part", {"folds": 3})
    mid = run.folds[0].total_steps + 2  # inside fold 2
    assert run.train(stop_after=mid) is False and run.step == mid
    assert (tmp_path / "part" / "folds" / "2" / "checkpoint.safetensors").exists()
    # the app finds the stopped run and its step across parts (its Resume button)
    from dxstudio.tuning.folds import folded_step
    assert folded_step(tmp_path / "part") == mid and folded_step(tmp_path / "full") == run.total_steps
    (tmp_path / "runs").mkdir()
    shutil.copytree(tmp_path / "part", tmp_path / "runs" / "part")
    from dxstudio.ui.train_tab import checkpoint_step, unfinished_run
    assert unfinished_run(tmp_path / "runs") == tmp_path / "runs" / "part"
    assert checkpoint_step(tmp_path / "runs" / "part") == mid
    again = prepare_run(Project.open(receipts_project), tmp_path / "part", {"folds": 3, "degree": 2})
    steps = []
    assert again.train(lambda ev: steps.append(ev.step) if ev.kind == "step" else None, resume=True)
    assert steps[0] == mid + 1 and steps[-1] == again.total_steps
    report = again.finish()
    assert (tmp_path / "part" / "model.safetensors").read_bytes() == full
    assert report["fields"] == full_report["fields"]


def test_bad_folds_are_one_clear_error_and_write_nothing(receipts_project, tmp_path, capsys):
    out = tmp_path / "out"
    for k in ("1", "0"):  # refused by the option itself (the settings table's range), as every setting
        with pytest.raises(SystemExit) as e:
            cli_main(["tune", str(receipts_project), "--folds", k, "--out", str(out)])
        assert e.value.code == 2
        assert "argument --folds: must be an integer >= 2" in capsys.readouterr().err.strip().splitlines()[-1]
        assert not out.exists()
    assert cli_main(["tune", str(receipts_project), "--folds", "999", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--folds 999 is more than the" in err[0] and "usable pages" in err[0]
    assert not out.exists()
    # and in dxproject.json: the same check, one clear error
    with pytest.raises(TuneError, match="setting folds must be an integer >= 2"):
        prepare_run(Project.open(receipts_project), out, {"folds": 1})


# -- eval --all ----------------------------------------------------------------------------------

def test_eval_all_scores_every_usable_page_at_the_stored_thresholds(receipts_project, tmp_path, capsys):
    run = TuneRun.prepare(Project.open(receipts_project), tmp_path / "run", {})
    assert run.train()
    run.finish()
    model = tmp_path / "run" / "model.safetensors"
    report = evaluate_model(model, Project.open(receipts_project), all_pages=True)
    usable = {r[0] for r in run.train_pages + run.heldout_pages}
    assert {p["id"] for p in report["pages"]} == usable and report["run"]["heldout_pages"] == len(usable)
    stored = report["stored"]
    assert stored["thresholds"] == load_model(model).thresholds and stored["by"] == "value"
    assert report["threshold_by"] == "value"  # the model's own rule
    for name, f in report["fields"].items():
        t = stored["thresholds"]["fields"][name]
        t = t if t is not None else stored["thresholds"]["pooled"]
        above = [c for c, _, _ in f["confidences"] if t is not None and c >= t]
        assert stored["fields"][name]["values"] == len(above)
        assert stored["fields"][name]["coverage"] == (len(above) / len(f["confidences"]) if f["confidences"] else None)
    out = tmp_path / "eval.json"
    assert cli_main(["eval", str(model), str(receipts_project), "--all", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["n_pages"] == len(usable)
    capsys.readouterr()
    # a project whose schema differs from the model's: one clear error, nothing written
    other = tmp_path / "other"
    shutil.copytree(receipts_project, other)
    p = Project.open(other)
    p.schema = p.schema[:2]
    p.save()
    out2 = tmp_path / "eval2.json"
    assert cli_main(["eval", str(model), str(other), "--all", "--out", str(out2)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schema" in err[0] and str(model) in err[0]
    assert not out2.exists()


def test_threshold_table_tool_recomputes_both_rules():
    from pathlib import Path

    tool = load_script(Path(__file__).resolve().parents[1] / "bench" / "threshold_table.py")
    # tuning: six dates, two read at the other printing (value right, words wrong)
    held = [HeldOutPage(f"h{i}", {"date": (1,)}, {"date": ((2,) if i < 2 else (1,), 0.95 - 0.01 * i)},
                        value_match=frozenset({"date"}) if i < 2 else frozenset()) for i in range(6)]
    run_report = score_pages(["date"], held)
    new = [HeldOutPage(f"n{i}", {"date": (1,)}, {"date": ((1,) if i != 3 else (4,), c)})
           for i, c in enumerate([0.99, 0.93, 0.91, 0.90, 0.5])]
    eval_report = score_pages(["date"], new)
    words = tool.table(run_report, eval_report, "words")
    value = tool.table(run_report, eval_report, "value")
    assert words["fields"]["date"]["threshold"] is None and words["pooled"]["values"] == 0
    d = value["fields"]["date"]
    assert d["threshold"] == 0.95 - 0.01 * 5 and (d["values"], d["right"]) == (4, 3) and d["coverage"] == 4 / 5
    assert value["pooled"]["precision_lower"] == clopper_pearson_lower(3, 4)


def test_cli_folds_stop_resume_and_overwrite(receipts_project, tmp_path, capsys):
    full, out = tmp_path / "full", tmp_path / "cli"
    assert cli_main(["tune", str(receipts_project), "--folds", "2", "--out", str(full)]) == 0
    assert cli_main(["tune", str(receipts_project), "--folds", "2", "--out", str(out), "--stop-after", "5"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 5
    assert not (out / "report.json").exists()
    assert cli_main(["tune", str(receipts_project), "--folds", "2", "--out", str(out)]) == 2  # holds a run
    assert "already holds a run" in capsys.readouterr().err
    assert cli_main(["tune", str(receipts_project), "--folds", "2", "--out", str(out), "--resume",
                     "--degree", "2"]) == 0
    assert (out / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()
    assert cli_main(["tune", str(receipts_project), "--folds", "2", "--out", str(out), "--overwrite"]) == 0
    assert (out / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()
