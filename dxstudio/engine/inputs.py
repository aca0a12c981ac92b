"""Page to model inputs: character ids, position buckets, word features and pair features.

docs/inputs.md is the specification; every formula, order of operations and dtype here is
pinned there so that another implementation reproduces the bytes. In short:

* Text is NFC-normalized once; features read the whole normalized text, character ids the
  first ``max_chars`` code points.
* Box edges are quantized to q = clamp(floor((v / extent) * 1000), 0, 1000) in float64;
  every box feature is then exact integer arithmetic on q followed by one float64 division
  and one rounding to float32.
* Classification of characters uses fixed sets (ASCII digits, a fixed list of currency
  signs) and Unicode general categories for letters (the UCD of the running Python,
  recorded as ``UNICODE_VERSION``).

Nothing here uses NumPy reductions, exp/log or BLAS: only integer arithmetic and
correctly rounded elementwise + - * /, so the bytes do not depend on the machine.
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .page import Page, PageError, Word

UNICODE_VERSION = unicodedata.unidata_version

PAD_ID = 0
UNKNOWN_ID = 1
QUANT_MAX = 1000  # quantized coordinates run 0..1000 inclusive
LENGTH_SCALE = 24  # length feature = min(len, 24) / 24
REL_SCALE = 64  # pair feature clamp((j - i) / 64, -1, 1)

WORD_FEATURE_NAMES = (
    "has_digit", "all_digits", "has_letter", "all_upper", "title_case", "currency_sign",
    "amount", "date", "punctuation", "ends_with_colon", "length", "digit_fraction",
    "box_width", "box_height", "centre_x", "centre_y",
)
PAIR_FEATURE_NAMES = ("dx", "dy", "gap_x", "gap_y", "same_line", "sign", "rel", "self")

# -- character classes (docs/inputs.md, "Character classes") ---------------------------------
DIGITS = frozenset("0123456789")  # ASCII only: other decimal digits are neither digit nor letter
# Currency signs: the Latin-1 ones, the Thai baht, the whole Currency Symbols block and the
# fullwidth/small forms. A fixed list, so it does not move with the Unicode version.
CURRENCY_SIGNS = frozenset(
    "$\u00a2\u00a3\u00a4\u00a5\u0e3f\ufe69\uff04\uffe0\uffe1\uffe5\uffe6"
    + "".join(chr(c) for c in range(0x20A0, 0x20D0))
)
# Currency codes that receipts print instead of a sign (Malaysian ringgit, Indonesian rupiah...).
CURRENCY_CODES = ("RM", "RP", "USD", "EUR", "GBP", "IDR", "MYR", "SGD")
COLONS = (":", "\uff1a")  # ASCII and fullwidth colon
CORE_STRIP = ",;:"  # trailing characters removed before the amount/date/code patterns

_SIGN_CLASS = "[" + "".join(re.escape(c) for c in sorted(CURRENCY_SIGNS)) + "]"
_CODE = "(?:" + "|".join(CURRENCY_CODES) + ")"
_CUR = f"(?:{_SIGN_CLASS}|{_CODE})"
_INT = r"[0-9]+"
_GROUPED = r"[0-9]{1,3}(?:[.,][0-9]{3})+"
_DEC = r"[.,][0-9]{2}"
_PRE = r"\(?[-+]?"
_POST = r"-?\)?"
_OPT_CUR_PRE = rf"(?:{_CUR}\s?)?[-+]?"
_OPT_CUR_POST = rf"(?:\s?{_CUR})?"
_FLAGS = re.ASCII | re.IGNORECASE  # ASCII: \s and case folding never reach beyond ASCII

# A code as the whole core ("RM", "Rp."), before a number ("RM12.50", "Rp 25.000") or after one
# ("100EUR"); used with fullmatch.
CURRENCY_CODE_RE = re.compile(rf"{_CODE}\.?|{_CODE}\.?\s?[-+]?[0-9].*|.*[0-9]\s?{_CODE}\.?",
                              _FLAGS | re.DOTALL)
AMOUNT_RES = (
    # decimals: 12.50, 1,234.56, 1.234,56, $12.50, (12.50), 12.50-
    re.compile(rf"{_PRE}{_OPT_CUR_PRE}(?:{_GROUPED}|{_INT}){_DEC}{_OPT_CUR_POST}{_POST}", _FLAGS),
    # thousands groups: 25.000, 1,234,567
    re.compile(rf"{_PRE}{_OPT_CUR_PRE}{_GROUPED}{_OPT_CUR_POST}{_POST}", _FLAGS),
    # an integer with a currency: $3, RM5, 100 EUR
    re.compile(rf"{_PRE}(?:{_CUR}\s?[-+]?(?:{_GROUPED}|{_INT})|[-+]?(?:{_GROUPED}|{_INT})\s?{_CUR}){_POST}",
               _FLAGS),
)
_MONTH = r"(?:JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC)[A-Z]*"
_YEAR = r"(?:[0-9]{4}|[0-9]{2})"
DATE_RES = (
    re.compile(rf"[0-9]{{1,2}}[-/.][0-9]{{1,2}}[-/.]{_YEAR}", _FLAGS),  # 03/01/19, 1.3.2019
    re.compile(r"[0-9]{4}[-/.][0-9]{1,2}[-/.][0-9]{1,2}", _FLAGS),  # 2019-03-01
    re.compile(rf"[0-9]{{1,2}}[-/. ]?{_MONTH}[-/., ]?{_YEAR}", _FLAGS),  # 01-Mar-2019, 25MAR18
    re.compile(rf"{_MONTH}[-/. ]?[0-9]{{1,2}}[-/., ]{{0,2}}{_YEAR}", _FLAGS),  # Mar-01-2019
)


def normalize_text(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def is_letter(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "L"


# -- character ids -------------------------------------------------------------------------
def char_ids(text: str, cfg: ModelConfig) -> np.ndarray:
    """int32 ids of the first cfg.max_chars code points of NFC(text): alphabet index + 2,
    1 for a character outside the alphabet. No padding (length <= max_chars)."""
    if not isinstance(text, str):
        raise TypeError(f"char_ids: text must be a str, not {type(text).__name__}")
    index = _alphabet_index(cfg.alphabet)
    chars = normalize_text(text)[: cfg.max_chars]
    return np.array([index.get(c, UNKNOWN_ID) for c in chars], dtype=np.int32)


_ALPHABET_CACHE: dict[str, dict[str, int]] = {}


def _alphabet_index(alphabet: str) -> dict[str, int]:
    index = _ALPHABET_CACHE.get(alphabet)
    if index is None:
        index = {c: i + 2 for i, c in enumerate(alphabet)}
        if len(_ALPHABET_CACHE) > 16:
            _ALPHABET_CACHE.clear()
        _ALPHABET_CACHE[alphabet] = index
    return index


# -- coordinates ---------------------------------------------------------------------------
def quantize(v: float, extent: float) -> int:
    """q = clamp(floor((v / extent) * 1000), 0, 1000), in float64 with that order of operations
    (the division first, so that v == extent gives exactly 1000)."""
    v = float(v)
    extent = float(extent)
    if not math.isfinite(extent) or extent <= 0:
        raise ValueError(f"quantize: the page extent must be positive and finite, not {extent!r}")
    if not math.isfinite(v):
        raise ValueError(f"quantize: coordinate {v!r} is not finite")
    q = math.floor((v / extent) * 1000.0)
    return min(max(q, 0), QUANT_MAX)


def bucket(q: int, buckets: int) -> int:
    """Position bucket of a quantized coordinate: q * B // 1001, in 0..B-1 for q in 0..1000."""
    if not 0 <= q <= QUANT_MAX:
        raise ValueError(f"bucket: quantized coordinate {q} is outside 0..{QUANT_MAX}")
    return q * buckets // (QUANT_MAX + 1)


