"""Grounding: find each answered value's words on the page, and turn labels into tag targets.

Statuses (the seed's "Labels"):
  exact       the words' texts joined by single spaces equal the value (white space collapsed)
  normalized  equal after normalization: Unicode NFKC, case, white space, punctuation at the
              edges of each word, currency marks before a number, number formats; failing
              that, ignoring every punctuation mark (OCR often drops or adds a space or a dot);
              failing that, for a text value of FUZZY_MIN_CHARS letters and digits or more
              (a name, an address), a run of words within one edit per FUZZY_CHARS_PER_EDIT
              characters of it, punctuation ignored (OCR misreads a letter: "JOHOR" as "J0HOR");
              failing that, a value of JOINED_MIN_CHARS or more inside words the OCR joined to
              their neighbours ("03Mar201818:22" for the date 03 MAR 2018), when the value is at
              least JOINED_MIN_SHARE of those words' characters: the words are labelled
  computed    a number that is not printed but equals a sum or product of printed numbers:
              never labelled (the field has no value on this page)
  absent      not on the page: the whole page is excluded from training and evaluation,
              with the reason kept (the setting absent_value "ignore" keeps a page whose
              other values are found: ABSENT_POLICIES below)
  null        no value (the answer is null, missing, or has no words)

When a value occurs more than once, the most exact match wins (exact, then normalized, then
punctuation-blind); among equally exact runs, those within three words after a word naming
the field on the same row ("TOTAL 12.50" for total) come first; then the LAST occurrence
for a number (a receipt's total follows the items and subtotals that repeat it) and the
FIRST for text. The fields of a page are grounded together so that two fields do not take
the same words when another occurrence is free. Measured on the 800 CORD receipts, whose
words carry their field: 2530 of 2684 values get exactly the annotated words.
See docs/project.md.
"""
from __future__ import annotations

import bisect
import decimal
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

import numpy as np

from dxstudio.engine import extract as _engine_extract
from dxstudio.project import LabelError, LabelFile

# ---------------------------------------------------------------------------------------
# Normalization

_CURRENCY_CODES = ("rm", "rp", "usd", "myr", "idr", "sgd", "eur", "gbp", "us", "s", "inr", "aud", "cad", "jpy")
# OCR's readings of a currency code printed against a number ("5.00RH" for 5.00RM)
_CURRENCY_MISREAD = ("rh",)
_CURRENCY_ALT = "|".join(sorted(_CURRENCY_CODES + _CURRENCY_MISREAD, key=len, reverse=True))
_CURRENCY_PREFIX = re.compile(r"^(?:%s)\.?(?=\d)" % _CURRENCY_ALT)
# a code after the number, in the same word ("1.50RM"): stripped only when a number is left
_CURRENCY_SUFFIX = re.compile(r"(?<=\d)(?:%s)$" % "|".join(c for c in _CURRENCY_ALT.split("|") if len(c) > 1))
_NUMBERISH = re.compile(r"\d[\d.,]*")


def _strip_edges(t: str) -> str:
    """Remove every character that is not a letter or digit from both ends."""
    i, j = 0, len(t)
    while i < j and not t[i].isalnum():
        i += 1
    while j > i and not t[j - 1].isalnum():
        j -= 1
    return t[i:j]


def canonical_number(s: str) -> str | None:
    """'1,234.50', '1234.50', '1.234,50', '1234,50' -> '1234.5'; None when s is not a number.

    A separator followed by exactly three digits is a thousands separator when it is the
    only one ('75,000' and '75.000' are 75000: receipts almost never print three decimals).
    With both '.' and ',' the last one is the decimal mark. A number with a leading zero
    ('007', an id) is kept as it is. Dates such as 25.12.2018 are not numbers."""
    if not _NUMBERISH.fullmatch(s) or not s[-1].isdigit():
        return None
    groups = re.split(r"[.,]", s)
    seps = re.findall(r"[.,]", s)
    if not seps:
        if len(s) > 1 and s[0] == "0":
            return None
        int_part, frac = s, ""
    elif len(set(seps)) == 2:
        dec = seps[-1]
        if any(c == dec for c in seps[:-1]):
            return None
        head, frac = groups[:-1], groups[-1]
        if not (1 <= len(head[0]) <= 3) or any(len(g) != 3 for g in head[1:]):
            return None
        int_part = "".join(head)
    elif len(seps) > 1:
        if not (1 <= len(groups[0]) <= 3) or any(len(g) != 3 for g in groups[1:]):
            return None
        int_part, frac = "".join(groups), ""
    else:
        a, b = groups
        if len(b) == 3 and 1 <= len(a) <= 3 and a != "0":
            int_part, frac = a + b, ""
        else:
            int_part, frac = a, b
    try:
        d = Decimal(f"{int_part or '0'}.{frac or '0'}")
    except InvalidOperation:
        return None
    return format(d.normalize(), "f")


def word_key(text: str) -> str:
    """The normalized form of one word (or one white-space token of a value)."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = _strip_edges(t)
    t = _CURRENCY_PREFIX.sub("", t)
    num = canonical_number(t)
    if num is not None:
        return num
    bare = _CURRENCY_SUFFIX.sub("", t)
    if bare != t:
        num = canonical_number(bare)
        if num is not None:
            return num
    if t in _CURRENCY_CODES:  # a lone currency word ("RM 12.50") carries no value
        return ""
    return t


def loose_key(key: str) -> str:
    """A word key with every punctuation mark removed."""
    return "".join(c for c in key if c.isalnum())


# Characters OCR reads one for another (a letter for the digit it looks like, and back). Each
# class holds exactly one digit, so two different digit strings never fold alike: a text value
# folded matches only text that differs from it where a letter stands for its look-alike digit
# (or I for l). Used only for text values (never numbers) of LOOKALIKE_MIN_CHARS or more.
_LOOKALIKE = str.maketrans({"o": "0", "i": "1", "l": "1", "|": "1", "s": "5", "b": "8", "z": "2"})
LOOKALIKE_MIN_CHARS = 4


def lookalike_key(loose: str) -> str:
    """A loose key with every look-alike letter read as its digit ("L0T" and "LOT": "10t")."""
    return loose.translate(_LOOKALIKE)


def pieces(key: str) -> list[str]:
    """The runs of letters and digits of a word key ("(306295-x)fka" -> 306295, x, fka)."""
    return [m.group(0) for m in re.finditer(r"[^\W_]+", key)]


FUZZY_MIN_CHARS = 10  # letters and digits of a value before OCR misreadings are forgiven
FUZZY_CHARS_PER_EDIT = 8  # one edit (insert, delete, substitute) forgiven per 8 characters


def _bounded_distance(a: str, b: str, limit: int) -> int | None:
    """Levenshtein distance of a and b when it is at most `limit`, else None (the rows stop
    as soon as every entry exceeds the limit)."""
    if abs(len(a) - len(b)) > limit:
        return None
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        best = i
        for j, cb in enumerate(b, 1):
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            cur[j] = v
            if v < best:
                best = v
        if best > limit:
            return None
        prev = cur
    return prev[-1] if prev[-1] <= limit else None


def _fuzzy_runs(keys: list[str], target: str) -> tuple[list[tuple[int, int]], int]:
    """The runs [i, j] of consecutive words whose keys, joined, are nearest to `target` within
    len(target) // FUZZY_CHARS_PER_EDIT edits, in order of i, and that distance. A run starts
    on a word whose key begins like the target (its first two characters, or its second and
    third when the first was misread, within the first few of the target); only runs of about
    the target's length are measured."""
    limit = len(target) // FUZZY_CHARS_PER_EDIT
    best, runs = limit + 1, []
    head = target[: limit + 4]
    n = len(keys)
    for i in range(n):
        k = keys[i]
        if not k or (k[:2] not in head and (len(k) < 3 or k[1:3] not in head)):
            continue
        text = ""
        for j in range(i, n):
            if not keys[j]:
                continue
            text += keys[j]
            if len(text) > len(target) + limit:
                break
            if len(text) < len(target) - limit:
                continue
            d = _bounded_distance(text, target, min(limit, best))
            if d is None:
                continue
            if d < best:
                best, runs = d, [(i, j)]
            elif d == best:
                runs.append((i, j))
    return runs, best


