"""A terminal progress bar on standard error (quiet when stderr is not a terminal, unless forced).

Two ways to drive it: `update(step)` from a loop that counts, or call it as `bar(done, total)`,
the progress callback the importers and the labelling client take.
"""
from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, total: int = 0, label: str = "", stream=None, enabled: bool | None = None, width: int = 30):
        self.total = max(int(total), 0)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.done = 0
        self.start = time.monotonic()
        self._last = 0.0
        self._shown = False
        self.suffix = ""

    def update(self, step: int = 1, suffix: str | None = None) -> None:
        self.show(self.done + step, suffix=suffix)

    def show(self, done: int, total: int | None = None, suffix: str | None = None) -> None:
        """Set the count (and the total) and redraw, at most ten times a second and at the end."""
        if total is not None:
            self.total = max(int(total), 0)
        self.done = min(done, self.total) if self.total else done
        if suffix is not None:
            self.suffix = suffix
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done >= self.total):
            self._last = now
            self._draw(now)

    def __call__(self, done: int, total: int) -> None:
        self.show(done, total)

    def _draw(self, now: float) -> None:
        frac = self.done / self.total if self.total else 1.0
        filled = int(round(frac * self.width))
        elapsed = now - self.start
        left = (elapsed / self.done * (self.total - self.done)) if self.done else 0.0
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s, {left:5.1f}s left {self.suffix}\x1b[K")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