def quantize_box(box, width: float, height: float) -> tuple[int, int, int, int]:
    """(qx0, qy0, qx1, qy1): x edges from the page width, y edges from its height."""
    x0, y0, x1, y1 = box
    return (quantize(x0, width), quantize(y0, height), quantize(x1, width), quantize(y1, height))


def _checked_qbox(word: Word, page: Page, label: str) -> tuple[int, int, int, int]:
    """The quantized box, or a PageError naming the page and the word if the box is unusable."""
    where = f"page {page.id!r}: {label} ({word.text!r})"
    try:
        box = tuple(float(v) for v in word.box)
    except (TypeError, ValueError):
        raise PageError(f"{where}: box must be four numbers, not {word.box!r}") from None
    if len(box) != 4:
        raise PageError(f"{where}: box must be [x0, y0, x1, y1], not {word.box!r}")
    if not all(math.isfinite(v) for v in box):
        raise PageError(f"{where}: box {list(word.box)} is not finite")
    if box[2] < box[0] or box[3] < box[1]:
        raise PageError(f"{where}: inverted box {list(word.box)}")
    try:
        return quantize_box(box, page.width, page.height)
    except ValueError as e:
        raise PageError(f"{where}: {e}") from None


# -- word features -------------------------------------------------------------------------
def _core(text: str) -> str:
    """The text with trailing ',', ';', ':' removed (for the amount, date and code patterns)."""
    return text.rstrip(CORE_STRIP)