JOINED_MIN_CHARS = 6
JOINED_MIN_SHARE = 0.6


def _joined_runs(keys: list[str], target: str) -> list[tuple[int, int]]:
    """Runs [i, j] whose joined keys contain `target` starting or ending inside a word (OCR
    joined the value to its neighbours), the value JOINED_MIN_SHARE of the run's characters,
    never cutting a run of digits (07-04-20 is not inside 07-04-2019)."""
    starts, parts, owner = [], [], []
    for i, k in enumerate(keys):
        if k:
            starts.append(sum(len(p) for p in parts))
            parts.append(k)
            owner.append(i)
    text = "".join(parts)
    bounds = starts + [len(text)]
    runs = []
    at = text.find(target)
    while at != -1:
        a = bisect.bisect_right(starts, at) - 1
        b = bisect.bisect_right(starts, at + len(target) - 1) - 1
        span = bounds[b + 1] - bounds[a]
        end = at + len(target)
        cuts_number = ((at > bounds[a] and text[at - 1].isdigit() and text[at].isdigit())
                       or (end < bounds[b + 1] and text[end - 1].isdigit() and text[end].isdigit()))
        if len(target) >= JOINED_MIN_SHARE * span and not cuts_number:
            runs.append((owner[a], owner[b]))
        at = text.find(target, at + 1)
    return runs


REORDERED_MIN_PIECES = 3  # a value of this many pieces or more may be found in another order


def _reordered_runs(wp: list[list[str]], target: list[str]) -> list[tuple[int, int]]:
    """Runs [i, j] whose words' pieces `wp` are the `target` pieces, the same multiset in another
    order (OCR put a line of the value before another: two boxes on one tilted row), starting
    and ending on a word with pieces; the run holds nothing else."""
    want = Counter(target)
    total = len(target)
    runs = []
    for i in range(len(wp)):
        if not wp[i] or not all(p in want for p in wp[i]):
            continue
        have, count = Counter(), 0
        for j in range(i, len(wp)):
            have.update(wp[j])
            count += len(wp[j])
            if count > total or any(have[p] > want[p] for p in wp[j]):
                break
            if count == total and wp[j]:
                if have == want:
                    runs.append((i, j))
                break
    return runs


def _piece_runs(keys: list[str], target: str) -> list[tuple[int, int]]:
    """Runs [i, j] of words holding `target` as whole consecutive pieces (the value bounded by
    punctuation inside a word the OCR joined: "MYNEWSRETAILSB(306295-X)FKA")."""
    owner, parts = [], []
    for i, k in enumerate(keys):
        for p in pieces(k):
            owner.append(i)
            parts.append(p)
    return sorted({(owner[a], owner[b]) for a, b in _find_runs(parts, target, "")})


