"""Local OCR: images (PNG, JPEG, TIFF incl. multi-page, WebP) and image-only PDF pages to
words with boxes in the image's pixels. Qt-free; the engines are the optional `ocr` extra
(pip install "dxstudio[ocr]"): nothing here imports them at module level.

    pages = read_image_file(path)             # [(page number, upright RGB array)], bounded
    result = ocr_image(rgb, engine="rapidocr")  # OcrResult: words (reading order), size,
                                              # rotation applied, engine and version
    page = result.page(page_id, image_name)   # a Page whose `ocr` names the engine

Engines (docs/ocr.md measures both):
  rapidocr   the default: PP-OCRv4 detection + recognition on onnxruntime; the models come
             inside the rapidocr-onnxruntime wheel, so nothing is downloaded at run time.
             One thread per page (the same words at any --workers: parallelism is processes).
  tesseract  Tesseract 5 through pytesseract, where the `tesseract` program is installed
             (Debian: apt-get install tesseract-ocr).

Orientation: EXIF orientation is applied when the image is read; then a page whose text
runs at 90, 180 or 270 degrees is turned upright (rapidocr: its text lines' shape and its
0/180 line classifier; tesseract: its orientation detection) and read again.

Every problem is an OcrError whose message names the file and says what is wrong.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from dxstudio.engine.page import Page, Word

ENGINES = ("rapidocr", "tesseract")
DEFAULT_ENGINE = "rapidocr"
INSTALL_HINT = ('the OCR engine is not installed; install the ocr extra: pip install "dxstudio[ocr]" '
                '(or pip install -e ".[ocr]" in a checkout)')

# Bounds on what is decoded (docs/security.md): a 20,000 x 20,000 image is 400 M pixels, 1.2 GB
# as RGB, refused from its header before any pixel is decoded. A page scanned at 600 dpi is
# 5100 x 6600 = 34 M pixels; a phone photo 12-50 M.
MAX_IMAGE_PIXELS = 60_000_000
MIN_IMAGE_SIDE = 8  # a narrower image cannot hold a readable character
MAX_FRAMES = 1000  # pages of one multi-page TIFF

IMAGE_SUFFIXES = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".tif": "TIFF", ".tiff": "TIFF",
                  ".webp": "WEBP"}
OCR_PDF_DPI = 200.0  # a PDF page without a text layer is rendered at this resolution for OCR
# rapidocr: a gap between two characters wider than this share of the line's median character
# width ends a word (best of 0.3-1.7 on SROIE receipts 200-211 against the data set's OCR; docs/ocr.md)
WORD_GAP = 0.6
COLONS = (":", "\uff1a")  # a word ends after a colon (the full-width one of the Chinese models too)
# rapidocr: a page whose text lines are smaller than SMALL_TEXT_PX (median line height of the
# detector's boxes, in the page's pixels up to rapidocr's 2000 on the longer side) is read again
# enlarged SMALL_TEXT_SCALE times (cubic), its longer side at most SMALL_TEXT_MAX_SIDE: small
# print read at its own size loses letters ("12.JdanT 7 K nPeind" for "12, Jalan Tampoi
# 7/4,Kawasan Perindustrian"; docs/ocr.md). 18 is set for the boxes of the detector at 736; at
# DET_MIN_SIDE 576 they are a pixel or two taller, and 19 takes the same 33 of 110 SROIE receipts
# for small print (and two more; docs/ocr.md, "Tenth round")
SMALL_TEXT_PX = 18.0
SMALL_TEXT_SCALE = 2.0
SMALL_TEXT_MAX_SIDE = 3200
# rapidocr: lines recognised one at a time (rapidocr pads a batch to its widest line; one at a
# time is faster on a CPU and reads each line alone: docs/ocr.md)
REC_BATCH = 1
# rapidocr: each line is resized to REC_HEIGHT pixels high (its width in proportion) for the
# recogniser, not to rapidocr's 48: the recogniser's time goes with its input's area, and
# PP-OCRv4's recogniser reads any height from 33 to 48 (its last stage is then 3 high). At 44 a
# read of SROIE receipts is 9% faster with the same grounding (100 of 110), CER (0.0610 against
# 0.0613) and end to end (0.884 against 0.869, seeds 0 and 1); 40 was 20% faster but grounding
# kept 98 (docs/ocr.md, "Ninth round"; with the detector at 576, "Tenth round": end to end 0.040
# from the data set's pipeline); 36 and below lose letters. 48: rapidocr's own.
REC_HEIGHT = 44
# rapidocr: a page read enlarged as small print (SMALL_TEXT_PX) has its lines recognised
# REC_HEIGHT_SMALL_PRINT pixels high, whatever REC_HEIGHT is (its padding in proportion): at 40
# everywhere the enlarged small print of 10 training receipts lost its address (grounding kept 41
# of 60 against 52 at 48, 50 with this; docs/ocr.md, "Ninth round"). 48: rapidocr's own.
REC_HEIGHT_SMALL_PRINT = 48
# rapidocr: a line narrower than REC_MIN_WIDTH (in the recogniser's REC_HEIGHT-pixel-high input;
# at another height in proportion) is padded only to that width, not to rapidocr's 320: a short
# word ("RM", "1.50") no longer pays for 320 pixels of padding (recognition 22% faster on SROIE
# receipts, the same folded CER; docs/ocr.md). 160 at 48 high (the fifth to eighth rounds); 147 at
# 44 (the ninth), 136 at 40: the same shape
REC_MIN_WIDTH = 147
# rapidocr: a line wider than REC_MAX_WIDTH at the recogniser's REC_HEIGHT pixels high is squeezed to that
# width. 0 (the default): no bound, as rapidocr. 640 took 3% off a read but squeezed the letters
# of a long address line out of receipt 589 ("OASIS VILLAGE" -> "ASISVI AGE"; docs/ocr.md, "Fifth round")
REC_MAX_WIDTH = 0
# rapidocr: the detector enlarges a page to DET_MIN_SIDE on its shorter side (rapidocr's own 736).
# Reading a receipt at its own size (512) takes a third of the detector's time, but small print
# is then not taken for small print (5 of 6 receipts it lost were not read again, below) and loses
# letters: grounding kept 95 of 110 SROIE receipts against 100 (docs/ocr.md, "Speed (third round)").
# At 576 (with REC_HEIGHT 40) a read was 0.3 s faster on AVX2 but the small-print receipts lost their
# addresses: grounding kept 37 of the 60 training receipts (docs/ocr.md, "Ninth round"): their
# taller boxes at 576 no longer said small print. With SMALL_TEXT_PX set again for 576 (19) the
# same pages are read enlarged (at SMALL_TEXT_DET_MIN_SIDE) and a page's first detection costs 40%
# less, but the other pages' words are worse: end to end 0.041 from the data set's pipeline
# against 0.010 at 736, so 736 stays (docs/ocr.md, "Tenth round")
DET_MIN_SIDE = 736
# rapidocr: a page read enlarged as small print is detected with the detector enlarging it to at
# least SMALL_TEXT_DET_MIN_SIDE on its shorter side, whatever DET_MIN_SIDE is: small print's
# words stay those of the detector at 736 (docs/ocr.md, "Tenth round")
SMALL_TEXT_DET_MIN_SIDE = 736
# rapidocr: a page is taken for small print from the detector's own line boxes, before any line
# is recognised, and read enlarged at once: before, its lines were recognised at the page's size
# only to be read again (the same words where the two agree; docs/ocr.md, "Sixth round").
# False: recognise first, then judge from the recognised lines (the fifth round's code).
EARLY_SMALL_TEXT = True
# rapidocr: a page read enlarged as small print is detected again at the enlarged size (True,
# the sixth round's code). False: the lines the detector found at the page's own size (before
# any recognition, EARLY_SMALL_TEXT) are cut from the enlarged page and recognised there, and
# the enlarged page is not detected again (docs/ocr.md, "Seventh round")
SMALL_TEXT_REDETECT = True
# rapidocr: the 0/180 line classifier reads the CLS_SAMPLE longest lines first; when none reads
# upside down the page is upright and the other lines are not classified (docs/ocr.md, "Fourth
# round"); otherwise every line is, as rapidocr does. 0: every line always.
CLS_SAMPLE = 8
# rapidocr: its three models run with their per-layer arithmetic folded (dxstudio/ocr_graph.py:
# the affine blocks into the convolutions, hard-swish in two operators, not four): the same
# function to float32 rounding, the same words on receipts and a read 24% faster (docs/ocr.md,
# "Fifth round"). Made once under the user's cache folder (by the onnx package, in the ocr
# extra); without onnx and nothing cached the models run as they come. False: always as they come.
FOLD_MODELS = True


class OcrError(ValueError):
    """A file or page that cannot be read by OCR; str() names the file and the problem."""


class OcrMissing(OcrError):
    """The OCR extra (or the chosen engine) is not installed."""


def check_pixels(width: int, height: int, source: str) -> None:
    """OcrError naming `source` when an image of width x height is too large or too small."""
    if width * height > MAX_IMAGE_PIXELS:
        raise OcrError(f"{source}: {width} x {height} pixels is more than the {MAX_IMAGE_PIXELS:,} "
                       f"pixels read (about 7700 x 7700); scale it down first")
    if min(width, height) < MIN_IMAGE_SIDE:
        raise OcrError(f"{source}: {width} x {height} pixels is too small to hold text "
                       f"(at least {MIN_IMAGE_SIDE} pixels a side)")


def sniff_format(head: bytes) -> str | None:
    """PNG, JPEG, TIFF, WEBP, PDF or GIF/BMP from a file's first bytes, else None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith(b"%PDF-"):
        return "PDF"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head[:2] == b"BM":
        return "BMP"
    return None


