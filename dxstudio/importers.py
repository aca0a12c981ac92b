"""Importers: pages (and, where the data set has them, answers) into a project.

    import_pages(fmt, src, project, progress=None) -> ImportReport

fmt is one of FORMATS. One bad source file is reported (file name and problem) and the rest
goes on; a page already in the project with the same words is left as it is, one with
different words under the same id is refused (its labels refer to the saved words).
Formats (docs/project.md has the details):
  json   page JSON files (a file or a folder of *.json)
  funsd  FUNSD annotations/*.json; words in the reading order of the entities; no fields
  sroie  box/*.csv + key/*.json (+ img/, image_sizes.csv); key values become answers
  cord   CORD json/receipt_*.json; total, subtotal, tax, cash and change become answers
  pdf    PDF files (pypdfium2): one page per PDF page, each rendered to
         pages/images/<id>.png (PDF_IMAGE_DPI, grey) that the page JSON names, as the
         bundled sample's images are stored; a page without a text layer (a scan) is
         rendered at OCR_PDF_DPI and read by OCR (the ocr extra), its words in that image's pixels
  images PNG, JPEG, TIFF (each page of a multi-page TIFF) and WebP files read by OCR
         (dxstudio.ocr, the ocr extra): the upright image is kept in pages/images/, the
         words' boxes are in its pixels, the page's "ocr" names the engine and its version
"""
from __future__ import annotations

import csv
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from dxstudio import ocr
from dxstudio.documents import DocumentError, bind_document, check_page_count
from dxstudio.engine.page import Page, PageError, Word, page_from_dict, reading_order, reading_rows  # noqa: F401 (re-exported)
from dxstudio.fsutil import MAX_SOURCE_BYTES, read_json, read_regular_file, write_bytes_atomic
from dxstudio.labelling import apply_answers
from dxstudio.ocr import IMAGE_SUFFIXES, OCR_PDF_DPI, OcrError, check_pixels, ocr_chunk
from dxstudio.pdflimits import PdfBudget, open_pdf
from dxstudio.project import LabelError, Project, ProjectError, is_safe_page_id, safe_page_id

FORMATS = ("json", "funsd", "sroie", "cord", "pdf", "images")


class SourceError(ValueError):
    """A source that cannot be imported; str() names the file and the problem."""


@dataclass
class ImportReport:
    format: str
    added: list = field(default_factory=list)  # page ids written
    unchanged: list = field(default_factory=list)  # page ids already there, same words
    errors: list = field(default_factory=list)  # [(file, message)]
    notes: list = field(default_factory=list)  # [(file, message)] imported, but worth knowing
    fields_added: list = field(default_factory=list)
    answers: int = 0  # pages whose answers were imported

    def to_dict(self) -> dict:
        return {"format": self.format, "added": len(self.added), "unchanged": len(self.unchanged),
                "errors": [{"file": f, "error": m} for f, m in self.errors],
                "notes": [{"file": f, "note": m} for f, m in self.notes],
                "fields_added": self.fields_added, "answers": self.answers}


# ---------------------------------------------------------------------------------------
# Shared helpers

def split_line(text: str, box) -> list[Word]:
    """Words of an OCR line, each box estimated in proportion to character counts: the line
    is cut into len(text) equal slices and a word spans its characters' slices."""
    x0, y0, x1, y1 = box
    n = len(text)
    step = (x1 - x0) / n if n else 0.0
    words, pos = [], 0
    for token in text.split():
        start = text.index(token, pos)
        end = start + len(token)
        pos = end
        words.append(Word(token, (x0 + step * start, y0, x0 + step * end, y1)))
    return words


