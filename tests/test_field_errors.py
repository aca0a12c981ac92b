"""bench/field_errors.py: the finer outcome of a field on a page (why a model loses it)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location("field_errors", Path(__file__).resolve().parents[1] / "bench" / "field_errors.py")
fe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fe)


def test_outcomes_split_wrong_values_by_how_they_are_wrong():
    assert fe.classify((), None) == "both absent"
    assert fe.classify((), (3,)) == "spurious"
    assert fe.classify((1, 2), None) == "missed"
    assert fe.classify((1, 2), (2, 1)) == "right"
    assert fe.classify((1, 2, 3), (1, 2)) == "cut short"
    assert fe.classify((1, 2), (1, 2, 3)) == "run on"
    assert fe.classify((1, 2), (2, 3)) == "overlap"
    assert fe.classify((1, 2), (7,)) == "other"


def test_span_scores_are_the_decoders_margins_over_o():
    lg = np.zeros((4, 3), np.float32)
    lg[1, 1], lg[2, 2], lg[3, 2] = 2.0, -1.0, -5.0  # B at 1, I at 2 weakly, I at 3 clearly not
    assert fe.span_score(lg, 0, 1, 2) == 1.0
    assert fe.best_unblocked(lg, 0, frozenset({0})) == (2.0, 1, 1)
    lg[:, 0] = 10.0  # O everywhere far above: the best span is still named, with its negative score
    best = fe.best_unblocked(lg, 0, frozenset({0}))
    assert best[0] < 0 and best[1] == best[2]