def _pil():
    try:
        from PIL import Image, ImageOps
    except ImportError:
        raise OcrMissing(INSTALL_HINT) from None
    return Image, ImageOps


def _to_rgb(im):
    """An RGB copy of a PIL image of any mode (transparency over white, 16-bit scaled)."""
    Image, _ = _pil()
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        import numpy as np

        a = np.asarray(im, dtype=np.float64)
        top = float(a.max()) or 1.0
        im = Image.fromarray((a * (255.0 / top)).astype("uint8"), "L")
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        im = im.convert("RGBA")
        back = Image.new("RGBA", im.size, (255, 255, 255, 255))
        im = Image.alpha_composite(back, im)
    return im.convert("RGB")


def read_image_bytes(data: bytes, source: str, suffix: str | None = None) -> list:
    """[(page number from 1, upright RGB uint8 array)] of an image file's bytes: EXIF
    orientation applied, each frame of a multi-page TIFF a page. `suffix` (".png"...) must
    agree with the content when given. OcrError naming `source` for a file that is not an
    image, not what its extension says, truncated, too large or too small."""
    import io

    import numpy as np

    kind = sniff_format(data[:16])
    expected = IMAGE_SUFFIXES.get((suffix or "").lower())
    if kind not in ("PNG", "JPEG", "TIFF", "WEBP"):
        what = f"a {kind} file" if kind else "not an image (no PNG, JPEG, TIFF or WebP header)"
        raise OcrError(f"{source}: {what}; images are read as PNG, JPEG, TIFF or WebP")
    if expected is not None and kind != expected:
        raise OcrError(f"{source}: the file is a {kind} image, not {expected} as its extension says; "
                       f"rename it to what it is")
    if kind == "PNG" and len(data) >= 24:  # the size from the header, before the decoder sees it
        import struct

        width, height = struct.unpack(">II", data[16:24])
        check_pixels(int(width), int(height), source)
    Image, ImageOps = _pil()
    from PIL import ImageSequence, UnidentifiedImageError

    try:
        im = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        raise OcrError(f"{source}: more than the {MAX_IMAGE_PIXELS:,} pixels read ({e})") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise OcrError(f"{source}: not a readable {kind} image ({e})") from None
    pages = []
    try:
        n = getattr(im, "n_frames", 1)
        if n > MAX_FRAMES:
            raise OcrError(f"{source}: {n} pages, more than the {MAX_FRAMES} read from one file")
        for k, frame in enumerate(ImageSequence.Iterator(im) if n > 1 else [im]):
            where = source if n == 1 else f"{source} page {k + 1}"
            check_pixels(frame.size[0], frame.size[1], where)  # before any pixel is decoded
            try:
                frame.load()
                upright = ImageOps.exif_transpose(frame)
                rgb = np.asarray(_to_rgb(upright), dtype=np.uint8)
            except Image.DecompressionBombError as e:
                raise OcrError(f"{where}: more than the {MAX_IMAGE_PIXELS:,} pixels read ({e})") from None
            except (OSError, ValueError, SyntaxError, EOFError) as e:
                msg = str(e) or type(e).__name__
                if "truncated" in msg or isinstance(e, EOFError):
                    msg = f"truncated ({msg})"
                raise OcrError(f"{where}: the image does not decode: {msg}") from None
            check_pixels(rgb.shape[1], rgb.shape[0], where)
            pages.append((k + 1, np.ascontiguousarray(rgb)))
    finally:
        im.close()
    return pages


