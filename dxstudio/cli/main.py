"""The `dxstudio` command line. With no command it opens the app.

Each command lives in the module named for what it does; this file only routes. A module
named here provides `configure(name, parser)` and `run(name, args) -> int` and imports its
heavy parts (the engine, Qt) inside `run`, so `dxstudio --help` stays quick. Errors, JSON
output and progress go through dxstudio.cli.common (fail, emit_json, progress); the exit
codes are listed there and in every --help.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from dxstudio import __version__
from dxstudio.cli.common import EXIT_CODES, FAILED, CliError, report_error, set_command

# (command, module, one-line help)
COMMANDS = [
    ("sample", "dxstudio.cli.sample", "copy the bundled sample project to a folder and print where it is"),
    ("schema", "dxstudio.cli.sample", "show, set or add to a project's fields (--field NAME[:DESCRIPTION])"),
    ("new-model", "dxstudio.cli.model", "write a new docextract-v0 model from a seed"),
    ("extract", "dxstudio.cli.model", "extract fields from page JSON files, one JSON line per page"),
    ("route", "dxstudio.cli.route", "LocalFirst: values at or above the threshold locally, the rest from the labelling model"),
    ("import", "dxstudio.cli.project", "import pages (json, funsd, sroie, cord, pdf, images) into a project"),
    ("label", "dxstudio.cli.project", "ask the labelling model for every page's fields"),
    ("tune", "dxstudio.cli.tune", "fine-tune a model on a project's labels"),
    ("eval", "dxstudio.cli.tune", "score a model on a project's held-out pages"),
    ("pretrain", "dxstudio.cli.pretrain", "train the base model on a corpus of labelled documents"),
    ("screenshot", "dxstudio.ui.screenshot", "render a screen of the app to a PNG, offscreen"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dxstudio", usage="dxstudio [PROJECT] | dxstudio COMMAND ...",
        description="Local document extraction models from a labelling model's answers. "
                    "With no command, opens the app on PROJECT (default: the bundled sample).",
        epilog=EXIT_CODES)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog="dxstudio")
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES)
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # a part not installed should not break the other commands
            p.set_defaults(_missing=str(e))
            continue
        mod.configure(name, p)
        p.set_defaults(_module=mod)
    parser.add_argument("--version", action="version", version=f"dxstudio {__version__}")
    return parser


def _has_display() -> bool:
    import os

    if os.environ.get("QT_QPA_PLATFORM"):  # offscreen, vnc, ...: the user chose a platform
        return True
    if sys.platform != "linux":
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _is_path(arg: str) -> bool:
    """`dxstudio PROJECT` opens the app: an argument that names an existing file or folder, or
    looks like a path (a separator in it), is a project, anything else a command."""
    import os

    return os.path.exists(arg) or os.sep in arg or (os.altsep or os.sep) in arg


def _unknown(word: str, commands) -> int:
    import difflib

    near = difflib.get_close_matches(word, commands, n=1, cutoff=0.6)
    hint = f"did you mean `dxstudio {near[0]}`? " if near else ""
    print(f"dxstudio: unknown command {word!r}, and no project folder by that name; {hint}"
          f"(dxstudio --help lists the commands)", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = {c[0] for c in COMMANDS}
    if argv and argv[0] not in names and not argv[0].startswith("-") and not _is_path(argv[0]):
        return _unknown(argv[0], [c[0] for c in COMMANDS])
    if not argv or (argv[0] not in names and not argv[0].startswith("-")):
        # `dxstudio [PROJECT]` opens the app
        if not _has_display():
            print("dxstudio: no display to open the app on (DISPLAY and WAYLAND_DISPLAY are unset).\n"
                  "Run it on a desktop, under Xvfb (xvfb-run dxstudio), or use the headless commands:\n"
                  "  dxstudio tune PROJECT, dxstudio extract MODEL PAGE.json, "
                  "dxstudio screenshot PROJECT OUT.png --screen review (see dxstudio --help)", file=sys.stderr)
            return 2
        from dxstudio.ui.app import run_app
        return run_app(argv[0] if argv else None)
    parser = build_parser()
    args = parser.parse_args(argv)  # bad arguments: argparse says why and exits 2
    set_command(args.command)
    try:
        if getattr(args, "_missing", None):
            raise CliError(f"not available ({args._missing})", FAILED)
        return int(args._module.run(args.command, args) or 0)
    except CliError as e:
        return report_error(e)
    finally:
        set_command(None)


if __name__ == "__main__":
    sys.exit(main())
