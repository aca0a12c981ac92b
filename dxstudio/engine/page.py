"""One page: words in reading order, each with its text and box, plus the page size.

The page JSON (pages/<id>.json in a project, and what `dxstudio extract` reads):
    {"id": str, "width": number, "height": number,
     "words": [{"text": str, "box": [x0, y0, x1, y1]}, ...], "image": optional str,
     "document": optional str, "page_number": optional int,
     "ocr": optional {"engine": str, "version": str, "rotation": 0|90|180|270}}
("ocr" names the OCR that read the words of a scan or photo: dxstudio.ocr.)
Boxes are in the page's own units (pixels or points), y growing downwards. Every problem
is a PageError whose message names the file and what is wrong.

`document` and `page_number` (both or neither) say which document the page belongs to and
where in it (1 = first page, at most MAX_PAGES_PER_DOCUMENT). A page without them is a
document of one page whose document id is the page id (dxstudio/documents.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field


# Coordinates and page sizes are bounded (docs/security.md): a box of 1e308 is finite, but
# its width overflows. A poster at 600 dpi is 30000 pixels; PDF pages are at most 14400 points.
MAX_COORD = 1e7
MAX_WORDS_PER_PAGE = 1_000_000
MAX_WORD_CHARS = 10_000
# The most pages one document may have (a PDF of more is refused at import, naming this bound):
# a 5,000-page scan is a batch of documents, not one record.
MAX_PAGES_PER_DOCUMENT = 1000


# A page id is a file name (pages/<id>.json, labels/<id>.json, the label cache): letters,
# digits, '.', '_', '-', not starting with '.' or '-', no '..', at most 120 characters. The
# importers make ids of this form; every page read by any command is held to it here.
PAGE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,119}")
PAGE_ID_RULE = "letters, digits, '.', '_', '-'; at most 120 characters; not starting with '.' or '-'; no '..'"


def is_page_id(page_id) -> bool:
    return isinstance(page_id, str) and bool(PAGE_ID.fullmatch(page_id)) and ".." not in page_id


def page_id_problem(page_id) -> str:
    """Why `page_id` is not a valid page id (short: a hostile id is cut), "" when it is."""
    if is_page_id(page_id):
        return ""
    shown = repr(page_id[:60]) + ("..." if len(page_id) > 60 else "") if isinstance(page_id, str) else repr(page_id)
    return f"{shown} is not a valid page id ({PAGE_ID_RULE})"


class PageError(ValueError):
    """A page that cannot be used; str() names the file and the problem."""


@dataclass(frozen=True)
class Word:
    text: str
    box: tuple  # (x0, y0, x1, y1), floats


@dataclass(frozen=True)
class Page:
    id: str
    width: float
    height: float
    words: tuple  # of Word
    image: str | None = None
    document: str | None = None  # the document's id; None: a document of one page (this page)
    page_number: int | None = None  # 1-based place in the document; None with document None

    @property
    def document_id(self) -> str:
        """The id of the page's document: `document`, or the page id for a page of its own."""
        return self.document if self.document is not None else self.id

    @property
    def number(self) -> int:
        """The page's number in its document (1 for a page of its own)."""
        return self.page_number if self.page_number is not None else 1
    ocr: dict | None = field(default=None, compare=False, hash=False)  # the OCR that read the words

    def to_dict(self) -> dict:
        d = {"id": self.id, "width": self.width, "height": self.height,
             "words": [{"text": w.text, "box": list(w.box)} for w in self.words]}
        if self.image is not None:
            d["image"] = self.image
        if self.document is not None:
            d["document"] = self.document
            d["page_number"] = self.page_number
        if self.ocr is not None:
            d["ocr"] = dict(self.ocr)
        return d