def read_image_file(path) -> list:
    """read_image_bytes of a file (a regular file of bounded size)."""
    from pathlib import Path

    from dxstudio.fsutil import MAX_SOURCE_BYTES, read_regular_file

    path = Path(path)
    data = read_regular_file(path, MAX_SOURCE_BYTES, OcrError)
    return read_image_bytes(data, str(path), path.suffix)


# ---------------------------------------------------------------------------------------
# Engines

@dataclass
class Line:
    box: tuple  # (x0, y0, x1, y1) in image pixels
    words: list  # [Word]
    upright: bool = True  # the line classifier's verdict (rapidocr), True when unknown
    vertical: bool = False  # the line is taller than wide (text running at 90/270)
    score: float = 0.0  # confidence (0-1) times characters: how well the line was read
    confidence: float = 0.0  # the recogniser's mean character confidence (0-1)
    # rapidocr: the recognised characters [(char, (x0, y0, x1, y1))] in image pixels, before
    # they were cut into words (None when the line's words were split evenly)
    chars: list | None = field(default=None, repr=False)


@dataclass
class OcrResult:
    words: list  # [Word] in reading order, boxes in the pixels of the upright image
    width: int
    height: int
    rotation: int  # degrees (counter-clockwise) the image was turned to read it upright
    engine: str
    version: str
    image: object = field(default=None, repr=False)  # the upright RGB array

    def meta(self) -> dict:
        return {"engine": self.engine, "version": self.version, "rotation": self.rotation}

    def page(self, page_id: str, image: str | None = None) -> Page:
        return Page(page_id, float(self.width), float(self.height), tuple(self.words), image,
                    ocr=self.meta())


# an amount run together with the letters printed after it ("5.00RM", read "5.00RH"; "2.50S"):
# the data set's OCR gives "5.00 RM", two words, and the model learns amounts as words of their own
_AMOUNT_SUFFIX = re.compile(r"([-+]?\d[\d,]*[.,]\d{2})([A-Za-z]{1,3})")


def split_amount_suffix(words) -> list:
    """Words with an amount followed by 1-3 letters in one word ("5.00RM") split in two, the box
    cut in proportion to the characters ("5.00", "RM"). Anything else is left as it is
    ("RM5.00", "1.5OR", "A4RM", "12.505RM")."""
    out = []
    for w in words:
        m = _AMOUNT_SUFFIX.fullmatch(w.text)
        if m is None:
            out.append(w)
            continue
        x0, y0, x1, y1 = w.box
        cut = x0 + (x1 - x0) * len(m.group(1)) / len(w.text)
        out.append(Word(m.group(1), (x0, y0, cut, y1)))
        out.append(Word(m.group(2), (cut, y0, x1, y1)))
    return out


# words the recogniser ran together, a lower-case letter then a capitalised word ("NetTotal",
# "TotalInclGsT", "JohorBahru"): the data set's OCR gives them apart ("NET TOTAL"), and a field's
# name run into the next word is not seen as its name by grounding (docs/ocr.md, "Fourth round")
_JOINED = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")
# a name's own capital after Mc / Mac ("McDonald's", "MacArthur") is not a run-together word
_NAME_PREFIX = re.compile(r"(?:^|[^A-Za-z])Ma?c$")
# a dollar sign read as S before an amount ("S8.20" for "$8.20")
_DOLLAR_AS_S = re.compile(r"S(\d[\d,]*\.\d{2})")


def split_joined_words(words) -> list:
    """Words with a capitalised word run into a lower-case letter split there ("NetTotal" ->
    "Net" "Total"; "TotalInclGsT" -> "Total" "Incl" "GsT"), the box cut in proportion to the
    characters; a part of one letter is not split off ("iPhone", "eWallet" stay), nor a name's
    capital after Mc or Mac ("McDonald's", "MacArthur"). "S" before an
    amount with two decimals is the dollar sign ("S8.20" -> "$8.20"). Anything else is left as
    it is ("TOTAL", "SST", "S8", "S8.2")."""
    out = []
    for w in words:
        text = w.text
        m = _DOLLAR_AS_S.fullmatch(text)
        if m is not None:
            text = "$" + m.group(1)
        cuts = [0] + [k for k in (m.start() for m in _JOINED.finditer(text))
                      if k >= 2 and not _NAME_PREFIX.search(text[:k])] + [len(text)]
        cuts = sorted(set(cuts))
        if len(cuts) == 2:
            out.append(w if text == w.text else Word(text, w.box))
            continue
        x0, y0, x1, y1 = w.box
        per = (x1 - x0) / len(text)
        for a, b in zip(cuts, cuts[1:]):
            out.append(Word(text[a:b], (x0 + per * a, y0, x0 + per * b if b < len(text) else x1, y1)))
    return out


# dates the recogniser runs into the time after them or cuts at a gap: the data set's OCR gives
# "29/06/2018" "8:26:57", "05" "MAR" "2018" "18:24", "25/12/2018" (docs/ocr.md, "Sixth round")
_MONTHS = ("jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|"
           "july|august|september|october|november|december")
_TIME = r"(?:[01]?\d|2[0-3]):[0-5]\d"
# a numeric date run into a time: the digits after the second separator are a year of 2 or 4
# digits (19xx, 20xx) and then the hour, one reading only ("01-03-185:23:26", "29/06/20188:26:57AM")
_DATE_TIME = re.compile(r"(\d{1,2}([-/.])\d{1,2}\2(?:(?:19|20)\d{2}|\d{2}))(%s.*)" % _TIME)
# a date with its month's name, run together, perhaps into the time ("05Mar201818:24", "Mar2018")
_NAMED_DATE = re.compile(r"(\d{1,2})?(%s)((?:19|20)\d{2})(%s.*)?" % (_MONTHS, _TIME), re.IGNORECASE)
_NAMED_DATE_SHORT = re.compile(r"(\d{1,2})(%s)(\d{2})" % _MONTHS, re.IGNORECASE)
# the first part of a date cut before the last two digits of its year ("25/12/20" "18")
_DATE_CUT = re.compile(r"\d{1,2}([-/.])\d{1,2}\1(?:19|20)")
_TIME_AFTER = re.compile(r"%s.*" % _TIME)


def _cut(word, parts) -> list:
    """`word` cut into consecutive `parts` (their texts join to its text), boxes in proportion."""
    x0, y0, x1, y1 = word.box
    per = (x1 - x0) / len(word.text)
    out, at = [], 0
    for k, part in enumerate(parts):
        end = at + len(part)
        out.append(Word(part, (x0 + per * at, y0, x0 + per * end if k < len(parts) - 1 else x1, y1)))
        at = end
    return out


