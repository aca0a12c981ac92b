"""Bounds on reading and rendering a PDF nobody vouches for (docs/security.md, "PDFs").

    pdf = open_pdf(path, data, SourceError)           # inflate bombs refused, zero pages named
    budget = PdfBudget(path, SourceError)             # one per file
    scale = budget.render_scale(k, width, height, dpi) # before rendering page k: pixels and time
    budget.check_time(k)                              # between pages of any other work

Every refusal raises `error` (SourceError for the importers) with one line naming the file,
the page where there is one, and the limit. pdfium itself cannot be stopped mid-call, so the
bounds are checked before each call that could be large: the inflated size of every
Flate-compressed stream before the document is opened (a 1 MB stream that inflates to 1 GB
is refused, not handed to pdfium), a page's pixels before it is rendered, the file's pixels
and the file's time between pages.
"""
from __future__ import annotations

import itertools
import re
import time
import zlib

MAX_PDF_PAGE_PIXELS = 40_000_000  # one rendered page: a Letter page at 100 dpi is 0.94 M, A0 15.5 M
MAX_PDF_FILE_PIXELS = 400_000_000  # every rendered page of one file: 425 Letter pages at 100 dpi
MAX_PDF_SECONDS = 120.0  # reading (and rendering) one file
MAX_PDF_STREAM_BYTES = 256 * 1024 * 1024  # one stream, inflated (a 600 dpi Letter RGB image is 101 MB)
MAX_PDF_FILTER_DEPTH = 4  # Flate inside Flate inside ... looked through this deep

_STREAM = re.compile(rb"(?<!end)stream\r?\n")


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MB"


def _layer(pieces):
    """The inflated pieces (at most 1 MB each) of the zlib stream in `pieces`; zlib.error
    when it is not one."""
    d = zlib.decompressobj()
    for piece in pieces:
        while piece:
            out = d.decompress(piece, 1 << 20)
            piece = d.unconsumed_tail
            if out:
                yield out
        if d.eof:
            return


def _zlib_head(b: bytes) -> bool:
    return len(b) >= 2 and b[0] & 0x0F == 8 and (b[0] * 256 + b[1]) % 31 == 0


def _inflated_size(data: bytes, start: int, limit: int, deadline: float) -> int | None:
    """Bytes the zlib stream at data[start:] inflates to (stopping once past `limit` or the
    deadline), looking through up to MAX_PDF_FILTER_DEPTH nested zlib layers (Flate inside
    Flate); None when no zlib stream starts there."""
    stream = _layer(data[i:i + (1 << 16)] for i in range(start, len(data), 1 << 16))
    try:
        first = next(stream, b"")
    except zlib.error:
        return None
    depth = 1
    while depth < MAX_PDF_FILTER_DEPTH and _zlib_head(first):
        inner = _layer(itertools.chain([first], stream))
        try:
            inner_first = next(inner, b"")
        except zlib.error:
            break  # only looked like a zlib header
        stream, first, depth = inner, inner_first, depth + 1
    total = len(first)
    try:
        for out in stream:
            total += len(out)
            if total > limit or time.monotonic() > deadline:
                break
    except zlib.error:
        pass  # a damaged stream: pdfium stops there too
    return total


def check_streams(path, data: bytes, error=ValueError, max_stream: int | None = None,
                  max_seconds: float | None = None) -> None:
    """Refuse a PDF with a Flate stream that inflates past MAX_PDF_STREAM_BYTES (looking
    through nested Flate layers), or whose streams take longer than MAX_PDF_SECONDS to size."""
    limit = MAX_PDF_STREAM_BYTES if max_stream is None else max_stream
    seconds = MAX_PDF_SECONDS if max_seconds is None else max_seconds
    deadline = time.monotonic() + seconds
    for m in _STREAM.finditer(data):
        size = _inflated_size(data, m.end(), limit, deadline)
        if size is not None and size > limit:
            raise error(f"{path}: a stream at byte {m.end()} inflates to more than {_mb(limit)} "
                        f"(the limit for one stream of a PDF); not read")
        if time.monotonic() > deadline:
            raise error(f"{path}: took more than {seconds:g} s to check (the limit for one PDF); not read")