_DATE = re.compile(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{2,4}|\d{1,2} ?[a-z]{3,9}\.? ?\d{2,4}")


def _date_time_runs(texts: list[str], value: str) -> list[tuple[int, int]]:
    """Words that begin with the date `value` as printed and run on into a time without a
    space ("01-03-185:23:26" for 01-03-18, "Date:25-03-201809:42" for 25-03-2018, "19" +
    "Mar201818:" for 19 MAR 2018): the words holding the date, up to three. A two-digit year 19
    or 20 followed by two digits is not taken (it may be the first half of a four-digit year)."""
    v = " ".join(unicodedata.normalize("NFKC", value).casefold().split())
    if not _DATE.fullmatch(v):
        return []
    ambiguous = re.search(r"(?<!\d)(19|20)$", v) is not None
    pat = re.compile(r"(?:^|[^\w])" + re.escape(v.replace(" ", "")) + r"(\d{1,2}) ?: ?\d{2}")
    low = [unicodedata.normalize("NFKC", t).casefold() for t in texts]
    runs = []
    for i in range(len(low)):
        joined, ends = "", []
        for j in range(i, min(i + 4, len(low))):
            joined += low[j]
            ends.append(len(joined))
            m = pat.search(joined)
            if m is None:
                continue
            start = m.start() + (0 if joined[m.start()].isalnum() and m.start() == 0 else 1)
            if start >= len(low[i]) or (ambiguous and len(m.group(1)) == 2):
                break  # the date starts in a later word (found from there), or is ambiguous
            last = next(k for k, e in enumerate(ends) if e > m.start(1) - 1)  # its last character's word
            runs.append((i, i + last))
            break
    return runs


def value_key(value: str) -> str:
    return "".join(word_key(t) for t in value.split())


def number_value(text: str) -> Decimal | None:
    k = word_key(text)
    if not k or canonical_number(k) is None:
        return None
    return Decimal(k)


# ---------------------------------------------------------------------------------------
# Finding a value

@dataclass(frozen=True)
class Grounding:
    status: str  # exact | normalized | computed | absent | null
    words: tuple = ()
    reason: str = ""

    def to_dict(self) -> dict:
        return {"status": self.status, "words": list(self.words), "reason": self.reason}


def _find_runs(keys: list[str], target: str, joiner: str) -> list[tuple[int, int]]:
    """Every run [i, j] of consecutive words, starting and ending on a word with a non-empty
    key, whose keys joined by `joiner` equal `target`, in order of i.

    The non-empty keys are joined once into one string and `target` is searched in it; an
    occurrence is a run when it starts at a word's first character and ends at a word's
    last. Linear in the page's text (the old scan from every word was quadratic)."""
    runs = []
    if not target:
        return runs
    starts, ends, parts = {}, {}, []
    pos = 0
    for i, k in enumerate(keys):
        if not k:
            continue
        if parts:
            pos += len(joiner)
        starts[pos] = i
        parts.append(k)
        pos += len(k)
        ends[pos] = i
    text = joiner.join(parts)
    at = text.find(target)
    while at != -1:
        i = starts.get(at)
        if i is not None:
            j = ends.get(at + len(target))
            if j is not None:
                runs.append((i, j))
        at = text.find(target, at + 1)
    return runs


def _computed_from(page_numbers: list[Decimal], amounts: list[Decimal], v: Decimal) -> str | None:
    counts = Counter(page_numbers)
    for a in page_numbers:
        b = v - a
        if b in counts and (b != a or counts[a] > 1) and a != 0 and b != 0:
            return f"{_fmt(a)} + {_fmt(b)}"
    for a in page_numbers:
        if a in (0, 1):
            continue
        b = v / a
        if b in counts and b != 1 and (b != a or counts[a] > 1):
            return f"{_fmt(a)} x {_fmt(b)}"
    run = _consecutive_sum(amounts, v)
    if run is not None:
        i, j = run
        return f"the sum of {j - i + 1} consecutive amounts from {_fmt(amounts[i])} to {_fmt(amounts[j])}"
    return None


def _consecutive_sum(amounts: list[Decimal], v: Decimal) -> tuple[int, int] | None:
    """The first run amounts[i..j] of two or more amounts whose sum is v (smallest i, then
    smallest j), in O(n log n): prefix sums P, and P[j + 1] - P[i] == v looked up by value.
    The sums are exact (no rounding to the default 28 digits)."""
    n = len(amounts)
    if n < 2:
        return None
    exact = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    prefix = [Decimal(0)]
    for a in amounts:
        prefix.append(exact.add(prefix[-1], a))
    where: dict = {}
    for k, p in enumerate(prefix):
        where.setdefault(p, []).append(k)  # indices in increasing order
    for i in range(n - 1):
        ks = where.get(exact.add(prefix[i], v))
        if ks:
            pos = bisect.bisect_left(ks, i + 2)
            if pos < len(ks):
                return i, ks[pos] - 1
    return None


def _fmt(d: Decimal) -> str:
    return format(d.normalize(), "f")


def _hint_keys(field_name: str | None) -> set:
    if not field_name:
        return set()
    parts = [p for p in field_name.casefold().split("_") if len(p) >= 3]
    return set(parts) | {field_name.casefold().replace("_", "")}


def _same_row(a, b) -> bool:
    cy = (a[1] + a[3]) / 2
    return b[1] <= cy <= b[3]


def _keyed(keys: list[str], start: int, hints: set, words=None, above: bool = False) -> bool:
    """Whether one of the three words before `start`, on the same row, names the field
    ("TOTAL 12.50"); with `above` (a field's keywords, field_keywords) also a word of the row
    just above the value that overlaps its first word sideways ("Date:" over "12/03/2019")."""
    if above and words is not None:
        return any(keys[k] in hints for k in context_words(words, start))
    return any(keys[k] in hints and (words is None or _same_row(words[k].box, words[start].box))
               for k in range(max(0, start - 3), start))


# ---------------------------------------------------------------------------------------
# A field's keywords: the words that name it where it is printed (the "printing" reading and
# the learnt keywords of tuning/keywords.py). Keys are word_key()s.

KEYWORD_SOURCES = ("name", "schema", "learned")  # the settings table's `keywords` choices
# Abbreviations in field names, and the words they stand for on a page
ABBREVIATIONS = {
    "num": ("number", "no"), "no": ("number", "no"), "nr": ("number", "no"), "nbr": ("number", "no"),
    "amt": ("amount",), "qty": ("quantity", "qty"), "addr": ("address",), "tel": ("tel", "telephone", "phone"),
    "ph": ("phone", "tel"), "dt": ("date",), "inv": ("invoice",), "acct": ("account",), "acc": ("account",),
    "ref": ("reference", "ref"), "desc": ("description",), "tot": ("total",), "subtot": ("subtotal",),
    "po": ("po", "order"), "vat": ("vat", "tax"), "gst": ("gst", "tax"), "id": ("id", "number"),
}
# Words of a name or a description that name no field ("the amount to pay", "as printed")
STOPWORDS = frozenset(
    "a an the of to for in on at by as is are be or and with without its it this that which what who "
    "from all any each per value field printed shown written given page document receipt form "
    "one two where when how their his her our your".split())


def split_name(name: str) -> list[str]:
    """A field name's words: snake_case, camelCase, kebab-case and digits split, lower case
    ("invoiceNum2" -> invoice, num, 2)."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
    return [p for p in re.split(r"[^0-9A-Za-z]+|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])", s.casefold()) if p]


def name_keywords(name: str) -> set:
    """The keys a field's name gives: its words that are not stop words (a short word only
    where it is a known abbreviation), each abbreviation's words, and the name joined
    ("subtotal" for sub_total)."""
    words = split_name(name)
    out = set()
    for w in words:
        if w in ABBREVIATIONS:
            out.update(ABBREVIATIONS[w])
        elif w not in STOPWORDS and len(w) >= 3 and not w.isdigit():
            out.add(w)
    if len(words) > 1:
        out.add("".join(words))
    return {k for k in (word_key(w) for w in out) if k}


def description_keywords(text: str | None) -> set:
    """The keys of a field's description: its words of three letters or more that are not
    stop words ("the amount to pay" -> amount, pay)."""
    out = set()
    for w in re.findall(r"[^\W\d_]+", (text or "").casefold()):
        if len(w) >= 3 and w not in STOPWORDS:
            k = word_key(w)
            if k:
                out.add(k)
    return out


def words_above(words, start: int) -> list[int]:
    """The words of the row just above word `start` that overlap it sideways: each word whose
    box ends above the word's vertical centre, within one and a half of its heights of its top,
    and the nearest such row only (the words whose bottom is within a quarter height of the
    lowest)."""
    x0, y0, x1, y1 = words[start].box
    h = max(y1 - y0, 1e-6)
    cy = (y0 + y1) / 2
    cand = [k for k, w in enumerate(words)
            if k != start and w.box[3] <= cy and y0 - w.box[3] <= 1.5 * h and w.box[0] < x1 and w.box[2] > x0]
    if not cand:
        return []
    low = max(words[k].box[3] for k in cand)
    return [k for k in cand if words[k].box[3] >= low - 0.25 * h]


def context_words(words, start: int) -> list[int]:
    """The words that may name a value starting at word `start`: the three before it on its
    row, and those of the row just above that overlap it (words_above)."""
    before = [k for k in range(max(0, start - 3), start) if _same_row(words[k].box, words[start].box)]
    return before + [k for k in words_above(words, start) if k not in before]


def ground_value(page, value, prefer: str | None = None, field: str | None = None, ocr: bool = True) -> Grounding:
    """Find `value` on `page` as one run of consecutive words.

    Among equally exact runs, those within three words after a word equal to the field's
    name (or a part of it of three letters or more: "total", "invoice" for invoice_number),
    on the same row, are preferred; then the `prefer`red occurrence, "first" or "last"; by
    default the last for a number and the first otherwise. ocr=False leaves out the OCR
    tiers (words read from a text layer: exact, normalized, punctuation-blind, computed),
    the rule the pretraining corpus's invoice2data pages are grounded by (docs/base-model.md)."""
    return _ground(page, value, prefer, field, ocr)[0]