def _same_row_next(a, b) -> bool:
    """Whether word b follows word a on its row, within a character or so of it."""
    ah, bh = a.box[3] - a.box[1], b.box[3] - b.box[1]
    overlap = min(a.box[3], b.box[3]) - max(a.box[1], b.box[1])
    return overlap > 0.5 * min(ah, bh) and -0.5 * ah <= b.box[0] - a.box[2] <= 1.5 * ah


def split_dates(words) -> list:
    """Dates as words of their own, as printed: a date run into the time after it split from it
    ("29/06/20188:26:57AM" -> "29/06/2018" "8:26:57AM"; "01-03-185:23:26" -> "01-03-18"
    "5:23:26"), a date with its month's name run together cut into day, month and year
    ("05Mar201818:24" -> "05" "Mar" "2018" "18:24"; "Mar2018" -> "Mar" "2018"; "15Jun18" ->
    "15" "Jun" "18"), and a date cut before the last two digits of its year joined again when the
    two words follow on one row ("25/12/20" "18" -> "25/12/2018"). Anything else is left as it is
    ("12/2018", "10:30", "2018-03-23", "SH01", "Mar")."""
    out = []
    for w in words:
        t = w.text
        m = _DATE_TIME.fullmatch(t)
        if m is not None:
            out.extend(_cut(w, [m.group(1), m.group(3)]))
            continue
        m = _NAMED_DATE.fullmatch(t) or _NAMED_DATE_SHORT.fullmatch(t)
        if m is not None:
            out.extend(_cut(w, [g for g in m.groups() if g]))
            continue
        if out and re.fullmatch(r"\d{2}", t[:2]) and _DATE_CUT.fullmatch(out[-1].text) \
                and (len(t) == 2 or _TIME_AFTER.fullmatch(t[2:])) and _same_row_next(out[-1], w):
            prev = out.pop()
            joined = Word(prev.text + t[:2], (prev.box[0], min(prev.box[1], w.box[1]),
                                              w.box[2] if len(t) == 2 else w.box[0] + (w.box[2] - w.box[0]) * 2 / len(t),
                                              max(prev.box[3], w.box[3])))
            out.append(joined)
            if len(t) > 2:
                out.append(Word(t[2:], (joined.box[2], w.box[1], w.box[2], w.box[3])))
            continue
        out.append(w)
    return out


# a number of 3 digits or more run into a word of 3 letters or more, either way round
# ("81200Johor", "Tampoi81200", "BILL18550"): the postcode and the town, apart in the data set's OCR
_DIGITS_LETTERS = re.compile(r"(?<=\d{3})(?=[^\W\d_]{3})|(?<=[^\W\d_]{3})(?=\d{3})")


def split_digits_letters(words) -> list:
    """Words where a run of 3 digits or more meets a run of 3 letters or more split there, the box
    cut in proportion ("81200Johor" -> "81200" "Johor"; "Tampoi81200Johor" -> "Tampoi" "81200"
    "Johor"). Shorter runs stay as printed ("UPTOWN3", "SH01", "5.00RM", "JM0325955-V", "PJU6A")."""
    out = []
    for w in words:
        cuts = [m.start() for m in _DIGITS_LETTERS.finditer(w.text)]
        if not cuts:
            out.append(w)
            continue
        bounds = [0] + cuts + [len(w.text)]
        out.extend(_cut(w, [w.text[a:b] for a, b in zip(bounds, bounds[1:])]))
    return out


def _colon_ends(cur, ch: str) -> bool:
    """Whether the word `cur` ([(char, box)]) ends at its last character, a colon, before `ch`:
    yes after a letter ("Date:25/12/2018"), never between two digits (a time, "13:16:21", is one
    word, as the data set's OCR gives it)."""
    if cur[-1][0] not in COLONS:
        return False
    return not (len(cur) >= 2 and cur[-2][0].isdigit() and ch.isdigit())


COMMAS = (",", "\uff0c")


def _comma_ends(cur, ch: str) -> bool:
    """Whether the word `cur` ([(char, box)]) ends at its last character, a comma, before `ch`:
    before a letter ("Cheras,Selangor", "9,Bandar"), and after a letter before a digit
    ("Perdana,40150"), as the data set's OCR gives them apart; never between two digits
    ("1,234.50", "SS21/39,47400")."""
    if cur[-1][0] not in COMMAS or len(cur) < 2:
        return False
    return ch.isalpha() or (cur[-2][0].isalpha() and ch.isdigit())


def _char_items(chars, boxes) -> list:
    """[(char, (x0, y0, x1, y1))] of a recognised line's characters and their quads."""
    items = []
    for ch, quad in zip(chars, boxes):
        xs = [p[0] for p in quad]
        ys = [p[1] for p in quad]
        items.append((ch, (float(min(xs)), float(min(ys)), float(max(xs)), float(max(ys)))))
    return items


def _line_words_from_chars(chars, boxes) -> list:
    """Words of a recognised line from its characters and their boxes (quads): a word ends
    at a space and at a gap wider than WORD_GAP (0.6) of the line's median character width (the
    recogniser often leaves out the spaces between Latin words)."""
    return _words_of_chars(_char_items(chars, boxes))