def image_size(path) -> tuple[int, int] | None:
    """(width, height) of a PNG or JPEG from its header, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(26)
            if head[:8] == b"\x89PNG\r\n\x1a\n":
                w, h = struct.unpack(">II", head[16:24])
                return int(w), int(h)
            if head[:2] != b"\xff\xd8":
                return None
            f.seek(2)
            while True:
                marker = f.read(2)
                if len(marker) < 2 or marker[0] != 0xFF:
                    return None
                while marker[1] == 0xFF:  # fill bytes
                    marker = marker[:1] + f.read(1)
                    if len(marker) < 2:  # the file ends inside the fill bytes
                        return None
                kind = marker[1]
                if kind in (0xD8, 0x01) or 0xD0 <= kind <= 0xD7:
                    continue
                if kind == 0xD9:  # end of image before any frame header
                    return None
                seglen = struct.unpack(">H", f.read(2))[0]
                if seglen < 2:  # a segment length counts its own two bytes
                    return None
                if kind in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                    h, w = struct.unpack(">xHH", f.read(5))
                    return int(w), int(h)
                f.seek(seglen - 2, 1)
    except (OSError, struct.error):
        return None


def _read_json(path: Path):
    return read_json(path, SourceError)


def _read_source(path: Path) -> bytes:
    return read_regular_file(path, MAX_SOURCE_BYTES, SourceError)


def _check_source(src: Path) -> None:
    """A source named on the command line: a folder or a regular file, never a device or FIFO."""
    if src.is_dir() or src.is_file():
        return
    if not src.exists():
        raise SourceError(f"{src}: no such file or folder")
    raise SourceError(f"{src}: not a regular file or folder (a device, FIFO or socket is never read)")


def _inside(path: Path, root: Path | None) -> bool:
    """Whether `path`, with every link resolved, lies inside `root` (None: no limit)."""
    if root is None:
        return True
    try:
        path.resolve().relative_to(root)
        return True
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a link loop
        return False


def _outside_error(path: Path, root: Path) -> str:
    return f"{path}: a link that leads outside the import source {root}; not followed"


def _files(src: Path, pattern: str, subdir: str | None = None) -> list[Path]:
    """A single file, or the matching files of a folder (or of its `subdir`), sorted."""
    _check_source(src)
    if src.is_file():
        return [src]
    if subdir and (src / subdir).is_dir():
        src = src / subdir
    return sorted(p for p in src.glob(pattern) if p.is_file() and not p.name.startswith("."))


def _page_id(stem: str) -> str:
    return stem if is_safe_page_id(stem) else safe_page_id(stem)


def _clamp_box(box, width, height):
    x0, y0, x1, y1 = box
    x0, x1 = min(max(x0, 0.0), width), min(max(x1, 0.0), width)
    y0, y1 = min(max(y0, 0.0), height), min(max(y1, 0.0), height)
    return (x0, y0, x1, y1)


@dataclass
class OcrOptions:
    """How `images` and the scanned pages of `pdf` are read: the engine (dxstudio.ocr.ENGINES)
    and `map`, which takes an iterable of chunks of (label, suffix, bytes) and yields
    dxstudio.ocr.ocr_chunk's result for each chunk, in order (the CLI's --workers / --ray; None:
    in this process). `chunk` files go to one task."""
    engine: str = "rapidocr"
    map: object = None
    chunk: int = 1

    def results(self, items):
        """(item, ("ok", pages) | ("error", message)) for every item, in order; SourceError
        when the engine is not installed (every file would fail the same way)."""
        batches = _batches(items, max(1, self.chunk))
        if self.map is None:
            stream = ((b, ocr_chunk(self.engine, b)) for b in batches)
        else:
            stream = self.map(batches)
        for batch, results in stream:
            for item, (kind, value) in zip(batch, results):
                if kind == "missing":
                    raise SourceError(value)
                yield item, (kind, value)


def _batches(items, size: int):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class _Importer:
    """Adds pages and answers to a project, collecting the report."""

    def __init__(self, fmt: str, project: Project, progress=None, root: Path | None = None,
                 ocr: OcrOptions | None = None):
        self.ocr = ocr or OcrOptions()
        self.report = ImportReport(fmt)
        self.project = project
        self.progress = progress
        self.total = 0
        self.root = root  # resolved; files whose links lead outside it are not read

    def outside(self, path: Path) -> bool:
        """True (and the file reported) when a link takes `path` outside the source."""
        if _inside(path, self.root):
            return False
        self.report.errors.append((str(path), _outside_error(path, self.root)))
        return True

    def add(self, page: Page, source, answers: dict | None = None) -> None:
        try:
            # validate through the page JSON checks (boxes, empty words...)
            page = page_from_dict(page.to_dict(), str(source))
            status = self.project.add_page(page)
        except (PageError, ProjectError) as e:
            self.report.errors.append((str(source), str(e)))
            return
        (self.report.added if status == "added" else self.report.unchanged).append(page.id)
        if answers is not None:
            self._save_answers(page, answers, source)

    def _save_answers(self, page: Page, answers: dict, source) -> None:
        try:
            apply_answers(self.project, page.id, answers, "import", page=page)
            self.report.answers += 1
        except (LabelError, ValueError) as e:
            self.report.errors.append((str(source), str(e)))

    def step(self, done: int, total: int) -> None:
        self.total = total
        if self.progress is not None:
            self.progress(done, total)


# ---------------------------------------------------------------------------------------
# json

def _import_json(src: Path, imp: _Importer) -> None:
    files = _files(src, "*.json", "pages")
    for k, path in enumerate(files):
        imp.step(k, len(files))
        if imp.outside(path):
            continue
        try:
            page = page_from_dict(_read_json(path), str(path))  # the page id rule included
        except (SourceError, PageError) as e:
            imp.report.errors.append((str(path), str(e)))
            continue
        imp.add(page, path)


# ---------------------------------------------------------------------------------------
# FUNSD

def funsd_page(path: Path, root: Path | None = None) -> Page:
    d = _read_json(path)
    form = d.get("form") if isinstance(d, dict) else None
    if not isinstance(form, list):
        raise SourceError(f"{path}: not a FUNSD annotation (no 'form' list of entities)")
    entities = []
    for k, ent in enumerate(form):
        if not isinstance(ent, dict) or not isinstance(ent.get("words"), list):
            raise SourceError(f"{path}: entity {k} has no 'words' list")
        words = []
        for w in ent["words"]:
            try:
                text = w["text"]
                box = w["box"]  # a list of numbers: a string "1234" would give (1, 2, 3, 4)
                if not isinstance(box, list) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in box):
                    raise TypeError
                box = tuple(float(v) for v in box)
            except (KeyError, TypeError, ValueError):
                raise SourceError(f"{path}: entity {k}: a word without text or box ({w!r})") from None
            if len(box) != 4:
                raise SourceError(f"{path}: entity {k}: word {text!r} box must have 4 numbers")
            if isinstance(text, str) and text.strip():
                words.append(Word(" ".join(text.split()), box))
        if words:
            xs0, ys0, xs1, ys1 = zip(*(w.box for w in words))
            entities.append(((min(xs0), min(ys0), max(xs1), max(ys1)), words))
    if not entities:
        raise SourceError(f"{path}: the form has no words")
    ordered = [entities[i] for i in reading_order([e[0] for e in entities])]
    words = [w for _, ws in ordered for w in ws]
    image = path.parent.parent / "images" / f"{path.stem}.png"
    if image.is_file() and not _inside(image, root):
        raise SourceError(_outside_error(image, root))
    size = image_size(image) if image.is_file() else None
    if size is None:
        size = (max(w.box[2] for w in words), max(w.box[3] for w in words))
    return Page(_page_id(path.stem), float(size[0]), float(size[1]), tuple(words),
                str(image.resolve()) if image.is_file() else None)


def _import_funsd(src: Path, imp: _Importer) -> None:
    if src.is_dir() and not (src / "annotations").is_dir() and not list(src.glob("*.json")):
        files = sorted(src.glob("*/annotations/*.json"))  # the FUNSD root: both splits
    else:
        files = _files(src, "*.json", "annotations")
    if not files:
        raise SourceError(f"{src}: no FUNSD annotations/*.json found")
    for k, path in enumerate(files):
        imp.step(k, len(files))
        if imp.outside(path):
            continue
        try:
            page = funsd_page(path, imp.root)
        except SourceError as e:
            imp.report.errors.append((str(path), str(e)))
            continue
        imp.add(page, path)


# ---------------------------------------------------------------------------------------
# SROIE

SROIE_FIELDS = (
    {"name": "company", "description": "the name of the company or shop that issued the receipt"},
    {"name": "date", "description": "the date of the receipt, as printed"},
    {"name": "address", "description": "the address of the shop, as printed (all its lines)"},
    {"name": "total", "description": "the total amount paid, as printed, without the currency"},
)


def _sroie_sizes(root: Path) -> dict:
    sizes = {}
    path = root / "image_sizes.csv"
    if not path.is_file():
        return sizes
    try:
        text = _read_source(path).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        for row in csv.DictReader(text.splitlines()):
            try:
                sizes[row["id"]] = (float(row["width"]), float(row["height"]))
            except (KeyError, TypeError, ValueError, OverflowError):
                raise SourceError(f"{path}: row {row!r} needs id, width, height") from None
    except csv.Error as e:
        raise SourceError(f"{path}: not a CSV file ({e})") from None
    return sizes


def sroie_page(box_path: Path, root: Path, sizes: dict, limit: Path | None = None) -> Page:
    raw = _read_source(box_path).decode("utf-8-sig", errors="replace")
    words = []
    for lineno, line in enumerate(raw.splitlines(), 1):  # CRLF or LF
        if not line.strip():
            continue
        parts = line.split(",", 8)  # TEXT may hold commas: only the first eight separate
        if len(parts) < 9:
            raise SourceError(f"{box_path}: line {lineno}: expected x1,y1,...,y4,TEXT, got {line[:60]!r}")
        try:
            coords = [float(v) for v in parts[:8]]
        except ValueError:
            raise SourceError(f"{box_path}: line {lineno}: the first eight values must be numbers") from None
        text = parts[8]
        if not text.strip():
            continue
        xs, ys = coords[0::2], coords[1::2]
        words.extend(split_line(text, (min(xs), min(ys), max(xs), max(ys))))
    if not words:
        raise SourceError(f"{box_path}: no text lines")
    stem = box_path.stem
    image = None
    for ext in (".jpg", ".jpeg", ".png"):
        if (root / "img" / (stem + ext)).is_file():
            image = root / "img" / (stem + ext)
            if not _inside(image, limit):
                raise SourceError(_outside_error(image, limit))
            break
    size = sizes.get(stem)
    if size is None and image is not None:
        size = image_size(image)
    if size is None:
        size = (max(w.box[2] for w in words), max(w.box[3] for w in words))
    return Page(_page_id(stem), float(size[0]), float(size[1]), tuple(words),
                str(image.resolve()) if image is not None else None)


def _import_sroie(src: Path, imp: _Importer) -> None:
    root = src if src.is_dir() else src.parent.parent
    box_dir = root / "box"
    if not box_dir.is_dir():
        raise SourceError(f"{src}: not a SROIE folder (no box/ with the OCR lines)")
    files = [src] if src.is_file() else sorted(p for p in box_dir.glob("*.csv") if p.is_file())
    try:
        if imp.outside(root / "image_sizes.csv"):
            raise SourceError("")
        sizes = _sroie_sizes(root)
    except SourceError as e:  # the sizes then come from the images or the boxes
        if str(e):
            imp.report.errors.append((str(root / "image_sizes.csv"), str(e)))
        sizes = {}
    imp.report.fields_added = imp.project.add_fields(SROIE_FIELDS)
    if imp.report.fields_added:
        imp.project.save()
    names = {f["name"] for f in SROIE_FIELDS}
    for k, path in enumerate(files):
        imp.step(k, len(files))
        if imp.outside(path):
            continue
        try:
            page = sroie_page(path, root, sizes, imp.root)
        except SourceError as e:
            imp.report.errors.append((str(path), str(e)))
            continue
        key_path = root / "key" / f"{path.stem}.json"
        answers = None
        if key_path.is_file():
            try:
                if not _inside(key_path, imp.root):
                    raise SourceError(_outside_error(key_path, imp.root))
                key = _read_json(key_path)
                if not isinstance(key, dict):
                    raise SourceError(f"{key_path}: must be a JSON object {{field: value}}")
                unknown = set(key) - names
                if unknown:
                    raise SourceError(f"{key_path}: unknown field(s) {sorted(unknown)}; "
                                      f"SROIE keys are {sorted(names)}")
                bad = [n for n in key if key[n] is not None and (isinstance(key[n], (bool, list, dict))
                                                                   or not isinstance(key[n], (str, int, float)))]
                if bad:
                    raise SourceError(f"{key_path}: the value of {bad[0]!r} is {type(key[bad[0]]).__name__}, "
                                      f"not text (a SROIE key value is the text printed on the receipt)")
                answers = {n: (None if key.get(n) is None else str(key[n])) for n in key}
                missing = names - set(key)
                if missing:
                    imp.report.notes.append((str(key_path), f"no {', '.join(sorted(missing))} (taken as no answer)"))
            except SourceError as e:
                imp.report.errors.append((str(key_path), str(e)))
        else:
            imp.report.notes.append((str(path), "no key file: the page is imported without answers"))
        imp.add(page, path, answers)


# ---------------------------------------------------------------------------------------
# CORD

CORD_FIELDS = (
    ({"name": "total", "description": "the total amount to pay, as printed"}, "total.total_price"),
    ({"name": "subtotal", "description": "the subtotal before tax and service, as printed"}, "sub_total.subtotal_price"),
    ({"name": "tax", "description": "the tax amount, as printed"}, "sub_total.tax_price"),
    ({"name": "cash", "description": "the cash amount given by the customer, as printed"}, "total.cashprice"),
    ({"name": "change", "description": "the change given back, as printed"}, "total.changeprice"),
)


def cord_page(path: Path) -> tuple[Page, dict]:
    """A CORD receipt and its answers {field: text of the field's words, joined by spaces in
    reading order, or None}."""
    page, categories = cord_words(path)
    answers = {}
    for spec, category in CORD_FIELDS:
        texts = [w.text for w, c in zip(page.words, categories) if c == category]
        answers[spec["name"]] = " ".join(texts) if texts else None
    return page, answers


def cord_image_size(d: dict, path: Path, error=SourceError) -> tuple[float, float]:
    """A CORD file's meta.image_size as (width, height), both positive; else `error` naming the file."""
    try:
        size = d["meta"]["image_size"]
        width, height = float(size["width"]), float(size["height"])
    except (KeyError, TypeError, ValueError, OverflowError):
        raise error(f"{path}: no meta.image_size {{width, height}}") from None
    if not (width > 0 and height > 0):
        raise error(f"{path}: image size {width} x {height} is not positive")
    return width, height


