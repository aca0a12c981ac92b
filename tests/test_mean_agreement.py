"""The Runs list's "Mean agreement" (dxstudio.tuning.scoring.mean_agreement): the mean over the
fields of the held-out agreement, fields without one left out, None when none has one."""
from __future__ import annotations

import pytest

from dxstudio.tuning.scoring import mean_agreement


def test_the_mean_over_the_fields_that_have_an_agreement():
    scores = {"fields": {"a": {"agreement": 0.5}, "b": {"agreement": 1.0}, "c": {"agreement": None}, "d": {}}}
    assert mean_agreement(scores) == pytest.approx(0.75)
    assert mean_agreement({"fields": {"a": {"agreement": 0.0}}}) == 0.0  # 0 is an agreement, not a missing one


@pytest.mark.parametrize("scores", [None, {}, {"fields": {}}, {"fields": {"a": {"agreement": None}}}])
def test_none_when_no_field_has_an_agreement(scores):
    assert mean_agreement(scores) is None
