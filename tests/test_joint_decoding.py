"""The joint decoding (engine/extract.py decode_joint, docs/model.md "Span decoding"): at most
one span per field, no word in two fields, the best summed score over every such assignment.
Hand-made tag logits: no model, no training."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dxstudio.engine import extract
from dxstudio.engine.extract import decode_joint, decode_spans, fields_from_logits
from tests.test_span_decoding import B, I, logits_for, page_of  # the span tests' hand-made logits


def span_score(lg, c, a, b):
    l = np.asarray(lg, np.float64)
    return float(l[a, B(c)] - l[a, 0]) + sum(float(l[j, I(c)] - l[j, 0]) for j in range(a + 1, b + 1))


def brute_force(lg, n_fields, starts=(0,)):
    """The best summed score over every assignment (each field: no span or any span a..b that
    crosses no window start), words disjoint."""
    n = len(lg)
    options = []
    for c in range(n_fields):
        opts = [None] + [(a, b) for a in range(n) for b in range(a, n)
                         if not any(a < s <= b for s in starts)]
        options.append(opts)
    best = 0.0
    for combo in itertools.product(*options):
        used, total, ok = set(), 0.0, True
        for c, ab in enumerate(combo):
            if ab is None:
                continue
            words = set(range(ab[0], ab[1] + 1))
            if words & used:
                ok = False
                break
            used |= words
            total += span_score(lg, c, *ab)
        if ok:
            best = max(best, total)
    return best


def test_a_long_value_gives_up_words_another_field_scores_more_on():
    # the address (field 1) likes words 0-5 and scores most; the company (field 0) likes 0-1,
    # where the address is weak: in turn the address takes all and the company nothing
    rows = [{B(0): 4.0, B(1): 0.5}, {I(0): 4.0, I(1): 0.5}, {I(1): 6.0, B(1): 5.0}, {I(1): 6.0}, {I(1): 6.0}, {I(1): 6.0}]
    lg = logits_for(rows, 2)
    assert decode_spans(lg, 2) == {1: (25.0, 0, 5)}
    got = decode_joint(lg, 2)
    assert got == {0: (8.0, 0, 1), 1: (23.0, 2, 5)}  # 31 > 25
    values = fields_from_logits(page_of(6), ["company", "address"], lg, joint=True)
    assert values["company"].words == (0, 1) and values["address"].words == (2, 3, 4, 5)


def test_it_agrees_with_the_fields_in_turn_when_they_do_not_compete():
    rows = [{}, {B(0): 6.0}, {I(0): 5.0}, {}, {B(1): 7.0}, {}]
    lg = logits_for(rows, 2)
    assert decode_joint(lg, 2) == decode_spans(lg, 2)
    assert decode_joint(logits_for([{}] * 4, 2), 2) == {}  # all O: no value
    assert decode_joint(logits_for([{B(0): 0.0}], 1), 1) == {}  # a score of 0 is not above none


def test_it_is_the_best_assignment_over_every_one_random_pages():
    rng = np.random.default_rng(11)
    for trial in range(40):
        n, k = int(rng.integers(1, 7)), int(rng.integers(1, 4))
        lg = rng.normal(-0.5, 2.5, (n, 1 + 2 * k)).astype(np.float32)
        starts = (0,) if trial % 3 else (0, max(1, n // 2))
        got = decode_joint(lg, k, starts)
        taken = []
        for c, (score, a, b) in got.items():
            assert score == span_score(lg, c, a, b) and score > 0
            assert not any(a < s <= b for s in starts)  # never across a window's edge
            taken += range(a, b + 1)
        assert len(taken) == len(set(taken))
        total = sum(v[0] for v in got.values())
        assert total == pytest.approx(brute_force(lg, k, starts), abs=1e-9)
        greedy = sum(v[0] for v in decode_spans(lg, k, starts).values())
        assert total >= greedy - 1e-9


def test_equal_assignments_prefer_fewer_fields_and_a_new_span_to_an_extension():
    # field 0 and field 1 equally like word 0: the lower field takes it
    assert decode_joint(logits_for([{B(0): 2.0, B(1): 2.0}], 2), 2) == {0: (2.0, 0, 0)}
    # B at word 1 as good as I: a span starts anew (ties as decode_spans)
    rows = [{B(0): 2.0}, {B(0): 5.0, I(0): 3.0}]  # extending: 2 + 3 = 5, starting anew: 5
    assert decode_joint(logits_for(rows, 1), 1) == decode_spans(logits_for(rows, 1), 1) == {0: (5.0, 1, 1)}


def test_bad_input_and_large_schemas():
    with pytest.raises(ValueError, match="do not fit 2 fields"):
        decode_joint(np.zeros((3, 3), np.float32), 2)
    bad = np.zeros((2, 3), np.float32)
    bad[1, 1] = np.inf
    with pytest.raises(ValueError, match="finite"):
        decode_joint(bad, 1)
    # above JOINT_MAX_FIELDS the fields take their spans in turn
    k = extract.JOINT_MAX_FIELDS + 1
    rng = np.random.default_rng(2)
    lg = rng.normal(0, 3, (8, 1 + 2 * k)).astype(np.float32)
    assert decode_joint(lg, k) == decode_spans(lg, k)
    assert decode_joint(np.zeros((0, 3), np.float32), 1) == {}