def cord_line_words(line: dict, k: int, path: Path, width: float, height: float,
                    error=SourceError) -> list[tuple[Word, bool]]:
    """The words of CORD line k as (Word with its quad's box clamped to the image, is_key), in
    file order; words with no text are skipped; a malformed word list or quad is `error`."""
    line_words = line.get("words") or []
    if not isinstance(line_words, list):
        raise error(f"{path}: line {k}: 'words' must be a list of words, not {line_words!r}")
    out = []
    for w in line_words:
        text = w.get("text") if isinstance(w, dict) else None
        if not isinstance(text, str) or not text.strip():
            continue
        try:
            q = w["quad"]
            xs = [float(q[f"x{i}"]) for i in range(1, 5)]
            ys = [float(q[f"y{i}"]) for i in range(1, 5)]
        except (KeyError, TypeError, ValueError, OverflowError):
            raise error(f"{path}: line {k}: word {text!r} has no quad x1..y4") from None
        if not all(math.isfinite(v) for v in xs + ys):  # min/max would drop a NaN silently
            raise error(f"{path}: line {k}: word {text!r} has a quad value that is not a finite number")
        box = _clamp_box((min(xs), min(ys), max(xs), max(ys)), width, height)
        out.append((Word(" ".join(text.split()), box), bool(w.get("is_key"))))
    return out


