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

import os
import stat
import sys
from pathlib import Path

from dxstudio.engine.page import PageError, page_from_dict
from dxstudio.fsutil import MAX_JSON_BYTES, MAX_SOURCE_BYTES, parse_json, read_file_bytes, read_regular_file
from dxstudio.importers import SourceError, document_pages, is_document, pdf_pages
from dxstudio.project import safe_page_id


def _jsonl(stream, name: str):
    """The lines of a stream, each read with a bound: a line longer than a page file may be is
    reported and skipped without being held in memory (the rest of it is read and dropped)."""
    n = 0
    while True:
        line = stream.readline(MAX_JSON_BYTES + 1)
        if not line:
            return
        n += 1
        if len(line) > MAX_JSON_BYTES:  # the cap of a page file holds for a line too
            while line and not line.endswith(b"\n"):
                line = stream.readline(1 << 20)
            yield (f"{name} line {n}", None, f"{name} line {n}: longer than {MAX_JSON_BYTES} bytes")
        elif line.strip():
            yield (f"{name} line {n}", line, None)


def _streamable(path: Path) -> str | None:
    """Why a JSON-lines path is not read ("" when it is): a regular file, or a FIFO (a pipe is
    read as a stream, once); never a device such as /dev/zero, a socket or a folder."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{path}: no such file"
    except OSError as e:
        return f"{path}: cannot read ({e.strerror or e})"
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return ""
    return f"{path}: not a regular file or a pipe (a device, socket or folder is never read)"


def _jsonl_file(path: Path):
    problem = _streamable(path)
    if problem:
        yield (str(path), None, problem)
        return
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


def _pdf(path: Path):
    """The pages of a PDF's text layer as page JSON items, one document (dxstudio.importers
    pdf_pages: ids <stem>-p<n>, "document": <stem>, "page_number": n)."""
    import json

    scans: list = []
    try:
        pages = pdf_pages(path, scans)
    except SourceError as e:
        yield (str(path), None, str(e))
        return
    if scans:  # pages without a text layer: the worker reads the whole file (text layer, else OCR)
        yield _file(path)
        return
    for p in pages:
        yield (f"{path} page {p.number}", json.dumps(p.to_dict()).encode(), None)


def page_items(args, stdin=None):
    """(label, raw bytes or None, error or None) for every page named by `args`, in order. A
    .pdf file gives its pages (read from its text layer), which make one document."""
    for arg in args:
        if arg == "-":
            yield from _jsonl(stdin if stdin is not None else sys.stdin.buffer, "<stdin>")
            continue
        path = Path(arg)
        if path.suffix.lower() == ".pdf" and path.is_file():
            yield from _pdf(path)
            continue
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
    """How many items page_items will give (a cheap pass counting lines), None with stdin or
    any input that is not a regular file (a pipe is read once, as the pages stream in: the
    progress then shows no total)."""
    n = 0
    for arg in args:
        if arg == "-":
            return None
        path = Path(arg)
        if path.suffix.lower() == ".pdf" and path.is_file():
            n += _pdf_page_count(path)
            continue
        files = _listed(path) if path.is_dir() else [path]
        n += 0 if files else 1
        for p in files:
            if p.suffix != ".jsonl":
                n += 1
                continue
            try:
                if not stat.S_ISREG(os.stat(p).st_mode):
                    return None  # counting would consume a pipe, or never end on a device
            except OSError:
                n += 1
                continue
            try:
                with open(p, "rb") as f:
                    n += sum(1 for _, raw, _ in _jsonl(f, str(p)))
            except OSError:
                n += 1
    return n


def _pdf_page_count(path: Path) -> int:
    try:
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument(read_regular_file(path, MAX_SOURCE_BYTES, ValueError))
        try:
            return len(pdf)
        finally:
            pdf.close()
    except Exception:  # an unreadable PDF is one error line
        return 1


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
    stored thresholds or None[, stored keywords as engine/extract.py reading_keywords gives])."""
    from dxstudio.engine.extract import model_decoding, predict_page, prediction_json

    if error is not None:
        return ("error", error)
    cfg, params, thresholds, *rest = model
    keywords = rest[0] if rest else None
    if raw is not None and " line " not in label and _is_document(label, raw):
        if ocr is None:
            return ("error", f"{label}: a PDF or an image; this command reads page JSON "
                             f"(dxstudio extract reads them, or import them first: dxstudio import pdf|images)")
        return _extract_document(cfg, params, thresholds, label, raw, kernels, ocr, keywords)
    try:
        page = load_item(label, raw)
        pred = predict_page(cfg, params, page, kernels, model_decoding(thresholds), keywords)
    except PageError as e:
        return ("error", str(e))
    record = prediction_json(pred, thresholds)
    if page.document is not None:
        record["document"], record["page_number"] = page.document, page.page_number
    return ("ok", record)


