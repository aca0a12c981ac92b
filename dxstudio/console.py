"""What every command shares: one error path, one JSON style, one progress bar, the exit codes.

Below every package that runs as a command (dxstudio.cli, the screenshot command in
dxstudio.ui.screenshot, the Ray session in dxstudio.scale.cluster), so none of them imports
another to print; dxstudio.cli.common gives the commands these names.

    fail("PATH: what is wrong")          # raises CliError: main prints "dxstudio CMD: ..." and exits 2
    warn("skipped PATH: why")            # one line on stderr, the command goes on
    emit_json({...})                     # one compact JSON object a line on stdout
    with progress(total, "tune") as bar: # a bar on stderr when it is a terminal, else nothing
        bar.show(step)

Standard output carries only JSON lines (a command's result); standard error carries the
messages and the progress bar.
"""
from __future__ import annotations

import json
import sys
from typing import NoReturn

from dxstudio.progress import ProgressBar

OK = 0  # everything asked for was done
PARTIAL = 1  # done, but some inputs failed (each named on stderr)
FAILED = 2  # nothing was done: bad arguments or inputs (the error on stderr)
INTERRUPTED = 130  # stopped by Ctrl-C; a tune run keeps its checkpoint for --resume

EXIT_CODES = (f"exit codes: {OK} done; {PARTIAL} done, but some inputs failed (each named on stderr); "
              f"{FAILED} nothing done (bad arguments or inputs; the error on stderr); "
              f"{INTERRUPTED} interrupted (a tune run keeps its checkpoint for --resume)")

_command = ["dxstudio"]  # the running command's name, for messages


class CliError(Exception):
    """A command that cannot go on; main prints the message (one line) and exits with code."""

    def __init__(self, message: str, code: int = FAILED):
        super().__init__(message)
        self.code = code


def set_command(name: str | None) -> None:
    _command[0] = f"dxstudio {name}" if name else "dxstudio"


def fail(message, code: int = FAILED) -> NoReturn:
    """Stop the command: one line naming the file and the problem, then exit `code`."""
    raise CliError(str(message), code)


def warn(message) -> None:
    """One line on stderr about an input that was skipped or a step that was taken."""
    print(f"{_command[0]}: {message}", file=sys.stderr)


def report_error(error: CliError) -> int:
    print(f"{_command[0]}: {error}", file=sys.stderr)
    return error.code


_results = [None]  # the stream results go to while sys.stdout is lent to stderr (results_stream)


def results_stream(stream) -> None:
    """Send emit_json's lines to `stream` (None: sys.stdout again). A Ray session points
    sys.stdout at stderr, so what Ray prints (its raylet and worker lines) never mixes with
    the results (dxstudio.scale.cluster)."""
    _results[0] = stream


def emit_json(obj) -> None:
    """A command's result on stdout: one compact JSON object, one line."""
    out = _results[0] or sys.stdout
    out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    out.flush()


def progress(total: int = 0, label: str = "", show: bool = True) -> ProgressBar:
    """The progress bar on stderr: drawn only when stderr is a terminal (no escape codes in a
    log) and `show`; open it with `with`, which closes it (the line ends) on any exit."""
    return ProgressBar(total, label, enabled=None if show else False)
