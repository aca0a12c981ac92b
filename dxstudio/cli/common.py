"""The commands' shared error path, JSON lines, progress bar and exit codes: dxstudio/console.py
(a module below the command line, so the app's screenshot command and the Ray session use it
without importing dxstudio.cli)."""
from dxstudio.console import (  # noqa: F401
    EXIT_CODES, FAILED, INTERRUPTED, OK, PARTIAL, CliError, emit_json, fail, progress, report_error,
    results_stream, set_command, warn,
)
