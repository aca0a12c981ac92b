"""Scores on hand-made held-out pages and the LocalFirst threshold cases."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dxstudio.tuning.scoring import (
    BOTH_NULL,
    CORRECT,
    MISSED,
    SPURIOUS,
    UNSCORED,
    WRONG,
    HeldOutPage,
    ScoringError,
    field_outcome,
    score_pages,
    threshold,
    write_report,
)


# ---------------------------------------------------------------------------------- outcomes
def test_field_outcomes():
    assert field_outcome((3, 4), ((3, 4), 0.9)) == (CORRECT, 0.9)
    assert field_outcome((3, 4), ((4, 3), 0.9)) == (CORRECT, 0.9)  # same words, any order
    assert field_outcome((3, 4), ((3,), 0.8)) == (WRONG, 0.8)  # fewer words is wrong
    assert field_outcome((3, 4), ((3, 4, 5), 0.8)) == (WRONG, 0.8)  # more words too
    assert field_outcome((), None) == (BOTH_NULL, None)
    assert field_outcome((3,), None) == (MISSED, None)
    assert field_outcome((), ((1,), 0.7)) == (SPURIOUS, 0.7)
    assert field_outcome([], (np.array([2]).tolist(), np.float32(0.5))) == (SPURIOUS, 0.5)
    # numpy indices (as an engine returns them) compare equal to Python ints
    assert field_outcome((4, 5), (tuple(np.arange(4, 6)), np.float32(0.25))) == (CORRECT, 0.25)


def test_bad_predictions_are_clear_errors():
    with pytest.raises(ScoringError, match="no words"):
        field_outcome((1,), ((), 0.9))
    with pytest.raises(ScoringError, match=r"not in \[0, 1\]"):
        field_outcome((1,), ((1,), 1.5))
    with pytest.raises(ScoringError, match=r"not in \[0, 1\]"):
        field_outcome((1,), ((1,), float("nan")))
    with pytest.raises(ScoringError, match="appears twice"):
        field_outcome((1, 1), None)
    with pytest.raises(ScoringError, match="not a non-negative integer"):
        field_outcome((-1,), None)
    with pytest.raises(ScoringError, match="word indices, confidence"):
        field_outcome((1,), (1, 2, 3))


# ---------------------------------------------------------------------------------- report
def _pages():
    # fields a, b. Per page the outcome of a and b is in the comment.
    return [
        HeldOutPage("p1", {"a": (0, 1), "b": (5,)}, {"a": ((0, 1), 0.95), "b": ((6,), 0.60)}),  # correct, wrong
        HeldOutPage("p2", {"a": (), "b": ()}, {"a": None, "b": None}),  # both null, both null
        HeldOutPage("p3", {"a": (2,)}, {"a": None, "b": ((7,), 0.40)}),  # missed, spurious (b missing = no value)
        HeldOutPage("p4", {"a": (3,), "b": (9, 10)}, {"a": ((3,), 0.99), "b": ((9, 10), 0.91)},
                    unscored=frozenset({"b"})),  # correct, unscored
        HeldOutPage("p5", {"a": (), "b": (1,)}, {"b": ((1,), 0.88)}),  # both null, correct
    ]


def test_score_report_by_hand():
    report = score_pages(["a", "b"], _pages())
    a, b = report["fields"]["a"], report["fields"]["b"]
    assert [p["outcomes"] for p in report["pages"]] == [
        {"a": CORRECT, "b": WRONG}, {"a": BOTH_NULL, "b": BOTH_NULL}, {"a": MISSED, "b": SPURIOUS},
        {"a": CORRECT, "b": UNSCORED}, {"a": BOTH_NULL, "b": CORRECT}]
    # a: labelled p1 p3 p4 (2 correct); either side p1 p3 p4; scored all 5
    assert (a["n_labelled"], a["n_either"], a["n_scored"], a["n_values"]) == (3, 3, 5, 2)
    assert a["recall"] == 2 / 3 and a["agreement"] == 2 / 3
    assert a["accuracy"] == 4 / 5  # the two both-null pages count as correct here
    assert a["precision_all"] == 1.0 and a["precision"] is None  # no threshold: nothing at it
    # b: labelled p1 p5 (p4 unscored); either side p1 p3 p5; values p1 p3 p5
    assert (b["n_labelled"], b["n_either"], b["n_scored"], b["n_values"]) == (2, 3, 4, 3)
    assert b["recall"] == 1 / 2 and b["agreement"] == 1 / 3  # the spurious value only hurts agreement
    assert b["outcomes"][UNSCORED] == 1
    assert b["confidences"] == [[0.60, False, False], [0.40, False, False], [0.88, True, True]]  # p4 is unscored
    # pooled over fields
    o = report["overall"]
    assert (o["n_labelled"], o["n_either"], o["n_correct"], o["n_values"]) == (5, 6, 3, 5)
    assert o["recall"] == 3 / 5 and o["agreement"] == 3 / 6
    assert report["n_pages"] == 5 and report["share"] == 0.99 and report["min_values"] == 5
    # 5 values overall, 3 right: the share is never reached
    assert report["threshold"] is None
    assert "No LocalFirst threshold" in report["threshold_statement"]
    assert a["threshold"] is None and "2 values" in a["threshold_statement"] and "at least 5" in a["threshold_statement"]
    json.loads(json.dumps(report))


def test_no_denominator_gives_none_not_zero():
    pages = [HeldOutPage("p1", {"a": ()}, {"a": None}), HeldOutPage("p2", {}, {}, unscored={"a"})]
    a = score_pages(["a"], pages)["fields"]["a"]
    assert a["recall"] is None and a["agreement"] is None and a["precision_all"] is None
    assert a["accuracy"] == 1.0 and a["n_scored"] == 1
    empty = score_pages(["a"], [])
    assert empty["overall"]["recall"] is None and empty["overall"]["accuracy"] is None
    assert empty["threshold"] is None and "0 values" in empty["threshold_statement"]


def test_report_errors_name_the_page_and_field():
    with pytest.raises(ScoringError, match=r"page p9: prediction names unknown field\(s\) \['zz'\]"):
        score_pages(["a"], [HeldOutPage("p9", {}, {"zz": None})])
    with pytest.raises(ScoringError, match="page p9: unscored names unknown"):
        score_pages(["a"], [HeldOutPage("p9", {}, {}, unscored={"q"})])
    with pytest.raises(ScoringError, match="page p3, field a: .*no words"):
        score_pages(["a"], [HeldOutPage("p3", {"a": (1,)}, {"a": ((), 0.5)})])
    with pytest.raises(ScoringError, match="appears twice"):
        score_pages(["a"], [HeldOutPage("p1", {}, {}), HeldOutPage("p1", {}, {})])
    with pytest.raises(ScoringError, match="distinct"):
        score_pages(["a", "a"], [])


def test_field_and_overall_thresholds(tmp_path):
    # field a: 6 values, all right -> threshold is its lowest confidence
    # field b: 6 values, the least confident wrong -> threshold above it
    pages = []
    for i in range(6):
        conf_a = 0.50 + 0.05 * i
        conf_b = 0.30 + 0.10 * i
        b_pred = ((1,), conf_b) if i > 0 else ((2,), conf_b)
        pages.append(HeldOutPage(f"p{i}", {"a": (0,), "b": (1,)}, {"a": ((0,), conf_a), "b": b_pred}))
    report = score_pages(["a", "b"], pages)
    assert report["fields"]["a"]["threshold"] == 0.50
    # b above 0.3 has only 5 values (all right): 0.4 qualifies
    assert report["fields"]["b"]["threshold"] == pytest.approx(0.40)
    # pooled: 12 values, 11 right; at >= 0.4 there are 11 values, all right
    assert report["threshold"] == pytest.approx(0.40)
    assert "Suggested LocalFirst threshold 0.4" in report["threshold_statement"]
    write_report(tmp_path / "runs" / "r1" / "report.json", report)
    assert json.loads((tmp_path / "runs" / "r1" / "report.json").read_text()) == json.loads(json.dumps(report))


# ---------------------------------------------------------------------------------- threshold
def test_threshold_needs_min_values():
    assert threshold([(0.9, True)] * 4) is None
    assert threshold([(0.9, True)] * 5) == 0.9
    assert threshold([]) is None
    assert threshold([(0.9, True)] * 3, min_values=3) == 0.9


def test_threshold_exactly_at_share():
    # 99 right and 1 wrong at the bottom: share exactly 0.99 at the lowest confidence qualifies
    pairs = [(0.5 + i / 1000, True) for i in range(99)] + [(0.1, False)]
    assert threshold(pairs) == 0.1
    # 98 right of 99 values is just below 0.99: the wrong value must be left out
    pairs = [(0.5 + i / 1000, True) for i in range(98)] + [(0.1, False)]
    assert threshold(pairs) == 0.5
    # share 0.8: 4 of 5 is exactly 0.8
    assert threshold([(0.9, True)] * 4 + [(0.2, False)], share=0.8) == 0.2
    # share 1.0 allows no mistake
    assert threshold([(0.9, True)] * 5 + [(0.2, False)], share=1.0) == 0.9


def test_threshold_ties_enter_together():
    # at 0.7 there are a right and a wrong value; from 0.7 the share is 5/6 < 0.99
    pairs = [(0.9, True)] * 4 + [(0.7, True), (0.7, False)]
    assert threshold(pairs) is None  # only 4 values above 0.7
    pairs = [(0.9, True)] * 5 + [(0.7, True), (0.7, False)]
    assert threshold(pairs) == 0.9
    # all tied and right: the tie counts as 6 values
    assert threshold([(0.6, True)] * 6) == 0.6


def test_threshold_is_the_lowest_qualifying_even_past_a_dip():
    # from 0.8: 5 right (qualifies); from 0.6: 5 right + 1 wrong (fails);
    # from 0.2: 105 right + 1 wrong -> 105/106 = 0.9906 qualifies again: the lowest wins
    pairs = [(0.9, True)] * 5 + [(0.6, False)] + [(0.2, True)] * 100
    assert threshold(pairs) == 0.2
    assert threshold(pairs, share=0.995) == 0.9


def test_threshold_bad_settings():
    with pytest.raises(ScoringError, match="share"):
        threshold([(0.9, True)] * 5, share=0)
    with pytest.raises(ScoringError, match="share"):
        threshold([(0.9, True)] * 5, share=1.2)
    with pytest.raises(ScoringError, match="min_values"):
        threshold([(0.9, True)] * 5, min_values=0)
    with pytest.raises(ScoringError, match=r"not in \[0, 1\]"):
        threshold([(2.0, True)] * 5)