def _words_of_chars(items) -> list:
    """_line_words_from_chars of [(char, box)]."""
    widths = sorted(b[2] - b[0] for ch, b in items if ch.strip())
    gap_limit = WORD_GAP * widths[len(widths) // 2] if widths else 0.0
    words, cur, prev = [], [], None
    for ch, b in items:
        if not ch.strip():
            if cur:
                words.append(cur)
            cur, prev = [], None
            continue
        if cur and prev is not None and (b[0] - prev[2] > gap_limit or _colon_ends(cur, ch) or _comma_ends(cur, ch)):
            words.append(cur)  # a gap, a colon or a comma ends a word ("Date:25/12/2018": two words)
            cur = []
        cur.append((ch, b))
        prev = b
    if cur:
        words.append(cur)
    out = []
    for w in words:
        text = unicodedata.normalize("NFKC", "".join(c for c, _ in w)).strip()
        if not text:
            continue
        bs = [b for _, b in w]
        out.append(Word(text, (min(b[0] for b in bs), min(b[1] for b in bs),
                               max(b[2] for b in bs), max(b[3] for b in bs))))
    return out


def _split_evenly(text: str, box) -> list:
    from dxstudio.importers import split_line

    return split_line(text, box)


def session_options(onnxruntime):
    """The options of every rapidocr session: one thread, run sequentially (the same numbers
    on any machine; parallelism is processes), every graph optimisation (onnxruntime's NCHWc
    layout: the recogniser 1.6x faster than ORT_ENABLE_EXTENDED), the memory arena on
    (rapidocr turns it off; docs/ocr.md)."""
    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 4
    opts.enable_cpu_mem_arena = True
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return opts


def _reuse_memory(wrapper, onnxruntime, path: str | None = None) -> None:
    """The session of rapidocr's wrapper made again with session_options (the memory arena on:
    rapidocr turns it off, and every run then allocates its buffers afresh, 30% of the
    detector's time on receipts), on the model file `path` (the folded model, ocr_graph) or the
    one it was made from."""
    old = getattr(wrapper, "session", None)
    path = path or getattr(old, "_model_path", None)
    if old is None or not path:
        return
    wrapper.session = onnxruntime.InferenceSession(
        path, sess_options=session_options(onnxruntime),
        providers=[("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})])


def folded_paths(wrappers, fold: bool | None = None):
    """([path or None for each wrapper], note): the folded model of each of rapidocr's session
    wrappers, all or none (a page is read by one kind of model: the version says which); None
    and why when any cannot be made here."""
    if not (FOLD_MODELS if fold is None else fold):
        return [None] * len(wrappers), "not folded (FOLD_MODELS is off)"
    from dxstudio.ocr_graph import folded_model_path

    out = []
    for w in wrappers:
        path = getattr(getattr(w, "session", None), "_model_path", None)
        folded, note = folded_model_path(path) if path else (None, "no model file")
        if folded is None:
            return [None] * len(wrappers), note
        out.append(str(folded))
    return out, "folded"


def _char_boxes(crops, dt_boxes, rec_res) -> list:
    """rapidocr's CalRecBoxes (1.4.4): each recognised line's character boxes, from the
    recogniser's column of each character, turned back from the line's crop into the detector's
    pixels, the same arithmetic (cal_ocr_word_box, adjust_box_overlap, the inverse of the crop's
    perspective transform, truncated to whole pixels) but all points of a line at once and
    without its per-point Python (order_points, deepcopy): 0.13 s of a receipt's 3.3 s. The four
    corners of a box come in any order (only their extent is used)."""
    import math

    import cv2
    import numpy as np
    from rapidocr_onnxruntime.cal_rec_boxes.main import CalRecBoxes as C

    out = []
    for crop, box, rec in zip(crops, dt_boxes, rec_res):
        text, conf, info = rec[0], rec[1], rec[2]
        h, w = crop.shape[:2]
        img_box = np.array([[0, 0], [w, 0], [w, h], [0, h]])
        content, cells, confs = C.cal_ocr_word_box(text, img_box, info)
        cells = C.adjust_box_overlap(cells)
        if not cells:
            out.append([text, conf, [], content, confs])
            continue
        direction = C.get_box_direction(box)
        bp = np.array(box, dtype=np.float32)  # a copy: dt_boxes stay as they are
        left, top = int(np.min(bp[:, 0])), int(np.min(bp[:, 1]))
        bp[:, 0] -= left
        bp[:, 1] -= top
        cw = int(np.linalg.norm(bp[0] - bp[1]))
        ch = int(np.linalg.norm(bp[0] - bp[3]))
        std = np.array([[0, 0], [cw, 0], [cw, ch], [0, ch]], dtype=np.float32)
        _, inv = cv2.invert(cv2.getPerspectiveTransform(bp, std))
        pts = np.array(cells, dtype=np.float64).reshape(-1, 2)
        if direction == "h":  # CalRecBoxes.s_rotate by -90 degrees about the origin, then + cw
            a = math.radians(-90)
            x, y = pts[:, 0].copy(), pts[:, 1].copy()
            pts = np.stack([x * math.cos(a) + y * math.sin(a) + cw, y * math.cos(a) - x * math.sin(a)], axis=1)
        p = np.concatenate([pts.astype(np.float32), np.ones((len(pts), 1), np.float32)], axis=1).astype(np.float64)
        xyz = p @ inv.T
        xs = (xyz[:, 0] / xyz[:, 2] + left).astype(np.int64)
        ys = (xyz[:, 1] / xyz[:, 2] + top).astype(np.int64)
        quads = np.stack([xs, ys], axis=1).reshape(-1, 4, 2).tolist()
        out.append([text, conf, quads, content, confs])
    return out


def _table_normalize(pre) -> None:
    """rapidocr's detector input, (uint8 * 1/255 - mean) / std as float32, looked up in a table of
    the 256 values of each channel (the same numbers, computed once, not per pixel), by OpenCV's
    LUT in one pass over the pixels (a third of numpy's per-channel indexing: 5 against 13 ms
    a receipt)."""
    import cv2
    import numpy as np

    v = np.arange(256, dtype=np.float32)[:, None]
    lut = ((v * pre.scale - pre.mean) / pre.std).astype(np.float32)  # (256, channels)
    table = np.ascontiguousarray(lut.reshape(1, 256, -1))

    def normalize(img):
        return cv2.LUT(img, table)

    pre.normalize = normalize


def _cap_width(rec, most: int) -> None:
    """rapidocr's recogniser resizing each line to at most `most` pixels wide (at its input
    height): a longer line is squeezed to `most`, not resized in proportion."""
    resize = rec.resize_norm_img

    def capped(img, max_wh_ratio):
        return resize(img, min(max_wh_ratio, most / rec.rec_image_shape[1]))

    rec.resize_norm_img = capped


def _rec_shape(channels: int, height: int) -> list:
    """rapidocr's recogniser input shape for lines `height` pixels high: padded to at least
    REC_MIN_WIDTH at REC_HEIGHT, the same width-to-height ratio at another height (REC_MIN_WIDTH
    itself at REC_HEIGHT)."""
    return [channels, height, round(REC_MIN_WIDTH * height / REC_HEIGHT)]


class RapidEngine:
    name = "rapidocr"

    def __init__(self):
        try:
            import rapidocr_onnxruntime
            from rapidocr_onnxruntime import RapidOCR
        except ImportError:
            raise OcrMissing(INSTALL_HINT) from None
        import logging

        logging.getLogger("RapidOCR").setLevel(logging.ERROR)
        try:
            from importlib.metadata import version

            ver = version("rapidocr-onnxruntime")
        except Exception:
            ver = getattr(rapidocr_onnxruntime, "__version__", "unknown")
        import onnxruntime

        self.version = f"rapidocr-onnxruntime {ver} (PP-OCRv4, onnxruntime {onnxruntime.__version__})"
        # one thread: the same numbers whatever the machine's cores; pages run in parallel
        # as processes (--workers, --ray)
        self.ocr = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1,
                            det_limit_type="min", det_limit_side_len=DET_MIN_SIDE)
        self.ocr.text_rec.rec_batch_num = REC_BATCH
        shape = list(self.ocr.text_rec.rec_image_shape)
        self.ocr.text_rec.rec_image_shape = _rec_shape(shape[0], REC_HEIGHT)
        self.rec = self.ocr.text_rec
        if REC_MAX_WIDTH:
            _cap_width(self.ocr.text_rec, REC_MAX_WIDTH)
        wrappers = (self.ocr.text_det.infer, self.ocr.text_cls.infer, self.ocr.text_rec.session)
        paths, self.fold_note = folded_paths(wrappers)
        for wrapper, path in zip(wrappers, paths):
            _reuse_memory(wrapper, onnxruntime, path)
        # what ran is recorded in each page: the folded models read a word differently now and then
        self.folded = paths[0] is not None
        if self.folded:
            from dxstudio.ocr_graph import FOLD_VERSION

            self.version = self.version[:-1] + f", folded v{FOLD_VERSION})"
        # the input sizes that change the words read, where they are not rapidocr's own
        sizes = [f"recogniser {REC_HEIGHT} high ({REC_HEIGHT_SMALL_PRINT} on small print)"
                 if (REC_HEIGHT, REC_HEIGHT_SMALL_PRINT) != (48, 48) else "",
                 f"detector {DET_MIN_SIDE} ({SMALL_TEXT_DET_MIN_SIDE} on small print)"
                 if (DET_MIN_SIDE, SMALL_TEXT_DET_MIN_SIDE) != (736, 736) else ""]
        if any(sizes):
            self.version = self.version[:-1] + ", " + ", ".join(x for x in sizes if x) + ")"
        self.cls_sample = CLS_SAMPLE
        self.small_quads = None  # the detector's boxes of the last page taken for small print (lines)
        self.fast_boxes = True  # _char_boxes, not rapidocr's CalRecBoxes (bench/ocr_settings.py compares)
        det = self.ocr.text_det
        made = det.get_preprocess

        def get_preprocess(max_wh):
            pre = made(max_wh)
            _table_normalize(pre)
            return pre

        det.get_preprocess = get_preprocess

    def small_text_scale(self, lines, rgb):
        """The scale at which to read `rgb` again (None: not) when its lines' median height, in
        the pixels the detector saw, is under SMALL_TEXT_PX: SMALL_TEXT_SCALE times what it saw
        (a large image is read at up to SMALL_TEXT_MAX_SIDE instead of rapidocr's 2000)."""
        return self._small_scale([ln.box[3] - ln.box[1] for ln in lines if not ln.vertical], rgb)

    def _small_scale(self, flat, rgb):
        """small_text_scale of the heights `flat` of a page's level lines."""
        if len(flat) < 3:
            return None
        h, w = rgb.shape[:2]
        seen = min(1.0, self.ocr.max_side_len / max(h, w))  # rapidocr shrinks a larger image
        median = sorted(flat)[len(flat) // 2] * seen
        if median >= SMALL_TEXT_PX:
            return None
        scale = min(SMALL_TEXT_SCALE * seen, SMALL_TEXT_MAX_SIDE / max(h, w))
        return scale if scale >= 1.25 * seen else None

    def lines_scaled(self, rgb, scale: float, quads=None) -> list:
        """The lines of `rgb` read enlarged `scale` times, boxes in `rgb`'s pixels. `quads`:
        the detector's line boxes in `rgb`'s pixels (lines(small_first=True) keeps them in
        small_quads), enlarged and recognised without detecting the enlarged page again."""
        import cv2
        import numpy as np

        h, w = rgb.shape[:2]
        big = cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))),
                         interpolation=cv2.INTER_CUBIC if scale > 1 else cv2.INTER_AREA)
        fx, fy = big.shape[1] / w, big.shape[0] / h
        if quads is not None:
            quads = [np.asarray(q, dtype=np.float32) * np.array([fx, fy], dtype=np.float32) for q in quads]
        o = self.ocr
        # rapidocr's recogniser (text_rec itself, or the one this engine was made with where
        # text_rec is wrapped: a timing, a test)
        rec = o.text_rec if hasattr(o.text_rec, "rec_image_shape") else self.rec
        keep, shape, side = o.max_side_len, rec.rec_image_shape, o.text_det.limit_side_len
        o.max_side_len = max(keep, max(big.shape[:2]))
        rec.rec_image_shape = _rec_shape(shape[0], REC_HEIGHT_SMALL_PRINT)
        o.text_det.limit_side_len = SMALL_TEXT_DET_MIN_SIDE
        try:
            lines = self.lines(big, quads=quads)
        finally:
            o.max_side_len, rec.rec_image_shape, o.text_det.limit_side_len = keep, shape, side

        def back(b):
            return (b[0] / fx, b[1] / fy, b[2] / fx, b[3] / fy)

        return [Line(back(ln.box), [Word(x.text, back(x.box)) for x in ln.words], ln.upright, ln.vertical, ln.score,
                     ln.confidence, None if ln.chars is None else [(c, back(b)) for c, b in ln.chars])
                for ln in lines]

    def classify(self, crops):
        """(crops, [[label, score]]): rapidocr's 0/180 line classifier, each line it reads as
        upside down turned, as rapidocr does; but when the CLS_SAMPLE longest lines all read
        upright the page is upright and the other lines are not classified (upright, score 1)."""
        o = self.ocr
        k = self.cls_sample
        if k and len(crops) > k:
            order = sorted(range(len(crops)), key=lambda i: (-crops[i].shape[1] / max(1, crops[i].shape[0]), i))
            order = order[:k]
            _, res, _ = o.text_cls([crops[i] for i in order])  # none turned: all read upright, or all lines below
            if all(r[0] != "180" for r in res):
                out = [["0", 1.0] for _ in crops]
                for i, r in zip(order, res):
                    out[i] = r
                return crops, out
        crops, res, _ = o.text_cls(crops)
        return crops, res

    def lines(self, rgb, small_first: bool = False, quads=None):
        """The recognised lines of an RGB image: the steps of RapidOCR.__call__ (1.4.4) with
        the 0/180 classifier's verdicts kept (its result drops them). With `small_first`, the
        scale to read the page at instead (a float), when the detector's own boxes say it is
        small print (small_text_scale of its level boxes): the lines at this size would only
        be read to be read again (EARLY_SMALL_TEXT; docs/ocr.md, "Sixth round"); the boxes,
        in `rgb`'s pixels, are kept in small_quads. `quads`: line boxes in `rgb`'s pixels to
        recognise instead of detecting (when rapidocr's preprocessing leaves the image as it
        is; otherwise it is detected)."""
        import numpy as np

        o = self.ocr
        img = np.ascontiguousarray(rgb[:, :, ::-1])  # RapidOCR works in BGR, as OpenCV reads
        raw_h, raw_w = img.shape[:2]
        op_record = {}
        img, ratio_h, ratio_w = o.preprocess(img)
        op_record["preprocess"] = {"ratio_h": ratio_h, "ratio_w": ratio_w}
        img, op_record = o.maybe_add_letterbox(img, op_record)
        as_is = ratio_h == 1.0 and ratio_w == 1.0 and not any(op_record.get("padding_1", {}).values())
        if quads is not None and len(quads) and as_is:
            dt_boxes = o.sorted_boxes(np.array(quads, dtype=np.float32))
        else:
            dt_boxes, _ = o.auto_text_det(img)
        if dt_boxes is None:
            return []
        if small_first:
            flat = []
            origin = o._get_origin_points(dt_boxes, op_record, raw_h, raw_w)
            for q in origin:
                w = float(np.linalg.norm(q[0] - q[1]))
                h = float(np.linalg.norm(q[0] - q[3]))
                if h < 1.5 * w:  # level, as Line.vertical
                    flat.append(float(q[:, 1].max() - q[:, 1].min()))
            scale = self._small_scale(flat, rgb)
            if scale is not None:
                self.small_quads = [np.asarray(q, dtype=np.float32) for q in origin]
                return scale
        crops = o.get_crop_img_list(img, dt_boxes)
        crops, cls_res = self.classify(crops)
        rec_res, _ = o.text_rec(crops, True)
        rec_res = _char_boxes(crops, dt_boxes, rec_res) if self.fast_boxes else o.cal_rec_boxes(crops, dt_boxes, rec_res)
        for r in rec_res:
            if r[2]:
                r[2] = o._get_origin_points(r[2], op_record, raw_h, raw_w).astype(np.int32).tolist()
        quads = o._get_origin_points(dt_boxes, op_record, raw_h, raw_w)
        lines = []
        for quad, cls, rec in zip(quads, cls_res, rec_res):
            text, score = rec[0], float(rec[1])
            if score < o.text_score or not text.strip():
                continue
            xs, ys = quad[:, 0], quad[:, 1]
            box = (float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))
            w = float(np.linalg.norm(quad[0] - quad[1]))
            h = float(np.linalg.norm(quad[0] - quad[3]))
            vertical = h >= 1.5 * w
            flipped = cls[0] == "180"
            chars = rec[3] if len(rec) > 3 else None
            items = None
            if rec[2] and chars and len(chars) == len(rec[2]) and not vertical and not flipped:
                items = _char_items(chars, rec[2])
                words = _words_of_chars(items)
            else:
                words = _split_evenly(" ".join(unicodedata.normalize("NFKC", text).split()), box)
            lines.append(Line(box, words, not flipped, vertical, score * len(text), score, items))
        return lines

    def rotation(self, lines) -> int:
        """Degrees (counter-clockwise) to turn the image so that its text reads upright,
        judged on the lines of three characters or more."""
        votes = [ln for ln in lines if sum(len(w.text) for w in ln.words) >= 3] or lines
        if not votes:
            return 0
        vertical = [ln for ln in votes if ln.vertical]
        if 2 * len(vertical) > len(votes):
            # a vertical crop is turned 90 degrees counter-clockwise before it is read: read
            # upright, the page was turned clockwise (turn it back counter-clockwise)
            upright = sum(ln.upright for ln in vertical)
            return 90 if 2 * upright >= len(vertical) else 270
        flipped = sum(not ln.upright for ln in votes)
        return 180 if 2 * flipped > len(votes) else 0


