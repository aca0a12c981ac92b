"""LocalFirst that never over-promises (issue 21): thresholds by the bound, no local answer
without a field's own threshold, folds by default on small projects, the one sentence, the
verdict of eval --all. Pure functions and argument checks only: fast."""
from __future__ import annotations

import json
import random

import pytest

from dxstudio.cli.main import main as cli_main
from dxstudio.engine.extract import FieldValue, PagePrediction, prediction_json
from dxstudio.tuning import schedule
from dxstudio.tuning.localfirst import (auto_folds, auto_folds_below, folds_plan, pages_needed, promise_sentence,
                                        verdicts)
from dxstudio.tuning.scoring import (HeldOutPage, bound_threshold, clopper_pearson_lower, right_values_needed,
                                     score_pages, threshold, values_needed)
from dxstudio.tuning.settings import DEFAULTS, TuneError, resolve_settings


def _pairs(rng, n, p_right):
    return [(rng.random(), rng.random() < p_right) for _ in range(n)]


# -- 1. the claim is the bound ------------------------------------------------------------------

def test_a_threshold_the_bound_does_not_support_is_never_stored():
    rng = random.Random(21)
    for _ in range(150):
        pairs = _pairs(rng, rng.randint(0, 700), rng.choice([0.97, 0.99, 0.995, 1.0]))
        share = rng.choice([0.9, 0.95, 0.99])
        t = bound_threshold(pairs, share)
        if t is not None:
            above = [ok for c, ok in pairs if c >= t]
            assert clopper_pearson_lower(sum(above), len(above)) >= share - 1e-9
            # and it is the lowest such confidence: no lower candidate qualifies
            for c in sorted({c for c, _ in pairs if c < t}):
                below = [ok for cc, ok in pairs if cc >= c]
                assert clopper_pearson_lower(sum(below), len(below)) < share + 1e-9
                break


def test_the_seed_rule_stays_a_setting_and_differs_where_the_bound_cannot_carry_the_claim():
    pairs = [(1.0 - i / 100, True) for i in range(20)]  # 20 values, all right
    assert threshold(pairs, 0.99, 5) == pytest.approx(0.81)  # the seed's point estimate: a threshold
    assert bound_threshold(pairs, 0.99) is None  # 20 of 20 supports only 86%
    assert right_values_needed(pairs, 0.99) == values_needed(0.99) - 20 == 279
    pages = [HeldOutPage(f"p{i}", {"a": (1,)}, {"a": ((1,), 1.0 - i / 100)}) for i in range(20)]
    bound = score_pages(["a"], pages, rule="bound")
    seed = score_pages(["a"], pages, rule="seed")
    assert seed["fields"]["a"]["threshold"] is not None and bound["fields"]["a"]["threshold"] is None
    assert bound["fields"]["a"]["needed_right"] == 279 and bound["threshold_rule"] == "bound"
    assert "About 279 more" in bound["fields"]["a"]["threshold_statement"]
    assert DEFAULTS["threshold_rule"] == "bound" and DEFAULTS["share"] == 0.99  # the seed and issue 21


def test_right_values_needed_is_the_fewest_that_give_a_threshold():
    rng = random.Random(5)
    for _ in range(60):
        pairs = _pairs(rng, rng.randint(0, 400), 0.995)
        share = rng.choice([0.9, 0.95, 0.99])
        k = right_values_needed(pairs, share)
        top = [(1.0, True)] * k
        assert bound_threshold(pairs + top, share) is not None
        if k:
            assert bound_threshold(pairs + top[1:], share) is None
        else:
            assert bound_threshold(pairs, share) is not None


# -- 2. no evidence, no local answer --------------------------------------------------------------