def cord_words(path: Path) -> tuple[Page, list]:
    """A CORD receipt in reading order and each word's category ("key" for key words)."""
    d = _read_json(path)
    if not isinstance(d, dict) or not isinstance(d.get("valid_line"), list):
        raise SourceError(f"{path}: not a CORD receipt (no 'valid_line' list)")
    width, height = cord_image_size(d, path)
    lines = []  # (box, [(word, category)])
    for k, line in enumerate(d["valid_line"]):
        category = line.get("category", "") if isinstance(line, dict) else ""
        if not isinstance(category, str):
            raise SourceError(f"{path}: line {k}: 'category' must be text, not {category!r}")
        words = cord_line_words(line, k, path, width, height) if isinstance(line, dict) else []
        # a key word ("TOTAL", is_key 1) shares its value's category but is not the value
        items = [(word, "key" if is_key else category) for word, is_key in words]
        if items:
            items.sort(key=lambda it: it[0].box[0])
            b = [it[0].box for it in items]
            lines.append(((min(x[0] for x in b), min(x[1] for x in b), max(x[2] for x in b), max(x[3] for x in b)), items))
    if not lines:
        raise SourceError(f"{path}: the receipt has no words")
    ordered = [lines[i] for i in reading_order([ln[0] for ln in lines])]
    pairs = [it for _, items in ordered for it in items]
    words = tuple(w for w, _ in pairs)
    return Page(_page_id(path.stem), width, height, words, None), [c for _, c in pairs]