class TesseractEngine:
    name = "tesseract"

    def __init__(self):
        try:
            import pytesseract
        except ImportError:
            raise OcrMissing('the tesseract engine needs pytesseract (pip install pytesseract) and the '
                             'tesseract program (Debian: apt-get install tesseract-ocr)') from None
        try:
            ver = str(pytesseract.get_tesseract_version())
        except Exception:
            raise OcrMissing("the tesseract program is not installed (Debian: apt-get install "
                             "tesseract-ocr); or use the default engine, rapidocr") from None
        self.pt = pytesseract
        self.version = f"tesseract {ver} (pytesseract {getattr(pytesseract, '__version__', '?')})"

    def lines(self, rgb) -> list:
        pt = self.pt
        # one thread, as rapidocr: OMP_THREAD_LIMIT is read by the tesseract process
        import os

        env_before = os.environ.get("OMP_THREAD_LIMIT")
        os.environ["OMP_THREAD_LIMIT"] = "1"
        try:
            d = pt.image_to_data(rgb, output_type=pt.Output.DICT, config="--psm 3")
        finally:
            if env_before is None:
                os.environ.pop("OMP_THREAD_LIMIT", None)
            else:
                os.environ["OMP_THREAD_LIMIT"] = env_before
        groups, scores = {}, {}
        for i, text in enumerate(d["text"]):
            if not text or not text.strip() or float(d["conf"][i]) < 0:
                continue
            key = (d["block_num"][i], d["par_num"][i], d["line_num"][i])
            x, y, w, h = d["left"][i], d["top"][i], d["width"][i], d["height"][i]
            text = " ".join(unicodedata.normalize("NFKC", text).split())
            groups.setdefault(key, []).append(Word(text, (float(x), float(y), float(x + w), float(y + h))))
            scores[key] = scores.get(key, 0.0) + float(d["conf"][i]) / 100.0 * len(text)
        lines = []
        for key, words in groups.items():
            box = (min(w.box[0] for w in words), min(w.box[1] for w in words),
                   max(w.box[2] for w in words), max(w.box[3] for w in words))
            lines.append(Line(box, words, score=scores[key]))
        return lines

    def rotation(self, lines, rgb=None) -> int:
        if rgb is None:
            return 0
        try:
            osd = self.pt.image_to_osd(rgb, output_type=self.pt.Output.DICT)
        except Exception:  # too few characters to tell: leave the page as it is
            return 0
        angle = int(osd.get("rotate", 0)) % 360
        # tesseract's "rotate" is clockwise; rotations here are counter-clockwise
        return (360 - angle) % 360 if float(osd.get("orientation_conf", 0)) >= 1.0 else 0