def test_a_field_with_no_threshold_routes_ask_and_says_why():
    thresholds = {"pooled": 0.0, "fields": {"date": 0.9, "total": None}}
    pred = PagePrediction("p", {"date": FieldValue((1,), "1/2/20", 0.95), "total": FieldValue((2,), "9.99", 1.0),
                                "company": None, "address": FieldValue((3,), "x", 0.5)}, None, None)
    out = prediction_json(pred, thresholds)["fields"]
    assert out["date"]["route"] == "local" and "why" not in out["date"]
    assert out["total"] == {"value": "9.99", "words": [2], "confidence": 1.0, "route": "ask", "why": "no threshold"}
    assert out["address"]["why"] == "no threshold"  # not named: none of its own, the pooled 0 is not used
    assert out["company"]["route"] == "ask" and out["company"]["why"] == "no value"
    low = prediction_json(PagePrediction("p", {"date": FieldValue((1,), "x", 0.5)}, None, None), thresholds)
    assert low["fields"]["date"]["why"] == "below threshold"


# -- 3. folds by default -----------------------------------------------------------------------

def test_fold_defaults_by_project_size():
    s = resolve_settings({})
    below = auto_folds_below(s)
    assert below == 1990  # 299 held-out values needed for 99% at 95%: 15% of 1990 is 298.5, rounded up
    assert schedule.heldout_count(below, 0.15) >= values_needed(0.99) > schedule.heldout_count(below - 1, 0.15)
    assert auto_folds_below(resolve_settings({"share": 0.9})) == 190  # 29 needed: 15% of 190 is 28.5
    assert auto_folds(25, s) == 5 and auto_folds(150, s) == 5 and auto_folds(below - 1, s) == 5
    assert auto_folds(below, s) is None and auto_folds(5000, s) is None
    assert auto_folds(3, s) == 3  # never more folds than pages
    assert auto_folds(25, resolve_settings({"auto_folds": 0})) is None  # the seed's single split
    assert auto_folds(25, resolve_settings({"folds": 3})) == 3  # set explicitly
    assert auto_folds(25, resolve_settings({"share": 0.9})) == 5  # 29 needed, 4 held out of 25
    assert auto_folds(500, resolve_settings({"share": 0.9})) is None  # 75 held out of 500
    assert auto_folds(500, s) == 5 and auto_folds(2000, s) is None  # 299 needed, 75 held out of 500
    with pytest.raises(TuneError, match="auto_folds must be 0"):
        auto_folds(25, resolve_settings({"auto_folds": 1}))
    with pytest.raises(TuneError, match="more than the 25 usable pages"):
        auto_folds(25, resolve_settings({"folds": 26}))
    plan = folds_plan(50, s, seconds_per_step=0.5)
    assert plan.folds == 5 and "5 folds (the default below 1990 usable pages" in plan.text
    single = schedule.total_steps(50 - schedule.heldout_count(50, 0.15), 4, 12)
    assert plan.single_steps == single and plan.steps > 4 * single and "x the time of a single split" in plan.text
    assert "min" in plan.text or " s." in plan.text
    assert folds_plan(3000, s).folds is None and folds_plan(3000, s).text.startswith("Single split")


# -- 4. one sentence -------------------------------------------------------------------------------

def _report(field_pairs, n_pages, folds=5):
    pages = []
    for i in range(n_pages):
        label, pred = {}, {}
        for name, pairs in field_pairs.items():
            label[name] = (1,)
            if i < len(pairs):
                c, ok = pairs[i]
                pred[name] = ((1,) if ok else (2,), c)
        pages.append(HeldOutPage(f"p{i}", label, pred))
    report = score_pages(list(field_pairs), pages, DEFAULTS["share"], rule="bound")  # as a run: the setting
    report["run"] = {"folds": folds, "settings": {"heldout_fraction": 0.15}}
    return report


def test_the_sentence_with_no_held_out_values():
    text = promise_sentence(_report({"total": []}, 10))
    assert text.startswith("No value can be answered locally yet") and "every value is asked" in text
    assert "%" not in text.split("every value")[0].replace("95%", "")  # claims no share


def test_the_sentence_with_one_held_out_value():
    report = _report({"total": [(0.99, True)]}, 1)
    text = promise_sentence(report)
    # says plainly why: how many values a field needs at the default share (0.99: 299, all right)
    assert text.startswith("No value can be answered locally yet: to show with 95% confidence that 99% of a "
                           "field's values are right takes at least 299 held-out values of that field")
    assert "the 1 held-out value here (at most one per field a page) falls short" in text
    assert report["fields"]["total"]["needed_right"] == 298
    assert "(it needs about 298 more right held-out values)" in text
    assert text.endswith(f"label about {pages_needed(report, 'total')} more pages.") and pages_needed(report, "total") == 298