def open_pdf(path, data: bytes, error=ValueError, check: bool = True):
    """pypdfium2's document for `data` (the bytes of `path`): its streams checked first
    (check_streams; check=False for bytes already checked); a file pdfium cannot load, and one
    without pages, raise `error` naming it."""
    import pypdfium2 as pdfium

    if check:
        check_streams(path, data, error)
    try:
        pdf = pdfium.PdfDocument(data)
    except Exception as e:  # pypdfium2 raises PdfiumError (or OSError) for unreadable files
        # pdfium refuses a page tree with no pages, and the reason it gives is its last error,
        # left by whatever document it read before (a damaged one: "Data format error"): the
        # file itself says whether it has pages
        if declared_page_count(data) == 0:
            raise error(f"{path}: the PDF has no pages") from None
        raise error(f"{path}: not a readable PDF ({e})") from None
    if len(pdf) == 0:
        pdf.close()
        raise error(f"{path}: the PDF has no pages")
    return pdf


_OBJECT = re.compile(rb"(?<![0-9])(\d+)\s+(\d+)\s+obj\b(.*?)\bendobj", re.S)
_CATALOG = re.compile(rb"/Type\s*/Catalog(?![A-Za-z0-9])")
_PAGES_REF = re.compile(rb"/Pages\s+(\d+)\s+(\d+)\s+R")
_COUNT = re.compile(rb"/Count\s+([+-]?\d+)")


def declared_page_count(data: bytes) -> int | None:
    """The /Count of the page tree the document catalog names, read from the file's own
    (uncompressed) objects, a later definition of an object winning as in an incremental
    update; None where that cannot be told (no catalog in plain sight, e.g. in an object
    stream). Independent of pdfium and its state."""
    objects = {(int(m[1]), int(m[2])): m[3] for m in _OBJECT.finditer(data)}
    root = None
    for body in objects.values():
        if _CATALOG.search(body):
            root = _PAGES_REF.search(body) or root
    tree = objects.get((int(root[1]), int(root[2]))) if root else None
    count = _COUNT.search(tree) if tree is not None else None
    return int(count[1]) if count else None


class PdfBudget:
    """The pixels and the time one PDF file may take; ask it before each page."""

    def __init__(self, path, error=ValueError, max_page_pixels: int | None = None,
                 max_file_pixels: int | None = None, max_seconds: float | None = None):
        self.path, self.error = path, error
        self.max_page_pixels = MAX_PDF_PAGE_PIXELS if max_page_pixels is None else max_page_pixels
        self.max_file_pixels = MAX_PDF_FILE_PIXELS if max_file_pixels is None else max_file_pixels
        self.max_seconds = MAX_PDF_SECONDS if max_seconds is None else max_seconds
        self.started = time.monotonic()
        self.pixels = 0  # rendered so far

    def check_time(self, k: int) -> None:
        """Before page k (0-based): the file's time is not used up."""
        if time.monotonic() - self.started > self.max_seconds:
            raise self.error(f"{self.path}: page {k + 1}: stopped after {self.max_seconds:g} s "
                             f"(the limit for one PDF file)")

    def render_scale(self, k: int, width: float, height: float, dpi: float) -> float:
        """The scale to render page k (width x height points) at `dpi`, once its pixels fit the
        page's and the file's limits and the file's time is not used up; counts the pixels."""
        self.check_time(k)
        scale = dpi / 72.0
        px = int(round(width * scale)) * int(round(height * scale))
        if px > self.max_page_pixels:
            raise self.error(f"{self.path}: page {k + 1} ({width:g} x {height:g} pt) would be {px:,} pixels at "
                             f"{dpi:g} dpi, more than the {self.max_page_pixels:,} allowed for one page")
        if self.pixels + px > self.max_file_pixels:
            raise self.error(f"{self.path}: page {k + 1}: the file's pages would be more than the "
                             f"{self.max_file_pixels:,} pixels allowed for one PDF file")
        self.pixels += px
        return scale