_engines: dict = {}


def get_engine(name: str = DEFAULT_ENGINE):
    """The engine `name` (one instance a process); OcrMissing when it is not installed."""
    if name not in ENGINES:
        raise OcrError(f"unknown OCR engine {name!r}; expected one of {', '.join(ENGINES)}")
    if name not in _engines:
        _engines[name] = RapidEngine() if name == "rapidocr" else TesseractEngine()
    return _engines[name]


def installed(name: str = DEFAULT_ENGINE) -> str | None:
    """None when engine `name`'s packages are installed, else why not: like available(), but
    without making the engine (rapidocr's models are neither loaded nor folded into the cache),
    for a check at import time (the tests' skips)."""
    if name != "rapidocr":
        return available(name)
    try:
        import onnxruntime  # noqa: F401
        import rapidocr_onnxruntime  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None


def available(name: str = DEFAULT_ENGINE) -> str | None:
    """None when engine `name` can run here, else the reason it cannot."""
    try:
        get_engine(name)
    except OcrError as e:
        return str(e)
    return None


def _ordered_words(lines) -> list:
    """Words in reading order as the other importers give it: lines from top to bottom (a
    line joins the row whose first line's extent holds its centre), left to right within a
    row, each line's words left to right."""
    from dxstudio.importers import reading_order

    order = reading_order([ln.box for ln in lines])
    return [w for i in order for w in sorted(lines[i].words, key=lambda w: w.box[0])]