def text_features(text: str) -> list[float]:
    """The 12 text features (indices 0..11) of NFC(text), as float64 values."""
    text = normalize_text(text)
    n = len(text)
    core = _core(text)
    n_digits = sum(1 for c in text if c in DIGITS)  # integer count: exact
    letters = [c for c in text if is_letter(c)]
    categories = [unicodedata.category(c) for c in letters]

    has_digit = n_digits > 0
    all_digits = n > 0 and n_digits == n
    has_letter = bool(letters)
    all_upper = has_letter and all(cat == "Lu" for cat in categories)
    title_case = (len(letters) >= 2 and categories[0] in ("Lu", "Lt")
                  and all(cat == "Ll" for cat in categories[1:]))
    currency = (any(c in CURRENCY_SIGNS for c in text)
                or CURRENCY_CODE_RE.fullmatch(core) is not None)
    amount = any(r.fullmatch(core) for r in AMOUNT_RES)
    date = any(r.fullmatch(core) for r in DATE_RES)
    punctuation = n > 0 and not has_digit and not has_letter
    ends_with_colon = text.endswith(COLONS)
    length = min(n, LENGTH_SCALE) / LENGTH_SCALE
    digit_fraction = n_digits / n if n else 0.0
    flags = (has_digit, all_digits, has_letter, all_upper, title_case, currency, amount, date,
             punctuation, ends_with_colon)
    return [1.0 if f else 0.0 for f in flags] + [length, digit_fraction]


def box_features(qbox) -> list[float]:
    """The 4 box features (indices 12..15) of a quantized box, as float64 values."""
    qx0, qy0, qx1, qy1 = (int(v) for v in qbox)
    return [(qx1 - qx0) / 1000, (qy1 - qy0) / 1000, (qx0 + qx1) / 2000, (qy0 + qy1) / 2000]


def word_features(word: Word, page: Page) -> np.ndarray:
    """16 float32 features of one word on its page, in WORD_FEATURE_NAMES order: each is
    computed in float64 and rounded once to float32."""
    qbox = _checked_qbox(word, page, "word")
    return np.array(text_features(word.text) + box_features(qbox), dtype=np.float32)