def _ground(page, value, prefer=None, field=None, ocr=True, keywords=None) -> tuple[Grounding, list, bool]:
    """(grounding, every run (first, last word) of the chosen tier in order of preference,
    whether the chosen run follows the field's name). `keywords` (a set of word keys): runs
    after one of them, or under one (field_keywords), come first instead of those after the
    field's name."""
    if value is None:
        return Grounding("null", (), "no value"), [], False
    if not isinstance(value, str):
        raise TypeError(f"a value is text or None, not {value!r}")
    texts = [w.text for w in page.words]
    target_exact = " ".join(value.split())
    vkey = value_key(value)
    if not target_exact:
        return Grounding("null", (), "the value is empty"), [], False
    is_number = canonical_number(vkey) is not None
    choose = prefer or ("last" if is_number else "first")
    if choose not in ("first", "last"):
        raise ValueError(f"prefer must be 'first' or 'last', not {prefer!r}")

    hints = _hint_keys(field) if keywords is None else set(keywords)
    keys = [word_key(t) for t in texts]

    def pick(runs, status, how):
        reason = how
        keyed = [r for r in runs if _keyed(keys, r[0], hints, page.words, keywords is not None)] if hints else []
        if len(runs) > 1:
            group = runs
            if keyed and len(keyed) < len(runs):
                reason += f"; {len(runs)} occurrences, {len(keyed)} after the field's name"
                group = keyed
            else:
                reason += f"; {len(runs)} occurrences"
            if len(group) > 1:
                reason += f", took the {choose}"
        ordered_keyed = keyed if choose == "first" else keyed[::-1]
        keyed_set = set(keyed)
        rest = [r for r in runs if r not in keyed_set]
        ordered = ordered_keyed + (rest if choose == "first" else rest[::-1])
        i, j = ordered[0]
        return Grounding(status, tuple(range(i, j + 1)), reason), ordered, bool(keyed)

    runs = _find_runs([" ".join(t.split()) for t in texts], target_exact, " ")
    if runs:
        return pick(runs, "exact", "found as printed")
    if not vkey:
        return Grounding("null", (), f"the value {value!r} has no words (only punctuation)"), [], False
    runs = _find_runs(keys, vkey, "")
    if runs:
        return pick(runs, "normalized", "found after normalization (case, Unicode, spaces, edge punctuation, "
                                        "number format)")
    lkeys = [loose_key(k) for k in keys]
    lvalue = loose_key(vkey)
    runs = _find_runs(lkeys, lvalue, "")
    if runs:
        return pick(runs, "normalized", "found ignoring punctuation")
    if not ocr and not is_number:  # every OCR tier below is for text values only
        return Grounding("absent", (), f"{value!r} is not on the page"), [], False
    # OCR tiers (docs/ocr.md), for text values only: a number read differently is another number
    fkeys, fvalue = [lookalike_key(k) for k in lkeys], lookalike_key(lvalue)
    if len(lvalue) >= LOOKALIKE_MIN_CHARS and not is_number:
        runs = _find_runs(fkeys, fvalue, "")
        if runs:
            return pick(runs, "normalized", "OCR: found reading look-alike characters as one "
                                            "(0/O, 1/I/l, 5/S, 8/B, 2/Z), punctuation ignored")
    if not is_number:
        runs = _date_time_runs(texts, value)
        if runs:
            return pick(runs, "normalized", "OCR: the date runs on into the time without a space "
                                            "(the words holding the date are labelled)")
    vpieces = [lookalike_key(p) for t in value.split() for p in pieces(word_key(t))]
    if len(vpieces) >= REORDERED_MIN_PIECES and len(lvalue) >= FUZZY_MIN_CHARS and not is_number:
        runs = _reordered_runs([[lookalike_key(p) for p in pieces(k)] for k in keys], vpieces)
        if runs:
            return pick(runs, "normalized", "OCR: found with its words in another order (lines of the "
                                            "value read out of order)")
    if len(lvalue) >= FUZZY_MIN_CHARS and not is_number and any(c.isalpha() for c in lvalue):
        runs, d = _fuzzy_runs(fkeys, fvalue)
        if runs:
            return pick(runs, "normalized", f"OCR: found ignoring punctuation and look-alike characters, "
                                            f"{d} character(s) read differently (at most one in "
                                            f"{FUZZY_CHARS_PER_EDIT})")
    if len(lvalue) >= JOINED_MIN_CHARS and not is_number:
        runs = _piece_runs(keys, lvalue) or _piece_runs([lookalike_key(k) for k in keys], fvalue)
        if runs:
            return pick(runs, "normalized", "OCR: found between punctuation inside words the OCR joined "
                                            "(the words are labelled)")
        runs = _joined_runs(fkeys, fvalue)
        if runs:
            return pick(runs, "normalized", "OCR: found inside words the OCR joined to their neighbours "
                                            "(the words are labelled)")
    if is_number:
        v = Decimal(vkey)
        numbers = [Decimal(k) for k in keys if k and canonical_number(k) is not None]
        amounts = [Decimal(word_key(t)) for t in texts
                   if re.search(r"\d[.,]\d", t) and canonical_number(word_key(t)) is not None]
        how = _computed_from(numbers, amounts, v)
        if how is not None:
            return Grounding("computed", (), f"not printed: {value!r} equals {how}"), [], False
    return Grounding("absent", (), f"{value!r} is not on the page"), [], False


def ground_answers(page, answers: dict, field_names, keywords: dict | None = None) -> dict:
    """The grounding report {field: Grounding.to_dict()} for every schema field (a field the
    answers leave out counts as null). `keywords` {field: set of word keys} (the "printing"
    reading with a model's keywords): runs after or under a field's keywords come first, not
    those after its name; None: its name (the labelling rule).

    Fields are grounded together: when two fields' chosen runs share a word (the same
    number printed as both subtotal and total, say), a field moves to its next run of the
    same tier that no other field uses. Fields whose run does not follow their name move
    first, so "SUBTOTAL 50,000 ... TOTAL 50,000" gives each field its own words."""
    found = {}
    for name in field_names:
        if name not in answers:
            found[name] = (Grounding("null", (), "no answer for this field"), [], False)
        else:
            found[name] = _ground(page, answers.get(name), field=name,
                                  keywords=None if keywords is None else keywords.get(name, ()))
    chosen = {n: set(g.words) for n, (g, _, _) in found.items()}
    names = [n for n in field_names if not found[n][2]] + [n for n in field_names if found[n][2]]
    for name in names:
        g, runs, _ = found[name]
        others = set().union(*(w for n, w in chosen.items() if n != name))
        if not (set(g.words) & others):
            continue
        for a, b in runs[1:]:
            run = tuple(range(a, b + 1))
            if not set(run) & others:
                g = Grounding(g.status, run, g.reason + "; moved off words another field uses")
                found[name] = (g, runs, found[name][2])
                chosen[name] = set(run)
                break
    return {n: found[n][0].to_dict() for n in field_names}


