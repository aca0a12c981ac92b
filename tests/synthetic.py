"""Synthetic model inputs for the engine tests (and tests/cpu_subprocess_check.py): the engine's
own random window (dxstudio.engine.readiness.random_window, which warms the kernels), so the
tests and the warm-up feed the kernels the same types."""
from __future__ import annotations

from dxstudio.engine.readiness import random_window as fake_window

__all__ = ["fake_window"]