# -- context features (input layout 2) -----------------------------------------------------
# Layout 2 appends these word features to the 16 above: the signals a classic word classifier
# is built from (docs/inputs.md, "Context features"), which a small model learns slowly from a
# few pages: a time or phone shape, generic keywords in the word, to its left on its line and
# just above it, an amount's rank among the window's amounts and whether it is the sum of two
# others (or part of such a sum), and the word's place in its line.
KEYWORD_GROUPS = (
    ("total", ("TOTAL", "TOTALS", "GRAND", "AMOUNT", "AMT", "SUMME", "GESAMT", "BETRAG", "TOTALE",
               "TOTAAL", "JUMLAH", "NETT", "NET", "DUE", "BALANCE", "PAYABLE", "PAYER", "BAYAR",
               "IMPORTE", "IMPORTO", "MONTANT", "TTC")),
    ("subtotal", ("SUBTOTAL", "SUB-TOTAL", "SUB", "ZWISCHENSUMME", "SUBTOTALE", "SUBTOTAAL",
                  "SOUS-TOTAL", "HT", "EXCL", "EXCL.", "NETTO")),
    ("tax", ("TAX", "GST", "VAT", "SST", "MWST", "MWST.", "UST", "UST.", "TVA", "IVA", "BTW", "PPN",
             "PAJAK", "INCL", "INCL.", "TAXES")),
    ("paid", ("CASH", "PAID", "TENDER", "TENDERED", "VISA", "CARD", "MASTERCARD", "MASTER", "BAR",
              "BARGELD", "ESPECES", "ESPÈCES", "EFECTIVO", "CONTANT", "CONTANTI", "TUNAI", "PAYMENT",
              "KONTAN", "GEGEBEN", "RECEIVED")),
    ("change", ("CHANGE", "RÜCKGELD", "RUCKGELD", "RENDU", "MONNAIE", "CAMBIO", "VUELTO",
                "WISSELGELD", "RESTO", "KEMBALI", "KEMBALIAN")),
    ("discount", ("DISCOUNT", "DISC", "DISC.", "RABATT", "REMISE", "DESCUENTO", "KORTING", "DISKON",
                  "SCONTO", "ROUNDING", "ROUND", "ADJ", "ADJ.", "ADJUSTMENT", "SAVINGS", "VOUCHER")),
    ("date", ("DATE", "DATUM", "FECHA", "DATA", "TANGGAL", "TGL", "DT", "DATED", "ISSUED",
              "RECHNUNGSDATUM")),
    ("time", ("TIME", "ZEIT", "UHRZEIT", "HEURE", "HORA", "JAM", "WAKTU", "ORA", "AM", "PM")),
    ("phone", ("TEL", "TEL.", "PHONE", "TELEPHONE", "TELEFON", "TÉL", "TÉL.", "TELP", "TELP.",
               "FAX", "HP", "MOBILE", "PH", "CONTACT", "TELEFONO", "TELÉFONO")),
    ("number", ("INVOICE", "INV", "INV.", "RECEIPT", "BILL", "NO", "NO.", "NUMBER", "NR", "NR.",
                "NUM", "#", "RECHNUNG", "FACTURE", "FACTURA", "FATTURA", "FAKTUR", "DOC", "REF",
                "TRANS", "CHECK", "CHK", "ORDER", "BELEG", "QUITTUNG", "RECIBO", "NOTA")),
    ("company", ("SDN", "BHD", "BHD.", "LTD", "LTD.", "INC", "INC.", "LLC", "GMBH", "CO", "CO.",
                 "CORP", "CORP.", "ENTERPRISE", "ENTERPRISES", "TRADING", "PLC", "S.A.", "SA",
                 "SARL", "SRL", "S.L.", "B.V.", "BV", "PT", "PT.", "CV", "AG", "KG", "RESTAURANT",
                 "STORE", "MART", "SHOP", "SUPERMARKET", "COMPANY", "CAFE", "HOTEL", "S.P.A.")),
    ("address", ("JALAN", "JLN", "JLN.", "JL", "JL.", "STREET", "ST", "ST.", "ROAD", "RD", "RD.",
                 "AVENUE", "AVE", "AVE.", "TAMAN", "STRASSE", "STRAßE", "STR", "STR.", "RUE", "CALLE",
                 "VIA", "STRAAT", "LOT", "BLOCK", "BLK", "FLOOR", "LEVEL", "KAWASAN", "BANDAR",
                 "BOX", "SUITE", "LANE", "DRIVE", "PLAZA", "AVENIDA", "PLATZ", "WEG", "BOULEVARD")),
)
KEYWORD_GROUP_NAMES = tuple(name for name, _ in KEYWORD_GROUPS)
_KEYWORD_GROUP_OF = {}
for _g, (_name, _words) in enumerate(KEYWORD_GROUPS):
    for _w in _words:
        _KEYWORD_GROUP_OF.setdefault(_w, _g)
KEYWORD_STRIP = ":;.,()[]*#=\uff1a"  # removed from both ends before the look-up (after a first try as is)