def _import_cord(src: Path, imp: _Importer) -> None:
    files = _files(src, "*.json", "json")
    if not files:
        raise SourceError(f"{src}: no CORD json/receipt_*.json found")
    imp.report.fields_added = imp.project.add_fields([spec for spec, _ in CORD_FIELDS])
    if imp.report.fields_added:
        imp.project.save()
    for k, path in enumerate(files):
        imp.step(k, len(files))
        if imp.outside(path):
            continue
        try:
            page, answers = cord_page(path)
        except SourceError as e:
            imp.report.errors.append((str(path), str(e)))
            continue
        imp.add(page, path, answers)


# ---------------------------------------------------------------------------------------
# PDF

ENCRYPTED = "an encrypted (password-protected) PDF; not read: save an unprotected copy to read it"


def pdf_pages(path: Path, scans: list | None = None, data: bytes | None = None, budget=None) -> list[Page]:
    """One page per PDF page, words and boxes from the text layer, in points with y growing
    downwards. A PDF without any text raises SourceError (a scan needs OCR first), unless
    `scans` is given: the 0-based numbers of the pages without text are appended to it.
    `data`: the file's bytes, already read (`path` then only names it). The file's streams and
    time are bounded (dxstudio.pdflimits; `budget`: the file's PdfBudget)."""
    if data is None:
        data = _read_source(path)  # a regular file of bounded size; pdfium reads from memory

    try:
        pdf = open_pdf(path, data, SourceError)
    except SourceError as e:
        if "password" in str(e).lower():
            raise SourceError(f"{path}: {ENCRYPTED}") from None
        raise
    budget = budget if budget is not None else PdfBudget(path, SourceError)
    pages = []
    try:
        n = len(pdf)
        try:
            check_page_count(n, str(path))
        except DocumentError as e:
            raise SourceError(str(e)) from None
        stem = safe_page_id(path.stem)
        for k in range(n):
            budget.check_time(k)
            page = pdf[k]
            width, height = page.get_size()
            textpage = page.get_textpage()
            words, cur, box = [], [], None
            count = textpage.count_chars()
            for i in range(count + 1):
                ch = textpage.get_text_range(i, 1) if i < count else " "
                if ch.strip() == "" or ch in "\x00\ufffe":
                    if cur:
                        x0, bottom, x1, top = box
                        words.append(Word("".join(cur), _clamp_box((x0, height - top, x1, height - bottom), width, height)))
                    cur, box = [], None
                    continue
                l, b, r, t = textpage.get_charbox(i)
                cur.append(ch)
                box = (l, b, r, t) if box is None else (min(box[0], l), min(box[1], b), max(box[2], r), max(box[3], t))
            textpage.close()
            page.close()
            if words:
                pid = stem if n == 1 else f"{stem}-p{k + 1}"
                pages.append(Page(pid, float(width), float(height), tuple(words), None))
            elif scans is not None:
                scans.append(k)
    finally:
        pdf.close()
    if not pages and scans is None:
        raise SourceError(f"{path}: no text layer (a scanned PDF?): run OCR and import its words as page JSON")
    # one document per file: document id <stem>, page_number the PDF page (a page without text is skipped)
    return bind_document(stem, [(_pdf_page_number(p, n) + 1, p) for p in pages], n, str(path))


