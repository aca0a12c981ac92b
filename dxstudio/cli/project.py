"""`dxstudio import FORMAT SRC PROJECT [--ocr ENGINE] [--workers N | --ray ADDRESS]` and `dxstudio label PROJECT [--jsonl FILE] [--limit N]`.

A JSON summary goes to stdout (one line), one line per bad file to stderr, a progress bar to
stderr when it is a terminal. Exit code: 0 all went well, 1 some files failed, 2 nothing could
be done.
"""
from __future__ import annotations

from pathlib import Path

from dxstudio.cli.common import FAILED, OK, PARTIAL, emit_json, fail, progress, warn
from dxstudio.cli.model import open_backend
from dxstudio.cli.sample import merge_fields, read_schema_file
from dxstudio.fsutil import DiskFullError
from dxstudio.importers import (FORMATS, OcrOptions, SourceError, import_pages)  # light: the importers' own imports are the standard library
from dxstudio.labelling import LabelClient, LabellingError, import_answers_jsonl, label_project
from dxstudio.ocr import ocr_chunk
from dxstudio.project import LabelError, PROJECT_FILE, Project, ProjectError
from dxstudio.scale import ScaleError
from dxstudio.scale.ordered import ordered_map


def configure(name: str, parser) -> None:
    if name == "import":
        parser.add_argument("format", choices=FORMATS, metavar="FORMAT", help=f"one of {', '.join(FORMATS)}")
        parser.add_argument("src", help="source file or folder")
        parser.add_argument("project", help="project folder (created if needed)")
        parser.add_argument("--name", help="project name when creating it (default: the folder name)")
        parser.add_argument("--schema", metavar="FILE", help='the fields to extract, from a JSON file: a list of '
                            'names or {"name", "description", "weight"} (or a dxproject.json); added to the '
                            "project's (dxstudio schema sets them later)")
        parser.add_argument("--ocr", choices=("rapidocr", "tesseract"), default="rapidocr", metavar="ENGINE",
                            help="images, and PDF pages without a text layer: the OCR engine, rapidocr "
                                 "(default) or tesseract (docs/ocr.md); needs the ocr extra: "
                                 'pip install "dxstudio[ocr]"')
        parser.add_argument("--workers", type=int, metavar="N", help="OCR on N local worker processes "
                            "(with --ray local: the CPUs of the Ray instance started here); the same pages")
        parser.add_argument("--ray", metavar="ADDRESS", help="OCR as tasks on the Ray cluster at ADDRESS "
                            "(host:port, ray://host:port, auto), or 'local' to start one on this machine")
        parser.add_argument("--chunk", type=int, default=1, metavar="FILES", help="image files per OCR task (default 1)")
    elif name == "label":
        parser.add_argument("project", help="project folder")
        parser.add_argument("--jsonl", metavar="FILE", help="import answers from a JSONL file instead of asking the model")
        parser.add_argument("--limit", type=int, metavar="N", help="ask for at most N pages")
        parser.add_argument("--force", action="store_true", help="ask again for pages that already have answers")
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer (default 60)")
        parser.add_argument("--retries", type=int, default=3, help="tries after the first on timeouts, 429, 5xx (default 3)")


def _emit(summary: dict, errors) -> None:
    for where, message in errors:
        warn(message if str(where) in message else f"{where}: {message}")
    emit_json(summary)


def _run_import(args) -> int:
    root = Path(args.project)
    root_existed, is_new = root.exists(), not (root / PROJECT_FILE).exists()
    if is_new and not Path(args.src).exists():  # said before anything is created
        fail(f"{args.src}: no such file or folder")
    fields = None
    if args.schema:
        fields = read_schema_file(args.schema)  # before anything is created
    try:
        project = Project.open_or_create(root, args.name)
    except (ProjectError, OSError) as e:
        fail(e)

    ocr, close = OcrOptions(args.ocr), (lambda: None)
    if args.format in ("images", "pdf") and (args.workers or args.ray):
        ocr, close = _ocr_backend(args)
    try:
        with progress(label=f"import {args.format}") as bar:
            report = import_pages(args.format, args.src, project, progress=bar, ocr=ocr)
    except ScaleError as e:
        if is_new:
            project.discard_new(root_existed)
        fail(e)
    except (SourceError, ProjectError, OSError) as e:
        if is_new:  # a project made for this import only: leave nothing behind
            project.discard_new(root_existed)
        fail(e)
    finally:
        close()
    if not (report.added or report.unchanged):  # nothing imported: a new project is not left behind
        if is_new:
            project.discard_new(root_existed)
        if not report.errors:
            fail(f"{args.src}: no {args.format} pages found there; nothing imported"
                 + ("" if not is_new else f" and no project made at {root}"))
    elif fields:
        try:
            merge_fields(project, fields, replace=False)
            project.save()
        except (ProjectError, OSError) as e:
            fail(f"{args.schema}: {e}")
    summary = report.to_dict()
    summary["project"] = str(project.root)
    summary["pages_in_project"] = len(project.page_ids())
    _emit({k: v for k, v in summary.items() if k != "errors"} | {"failed": len(report.errors)}, report.errors)
    if report.errors:
        return FAILED if not (report.added or report.unchanged) else PARTIAL
    return OK


def _ocr_backend(args):
    """OcrOptions whose map runs dxstudio.ocr.ocr_chunk on --workers processes or --ray tasks
    (the results in file order: the same pages as one process), and the closer."""
    backend, close = open_backend(args, ocr_chunk, args.ocr)
    state = {"entered": False}

    def run(batches):
        if not state["entered"]:
            backend.__enter__()
            state["entered"] = True
        yield from ordered_map(backend, batches, with_chunks=True)

    def closer():
        if state["entered"]:
            backend.__exit__(None, None, None)
        close()

    return OcrOptions(args.ocr, run, args.chunk), closer


def _run_label(args) -> int:
    try:
        project = Project.open(args.project)
        if not project.page_ids():
            raise ProjectError(f"{project.root}: the project has no pages; import some first")
        if args.jsonl:
            report = import_answers_jsonl(project, args.jsonl)
        else:
            client = LabelClient.from_project(project, timeout=args.timeout, retries=args.retries)
            with progress(label="label") as bar:
                report = label_project(project, client, limit=args.limit, progress=bar, force=args.force)
    except (ProjectError, LabelError, LabellingError, DiskFullError) as e:
        fail(e)
    summary = report.to_dict()
    summary.pop("errors")
    summary["failed"] = len(report.errors)
    summary["project"] = str(project.root)
    _emit(summary, report.errors)
    if report.stopped:
        warn(report.stopped)
    if report.errors or report.stopped:
        return FAILED if not report.labelled else PARTIAL
    return OK


def run(name: str, args) -> int:
    if name == "import":
        return _run_import(args)
    if name == "label":
        return _run_label(args)
    fail(f"dxstudio.cli.project does not handle {name!r}")
