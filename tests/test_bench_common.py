"""bench/common.py's interleaving: every contestant gets its turns, and calls per turn."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402


def test_interleaved_turns_and_calls_per_turn():
    order = []
    contestants = {name: (lambda name=name: order.append(name)) for name in "abc"}
    times = C.interleaved(contestants, 4, calls=3)
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}  # one time per turn
    assert len(order) == 4 * 3 * 3
    turns = [order[i] for i in range(0, len(order), 3)]
    assert all(order[i:i + 3] == [order[i]] * 3 for i in range(0, len(order), 3))  # calls in a row
    assert turns[:6] == ["a", "b", "c", "b", "c", "a"]  # the order turns by one each round
    assert all(t >= 0 for v in times.values() for t in v)