def _num(v, what: str, source: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PageError(f"{source}: {what} is not a number ({v!r})")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise PageError(f"{source}: {what} is not finite ({str(v)[:40]})")
    if abs(f) > MAX_COORD:
        raise PageError(f"{source}: {what} is {f:g}, beyond the {MAX_COORD:g} allowed")
    return f


def page_from_dict(d, source: str = "<page>") -> Page:
    """Validate a parsed page JSON object. Boxes reaching past the page edge are kept as they
    are (the coordinate quantization clamps them into 0..1000); a box wholly outside the page,
    inverted, or not finite is an error."""
    if not isinstance(d, dict):
        raise PageError(f"{source}: a page must be a JSON object")
    pid = d.get("id")
    if not isinstance(pid, str) or not pid.strip():
        raise PageError(f"{source}: missing or empty 'id'")
    if not is_page_id(pid):
        raise PageError(f"{source}: 'id' {page_id_problem(pid)}")
    if "width" not in d or "height" not in d:
        raise PageError(f"{source}: missing 'width' or 'height'")
    width = _num(d["width"], "width", source)
    height = _num(d["height"], "height", source)
    if width <= 0 or height <= 0:
        raise PageError(f"{source}: width and height must be positive ({width} x {height})")
    words = d.get("words")
    if not isinstance(words, list):
        raise PageError(f"{source}: missing 'words' (a list of {{text, box}})")
    if not words:
        raise PageError(f"{source}: the page has no words")
    if len(words) > MAX_WORDS_PER_PAGE:
        raise PageError(f"{source}: {len(words)} words, more than the {MAX_WORDS_PER_PAGE} allowed")
    out = []
    for i, w in enumerate(words):
        where = f"{source}: word {i}"
        if not isinstance(w, dict):
            raise PageError(f"{where} is not an object")
        text = w.get("text")
        if not isinstance(text, str):
            raise PageError(f"{where} has no text")
        if not text.strip():
            raise PageError(f"{where} has empty text")
        if len(text) > MAX_WORD_CHARS:
            raise PageError(f"{where} is {len(text)} characters long (at most {MAX_WORD_CHARS})")
        box = w.get("box")
        if not isinstance(box, (list, tuple)) or len(box) != 4:
            raise PageError(f"{where} ({text!r}): box must be [x0, y0, x1, y1]")
        x0, y0, x1, y1 = (_num(v, f"word {i} ({text!r}) box", source) for v in box)
        if x1 < x0 or y1 < y0:
            raise PageError(f"{where} ({text!r}): inverted box {list(box)}")
        if x1 < 0 or y1 < 0 or x0 > width or y0 > height:
            raise PageError(f"{where} ({text!r}): box {list(box)} lies outside the {width:g} x {height:g} page")
        out.append(Word(text, (x0, y0, x1, y1)))
    image = d.get("image")
    if image is not None and not isinstance(image, str):
        raise PageError(f"{source}: 'image' must be a file name")
    document, number = _document_fields(d, source)
    ocr = d.get("ocr")
    if ocr is not None and not (isinstance(ocr, dict) and len(ocr) <= 8 and all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and len(str(v)) <= 200 for k, v in ocr.items())):
        raise PageError(f"{source}: 'ocr' must be an object of a few short values (engine, version, rotation)")
    return Page(pid, width, height, tuple(out), image, document, number, ocr)


def _document_fields(d: dict, source: str) -> tuple:
    """(document id, page number) of a page JSON object, or (None, None)."""
    document, number = d.get("document"), d.get("page_number")
    if document is None and number is None:
        return None, None
    if document is None or number is None:
        raise PageError(f"{source}: 'document' and 'page_number' go together (the page's document "
                        f"and its number in it); this page has only {'document' if number is None else 'page_number'}")
    if not is_page_id(document):
        raise PageError(f"{source}: 'document' {str(document)[:60]!r} is not a valid document id (letters, "
                        f"digits, '.', '_', '-'; at most 120 characters; not starting with '.' or '-')")
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_PAGES_PER_DOCUMENT:
        raise PageError(f"{source}: 'page_number' must be an integer from 1 to {MAX_PAGES_PER_DOCUMENT} "
                        f"(MAX_PAGES_PER_DOCUMENT), not {str(number)[:40]}")
    return document, number


def load_page(path) -> Page:
    from dxstudio.fsutil import read_json

    return page_from_dict(read_json(path, PageError), str(path))


# reading order: pure geometry, here so that grounding (below the importers) can use it too
def reading_order(boxes) -> list[int]:
    """Indices of boxes (x0, y0, x1, y1) in reading order: rows from top to bottom, left to
    right within a row. A box joins the current row when its vertical centre lies within the
    row's first box's vertical extent (slightly tilted scans keep their rows)."""
    return [i for r in reading_rows(boxes) for i in sorted(r, key=lambda k: (boxes[k][0], boxes[k][1]))]


def reading_rows(boxes) -> list[list[int]]:
    """The rows of reading_order, top to bottom: each a list of box indices (not yet sorted
    left to right)."""
    order = sorted(range(len(boxes)), key=lambda i: ((boxes[i][1] + boxes[i][3]) / 2, boxes[i][0]))
    rows, row, row_top, row_bottom = [], [], None, None
    for i in order:
        x0, y0, x1, y1 = boxes[i]
        cy = (y0 + y1) / 2
        if row and row_top <= cy <= row_bottom:
            row.append(i)
            continue
        if row:
            rows.append(row)
        row, row_top, row_bottom = [i], y0, max(y1, y0 + 1e-9)
    if row:
        rows.append(row)
    return rows