def test_the_sentence_on_a_50_page_project_says_how_many_pages_are_missing_and_promises_nothing():
    # 50 pages held out once each by folds, every value right: at 0.99 a field needs 299 such values
    rng = random.Random(5)
    report = _report({"date": [(0.5 + 0.5 * rng.random(), True) for _ in range(50)],
                      "total": [(rng.random(), i % 10 != 0) for i in range(50)]}, 50)
    assert report["share"] == 0.99 and all(f["threshold"] is None for f in report["fields"].values())
    assert report["fields"]["date"]["needed_right"] == 299 - 50
    text = promise_sentence(report)
    assert text.startswith("No value can be answered locally yet: to show with 95% confidence that 99% of a "
                           "field's values are right takes at least 299 held-out values of that field")
    assert "the 100 held-out values here (at most one per field a page) fall short, so every value is asked" in text
    assert "about 249 more right held-out values for date" in text
    most = max(pages_needed(report, n) for n in ("date", "total"))
    assert most >= 249 and text.endswith(f": label about {most} more pages.")
    assert "will be right" not in text and "at least 9" not in text  # no share is promised


def test_the_sentence_with_many_held_out_values_states_only_the_bound():
    rng = random.Random(3)
    date = [(0.5 + 0.5 * rng.random(), True) for _ in range(400)]  # 400 right: bound 0.9925
    company = [(rng.random(), rng.random() < 0.6) for _ in range(400)]  # never 99%
    report = _report({"date": date, "company": company}, 400)
    f = report["fields"]["date"]
    assert f["threshold"] is not None and f["precision_lower"] >= 0.99
    text = promise_sentence(report)
    low = int(f["precision_lower"] * 100)
    assert text.startswith(f"Values of date at or above {f['threshold']:.6g} will be right at least {low}% "
                           f"of the time (95% confidence, from {f['values']} held-out values)")
    assert "; company has no threshold yet and is always asked (it needs about " in text
    assert f"{report['fields']['company']['needed_right']} more right held-out values): label about" in text
    assert low >= 99
    # a seed-rule report whose threshold the bound cannot carry: the sentence says the bound, and that it falls short
    pages = [HeldOutPage(f"p{i}", {"a": (1,)}, {"a": ((1,), 1.0 - i / 100)}) for i in range(20)]
    seed = score_pages(["a"], pages, rule="seed")
    text = promise_sentence(seed)
    assert "will be right at least 86% of the time" in text and "less than the 99% asked for" in text


# -- 5. eval verdicts --------------------------------------------------------------------------------