def ocr_image(rgb, engine: str = DEFAULT_ENGINE, upright: bool = True) -> OcrResult:
    """The words of an RGB uint8 (height, width, 3) image. With `upright`, a page whose text
    runs at 90, 180 or 270 degrees is turned and read again; the result's boxes are in the
    pixels of the turned image (result.image)."""
    import numpy as np

    eng = get_engine(engine)
    rapid = isinstance(eng, RapidEngine)
    enlarged = False
    if rapid and EARLY_SMALL_TEXT:
        lines = eng.lines(rgb, small_first=True)
        if not isinstance(lines, list):  # small print by the detector's boxes: read enlarged now
            if SMALL_TEXT_REDETECT:
                lines = eng.lines_scaled(rgb, lines)
            else:  # the boxes found at the page's size, cut from the enlarged page
                lines = eng.lines_scaled(rgb, lines, quads=eng.small_quads)
            enlarged = True
    else:
        lines = eng.lines(rgb)
    rotation = 0
    if upright:
        rotation = eng.rotation(lines, rgb) if isinstance(eng, TesseractEngine) else eng.rotation(lines)
        if rotation:
            turned = np.ascontiguousarray(np.rot90(rgb, rotation // 90))
            again = eng.lines(turned)
            # tesseract: kept only when the turned page reads better (its orientation guess
            # turned upright receipts upside down); rapidocr's line classifier reads turned
            # lines well either way, so its vote (rotation()) decides
            if not isinstance(eng, TesseractEngine) or sum(ln.score for ln in again) > sum(ln.score for ln in lines):
                rgb, lines, enlarged = turned, again, False
            else:
                rotation = 0
    if rapid and not enlarged:
        scale = eng.small_text_scale(lines, rgb)
        if scale is not None:
            lines = eng.lines_scaled(rgb, scale)
    h, w = rgb.shape[:2]
    words = page_words(lines, w, h, eng.name)
    return OcrResult(words, int(w), int(h), rotation, eng.name, eng.version, rgb)


def page_words(lines, width, height, engine: str = DEFAULT_ENGINE) -> list:
    """A page's words from its recognised lines: in reading order, boxes clamped to the
    width x height image, and for rapidocr the words its recogniser runs together split
    (the last steps of ocr_image; bench/ocr_lines.py runs them again on stored lines)."""
    w, h = width, height
    words = _ordered_words(lines)
    words = [Word(x.text, (min(max(x.box[0], 0.0), w), min(max(x.box[1], 0.0), h),
                           min(max(x.box[2], 0.0), w), min(max(x.box[3], 0.0), h))) for x in words]
    if engine == "rapidocr":  # its recogniser leaves out the space ("5.00RM")
        words = split_joined_words(split_amount_suffix(split_digits_letters(split_dates(words))))
    return words


def encode_image(rgb, fmt: str = "PNG") -> bytes:
    """An RGB array as PNG (lossless) or JPEG (quality 90) bytes, for pages/images/."""
    import io

    Image, _ = _pil()
    buf = io.BytesIO()
    im = Image.fromarray(rgb, "RGB")
    if fmt == "JPEG":
        im.save(buf, "JPEG", quality=90)
    else:
        im.save(buf, "PNG", compress_level=6)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------
# The work on one file, shared by the importers, `extract` and the app, in this process, in
# local worker processes or as Ray tasks (dxstudio.scale.ordered): bytes in, pages out, so a
# worker needs no access to the driver's files.

def ocr_file(engine: str, label: str, suffix: str, data: bytes, keep_format: bool = True) -> list:
    """The pages of one image file's bytes as dicts {number, frames, width, height, words
    [(text, box)], ocr, image (encoded bytes), ext}; OcrError naming `label`."""
    frames = read_image_bytes(data, label, suffix)
    fmt = "JPEG" if keep_format and suffix.lower() in (".jpg", ".jpeg") else "PNG"
    out = []
    for number, rgb in frames:
        r = ocr_image(rgb, engine)
        out.append({"number": number, "frames": len(frames), "width": r.width, "height": r.height,
                    "words": [(w.text, tuple(w.box)) for w in r.words], "ocr": r.meta(),
                    "image": encode_image(r.image, fmt), "ext": ".jpg" if fmt == "JPEG" else ".png"})
    return out


def ocr_chunk(engine: str, chunk) -> list:
    """[("ok", ocr_file pages) or ("error", message)] for each (label, suffix, bytes) of chunk.
    A missing engine is ("missing", message): the caller stops (every file would fail)."""
    results = []
    for label, suffix, data in chunk:
        try:
            results.append(("ok", ocr_file(engine, label, suffix, data)))
        except OcrMissing as e:
            results.append(("missing", str(e)))
        except OcrError as e:
            results.append(("error", str(e)))
        except MemoryError:
            results.append(("error", f"{label}: out of memory while reading the image"))
    return results


def page_of(entry: dict, page_id: str, image: str | None = None) -> Page:
    """The Page of one ocr_file entry (words in the pixels of its image)."""
    words = tuple(Word(t, tuple(float(v) for v in b)) for t, b in entry["words"])
    return Page(page_id, float(entry["width"]), float(entry["height"]), words, image, ocr=dict(entry["ocr"]))


def page_id_for(stem_id: str, entry: dict) -> str:
    """A page's id: the file's stem, with -p<number> for a page of a multi-page file (as
    `import pdf` names its pages)."""
    return stem_id if entry["frames"] == 1 else f"{stem_id}-p{entry['number']}"