CONTEXT_FEATURE_NAMES = (
    ("time", "phone")
    + tuple(f"kw_{g}" for g in KEYWORD_GROUP_NAMES)
    + tuple(f"left_kw_{g}" for g in KEYWORD_GROUP_NAMES)
    + tuple(f"above_kw_{g}" for g in KEYWORD_GROUP_NAMES)
    + ("amount_rank", "amount_largest", "amount_repeats", "amount_sum", "amount_part",
       "line_last", "left_colon")
)
TIME_RE = re.compile(r"[0-9]{1,2}[:h][0-9]{2}(?::[0-9]{2})?(?:\s?[AP]\.?M\.?)?", _FLAGS)  # not "12.50"
PHONE_RE = re.compile(r"\+?\(?[0-9]{2,4}\)?[-\s./]?[0-9]{3,4}[-\s./]?[0-9]{3,5}", _FLAGS)
AMOUNT_REPEATS_SCALE = 3  # amount_repeats = min(other words with the same value, 3) / 3
ABOVE_GAP = (3, 2)  # "just above": at most 3/2 of the word's height between the two boxes


def keyword_group(text: str) -> int:
    """Index of the keyword group of NFC(text) (upper-cased; as is, else with KEYWORD_STRIP
    characters removed from both ends), or -1."""
    t = normalize_text(text).upper()
    g = _KEYWORD_GROUP_OF.get(t)
    if g is None:
        g = _KEYWORD_GROUP_OF.get(t.strip(KEYWORD_STRIP))
    return -1 if g is None else g


def amount_cents(text: str) -> int | None:
    """The absolute value in hundredths of an amount word (feature `amount`), else None: the
    digits and separators of the core in order; a separator followed by exactly two final
    digits is the decimal point ("1.234,56" -> 123456), otherwise the number is whole
    ("25.000" -> 2500000)."""
    core = _core(normalize_text(text))
    if not any(r.fullmatch(core) for r in AMOUNT_RES):
        return None
    s = "".join(c for c in core if c in DIGITS or c in ".,")
    digits = "".join(c for c in s if c in DIGITS)
    if not digits:
        return None
    if len(s) >= 3 and s[-3] in ".," and s[-2] in DIGITS and s[-1] in DIGITS:
        return int(digits)
    return int(digits) * 100


def context_features(texts, qboxes) -> np.ndarray:
    """(n, len(CONTEXT_FEATURE_NAMES)) float64 context features of a window's words, from
    their texts and (n, 4) quantized boxes. Only integer arithmetic and exact divisions."""
    n = len(texts)
    q = np.asarray(qboxes, dtype=np.int64).reshape(n, 4)
    g_count = len(KEYWORD_GROUPS)
    out = np.zeros((n, len(CONTEXT_FEATURE_NAMES)), dtype=np.float64)
    if n == 0:
        return out
    cores = [_core(normalize_text(t)) for t in texts]
    out[:, 0] = [TIME_RE.fullmatch(c) is not None for c in cores]
    out[:, 1] = [PHONE_RE.fullmatch(c) is not None for c in cores]
    groups = np.array([keyword_group(t) for t in texts], dtype=np.int64)
    kw = np.zeros((n, g_count), dtype=bool)
    has = groups >= 0
    kw[np.nonzero(has)[0], groups[has]] = True
    out[:, 2:2 + g_count] = kw

    x0, y0, x1, y1 = (q[:, k] for k in range(4))
    col = lambda a: a[:, None]  # noqa: E731  (word i, the word described)
    row = lambda a: a[None, :]  # noqa: E731  (word j, its neighbour)
    twice_cx = x0 + x1
    height = y1 - y0
    overlap_y = np.minimum(col(y1), row(y1)) - np.maximum(col(y0), row(y0))
    same_line = (overlap_y >= 0) & (2 * overlap_y >= np.minimum(col(height), row(height)))
    not_self = ~np.eye(n, dtype=bool)
    left = same_line & not_self & (row(twice_cx) < col(twice_cx))
    right = same_line & not_self & (row(twice_cx) > col(twice_cx))
    overlap_x = np.minimum(col(x1), row(x1)) - np.maximum(col(x0), row(x0))
    gap_above = col(y0) - row(y1)  # >= 0: j ends above i starts
    above = (not_self & ~same_line & (gap_above >= 0) & (overlap_x >= 0)
             & (ABOVE_GAP[1] * gap_above <= ABOVE_GAP[0] * col(height)))
    # any neighbour of the kind in the group: a boolean product, no arithmetic
    out[:, 2 + g_count:2 + 2 * g_count] = (left[:, :, None] & kw[None, :, :]).any(axis=1)
    out[:, 2 + 2 * g_count:2 + 3 * g_count] = (above[:, :, None] & kw[None, :, :]).any(axis=1)

    base = 2 + 3 * g_count
    cents = [amount_cents(t) for t in texts]
    idx = [k for k, c in enumerate(cents) if c is not None]
    if idx:
        vals = np.array([cents[k] for k in idx], dtype=object)  # Python ints: no overflow
        distinct = sorted(set(vals.tolist()), reverse=True)
        rank = {v: r + 1 for r, v in enumerate(distinct)}
        counts: dict[int, int] = {}
        for v in vals.tolist():
            counts[v] = counts.get(v, 0) + 1
        positive = sorted(v for v in vals.tolist() if v > 0)
        pair_sums = set()
        for a in range(len(positive)):
            for b in range(a + 1, len(positive)):
                pair_sums.add(positive[a] + positive[b])
        for k in idx:
            v = cents[k]
            out[k, base] = 1 / rank[v]
            out[k, base + 1] = rank[v] == 1
            out[k, base + 2] = min(counts[v] - 1, AMOUNT_REPEATS_SCALE) / AMOUNT_REPEATS_SCALE
            if v > 0:
                # summands are positive and smaller than v, so neither is this word
                out[k, base + 3] = v in pair_sums
                # part of a sum: some w = v + u with u another word's value (u > 0)
                part = False
                for w in counts:
                    u = w - v
                    if u > 0 and counts.get(u, 0) - (1 if u == v else 0) > 0:
                        part = True
                        break
                out[k, base + 4] = part
    out[:, base + 5] = ~right.any(axis=1)
    # the nearest word to the left on the line (largest centre, then the lowest index) ends with a colon
    colon = np.array([normalize_text(t).endswith(COLONS) for t in texts], dtype=bool)
    for i in range(n):
        js = np.nonzero(left[i])[0]
        if js.size:
            best = js[np.argmax(twice_cx[js])]  # argmax takes the first (lowest index) of ties
            out[i, base + 6] = colon[best]
    return out