def test_eval_verdicts_per_field():
    stored = {"thresholds": {"share": 0.99, "pooled": 0.9, "fields": {"a": 0.9, "b": None, "c": 0.8}},
              "fields": {"a": {"threshold": 0.9, "values": 200, "right": 199, "precision_lower": 0.976},
                         "b": {"threshold": None, "values": 0, "right": 0, "precision_lower": None},
                         "c": {"threshold": 0.8, "values": 100, "right": 93, "precision_lower": 0.872}},
              "pooled": {"threshold": 0.9, "values": 300, "right": 292, "precision_lower": 0.952}}
    v = verdicts({"stored": stored})
    assert v["a"].holds is True and v["a"].text.startswith("holds at 99%: 199 of 200") and "at least 97%" in v["a"].text
    assert v["b"].holds is None and "no threshold" in v["b"].text
    assert v["c"].holds is False and v["c"].text.startswith("does not hold at 99%: 93 of 100 values routed local")
    assert v["pooled"].holds is False


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--share", "1"], "--share: must be a number > 0 and < 1"),
    (["--share", "0"], "--share: must be a number > 0 and < 1"),
    (["--threshold-rule", "median"], "invalid choice: 'median'"),
    (["--folds", "1"], "--folds: must be an integer >= 2"),
])
def test_bad_rule_settings_are_one_clear_error_and_write_nothing(small_project, capsys, argv, message):
    before = sorted(p.name for p in small_project.iterdir())
    with pytest.raises(SystemExit) as e:
        cli_main(["tune", str(small_project), *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in small_project.iterdir()) == before


def test_a_bad_saved_share_or_too_many_folds_is_one_clear_error_and_writes_nothing(small_project, capsys):
    data = json.loads((small_project / "dxproject.json").read_text())
    data["settings"]["share"] = 1.5
    (small_project / "dxproject.json").write_text(json.dumps(data))
    before = sorted(p.name for p in small_project.iterdir())
    assert cli_main(["tune", str(small_project)]) == 2
    err = capsys.readouterr().err
    assert "setting share must be a number > 0 and < 1, not 1.5" in err and err.count("\n") == 1
    data["settings"]["share"] = 0.99
    (small_project / "dxproject.json").write_text(json.dumps(data))
    assert cli_main(["tune", str(small_project), "--folds", "50"]) == 2
    err = capsys.readouterr().err
    assert "--folds 50 is more than the" in err and err.count("\n") == 1
    assert sorted(p.name for p in small_project.iterdir()) == before


def test_help_shows_the_rule_settings_with_their_defaults():
    from dxstudio.cli.main import build_parser

    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    text = " ".join(sub["tune"].format_help().split())
    assert "--threshold-rule {bound,seed}" in text and "(the seed's rule) (default bound)" in text
    assert "--folds INT" in text and "(default auto)" in text and "--auto-folds INT" in text
    assert "lower bound of the precision reaches share" in text and "95%" in text


def test_prepare_run_folds_by_default_on_a_small_project_and_it_is_the_run_of_folds_k(small_project, tmp_path):
    from dxstudio.project import Project
    from dxstudio.tuning import FoldedRun, TuneRun, prepare_run

    project = Project.open(small_project)  # its settings say auto_folds 0: the single split
    assert isinstance(prepare_run(project, tmp_path / "a"), TuneRun)
    auto = prepare_run(project, tmp_path / "b", {"auto_folds": 5})
    assert isinstance(auto, FoldedRun)
    k = auto.settings["folds"]
    assert k == min(5, len(auto.train_pages))
    explicit = prepare_run(project, tmp_path / "b", {"folds": k})
    assert explicit.fingerprint == auto.fingerprint  # the same run, the same bytes
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # prepare writes nothing


# -- the measurement tool of docs/tuning.md "The share: default 0.99"---------------------------

def test_the_rescore_table_states_the_claim_and_whether_it_held():
    from pathlib import Path

    from tests.conftest import load_script

    tool = load_script(Path(__file__).resolve().parents[1] / "bench" / "localfirst_rescore.py")
    # held out: 40 values of a, all right, confidences 1.0 down; b: 10 values (too few for 0.9)
    held_a = [[1.0 - i / 100, 0.5, True, True, f"h{i}"] for i in range(40)]
    held_b = [[0.99, 0.5, True, True, f"h{i}"] for i in range(10)]
    # new pages: a's values above its threshold are 9 of 10 right; b is asked
    test_a = [[0.99, 0.5, True, i != 0, f"t{i}"] for i in range(10)] + [[0.1, 0.5, True, True, "low"]]
    cache = {"fields": ["a", "b"], "heldout": {"a": held_a, "b": held_b},
             "test_values": {"a": test_a, "b": [[0.99, 0.5, True, True, "t0"]]}}
    fig = tool.figures(cache, 0.9, 0.95, "prob")
    a = fig["fields"]["a"]
    assert a["threshold"] == bound_threshold([(r[0], r[3]) for r in held_a], 0.9) == pytest.approx(0.61)
    assert a["promise"] == pytest.approx(clopper_pearson_lower(40, 40)) and fig["claim"] == 0.92  # 0.9279: 92%
    assert (a["values"], a["right"]) == (10, 9) and a["coverage"] == pytest.approx(10 / 11)
    assert fig["fields"]["b"]["threshold"] is None and fig["fields"]["b"]["values"] == 0
    assert fig["holds"] is False  # 90% right on the new pages is below the 92% claimed
    test_a[0][3] = True
    assert tool.figures(cache, 0.9, 0.95, "prob")["holds"] is True
    assert tool.figures(cache, 0.99, 0.95, "prob")["claim"] is None  # no threshold: nothing claimed