def pdf_page_id(stem: str, k: int, n: int) -> str:
    """The id of page k (0-based) of an n-page PDF, as pdf_pages names it."""
    return stem if n == 1 else f"{stem}-p{k + 1}"


def _render_gray(path: Path, pdf, indices, scale_of, notes=None) -> list:
    """The one PDF page render loop: [PNG bytes or None] of each page k of `indices`, rendered
    in grey at scale_of(k, width, height) (its render scale; a SourceError when the page may
    not be rendered). With `notes`, such a page is None and its reason appended to `notes`
    (the file's other pages go on); without, the SourceError stops the file. A page that does
    not render is a SourceError naming the file and the page."""
    out = []
    for k in indices:
        page = pdf[k]
        try:
            try:
                scale = scale_of(k, *page.get_size())
            except SourceError as e:
                if notes is None:
                    raise
                notes.append(str(e))
                out.append(None)
                continue
            bitmap = page.render(scale=scale, grayscale=True)
            pixels = bitmap.to_numpy()
            out.append(png_gray(pixels.reshape(pixels.shape[0], pixels.shape[1])))
        except SourceError:
            raise
        except Exception as e:
            raise SourceError(f"{path}: page {k + 1} does not render ({type(e).__name__}: {e})") from None
        finally:
            page.close()
    return out


def render_pdf_scans(path: Path, indices, dpi: float | None = None, data: bytes | None = None) -> list:
    """(label, ".png", PNG bytes) of each PDF page in `indices` (0-based), rendered in grey at
    the OCR resolution for dxstudio.ocr; a page too large to render is a SourceError."""
    dpi = dpi or OCR_PDF_DPI
    if data is None:
        data = _read_source(path)
    indices = list(indices)

    def scale_of(k: int, w: float, h: float) -> float:
        try:
            check_pixels(int(w * dpi / 72.0), int(h * dpi / 72.0), f"{path} page {k + 1}")
        except OcrError as e:
            raise SourceError(str(e)) from None
        return dpi / 72.0

    pdf = open_pdf(path, data, SourceError, check=False)  # pdf_pages checked its streams
    try:
        images = _render_gray(path, pdf, indices, scale_of)
    finally:
        pdf.close()
    return [(f"{path} page {k + 1}", ".png", png) for k, png in zip(indices, images)]


PDF_IMAGE_DPI = 100.0  # page images of imported PDFs: 850 x 1100 pixels for a Letter page


def png_gray(pixels) -> bytes:
    """A greyscale PNG (8 bits, no filter, zlib level 9) of a (height, width) uint8 array:
    the standard library's zlib, no imaging library needed."""
    import zlib

    import numpy as np

    a = np.ascontiguousarray(pixels, dtype=np.uint8)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"png_gray: a (height, width) array is needed, not shape {a.shape}")
    h, w = a.shape
    raw = np.hstack([np.zeros((h, 1), np.uint8), a]).tobytes()  # filter type 0 on every row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def render_pdf_images(path: Path, dpi: float = PDF_IMAGE_DPI, budget=None, notes=None) -> list:
    """Each page of a PDF rendered in grey at `dpi`, as PNG bytes (pypdfium2); None for a page
    over the pixel limits or past the file's time (dxstudio.pdflimits), the reason appended to
    `notes`. SourceError naming the file when it does not render."""
    data = _read_source(path)
    pdf = open_pdf(path, data, SourceError, check=budget is None)  # a budget: pdf_pages checked the streams
    budget = budget if budget is not None else PdfBudget(path, SourceError)
    notes = notes if notes is not None else []
    try:
        return _render_gray(path, pdf, range(len(pdf)), lambda k, w, h: budget.render_scale(k, w, h, dpi), notes)
    finally:
        pdf.close()


def _pdf_page_number(page: Page, n_pages: int) -> int:
    """The PDF page (0-based) a page of pdf_pages came from: its id ends in -p<k> when the
    file has more than one page."""
    tail = page.id.rsplit("-p", 1)[-1]
    return int(tail) - 1 if n_pages > 1 and tail.isdigit() else 0