# The "keyed" decoding (engine/extract.py keyed_values): a value printed after its field's key.
# A gap wider than this many word heights between two words of one row ends the value.
KEYED_GAP = 2.0


def _opens_its_piece(words, k: int, gaps: bool = True) -> bool:
    """Whether word k opens its piece of the row: the first of its row, after a word to its right
    (another column read before it), or with `gaps` more than KEYED_GAP word heights right of the
    word before."""
    if k == 0 or not _same_row(words[k].box, words[k - 1].box) or words[k - 1].box[0] > words[k].box[0]:
        return True
    h = max(words[k].box[3] - words[k].box[1], 1e-6)
    return gaps and words[k].box[0] - words[k - 1].box[2] > KEYED_GAP * h


def _prints_a_key(words, k: int) -> bool:
    """Whether word k is printed as a key: it ends in ':' ("To:") or it opens its row ("TO  K. A.
    Sparrow"); a keyword inside running text ("addressed to whom") is not one. (A ':' alone read
    within one form of this on FUNSD and SROIE, docs/base-model.md "Values after their keys".)"""
    return words[k].text.rstrip().endswith(":") or _opens_its_piece(words, k, gaps=False)


# The "keyed_layout" reading: the rows of a value over several rows start within a word height
# of its first word's left edge, each no more than this many word heights below the row before
# (FUNSD's addresses and cc lists: about 0.5)
ROWS_GAP = 1.5


def _row_run(words, s, is_key, anchor, gaps: bool = True, leftward: bool = False) -> int:
    """The last word of the run from word s along anchor's row: up to the row's end, a key
    (is_key), with `gaps` a gap wider than KEYED_GAP word heights, with `leftward` a word that
    starts left of the one before it (reading order gone back to another column)."""
    e = s
    for j in range(s + 1, len(words)):
        h = max(words[j].box[3] - words[j].box[1], 1e-6)
        if not _same_row(words[anchor].box, words[j].box) or is_key(j) \
                or (gaps and words[j].box[0] - words[j - 1].box[2] > KEYED_GAP * h) \
                or (leftward and words[j].box[0] < words[j - 1].box[0]):
            break
        e = j
    return e


def _next_row_start(words, s, e) -> int | None:
    """The word after e when it starts the next row where word s starts (within a word height,
    no more than ROWS_GAP heights below row e), else None."""
    j = e + 1
    if j >= len(words):
        return None
    h = max(words[s].box[3] - words[s].box[1], 1e-6)
    b, last = words[j].box, words[e].box
    if _same_row(last, b) or b[1] - last[3] > ROWS_GAP * h or abs(b[0] - words[s].box[0]) > h:
        return None
    return j


def _more_rows(words, s, e, is_key) -> int:
    """e, the end of a run from word s on its row, extended over the next rows that start where
    word s does, each with no key first (an address, a list of names); when there are such rows,
    every row of the value is taken to its end or a key, across gaps (a list of names in
    columns)."""
    row_end = _row_run(words, s, is_key, s, gaps=False, leftward=True)
    j = _next_row_start(words, s, row_end)
    if j is None or is_key(j):
        return e
    while j is not None and not is_key(j):
        row_end = _row_run(words, j, is_key, j, gaps=False, leftward=True)
        j = _next_row_start(words, s, row_end)
    return row_end


def keyword_near(page, start: int, keys) -> bool:
    """Whether one of `keys` (word keys) names a value starting at word `start`: it is one of the
    three words before it on its row or a word of the row just above that overlaps it
    (context_words). The "keyed_layout" reading's test of a model's value (keyed_values' `near`)."""
    return any(word_key(page.words[k].text) in keys for k in context_words(page.words, start))


def after_part_of_a_key(page, start: int, keys) -> bool:
    """Whether a value starting at word `start` follows a longer key of which one of `keys` is only
    a part: one of the three words before it on its row is one of keys, and its piece of the row,
    from the piece's first word up to the value, holds a word with letters that is none of keys
    ("MESSAGE TO: ...", "Coupon Issue Date ...", "DATE TO NYO: ..."; not "Start Date:" where
    "start" is a keyword of the field too, nor "1. Date:"). The "keyed_layout" reading's test of a
    near field's value (keyed_values' `near`): the schema's question is the key alone."""
    words = page.words

    def other(j):
        key = word_key(words[j].text)
        return key not in keys and any(ch.isalpha() for ch in key)

    for k in _keys_before(words, start, keys):
        first = k
        while not _opens_its_piece(words, first):
            first -= 1
        if any(other(j) for j in range(first, start)):
            return True
    return False


def _keys_before(words, start: int, keys) -> list:
    """The words among the three before word `start` on its row that are one of `keys` (word
    keys), the nearest first: the keys printed beside a value starting there."""
    return [k for k in range(start - 1, max(0, start - 3) - 1, -1)
            if _same_row(words[k].box, words[start].box) and word_key(words[k].text) in keys]


def _with_colon(words, k: int) -> bool:
    """Whether key word k is printed with a colon: it ends in ':' or the next word is ':' alone."""
    return words[k].text.rstrip().endswith(":") or (k + 1 < len(words) and words[k + 1].text.strip() == ":")


def key_beside(page, start: int, keys) -> int | None:
    """The last of the three words before word `start` on its row that is one of `keys` (word
    keys): the key printed beside a value starting there; None where there is none."""
    return next(iter(_keys_before(page.words, start, keys)), None)


def key_with_colon(page, start: int, keys) -> bool:
    """Whether the key beside a value starting at word `start` (key_beside) is printed with a
    colon ("To: Ron Milstein", "DATE : 18/03/18"; not "TO K. A. Sparrow"): the "keyed_layout"
    reading's count of its fields keyed with a colon (tuning/keywords.py keyed_counts)."""
    k = key_beside(page, start, keys)
    return k is not None and _with_colon(page.words, k)


