"""bench/step_parts.py: the timer wraps each section on its module and puts the original back,
the parts it reports add up within the step, and a wrapped call returns (and raises) as the
function does."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import step_parts as SP  # noqa: E402


def test_wrap_passes_results_and_errors_through_and_counts_time():
    spent = defaultdict(float)
    ticks = iter([1.0, 3.5, 10.0, 10.25])
    timed = SP._wrap(lambda a, b=0: a + b, "part", spent, lambda: next(ticks))
    assert timed(2, b=3) == 5
    assert spent["part"] == 2.5

    def boom():
        raise KeyError("x")

    with pytest.raises(KeyError):
        SP._wrap(boom, "part", spent, lambda: next(ticks))()
    assert spent["part"] == 2.75  # the time of a call that raised is counted too


def test_step_parts_restores_the_modules_and_parts_fit_in_the_step(capsys):
    # a FUNSD form cut to 24 words, or a synthetic page without the data: either serves
    before = [getattr(mod, name) for mod, name, _ in SP.PARTS]
    assert SP.main(["--sizes", "24", "--repeats", "2"]) == 0
    assert [getattr(mod, name) for mod, name, _ in SP.PARTS] == before  # nothing left wrapped
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    parts = figures["parts_24"]
    assert set(parts) >= {part for _, _, part in SP.PARTS}
    assert all(v >= 0 for v in parts.values())
    sections = [v for k, v in parts.items() if k.startswith("backward: ") and "apart" not in k]
    # the sections run inside the whole backward (mean per step) and it inside the step
    assert sum(sections) <= parts["backward (whole)"] * 1.05 + 0.05
    assert parts["forward (whole)"] + parts["backward (whole)"] <= 1.5 * figures["step_ms_24"] + 0.5
    assert parts["forward: blocks"] > 0 and parts["backward: blocks"] > 0
