"""Grounding stays near-linear on long pages (issue 9 item 10) and gives the same answers as
the quadratic scan it replaced."""
from __future__ import annotations

import random
import time
from decimal import Decimal

from dxstudio.engine.page import Page, Word
from dxstudio.grounding import _computed_from, _consecutive_sum, ground_answers, ground_value


def _amount_page(n: int, seed: int = 1) -> Page:
    rng = random.Random(seed)
    words = tuple(Word(f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}", (0, 0, 10, 10)) for _ in range(n))
    return Page("p", 100, 100, words)


def test_a_20000_word_page_of_amounts_against_an_absent_value_is_quick():
    page = _amount_page(20000)
    t0 = time.process_time()
    g = ground_value(page, "123456789.01")
    seconds = time.process_time() - t0  # CPU seconds: a loaded machine cannot fail it
    assert g.status == "absent"
    assert seconds < 8.0, f"{seconds:.1f} s of CPU"  # 33 to 40 s with the quadratic scan, about 1 s now


def test_many_equal_values_stay_quick():
    page = Page("p", 100, 100, tuple(Word("1.00", (0, 0, 10, 10)) for _ in range(20000)))
    t0 = time.process_time()
    out = ground_answers(page, {"total": "1.00", "tax": "1.00", "cash": "2.00"}, ["total", "tax", "cash"])
    assert time.process_time() - t0 < 8.0
    assert sorted([out["total"]["words"], out["tax"]["words"]]) == [[19998], [19999]]
    assert out["cash"]["status"] == "computed"


def _quadratic(amounts, v):
    for i in range(len(amounts)):
        total = amounts[i]
        for j in range(i + 1, len(amounts)):
            total += amounts[j]
            if total == v:
                return i, j
    return None


def _amount(rng):
    return Decimal(rng.choice([0, 0, 1, 2, 5, 10, 150, 2999, rng.randint(0, 3000)])).scaleb(-rng.choice([0, 1, 2]))


def test_consecutive_sum_matches_the_quadratic_scan():
    rng = random.Random(9)
    found = 0
    for _ in range(2000):
        amounts = [_amount(rng) for _ in range(rng.randint(0, 30))]
        v = _amount(rng)
        assert _consecutive_sum(amounts, v) == _quadratic(amounts, v), (amounts, v)
        if len(amounts) >= 2:  # a value that is such a sum, so the found case is exercised
            i = rng.randrange(len(amounts) - 1)
            w = sum(amounts[i:i + rng.randint(2, 5)], Decimal(0))
            assert _consecutive_sum(amounts, w) == _quadratic(amounts, w), (amounts, w)
            found += _consecutive_sum(amounts, w) is not None
    assert found > 1000


def test_computed_reason_unchanged():
    nums = [Decimal(x) for x in ("10.00", "2.50", "7.50", "3")]
    assert _computed_from(nums, nums, Decimal("12.50")) == "10 + 2.5"
    assert _computed_from(nums, nums, Decimal("22.5")) == "7.5 x 3"
    assert _computed_from(nums[:3], nums[:3], Decimal("20")) == "the sum of 3 consecutive amounts from 10 to 7.5"


def _find_runs_quadratic(keys, target, joiner):
    runs = []
    if not target:
        return runs
    n = len(keys)
    for i in range(n):
        if not keys[i] or not target.startswith(keys[i]):
            continue
        acc = keys[i]
        j = i
        while True:
            if acc == target:
                runs.append((i, j))
                break
            j += 1
            if j >= n:
                break
            if not keys[j]:
                continue
            nxt = acc + joiner + keys[j] if joiner else acc + keys[j]
            if not target.startswith(nxt):
                break
            acc = nxt
    return runs


KEYS = ["", "a", "b", "ab", "a b", "1", "1.5", "15", " "]


def test_find_runs_matches_the_quadratic_scan():
    from dxstudio.grounding import _find_runs

    rng = random.Random(4)
    found = 0
    for _ in range(5000):
        keys = [rng.choice(KEYS) for _ in range(rng.randint(0, 12))]
        joiner = rng.choice(["", " "])
        if keys and rng.random() < 0.5:  # a value taken from the page, so runs exist
            i = rng.randrange(len(keys))
            value = keys[i:i + rng.randint(1, 4)]
        else:
            value = [rng.choice(KEYS) for _ in range(rng.randint(1, 4))]
        target = joiner.join(k for k in value if k)
        runs = _find_runs(keys, target, joiner)
        assert runs == _find_runs_quadratic(keys, target, joiner), (keys, target, joiner)
        found += bool(runs)
    assert found > 1000


def test_a_long_repeated_value_on_a_long_page_is_quick():
    page = Page("p", 100, 100, tuple(Word("1.00", (0, 0, 10, 10)) for _ in range(20000)))
    t0 = time.process_time()
    g = ground_value(page, " ".join(["1.00"] * 2000))
    assert g.status == "exact" and len(g.words) == 2000
    assert time.process_time() - t0 < 8.0