def keyed_extents(page, field_names, keywords: dict | None = None, layout: bool = False, colon=()) -> dict:
    """{field: [(first, last), ...]} in reading order: the runs of words printed right after one
    of the field's keywords on its row ("To: Ron Milstein"), for the "keyed" decoding. A run
    starts at the word after the keyword, on its row and to its right, and goes on along that
    row until a word that is a keyword of any field, a word ending in ':' (another key), or a
    gap wider than KEYED_GAP word heights. `keywords` {field: set of word keys} (a model's
    stored keywords); None: the name rule's keys (_hint_keys), as the printing reading.
    layout=True (the "keyed_layout" reading): a run also stops at a word that starts left of
    the one before it, and goes on over the next rows that start where it starts (_more_rows:
    "TO: LORILLARD, INC." over "ONE PARK AVENUE" over "NEW YORK, N. Y. 10016"). `colon` (field
    names: the "keyed_layout" reading's fields keyed with a colon, colon_keys): a keyword of
    such a field printed without a colon (_with_colon) starts none of its runs ("To whom are we
    talking?"); it still ends the runs of others."""
    words = page.words
    keys = [word_key(w.text) for w in words]
    kw = {n: set(keywords.get(n, ())) if keywords is not None else _hint_keys(n) for n in field_names}
    every = set().union(*kw.values()) if kw else set()

    def is_key(j):
        return keys[j] in every or words[j].text.rstrip().endswith(":")

    out = {n: [] for n in field_names}
    for k in range(len(words)):
        named = [n for n in field_names if keys[k] and keys[k] in kw[n]
                 and (n not in colon or _with_colon(words, k))]
        if named and not _prints_a_key(words, k):
            continue
        s = k + 1
        if not named or s >= len(words) or not _same_row(words[k].box, words[s].box) \
                or words[s].box[0] < words[k].box[0] or is_key(s):
            continue
        e = _row_run(words, s, is_key, k, leftward=layout)
        if layout:
            e = _more_rows(words, s, e, is_key)
        for n in named:
            out[n].append((s, e))
    return out


def _tier(g: dict) -> int:
    """How exactly a grounded value was found: 0 as printed, 1 normalized, 2 ignoring
    punctuation, 3 by one of the OCR tiers."""
    if g["status"] == "exact":
        return 0
    reason = g.get("reason", "")
    if reason.startswith("OCR:"):
        return 3
    return 2 if reason.startswith("found ignoring punctuation") else 1


def ground_document(pages, answers: dict, field_names, document_id: str | None = None) -> dict:
    """The grounding reports {page id: {field: report}} of a document's pages (in page order)
    for one set of answers, the document's.

    Each field's value is looked for on every page and tagged where it is printed, by the rule
    for repeated printings applied across pages: the most exact tier wins; then the printings
    that follow the field's name; then the LAST page for a number (an invoice's total follows
    the pages that carry subtotals forward) and the FIRST for text. Every other page gets status
    "other_page" with "page" naming the page that holds the value: no value there, so a repeated
    printing on another page is O, as a repeated printing on the same page is. A value printed on
    no page is "absent" on every page (the document is excluded), "computed" where it is a sum or
    product of one page's numbers. A document of one page is grounded exactly as a page."""
    pages = list(pages)
    names = list(field_names)
    per_page = {p.id: ground_answers(p, answers, names) for p in pages}
    if len(pages) < 2:
        return per_page
    numbers = {p.id: (p.page_number if p.page_number is not None else k + 1) for k, p in enumerate(pages)}
    doc = document_id or pages[0].document_id
    for name in names:
        value = answers.get(name)
        if value is None or not isinstance(value, str):
            continue
        gs = [(p, per_page[p.id][name]) for p in pages]
        found = [(p, g) for p, g in gs if g["status"] in ("exact", "normalized")]
        if found:
            best = min(_tier(g) for _, g in found)
            cands = [(p, g) for p, g in found if _tier(g) == best]
            keyed = [(p, g) for p, g in cands if len(cands) > 1 and _ground(p, value, field=name)[2]]
            cands = keyed or cands
            is_number = canonical_number(value_key(value)) is not None
            page, g = cands[-1] if is_number else cands[0]
            note = f"; on page {numbers[page.id]} of document {doc}"
            if len(found) > 1:
                note += (f" (printed on {len(found)} pages, took the "
                         f"{'last' if is_number else 'first'}{' after the field name' if keyed else ''})")
            g["reason"] = g.get("reason", "") + note
        else:
            computed = [(p, g) for p, g in gs if g["status"] == "computed"]
            if not computed:
                for p, g in gs:
                    if g["status"] == "absent":
                        g["reason"] = f"{value!r} is not on any page of document {doc}"
                continue
            page, g = computed[0]
        for p, other in gs:
            if p.id != page.id:
                per_page[p.id][name] = {"status": "other_page", "words": [], "page": page.id,
                                        "reason": f"printed on page {numbers[page.id]} ({page.id}) of document {doc}"}
    return per_page


# ---------------------------------------------------------------------------------------
# Targets for training and scoring

@dataclass(frozen=True)
class Excluded:
    reason: str


@dataclass
class PageTargets:
    page_id: str
    tags: np.ndarray  # int64, one per page word: 0 = O, 1+2c = B-c, 2+2c = I-c, -1 = ignored
    field_words: dict  # {field: tuple of word indices, () = no value}
    unscored: set = field(default_factory=set)


def _label_source(labels: LabelFile) -> str:
    return f"labels/{labels.page}.json"


def _check_indices(words, n: int, what: str, labels: LabelFile) -> tuple:
    bad = [i for i in words if not 0 <= i < n]
    if bad:
        raise LabelError(f"{_label_source(labels)}: {what} names word {bad[0]} but the page has {n} words")
    return tuple(sorted(words))


def not_asked_fields(labels: LabelFile, field_names) -> list:
    """Schema fields the labelling model was never asked about on this page and a person has
    not set: fields added to the schema after the page was labelled. Such a field is neither
    a value nor "no value" (the page is left out of training and scoring until it is asked
    or set); a page never labelled is "not labelled yet" instead and returns []."""
    if labels.answers is None:
        return []
    fixes = (labels.review or {}).get("fixes", {}) or {}
    return [n for n in field_names if n not in labels.answers and n not in labels.grounding and n not in fixes]


def not_asked_reason(names) -> str:
    # no "; " inside: exclusion reasons are joined and split on it
    return (f"{', '.join(names)} not asked yet (added to the schema after this page was labelled, "
            f"Label pages asks for {'it' if len(names) == 1 else 'them'})")


# A value grounding did not find ("absent"): what becomes of its page (the tuning setting
# absent_value, docs/project.md). "exclude": the page is left out of training and scoring (the
# seed's rule). "ignore": a page whose other values are found (at least ABSENT_MIN_FOUND of them)
# and only one text value is not, is kept: that field is unscored on it, and the words where the
# value may still be printed (possible_words) are ignored by the loss (target -1) rather than
# taught as O. A number, or a text value none of whose pieces is on the page, still excludes it.
ABSENT_POLICIES = ("exclude", "ignore")
ABSENT_MIN_FOUND = 2
POSSIBLE_PIECE_CHARS = 3  # a value's pieces shorter than this say nothing about where it is
POSSIBLE_FUZZY_CHARS = 5  # a piece this long matches a word's piece within one edit