def _is_document(label: str, raw: bytes) -> bool:
    return is_document(label) and not raw.lstrip()[:1] in (b"{", b"[")


def _extract_document(cfg, params, thresholds, label, raw, kernels, engine, keywords=None):
    from dxstudio.engine.extract import model_decoding, predict_page, prediction_json

    try:
        pages = document_pages(label, raw, engine)
    except (SourceError, PageError) as e:
        return ("error", str(e))
    records = []
    for page, _, _ in pages:
        try:
            page = page_from_dict(page.to_dict(), f"{label} page {page.id}")  # the page checks
            rec = prediction_json(predict_page(cfg, params, page, kernels, model_decoding(thresholds), keywords),
                                  thresholds)
        except PageError as e:
            return ("error", str(e))
        rec["file"] = label
        if len(pages) > 1:  # a PDF's or a multi-page TIFF's pages: one document (dxstudio.documents)
            rec["document"] = page.document if page.document is not None else _document_id(label)
            rec["page_number"] = page.page_number if page.page_number is not None else len(records) + 1
        if page.ocr is not None:
            rec["ocr"] = dict(page.ocr)
        # the words the indices refer to (a PDF's or an image's words exist nowhere else)
        rec["page"] = {"width": page.width, "height": page.height,
                       "words": [{"text": w.text, "box": list(w.box)} for w in page.words]}
        records.append(rec)
    return ("pages", records)


def extract_chunk(model, chunk, kernels: str, ocr: str | None = None) -> list:
    return [extract_one(model, label, raw, error, kernels, ocr) for label, raw, error in chunk]


def _document_id(label: str) -> str:
    return safe_page_id(Path(label).stem)


class DocumentGroups:
    """Page records (extract_one's) gathered into documents as they stream in, in input order:
    consecutive records naming the same "document" are one document; a record naming none is a
    document of its own. add() and close() return the documents finished, each
    (document id or None, [(record, payload)]). A document's pages must come one after another
    (a PDF's do; in a folder they sort by name): one that comes back after another document,
    or a page number given twice, is said in `problems` ("FILE: ..." lines for stderr): the
    page coming back starts a new document line; a repeated page number is left out."""

    def __init__(self):
        self.current, self.items, self.numbers = None, [], set()
        self.finished: set = set()
        self.problems: list = []

    def add(self, record: dict, payload=None) -> list:
        doc = record.get("document")
        out = []
        if doc is None or doc != self.current:
            out += self.close()
        if doc is None:
            return out + [(None, [(record, payload)])]
        if doc != self.current:
            if doc in self.finished:
                self.problems.append(f"document {doc}: page {record['id']} comes after another document's pages; "
                                     f"its pages are given as a second line (put a document's pages together)")
            self.current = doc
        if record.get("page_number") in self.numbers:
            self.problems.append(f"document {doc}: page number {record.get('page_number')} given twice; "
                                 f"page {record['id']} left out")
            return out
        self.numbers.add(record.get("page_number"))
        self.items.append((record, payload))
        return out

    def close(self) -> list:
        if self.current is None:
            return []
        out = [(self.current, self.items)]
        self.finished.add(self.current)
        self.current, self.items, self.numbers = None, [], set()
        return out