def _import_pdf(src: Path, imp: _Importer) -> None:
    from dataclasses import replace

    files = _files(src, "*.pdf")
    if not files:
        raise SourceError(f"{src}: no *.pdf files")
    for k, path in enumerate(files):
        imp.step(k, len(files))
        if imp.outside(path):
            continue
        budget = PdfBudget(path, SourceError)  # the file's pixels and time (dxstudio.pdflimits)
        scans: list = []
        try:
            pages = pdf_pages(path, scans, budget=budget)
        except SourceError as e:
            imp.report.errors.append((str(path), str(e)))
            continue
        limits = []
        if scans:  # pages without a text layer: OCR (the ocr extra)
            _import_pdf_scans(path, scans, len(pages) + len(scans), imp)
        if not pages:
            continue
        try:
            images = render_pdf_images(path, budget=budget, notes=limits)
        except SourceError as e:  # the words are what trains: the pages come in without images
            imp.report.notes.append((str(path), f"{e}; its pages show their words' boxes"))
            images = []
        for note in limits:
            imp.report.notes.append((str(path), f"{note}; the page shows its words' boxes"))
        for page in pages:
            existing = _existing_page(imp.project, page.id)
            if existing is not None and replace(existing, image=None).to_dict() == page.to_dict():
                imp.add(existing, path)  # already imported (with or without its image): unchanged
                continue
            if existing is not None and replace(existing, image=None, document=page.document,
                                                page_number=page.page_number).to_dict() == page.to_dict():
                # imported before documents: same words, now told its document (labels stay valid)
                try:
                    imp.project.set_document(page.id, page.document, page.page_number)
                    imp.report.notes.append((str(path), f"page {page.id}: now page {page.page_number} of "
                                                        f"document {page.document}"))
                except (PageError, ProjectError, OSError) as e:
                    imp.report.errors.append((str(path), f"page {page.id}: {e}"))
                    continue
                imp.report.unchanged.append(page.id)
                continue
            index = _pdf_page_number(page, len(images))
            if index < len(images) and images[index] is not None and existing is None:
                name = f"images/{page.id}.png"
                try:  # the image first: a page file never names an image that is not there
                    imp.project.images_dir.mkdir(parents=True, exist_ok=True)
                    write_bytes_atomic(imp.project.pages_dir / name, images[index])
                    page = replace(page, image=name)
                except OSError as e:
                    imp.report.notes.append((str(path), f"page {page.id}: image not written ({e})"))
            imp.add(page, path)