def _word_rows(words) -> list[int]:
    """The row of each word, as reading_order groups them (rows from top to bottom)."""
    from dxstudio.engine.page import reading_rows

    row_of = [0] * len(words)
    for r, row in enumerate(reading_rows([w.box for w in words])):
        for i in row:
            row_of[i] = r
    return row_of


def possible_words(page, value) -> tuple:
    """The words where a text value grounding did not find may still be printed: the rows of
    the page's words that hold one of the value's pieces (its runs of letters and digits of
    POSSIBLE_PIECE_CHARS or more, look-alikes read alike, one edit forgiven in a piece of
    POSSIBLE_FUZZY_CHARS or more), the cluster of such rows (no more than one row between
    two) that holds the most of the value's pieces, and one row above and below it (a line
    read beyond recognition: a stamp over an address line). () when no piece is on the page,
    or the value is a number."""
    if not isinstance(value, str) or canonical_number(value_key(value)) is not None:
        return ()
    want = {lookalike_key(p) for t in value.split() for p in pieces(word_key(t)) if len(p) >= POSSIBLE_PIECE_CHARS}
    if not want or not page.words:
        return ()
    long_want = [p for p in want if len(p) >= POSSIBLE_FUZZY_CHARS]

    def hits(text):
        out = set()
        for p in pieces(word_key(text)):
            p = lookalike_key(p)
            if p in want:
                out.add(p)
            elif len(p) >= POSSIBLE_FUZZY_CHARS - 1:
                out.update(q for q in long_want if _bounded_distance(p, q, 1) is not None)
        return out

    row_of = _word_rows(page.words)
    found = {}  # row: the value's pieces on it
    for i, w in enumerate(page.words):
        h = hits(w.text)
        if h:
            found.setdefault(row_of[i], set()).update(h)
    if not found:
        return ()
    clusters, cur = [], []
    for r in sorted(found):
        if cur and r - cur[-1] > 2:
            clusters.append(cur)
            cur = []
        cur.append(r)
    clusters.append(cur)
    best = max(clusters, key=lambda c: (len(set().union(*(found[r] for r in c))), -c[0]))
    lo, hi = best[0] - 1, best[-1] + 1
    return tuple(i for i, r in enumerate(row_of) if lo <= r <= hi)


def field_words_of(page, labels: LabelFile, field_names, leave_out=(), absent: str = "exclude",
                   ignored: dict | None = None) -> dict | Excluded:
    """{field: (word indices)} after the review's fixes, or Excluded(reason). A field in
    `leave_out` (not asked yet on some page of the project: left out of the run) never
    excludes the page; its words are what a fix or the grounding says, else (). absent
    (ABSENT_POLICIES): with "ignore", a page with one text value not found and at least
    ABSENT_MIN_FOUND others found is kept, that field's words () and `ignored`[field] the
    words where it may be printed (possible_words); "exclude" leaves the page out."""
    if absent not in ABSENT_POLICIES:
        raise ValueError(f"absent must be one of {', '.join(ABSENT_POLICIES)}, not {absent!r}")
    n = len(page.words)
    review = labels.review or {}
    if review.get("state") == "excluded":
        return Excluded(review.get("reason") or "excluded in review")
    fixes = review.get("fixes", {}) or {}
    if labels.answers is None and not fixes and review.get("state") != "accepted":
        return Excluded("not labelled yet")
    leave_out = set(leave_out)
    missing = [m for m in not_asked_fields(labels, field_names) if m not in leave_out]
    if missing:
        return Excluded(not_asked_reason(missing))
    answers = labels.answers or {}
    out, missed, found = {}, [], 0
    for name in field_names:
        if name in leave_out and name not in fixes and name not in answers and name not in labels.grounding:
            out[name] = ()
            continue
        if name in fixes:  # a person's fix overrides whatever the model said
            out[name] = _check_indices(fixes[name], n, f"the fix of {name!r}", labels)
            found += bool(out[name])
            continue
        g = labels.grounding.get(name)
        if g is None:
            g = ground_value(page, answers.get(name), field=name).to_dict() if name in answers else {"status": "null"}
        status = g.get("status")
        if status == "absent" and name in leave_out:
            out[name] = ()
        elif status == "absent":
            missed.append((name, f"{name}: {g.get('reason') or 'the value is not on the page'}"))
        elif status == "other_page":  # the document's value is printed on another of its pages
            out[name] = ()
        elif status in ("exact", "normalized"):
            out[name] = _check_indices(g.get("words", []), n, f"the grounding of {name!r}", labels)
            found += bool(out[name])
        else:  # computed, null: no value on this page
            out[name] = ()
    if missed and absent == "ignore" and len(missed) == 1 and found >= ABSENT_MIN_FOUND:
        name = missed[0][0]
        maybe = possible_words(page, answers.get(name))
        if maybe:
            out[name] = ()
            if ignored is not None:
                ignored[name] = maybe
            return out
    if missed:
        return Excluded("; ".join(r for _, r in missed))
    return out


REPEATS = ("o", "ignore")


def repeated_runs(page, labels: LabelFile, name: str, chosen) -> list[tuple]:
    """The other runs of the same grounding tier where the field's grounded value is printed
    again (the same total beside TOTAL and beside CASH): [] for a person's fix, a value not
    grounded, or a value printed once."""
    review = labels.review or {}
    if name in (review.get("fixes") or {}) or not chosen:
        return []
    answers = labels.answers or {}
    value = answers.get(name)
    if not isinstance(value, str):
        return []
    g, runs, _ = _ground(page, value, field=name)
    if g.status not in ("exact", "normalized"):
        return []
    return [r for r in runs if set(r) != set(chosen)]


