"""The pages of an extract or route command line, and the work on one page.

A PAGES argument is a page JSON file, a folder (its *.json and *.jsonl files, by name), a
JSON-lines file (*.jsonl: one page object a line) or `-` (JSON lines on standard input). They
are read lazily, in order, as (label, raw bytes, error) items: the label names the file (and
the line), so a bad page is reported as `FILE: what is wrong` or `FILE line N: ...` and the
rest goes on. The driver reads the bytes; the workers parse and predict, so a cluster node
needs no access to the driver's files.
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
            files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
            if not files:
                yield (str(path), None, f"{path}: the folder holds no .json or .jsonl pages")
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
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file()) \
            if path.is_dir() else [path]
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


def extract_one(model, label: str, raw, error, kernels: str):
    """("ok", prediction record) or ("error", one line naming the page). `model` is
    (cfg, runtime params, stored thresholds or None)."""
    from dxstudio.engine.extract import model_decoding, predict_page, prediction_json

    if error is not None:
        return ("error", error)
    cfg, params, thresholds = model
    try:
        pred = predict_page(cfg, params, load_item(label, raw), kernels, model_decoding(thresholds))
    except PageError as e:
        return ("error", str(e))
    return ("ok", prediction_json(pred, thresholds))


def extract_chunk(model, chunk, kernels: str) -> list:
    return [extract_one(model, label, raw, error, kernels) for label, raw, error in chunk]
