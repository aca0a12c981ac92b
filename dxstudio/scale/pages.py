"""The pages of an extract or route command line, and the work on one page.

A PAGES argument is a page JSON file, a folder (its *.json and *.jsonl files, by name), a
JSON-lines file (*.jsonl: one page object a line) or `-` (JSON lines on standard input). They
are read lazily, in order, as (label, raw bytes, error) items: the label names the file (and
the line), so a bad page is reported as `FILE: what is wrong` or `FILE line N: ...` and the
rest goes on. The driver reads the bytes; the workers parse and predict, so a cluster node
needs no access to the driver's files. A PDF or an image (dxstudio.importers.DOCUMENT_SUFFIXES)
is read by the worker too (text layer, else OCR: dxstudio.ocr) when the command asks for it
(extract's `ocr` engine): its pages come back together, as ("pages", [records]).
"""
from __future__ import annotations

import sys
from pathlib import Path

from dxstudio.engine.page import PageError, page_from_dict
from dxstudio.fsutil import MAX_JSON_BYTES, parse_json, read_file_bytes


def _jsonl(stream, name: str):
    for n, line in enumerate(stream, 1):
        if len(line) > MAX_JSON_BYTES:  # the cap of a page file holds for a line too
            yield (f"{name} line {n}", None, f"{name} line {n}: longer than {MAX_JSON_BYTES} bytes")
        elif line.strip():
            yield (f"{name} line {n}", line, None)


def _jsonl_file(path: Path):
    try:
        with open(path, "rb") as f:
            yield from _jsonl(f, str(path))
    except OSError as e:
        yield (str(path), None, f"{path}: cannot read ({e.strerror or e})")


_LISTED = (".json", ".jsonl", ".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def _listed(path: Path) -> list:
    """The page files of a folder, by name: page JSON, JSON lines, PDFs and images."""
    return sorted(p for p in path.iterdir() if p.suffix.lower() in _LISTED and p.is_file())


def _file(path: Path):
    try:
        return (str(path), read_file_bytes(path, PageError), None)
    except PageError as e:
        return (str(path), None, str(e))


def page_items(args, stdin=None):
    """(label, raw bytes or None, error or None) for every page named by `args`, in order."""
    for arg in args:
        if arg == "-":
            yield from _jsonl(stdin if stdin is not None else sys.stdin.buffer, "<stdin>")
            continue
        path = Path(arg)
        if path.is_dir():
            files = _listed(path)
            if not files:
                yield (str(path), None, f"{path}: the folder holds no .json or .jsonl pages, PDFs or images")
            for p in files:
                if p.suffix == ".jsonl":
                    yield from _jsonl_file(p)
                else:
                    yield _file(p)
        elif path.suffix == ".jsonl":
            yield from _jsonl_file(path)
        else:
            yield _file(path)


def count_pages(args) -> int | None:
    """How many items page_items will give (a cheap pass counting lines), None with stdin."""
    n = 0
    for arg in args:
        if arg == "-":
            return None
        path = Path(arg)
        files = _listed(path) if path.is_dir() else [path]
        n += 0 if files else 1
        for p in files:
            if p.suffix != ".jsonl":
                n += 1
                continue
            try:
                with open(p, "rb") as f:
                    n += sum(1 for line in f if line.strip())
            except OSError:
                n += 1
    return n


def chunks(items, size: int):
    """Lists of `size` consecutive items (the last one shorter)."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def load_item(label: str, raw: bytes):
    """The Page in `raw`; PageError naming `label` when it is not a valid page."""
    return page_from_dict(parse_json(raw, label, PageError), label)


def extract_one(model, label: str, raw, error, kernels: str, ocr: str | None = None):
    """("ok", prediction record), ("pages", [records]) for a PDF or an image when `ocr` names
    the engine, or ("error", one line naming the page). `model` is (cfg, runtime params,
    stored thresholds or None)."""
    from dxstudio.engine.extract import predict_page, prediction_json

    if error is not None:
        return ("error", error)
    cfg, params, thresholds = model
    if raw is not None and " line " not in label and _is_document(label, raw):
        if ocr is None:
            return ("error", f"{label}: a PDF or an image; this command reads page JSON "
                             f"(dxstudio extract reads them, or import them first: dxstudio import pdf|images)")
        return _extract_document(cfg, params, thresholds, label, raw, kernels, ocr)
    try:
        pred = predict_page(cfg, params, load_item(label, raw), kernels)
    except PageError as e:
        return ("error", str(e))
    return ("ok", prediction_json(pred, thresholds))


def _is_document(label: str, raw: bytes) -> bool:
    from dxstudio.importers import is_document

    return is_document(label) and not raw.lstrip()[:1] in (b"{", b"[")


def _extract_document(cfg, params, thresholds, label, raw, kernels, engine):
    from dxstudio.engine.extract import predict_page, prediction_json
    from dxstudio.importers import SourceError, document_pages

    try:
        pages = document_pages(label, raw, engine)
    except (SourceError, PageError) as e:
        return ("error", str(e))
    records = []
    for page, _, _ in pages:
        try:
            page = page_from_dict(page.to_dict(), f"{label} page {page.id}")  # the page checks
            rec = prediction_json(predict_page(cfg, params, page, kernels), thresholds)
        except PageError as e:
            return ("error", str(e))
        rec["file"] = label
        if page.ocr is not None:
            rec["ocr"] = dict(page.ocr)
        # the words the indices refer to (a PDF's or an image's words exist nowhere else)
        rec["page"] = {"width": page.width, "height": page.height,
                       "words": [{"text": w.text, "box": list(w.box)} for w in page.words]}
        records.append(rec)
    return ("pages", records)


def extract_chunk(model, chunk, kernels: str, ocr: str | None = None) -> list:
    return [extract_one(model, label, raw, error, kernels, ocr) for label, raw, error in chunk]