# -- pair features -------------------------------------------------------------------------
def pair_features(qboxes) -> np.ndarray:
    """(n*n, 8) float32 features of every ordered pair (i, j) of a window, row-major (i, j),
    from the (n, 4) quantized boxes (qx0, qy0, qx1, qy1), in PAIR_FEATURE_NAMES order."""
    q = np.asarray(qboxes)
    if q.ndim != 2 or q.shape[1] != 4:
        raise ValueError(f"pair_features: boxes must have shape (n, 4), not {q.shape}")
    q = q.astype(np.int64)
    if q.size and (q.min() < 0 or q.max() > QUANT_MAX):
        raise ValueError(f"pair_features: quantized coordinates must lie in 0..{QUANT_MAX}")
    n = q.shape[0]
    x0, y0, x1, y1 = (q[:, k] for k in range(4))
    # Row i is the first word of the pair, column j the second.
    col = lambda a: a[:, None]  # noqa: E731  (word i)
    row = lambda a: a[None, :]  # noqa: E731  (word j)

    twice_cx = x0 + x1
    twice_cy = y0 + y1
    out = np.empty((n, n, 8), dtype=np.float32)
    # All integer arithmetic below is exact; each feature is one float64 division, then float32.
    out[:, :, 0] = (row(twice_cx) - col(twice_cx)) / 2000
    out[:, :, 1] = (row(twice_cy) - col(twice_cy)) / 2000
    gap_x = np.maximum(col(x0), row(x0)) - np.minimum(col(x1), row(x1))  # < 0: overlap
    gap_y = np.maximum(col(y0), row(y0)) - np.minimum(col(y1), row(y1))
    out[:, :, 2] = gap_x / 1000
    out[:, :, 3] = gap_y / 1000
    height = y1 - y0
    overlap_y = -gap_y
    same_line = (overlap_y >= 0) & (2 * overlap_y >= np.minimum(col(height), row(height)))
    out[:, :, 4] = same_line
    idx = np.arange(n, dtype=np.int64)
    diff = row(idx) - col(idx)  # j - i
    out[:, :, 5] = np.sign(diff)
    out[:, :, 6] = np.clip(diff / REL_SCALE, -1.0, 1.0)
    out[:, :, 7] = diff == 0
    return out.reshape(n * n, 8)