def page_targets(page, labels: LabelFile, field_names, max_words: int | None = None,
                 repeats: str = "o", leave_out=(), absent: str = "exclude") -> PageTargets | Excluded:
    """Tag targets of one page.

    A field's words, if one run of consecutive words, are B then I; every other word is O.
    A field whose words are not one run, or that shares a word with another field, or that
    has a word past the first window of max_words words, is not scored and its words get -1.
    Words past the window get -1 too. repeats="ignore": the words of the other runs where a
    grounded value is printed again (same tier, repeated_runs) get -1 where they would be O;
    "o" (the seed's rule) leaves them O. leave_out: fields left out of the run (not asked yet on
    some page, left_out_fields): unscored on every page, their words (where a person set them)
    ignored by the loss, so the other fields train and score as if the field were not there.
    absent="ignore" (ABSENT_POLICIES): a page with one text value not found but the others
    found is kept, that field unscored on it, the words where it may be printed -1 where they
    would be O (field_words_of); "exclude" leaves such a page out."""
    if repeats not in REPEATS:
        raise ValueError(f"repeats must be one of {', '.join(REPEATS)}, not {repeats!r}")
    field_names = list(field_names)
    leave_out = [n for n in field_names if n in set(leave_out)]
    ignored = {}
    fw = field_words_of(page, labels, field_names, leave_out, absent, ignored)
    if isinstance(fw, Excluded):
        return fw
    n = len(page.words)
    tags = np.zeros(n, dtype=np.int64)
    claims = Counter(i for words in fw.values() for i in words)
    unscored = set(leave_out) | set(ignored)
    for name, words in fw.items():
        if not words or name in unscored:
            continue
        contiguous = words[-1] - words[0] == len(words) - 1
        shared = any(claims[i] > 1 for i in words)
        past_window = max_words is not None and words[-1] >= max_words
        if not contiguous or shared or past_window:
            unscored.add(name)
    for c, name in enumerate(field_names):
        words = fw[name]
        if not words or name in unscored:
            continue
        tags[words[0]] = 1 + 2 * c
        tags[list(words[1:])] = 2 + 2 * c
    for name in unscored:
        tags[list(fw[name])] = -1
    for words in ignored.values():  # where a value not found may be printed: not taught as O
        for i in words:
            if tags[i] == 0:
                tags[i] = -1
    if repeats == "ignore":
        for name in field_names:
            for run in repeated_runs(page, labels, name, fw[name]):
                for i in run:
                    if tags[i] == 0:
                        tags[i] = -1
    if max_words is not None and n > max_words:
        tags[max_words:] = -1
    return PageTargets(page.id, tags, fw, unscored)


@dataclass
class ProjectTargets:
    kept: list  # [(page id, Page, PageTargets)]
    excluded: list  # [(page id, reason)]
    errors: list  # [(page id, message)] pages or label files that did not load
    # {page id: (page file bytes, label file bytes or b"")} of the kept pages: what was read
    sources: dict = field(default_factory=dict)
    # {field: pages where it is not asked yet}: fields left out of training and scoring
    left_out: dict = field(default_factory=dict)

    def left_out_note(self) -> str:
        """What a run does with the fields not asked yet, naming each and the fix ("" for none)."""
        return left_out_note(self.left_out)

    def not_trainable_reason(self) -> str | None:
        """A clear message when the project cannot be trained on (no usable page, or only
        one: nothing to hold out); None otherwise."""
        n = len(self.kept)
        if n >= 2:
            return None
        why = f"{len(self.excluded)} excluded, {len(self.errors)} unreadable"
        if n == 0:
            return f"no usable page to train on ({why}); import pages and label them first"
        return (f"only one usable page ({self.kept[0][0]}; {why}): training needs at least two, "
                f"one to learn from and one held out to score")

    def summary(self) -> dict:
        reasons = Counter()
        for _, r in self.excluded:
            reasons[_reason_kind(r)] += 1
        return {"kept": len(self.kept), "excluded": len(self.excluded), "errors": len(self.errors),
                "excluded_by_reason": dict(sorted(reasons.items()))}


def _reason_kind(reason: str) -> str:
    """A short class of an exclusion reason for summaries ('total: absent', 'not labelled yet')."""
    parts = []
    for piece in reason.split("; "):
        if ": " in piece and ("is not on the page" in piece or "is not on any page" in piece):
            parts.append(piece.split(": ", 1)[0] + " absent")
        elif "not asked yet (" in piece:
            parts.append(piece.split(" (", 1)[0])
        else:
            parts.append(piece)
    return ", ".join(parts)


def left_out_fields(labels_list, field_names) -> dict:
    """{field: number of pages} of the schema fields not asked yet on some page that would
    otherwise train (labelled, not excluded by a person): a field added to the schema after the
    pages were labelled. Such a field is left out of training and scoring (page_targets'
    leave_out) until Label pages asks for it or a person sets it on every such page; the other
    fields go on training on every page."""
    out: dict = {}
    for labels in labels_list:
        if (labels.review or {}).get("state") == "excluded":
            continue
        for name in not_asked_fields(labels, field_names):
            out[name] = out.get(name, 0) + 1
    return {n: out[n] for n in field_names if n in out}


def left_out_note(left_out: dict) -> str:
    if not left_out:
        return ""
    names = ", ".join(f"{n} (not asked on {k} page{'s' if k != 1 else ''})" for n, k in left_out.items())
    one = len(left_out) == 1
    return (f"Left out of training and scoring: {names}. The other fields train on every page. "
            f"To train {'it' if one else 'them'}: Label pages (Schema & labels) asks for "
            f"{'it' if one else 'them'}, or set {'it' if one else 'them'} in Review.")


def project_targets(project, max_words: int | None = None, field_names=None, repeats: str = "o",
                    absent: str = "exclude") -> ProjectTargets:
    """Targets of every page of a project. A page or label file that does not load is
    reported in `errors` and the rest goes on. Fields not asked yet on some page are left
    out of training and scoring (left_out_fields), not the pages. absent: page_targets'."""
    from dxstudio.engine.page import PageError

    names = list(field_names) if field_names is not None else project.field_names
    errors, read = [], []
    for pid in project.page_ids():
        try:
            page, page_raw = project.read_page(pid)
            labels, label_raw = project.read_labels(pid)
        except (PageError, LabelError) as e:
            errors.append((pid, str(e)))
            continue
        read.append((pid, page, page_raw, labels, label_raw))
    pt = targets_of_read(read, names, max_words, repeats, errors, (PageError, LabelError), absent)
    pt.errors.sort(key=lambda e: e[0])
    return pt


def targets_of_read(read, names, max_words, repeats: str, errors: list, problems: tuple,
                    absent: str = "exclude") -> ProjectTargets:
    """The targets of pages already read, [(pid, page, page_raw, labels, label_raw)]: the fields
    not asked on some page left out of all (left_out_fields), a page whose targets raise one of
    `problems` added to `errors` and the rest go on. project_targets (the project's label files)
    and tuning.pages.snapshot_targets (a run's label snapshot) both end here."""
    kept, excluded, sources = [], [], {}
    left_out = left_out_fields([r[3] for r in read], names)
    for pid, page, page_raw, labels, label_raw in read:
        try:
            t = page_targets(page, labels, names, max_words, repeats, leave_out=left_out, absent=absent)
        except problems as e:
            errors.append((pid, str(e)))
            continue
        if isinstance(t, Excluded):
            excluded.append((pid, t.reason))
        else:
            kept.append((pid, page, t))
            sources[pid] = (page_raw, label_raw)
    return ProjectTargets(kept, excluded, errors, sources, left_out)


# the "printing" decoding (engine/extract.py) reads each value at the printing this rule labels;
# the "keyed" decoding reads a value the model has none for after its field's keywords
_engine_extract.set_layout_rules(printing=ground_answers, keyed=keyed_extents, near=keyword_near,
                                 part_key=after_part_of_a_key)