DOCUMENT_SUFFIXES = (".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def is_document(name: str) -> bool:
    """Whether a file name is a PDF or an image (read by document_pages), not page JSON."""
    return Path(name).suffix.lower() in DOCUMENT_SUFFIXES


def document_pages(source: str, data: bytes, engine: str = "rapidocr") -> list:
    """[(Page, image bytes or None, image suffix)] of a PDF's or an image's bytes, in page
    order, outside any project (`extract`, the app's Extract tab): a PDF's text layer, its
    pages without one and images by OCR (their image comes with them). Page ids as the
    importers give them. SourceError naming `source` when the file cannot be read."""
    path = Path(source)
    if path.suffix.lower() == ".pdf" or data[:5] == b"%PDF-":
        scans: list = []
        pages = pdf_pages(path, scans, data=data)
        n = len(pages) + len(scans)
        out = {_pdf_page_number(p, n): (p, None, "") for p in pages}
        if scans:
            missing = ocr.available(engine)
            if missing is not None:
                raise SourceError(f"{source}: page(s) {', '.join(str(k + 1) for k in scans[:10])} have no "
                                  f"text layer and need OCR: {missing}")
            stem = safe_page_id(path.stem)
            items = render_pdf_scans(path, scans, data=data)
            for k, (kind, value) in zip(scans, ocr.ocr_chunk(engine, items)):
                if kind != "ok":
                    raise SourceError(value)
                entry = value[0]
                if entry["words"]:  # a blank page (no text layer, nothing found) is left out
                    out[k] = (ocr.page_of(entry, pdf_page_id(stem, k, n)), entry["image"], entry["ext"])
        if not out:
            raise SourceError(f"{source}: no text layer, and OCR ({engine}) found no text on its page(s)")
        return [out[k] for k in sorted(out)]
    try:
        entries = ocr.ocr_file(engine, source, path.suffix, data)
    except ocr.OcrError as e:
        raise SourceError(str(e)) from None
    stem = _page_id(path.stem)
    found = [(ocr.page_of(e, ocr.page_id_for(stem, e)), e["image"], e["ext"]) for e in entries if e["words"]]
    if not found:
        raise SourceError(f"{source}: no text found by OCR ({engine})")
    return found


def _import_pdf_scans(path: Path, scans: list, n_pages: int, imp: _Importer) -> None:
    """Pages of a PDF without a text layer, rendered at OCR_PDF_DPI and read by OCR."""
    which = ", ".join(str(k + 1) for k in scans[:10]) + (" ..." if len(scans) > 10 else "")
    # in a PDF whose other pages have text, a page without any is often blank: said as a note,
    # and the pages with text come in; a PDF with no text at all needs the OCR (an error)
    said = imp.report.notes if n_pages > len(scans) else imp.report.errors
    missing = ocr.available(imp.ocr.engine)
    if missing is not None:
        said.append((str(path), f"{path}: page(s) {which} have no text layer and need OCR to be read: {missing}"))
        return
    try:
        items = render_pdf_scans(path, scans)
    except SourceError as e:
        imp.report.errors.append((str(path), str(e)))
        return
    stem = safe_page_id(path.stem)
    for (label, _, _), k, (kind, value) in ((it, k, r) for k, (it, r) in zip(scans, imp.ocr.results(items))):
        if kind == "error":
            imp.report.errors.append((str(path), value))
            continue
        entry = value[0]
        if not entry["words"]:
            said.append((str(path), f"{label}: no text layer, and OCR ({entry['ocr']['engine']}) "
                                             f"found no text"))
            continue
        _add_ocr_page(imp, entry, pdf_page_id(stem, k, n_pages), path,
                      *((stem, k + 1) if n_pages > 1 else (None, None)))


def _add_ocr_page(imp: _Importer, entry: dict, page_id: str, source, document: str | None = None,
                  number: int | None = None) -> None:
    """One page read by OCR into the project: its image first (pages/images/<id>.png|.jpg),
    then the page that names it; the image is removed again when the page is refused.
    document, number: the page's document and its number in it (a page of a multi-page PDF or
    TIFF; dxstudio.documents), or None for a page of its own."""
    from dataclasses import replace

    page = ocr.page_of(entry, page_id)
    if document is not None:
        page = replace(page, document=document, page_number=number)
    existing = _existing_page(imp.project, page_id)
    if existing is not None:
        if replace(existing, image=None).to_dict() == page.to_dict():
            imp.add(existing, source)  # already imported: unchanged
        else:
            imp.add(page, source)  # refused: a different page under this id (nothing written)
        return
    name = f"images/{page_id}{entry['ext']}"
    target = imp.project.pages_dir / name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(target, entry["image"])
        page = replace(page, image=name)
    except OSError as e:
        imp.report.notes.append((str(source), f"page {page_id}: image not written ({e})"))
        target = None
    before = len(imp.report.errors)
    imp.add(page, source)
    if len(imp.report.errors) > before and target is not None:
        try:
            target.unlink()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------
# images

def _image_files(src: Path) -> tuple[list[Path], int]:
    """The image files of a folder (by suffix, sorted) or the one file named, and how many
    other files the folder holds."""
    _check_source(src)
    if src.is_file():
        return [src], 0
    files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    return images, len(files) - len(images)


def _import_images(src: Path, imp: _Importer) -> None:
    files, others = _image_files(src)
    if not files:
        raise SourceError(f"{src}: no image files (.png, .jpg, .jpeg, .tif, .tiff, .webp)")
    missing = ocr.available(imp.ocr.engine)
    if missing is not None:
        raise SourceError(missing)
    if others:
        imp.report.notes.append((str(src), f"{others} file(s) that are not images (by their extension) left out"))
    read_errors = {}

    def items():
        for path in files:
            if imp.outside(path):
                continue
            try:
                data = read_regular_file(path, MAX_SOURCE_BYTES, SourceError)
            except SourceError as e:
                read_errors[str(path)] = str(e)
                data = b""
            yield (str(path), path.suffix, data)

    imp.step(0, len(files))
    done = 0
    for (label, _, _), (kind, value) in imp.ocr.results(items()):
        done += 1
        path = Path(label)
        if label in read_errors:
            imp.report.errors.append((label, read_errors.pop(label)))
        elif kind == "error":
            imp.report.errors.append((label, value))
        else:
            stem = _page_id(path.stem)
            for entry in value:
                pid = ocr.page_id_for(stem, entry)
                if not entry["words"]:
                    imp.report.errors.append((label, f"{label}{'' if entry['frames'] == 1 else ' page ' + str(entry['number'])}: "
                                                     f"no text found by OCR ({entry['ocr']['engine']})"))
                    continue
                # the frames of a multi-page TIFF are one document (dxstudio.documents)
                _add_ocr_page(imp, entry, pid, label, *((stem, entry["number"]) if entry["frames"] > 1
                                                        else (None, None)))
        imp.step(done, len(files))


def _existing_page(project: Project, page_id: str) -> Page | None:
    """The page already saved under this id, or None (none, or an unreadable file)."""
    try:
        return project.load_page(page_id) if project.has_page(page_id) else None
    except (PageError, ProjectError):
        return None


_IMPORTERS = {"json": _import_json, "funsd": _import_funsd, "sroie": _import_sroie,
              "cord": _import_cord, "pdf": _import_pdf, "images": _import_images}


def import_pages(fmt: str, src, project: Project, progress=None, ocr: OcrOptions | None = None) -> ImportReport:
    """Import every page of `src` in format `fmt` into `project`. progress(done, total) is
    called before each source file. `ocr`: how images and scanned PDF pages are read. A source that cannot be read at all raises SourceError;
    problems with single files are collected in the report."""
    if fmt not in _IMPORTERS:
        raise SourceError(f"unknown import format {fmt!r}; expected one of {', '.join(FORMATS)}")
    src = Path(src)
    _check_source(src)
    # Links inside the source are followed only while they stay inside it (docs/security.md).
    if src.is_dir():
        root = src.resolve()
    elif fmt in ("sroie", "funsd"):
        root = src.resolve().parent.parent  # box/NAME.csv, annotations/NAME.json: the data set folder
    else:
        root = None  # a single file named by the person: nothing else is read
    imp = _Importer(fmt, project, progress, root, ocr)
    _IMPORTERS[fmt](src, imp)
    if progress is not None and imp.total:
        progress(imp.total, imp.total)
    return imp.report