# -- windows -------------------------------------------------------------------------------
def window_ranges(n_words: int, max_words: int) -> list[tuple[int, int]]:
    """Consecutive windows [start, stop) of at most max_words words in page order."""
    for name, v, low in (("n_words", n_words, 0), ("max_words", max_words, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"window_ranges: {name} must be an integer >= {low}, not {v!r}")
    return [(start, min(start + max_words, n_words)) for start in range(0, n_words, max_words)]


@dataclass(frozen=True, eq=False)
class WindowInputs:
    """Model inputs of one window of a page (n words, local index 0..n-1)."""
    char_ids: np.ndarray  # (n, max_chars) int32, zero-padded
    char_len: np.ndarray  # (n,) int32, number of real character positions
    buckets: np.ndarray  # (n, 4) int32: x0, y0, x1, y1 position buckets
    word_feats: np.ndarray  # (n, cfg.word_features) float32: 16, or 16 + context in layout 2
    pair_feats: np.ndarray  # (n*n, 8) float32, row-major (i, j)
    start: int  # index in the page of the window's first word
    n: int


def window_inputs(page: Page, cfg: ModelConfig, start: int, stop: int) -> WindowInputs:
    """Inputs of the words page.words[start:stop] (at most cfg.max_words of them)."""
    if not isinstance(page, Page):
        raise TypeError(f"window_inputs: expected a Page, not {type(page).__name__}")
    n_page = len(page.words)
    if not (isinstance(start, (int, np.integer)) and isinstance(stop, (int, np.integer))
            and 0 <= start < stop <= n_page):
        raise PageError(f"page {page.id!r}: window [{start}, {stop}) is not a non-empty range "
                        f"of its {n_page} words")
    n = stop - start
    if n > cfg.max_words:
        raise PageError(f"page {page.id!r}: window [{start}, {stop}) has {n} words, more than "
                        f"max_words = {cfg.max_words}")
    ids = np.zeros((n, cfg.max_chars), dtype=np.int32)
    lengths = np.zeros(n, dtype=np.int32)
    qboxes = np.zeros((n, 4), dtype=np.int64)
    feats = np.zeros((n, len(WORD_FEATURE_NAMES)), dtype=np.float64)
    for k in range(n):
        word = page.words[start + k]
        if not isinstance(word.text, str):
            raise PageError(f"page {page.id!r}: word {start + k} has no text")
        qbox = _checked_qbox(word, page, f"word {start + k}")
        word_ids = char_ids(word.text, cfg)
        ids[k, : len(word_ids)] = word_ids
        lengths[k] = len(word_ids)
        qboxes[k] = qbox
        feats[k] = text_features(word.text) + box_features(qbox)
    if cfg.input_layout == 2:
        texts = [w.text for w in page.words[start:stop]]
        feats = np.concatenate([feats, context_features(texts, qboxes)], axis=1)
    if feats.shape[1] != cfg.word_features:  # a config that validate() would refuse
        raise ValueError(f"input layout {cfg.input_layout} gives {feats.shape[1]} word features, "
                         f"the config says {cfg.word_features}")
    buckets = (qboxes * cfg.pos_buckets // (QUANT_MAX + 1)).astype(np.int32)
    return WindowInputs(
        char_ids=ids,
        char_len=lengths,
        buckets=buckets,
        word_feats=feats.astype(np.float32),  # one rounding per value, to nearest even
        pair_feats=pair_features(qboxes),
        start=int(start),
        n=int(n),
    )


def page_inputs(page: Page, cfg: ModelConfig) -> list[WindowInputs]:
    """Inputs of every window of the page, in page order (training uses only the first)."""
    return list(iter_page_inputs(page, cfg))


def iter_page_inputs(page: Page, cfg: ModelConfig):
    """The windows' inputs one at a time, in page order: extraction holds one window's pair
    features (max_words^2 x 8 floats) at a time, not every window's (docs/security.md)."""
    if not isinstance(page, Page):
        raise TypeError(f"page_inputs: expected a Page, not {type(page).__name__}")
    for start, stop in window_ranges(len(page.words), cfg.max_words):
        yield window_inputs(page, cfg, start, stop)
