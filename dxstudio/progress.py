"""A terminal progress bar on standard error (quiet when stderr is not a terminal, unless forced;
forced onto a stream that is not a terminal, it writes plain lines, never escape codes).
The command line opens it through dxstudio.console.progress (dxstudio.cli.common gives it the commands).

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
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or odd stream
            self.tty = False
        self.enabled = self.tty if enabled is None else enabled
        self.width = width
        self.done = 0
        self.start = time.monotonic()
        self._last = 0.0
        self._shown = False
        self._closed = False
        self._last_drawn = None
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
        every = 0.1 if self.tty else 5.0  # a log gets a line every few seconds, not ten a second
        if self.enabled and (now - self._last > every or self.done >= self.total):
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
        text = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s, {left:5.1f}s left {self.suffix}"
        if self.tty:  # redraw in place, clearing the rest of the line
            self.stream.write(f"\r{text}\x1b[K")
        else:
            self.stream.write(text.rstrip() + "\n")
        self.stream.flush()
        self._shown = True
        self._last_drawn = self.done

    def close(self) -> None:
        if self._shown and not self._closed:
            self._closed = True
            if self.tty:
                self._draw(time.monotonic())
                self.stream.write("\n")
            elif self._last_drawn != self.done:
                self._draw(time.monotonic())
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
