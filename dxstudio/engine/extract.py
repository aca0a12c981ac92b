"""Reading fields off the tags, window by window (docs/model.md "Reading fields off the tags").

Tag = argmax of the tag logits (ties: the lowest index), its probability from the softmax
(binary32, the library's exp), kept in `tag_probs`. A value's confidence is computed apart, in
binary64 from the same logits (`tag_confidence`), so that probabilities the binary32 softmax
rounds to the same value near 1 stay distinct and rank. Spans: B-c opens a span of c; I-c continues an open span of c
and otherwise opens one; O (or another field's tag) closes. A span's confidence is the lowest
confidence of its words' tags; a field's value is its most confident span (ties: the first).
A long page is read window by window; per field the best-confidence value wins (ties: the
earlier window). That is the seed's reading, `decoding="seed"`.

The reading `decoding="span"` (docs/model.md "Span decoding") respects the BIO rules
and each field's cardinality (one value per page: the schema has no many-valued fields): a
field's value is its best-scoring span, B-c then I-c..., scored against reading the same words
O: score = (l[B-c] - l[O]) at the first word + the sum of (l[I-c] - l[O]) over the others, in
binary64 from the binary32 logits (the log of the span's probability ratio over O, with the
tags independent per word). A span scoring 0 or less is no value. Fields take their spans in
order of score (ties: schema order), each from the words no earlier field took; a span never
crosses a window's edge. The words of a span are consecutive in the page's reading order, so a
value over several lines is joined in that order. Its confidence is the lowest binary64
probability (`tag_confidence`) of the span's own tags at its words, a number in [0, 1].
`decoding="joint"`: the same spans, the best joint assignment of them to the fields
(decode_joint) instead of the fields in turn. `decoding="printing"`: joint, then
each value at the printing of it that the project's labelling rule labels (printings_by_rule).
`decoding="keyed"`: printing, then a field the model reads no value for takes the words printed
right after its keywords on their row ("To: Ron Milstein"), and a value that starts there but
stops short runs on to their end (keyed_values: a rule of the page's layout, not the model's).
`decoding="keyed_learned"`: keyed, with two rules per field learnt on the run's training pages
(counts stored with the model's keywords, tuning/keywords.py keyed_counts; key_rules): a field
whose labelled values were nearly always exactly the words after its key is read by the key rule
alone where the page prints its key with words after it (the model's value of it, and any other
field's value on those words, give way), and a field whose values nearly always hold a digit
takes no keyed run without one (keyed_values' `alone` and `digits`).
The default, `decoding="keyed_layout"`: keyed_learned, with keyed runs that go on over the next rows
that start where they start (an address, a list of names: grounding.keyed_extents' `layout`), and,
for the fields whose training values nearly always had one of their keywords beside or above them
(near_keys, learnt), no model value without one (keyed_values' `near`); last, a value that ends
on the first piece of a number the OCR split into words ("8/" "7/" "87") takes the rest of it
(whole_numbers).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .inputs import iter_page_inputs
from .layers import Ops, softmax_forward
from .model import forward
from .page import Page


@dataclass(frozen=True)
class FieldValue:
    words: tuple  # page word indices
    text: str
    confidence: float  # binary64 (tag_confidence), the lowest of its words


@dataclass
class PagePrediction:
    page_id: str
    fields: dict  # name -> FieldValue or None
    tags: np.ndarray  # (n_words,) predicted tag per page word
    tag_probs: np.ndarray  # (n_words,) probability of that tag (binary32 softmax)
    tag_conf: np.ndarray | None = None  # (n_words,) binary64 confidence of that tag
    decoding: str = "seed"  # how the values were read off the tags (DECODINGS)


# How values are read off the tags: "span" (best-scoring BIO span per field, one per page, the
# fields in turn), "seed" (the seed's: the most confident run of argmax tags), "joint" (the best
# joint assignment of spans to fields: decode_joint) or "printing" (joint, then each value at the
# printing of it the project's labelling rule labels: printings_by_rule) or "keyed" (printing,
# then a field with no value takes the words printed after its keywords, and a value that starts
# there but stops short runs on to their end: keyed_values) or "keyed_learned" (keyed, with each
# field's rules learnt on the training pages: read by its key alone, a digit's shape:
# ReadingKeywords) or "keyed_layout" (keyed_learned, with keyed runs over several rows:
# grounding.keyed_extents' layout, and no model value without a key for the fields that always
# had one: near_keys). The settings table's `decoding`.
DECODINGS = ("span", "seed", "joint", "printing", "keyed", "keyed_learned", "keyed_layout")
# the readings that place values by the fields' keywords (printings_by_rule and after)
KEYWORD_DECODINGS = ("printing", "keyed", "keyed_learned", "keyed_layout")
# the readings that fill values after the fields' keys (keyed_values), and those of them that read
# the rules learnt per field (key_rules)
KEYED_DECODINGS = ("keyed", "keyed_learned", "keyed_layout")
LEARNED_DECODINGS = ("keyed_learned", "keyed_layout")
# the readings that take the joint assignment of spans
JOINT_DECODINGS = ("joint",) + KEYWORD_DECODINGS
DEFAULT_DECODING = "keyed_layout"


def check_decoding(decoding) -> str:
    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be {', '.join(DECODINGS[:-1])} or {DECODINGS[-1]}, not {decoding!r}")
    return decoding


def model_decoding(thresholds: dict | None) -> str:
    """The reading a model's values are read with: the one its stored thresholds were found with;
    "seed" for a model tuned before the reading was stored (its thresholds are the seed
    reading's); the default for a model with no thresholds."""
    if not thresholds:
        return DEFAULT_DECODING
    return check_decoding(thresholds.get("decoding") or "seed")


def tags_and_probs(ops: Ops, tag_logits: np.ndarray):
    probs = softmax_forward(ops, tag_logits)
    tags = np.argmax(tag_logits, axis=1)  # first maximum = lowest index
    return tags, probs[np.arange(len(tags)), tags]


def tag_confidence(tag_logits: np.ndarray, tags: np.ndarray, kernels: str = "fast") -> np.ndarray:
    """Per word, the probability of its tag in binary64: 1 / (1 + q), q = sum over the other
    tags j (ascending, plain additions) of exp64(l_j - l_t), where l are the binary32 logits
    (each difference is exact in binary64) and exp64 the library's. Deterministic; it saturates
    at 1.0 only when q < 2^-53 (a margin of about 37 over every other tag), where the binary32
    softmax does at a margin of about 17."""
    logits = np.asarray(tag_logits, np.float64)
    n, k = logits.shape
    t = np.asarray(tags, np.int64)
    top = logits[np.arange(n), t]
    e = Ops(kernels).exp64(np.ascontiguousarray(logits - top[:, None]))
    q = np.zeros(n, np.float64)
    for j in range(k):
        q = q + np.where(t == j, 0.0, e[:, j])
    return 1.0 / (1.0 + q)


def spans(tags, n_fields: int):
    """[(field, first, last)] of the B/I runs, word indices local to `tags`."""
    out = []
    cur = None  # [field, first, last]
    for i, t in enumerate(int(t) for t in tags):
        if t == 0:
            if cur:
                out.append(tuple(cur))
            cur = None
            continue
        c, is_inside = (t - 1) // 2, (t - 1) % 2 == 1
        if c >= n_fields:
            raise ValueError(f"tag {t} is outside the schema's {n_fields} fields")
        if is_inside and cur is not None and cur[0] == c:
            cur[2] = i
        else:
            if cur:
                out.append(tuple(cur))
            cur = [c, i, i]
    if cur:
        out.append(tuple(cur))
    return out


def fields_from_tags(page: Page, fields, tags, probs, offset: int = 0) -> dict:
    best: dict = {f: None for f in fields}
    for c, a, b in spans(tags, len(fields)):
        conf = float(np.min(probs[a: b + 1]))
        cur = best[fields[c]]
        if cur is None or conf > cur.confidence:
            words = tuple(range(offset + a, offset + b + 1))
            best[fields[c]] = FieldValue(words, " ".join(page.words[w].text for w in words), conf)
    return best


def _best_span(sb: np.ndarray, si: np.ndarray, blocked: np.ndarray, starts: frozenset):
    """(score, first, last) of the highest-scoring span (ties: the one ending first; at equal
    scores a span starts anew rather than extends), or None when none scores above 0. Words
    in `blocked` are in no span; a span never crosses an index in `starts` (a window's first
    word)."""
    best = None
    cur, cur_a = -np.inf, -1
    for i in range(len(sb)):
        if blocked[i]:
            cur = -np.inf
            continue
        ext = cur + float(si[i]) if i not in starts else -np.inf
        if ext > float(sb[i]):
            cur = ext
        else:
            cur, cur_a = float(sb[i]), i
        if cur > 0 and (best is None or cur > best[0]):
            best = (cur, cur_a, i)
    return best


def _checked_logits(tag_logits, n_fields: int) -> np.ndarray:
    """A page's tag logits as binary64 (n_words, 1 + 2 * n_fields), finite, or a ValueError."""
    logits = np.asarray(tag_logits, np.float64)
    if logits.ndim != 2 or logits.shape[1] != 1 + 2 * n_fields:
        raise ValueError(f"tag logits of shape {logits.shape} do not fit {n_fields} fields "
                         f"(expected (n_words, {1 + 2 * n_fields}))")
    if not np.isfinite(logits).all():
        raise ValueError("tag logits must be finite")
    return logits


def decode_spans(tag_logits, n_fields: int, window_starts=(0,)) -> dict:
    """{field index: (score, first, last)} of the span decoding (module docstring) over a
    page's tag logits (n_words, 1 + 2 * n_fields); a field without a span above 0 is absent."""
    logits = _checked_logits(tag_logits, n_fields)
    n = logits.shape[0]
    starts = frozenset(int(s) for s in window_starts)
    o = logits[:, 0]
    scores = [(logits[:, 1 + 2 * c] - o, logits[:, 2 + 2 * c] - o) for c in range(n_fields)]
    blocked = np.zeros(n, bool)
    best = {c: _best_span(*scores[c], blocked, starts) for c in range(n_fields)}
    chosen: dict = {}
    while True:
        open_ = [(v[0], -c) for c, v in best.items() if c not in chosen and v is not None]
        if not open_:
            return chosen
        c = -max(open_)[1]  # highest score, ties: the lower field index
        _, a, b = best[c]
        chosen[c] = best[c]
        blocked[a: b + 1] = True
        for d, v in best.items():  # only spans that used a taken word can change
            if d not in chosen and v is not None and v[1] <= b and a <= v[2]:
                best[d] = _best_span(*scores[d], blocked, starts)


JOINT_MAX_FIELDS = 12  # the joint decoding's states grow as 2^fields; above this, fields take spans in turn


def decode_joint(tag_logits, n_fields: int, window_starts=(0,)) -> dict:
    """{field index: (score, first, last)} of the best joint assignment: at most one span per
    field, no word in two fields' spans, the spans' summed score (decode_spans' score of each)
    the highest over every such assignment, not only over the ones the fields' turns reach
    (a long address that would swallow the company name above it gives those words up when the
    company scores more on them than the address loses). Exact: a BIO lattice over the words
    whose states are (the fields that have their span, the field whose span is open), read in
    word order (a Viterbi pass, sums in binary64 in word order; at equal sums a span starts anew
    rather than extends, an O word is preferred to a span going on, and of equal assignments the
    one with fewer fields, then lower field indices, wins). A span never crosses a window's
    edge; a span of score 0 or less is dropped. Schemas of more than JOINT_MAX_FIELDS fields:
    decode_spans (the fields in turn)."""
    logits = _checked_logits(tag_logits, n_fields)
    if n_fields > JOINT_MAX_FIELDS:
        return decode_spans(tag_logits, n_fields, window_starts)
    n, F = logits.shape[0], n_fields
    if n == 0 or F == 0:
        return {}
    starts = frozenset(int(x) for x in window_starts)
    o = logits[:, 0]
    sb = np.stack([logits[:, 1 + 2 * c] - o for c in range(F)], axis=1)  # (n, F)
    si = np.stack([logits[:, 2 + 2 * c] - o for c in range(F)], axis=1)
    M = 1 << F
    masks = np.arange(M)
    has = [(masks >> c) & 1 == 1 for c in range(F)]
    with_c = [masks[h] for h in has]  # the masks holding field c, ascending
    S = np.full((M, F + 1), -np.inf)  # column 0: no span open; c + 1: field c's span open
    S[0, 0] = 0.0
    came_any = np.zeros((n, M), np.int16)  # per word: the state each mask's best came from
    started = np.zeros((n, M, F), bool)  # per word: field c's span starts at this word
    for i in range(n):
        any_k = np.argmax(S, axis=1)  # first maximum: no span open, then the lower field
        best = S[masks, any_k]
        came_any[i] = any_k
        new = np.full((M, F + 1), -np.inf)
        new[:, 0] = best  # word i is O
        for c in range(F):
            ms = with_c[c]
            b_score = best[ms ^ (1 << c)] + sb[i, c]
            i_score = S[ms, c + 1] + si[i, c] if i not in starts else np.full(len(ms), -np.inf)
            start = b_score >= i_score
            new[ms, c + 1] = np.where(start, b_score, i_score)
            started[i, ms, c] = start
        S = new
    flat = [(S[m, k], -bin(m).count("1"), -m, -k) for m in range(M) for k in range(F + 1) if S[m, k] > -np.inf]
    _, _, m, k = max(flat)
    m, k = -m, -k
    out: dict = {}
    for i in range(n - 1, -1, -1):
        if k == 0:
            k = int(came_any[i][m])
            continue
        c = k - 1
        a, b = out.get(c, (i, i))
        out[c] = (i, b)
        if started[i, m, c]:
            m ^= 1 << c
            k = int(came_any[i][m])
    result = {}
    for c, (a, b) in sorted(out.items()):
        score = float(sb[a, c]) + sum(float(si[j, c]) for j in range(a + 1, b + 1))
        if score > 0:
            result[c] = (score, a, b)
    return result


def fields_from_logits(page: Page, fields, tag_logits, window_starts=(0,), kernels: str = "fast",
                       joint: bool = False) -> dict:
    """The span decoding's {field: FieldValue or None} for a page's tag logits (all its words);
    joint=True: the spans of decode_joint (the best joint assignment) instead of decode_spans'."""
    fields = list(fields)
    out: dict = {f: None for f in fields}
    decode = decode_joint if joint else decode_spans
    for c, (_, a, b) in decode(tag_logits, len(fields), window_starts).items():
        span_tags = np.array([1 + 2 * c] + [2 + 2 * c] * (b - a), np.int64)
        conf = float(np.min(tag_confidence(np.asarray(tag_logits)[a: b + 1], span_tags, kernels)))
        words = tuple(range(a, b + 1))
        out[fields[c]] = FieldValue(words, " ".join(page.words[w].text for w in words), conf)
    return out


# The rules of a page's layout the "printing" and "keyed" decodings read values by live above
# the engine (dxstudio.grounding: ground_answers reads label files, the project's layer, and
# keyed_extents beside it); grounding hands them down when it is imported, so the engine never
# imports upwards (the layers contract).
_printing_rule = None
_keyed_rule = None
_near_rule = None
_part_key_rule = None


def set_layout_rules(printing, keyed, near=None, part_key=None) -> None:
    """printing(page, answers {field: text}, field names, keywords=None) -> {field: {"words":
    (...), ...}}: how a project labels an answer's printing (grounding's ground_answers);
    keywords {field: set of word keys}: the printings after or under them first, not after the
    field's name. keyed(page, field names, keywords=None) -> {field: [(first, last), ...]}: the
    runs printed right after each field's keywords on their row (grounding's keyed_extents; with
    layout=True, the "keyed_layout" reading's runs, over several rows). near(page, start, keys) ->
    bool: whether one of keys names a value starting at word `start`, beside or above it
    (grounding's keyword_near). part_key(page, start, keys) -> bool: whether the value starting at
    word `start` follows a longer key of which one of keys is only a part (grounding's
    after_part_of_a_key)."""
    global _printing_rule, _keyed_rule, _near_rule, _part_key_rule
    _printing_rule, _keyed_rule, _near_rule, _part_key_rule = printing, keyed, near, part_key


# The "keyed_learned" reading, per field from counts over the run's training pages (tuning/keywords.py
# keyed_counts, stored with learned keywords). Read by its key alone: on the pages where the field
# has a labelled value and its key is printed with words after it (keyed_extents' first run), the
# value was exactly those words on at least KEY_ALONE_SHARE of them, over KEY_ALONE_MIN_PAGES pages
# or more. Of a digit's shape: at least KEY_DIGIT_SHARE of its labelled values (KEY_ALONE_MIN_PAGES
# or more) hold a digit, so a keyed run without one is never its value (a date's "RECEIVED").
# Measured on FUNSD and SROIE at 50 pages (docs/base-model.md "Values after their keys").
KEY_ALONE_SHARE = 0.8
KEY_ALONE_MIN_PAGES = 3
KEY_DIGIT_SHARE = 0.9
# The "keyed_layout" reading's fields named where they are printed: at least this share of the
# labelled values (KEY_ALONE_MIN_PAGES or more) had one of the field's keywords beside or above
# them (the fifth number of the keyed counts, `near`; a model with four has no such field). Then a
# model's value with none is no value (the key may still fill it). FUNSD's four fields (0.8 to 1.0
# at 50 forms), no field of SROIE (0 to 0.6) or CORD (0.5 to 0.76): docs/base-model.md "Values over
# several rows".
KEY_NEAR_SHARE = 0.8
# The "keyed_layout" reading's fields read inside their keyed run: a field of `digits` whose keyed
# run was exactly its labelled value on fewer than this share of the pages that print it
# (KEY_ALONE_MIN_PAGES or more): the key's run holds the value among other words ("TOTAL SALES
# (INCLUSIVE GST) RM 23.60"), so a fill takes the words of the run the model reads best as the
# field. SROIE's total (6 of 36 at 50 receipts), CORD renamed's levy (8 of 21), no field of
# FUNSD (cc, 1 of 7, holds no digit): docs/base-model.md "A field's key alone, and a value
# inside its key's words".
KEY_INSIDE_SHARE = 0.5
# The "keyed_layout" reading's fields keyed with a colon: of the labelled values with one of the
# field's keywords among the three words before them on their row (KEY_ALONE_MIN_PAGES or more),
# at least this share had it printed with a colon ("To:", "DATE :"). Then a keyword printed without
# one starts no keyed run of the field ("To whom are we talking?", "TO TRAVEL TO IS:"). FUNSD's to,
# from and cc (all at 25 and 50 forms, from 2 of 2 at 25 too few; to 16 of 17 at 100), SROIE's
# date (27 of 28), no field of CORD renamed (0.04 to 0.13): docs/base-model.md "A key printed
# with a colon".
KEY_COLON_SHARE = 0.9


# The "keyed_layout" reading's fields whose keys come in longer ones: a near field's value after a
# longer key of which its keyword is only a part ("MESSAGE TO:", "Coupon Issue Date") is dropped,
# unless at least this many of its labelled values, and this share of those with a key beside
# them, followed such a key ("Grand Total" on receipts: the rule, learnt on forms, dropped every
# total after it; FUNSD's fields have 0 or 1 of 2-46 at 25-100 forms, receipts' totals 12-31 of 31-153)
KEY_LONGER_MIN = 2
KEY_LONGER_SHARE = 0.1


class ReadingKeywords(dict):
    """{field: frozenset of word keys} (what predict_page places values by), and what the
    "keyed_learned" reading learnt of the fields (key_rules): `alone`, the fields it reads by their
    key alone, and `digits`, those whose keyed values must hold a digit."""
    alone: frozenset = frozenset()
    digits: frozenset = frozenset()
    near: frozenset = frozenset()  # the "keyed_layout" reading's fields named where printed (near_keys)
    inside: frozenset = frozenset()  # the "keyed_layout" reading's fields read inside their keyed run (inside_keys)
    colon: frozenset = frozenset()  # the "keyed_layout" reading's fields keyed only with a colon (colon_keys)
    longer: frozenset = frozenset()  # the "keyed_layout" reading's fields keyed in longer keys too (longer_keys)


def key_rules(counts, field_names) -> tuple:
    """(alone, digits), frozensets of field names, from the stored keyed counts ([[hits, seen,
    digits, values], ...] in the model's field order, tuning/keywords.py keyed_counts): alone where
    hits >= KEY_ALONE_SHARE * seen and seen >= KEY_ALONE_MIN_PAGES; digits where digits >=
    KEY_DIGIT_SHARE * values and values >= KEY_ALONE_MIN_PAGES. No counts: neither."""
    if not counts:
        return frozenset(), frozenset()
    alone = frozenset(n for n, (hits, seen, _, _) in zip(field_names, (c[:4] for c in counts))
                      if seen >= KEY_ALONE_MIN_PAGES and hits >= KEY_ALONE_SHARE * seen)
    digits = frozenset(n for n, (_, _, dig, vals) in zip(field_names, (c[:4] for c in counts))
                       if vals >= KEY_ALONE_MIN_PAGES and dig >= KEY_DIGIT_SHARE * vals)
    return alone, digits


def near_keys(counts, field_names) -> frozenset:
    """The fields the "keyed_layout" reading reads only where one of their keywords is beside or
    above the value: from the stored keyed counts ([hits, seen, digits, values, near] per field,
    tuning/keywords.py keyed_counts), values >= KEY_ALONE_MIN_PAGES and near >= KEY_NEAR_SHARE *
    values. Counts of four numbers (a model tuned before `near`) or none: no field."""
    if not counts:
        return frozenset()
    return frozenset(n for n, c in zip(field_names, counts)
                     if len(c) >= 5 and c[3] >= KEY_ALONE_MIN_PAGES and c[4] >= KEY_NEAR_SHARE * c[3])


def inside_keys(counts, field_names) -> frozenset:
    """The fields the "keyed_layout" reading fills with the part of a keyed run the model reads best:
    from the stored keyed counts, the fields of key_rules' digits with seen >= KEY_ALONE_MIN_PAGES
    and hits < KEY_INSIDE_SHARE * seen. No counts: no field."""
    if not counts:
        return frozenset()
    _, digits = key_rules(counts, field_names)
    return frozenset(n for n, c in zip(field_names, counts)
                     if n in digits and c[1] >= KEY_ALONE_MIN_PAGES and c[0] < KEY_INSIDE_SHARE * c[1])


def colon_keys(counts, field_names) -> frozenset:
    """The fields the "keyed_layout" reading keys only where their keyword is printed with a colon:
    from the stored keyed counts ([hits, seen, digits, values, near, beside, colon] per field,
    tuning/keywords.py keyed_counts), beside >= KEY_ALONE_MIN_PAGES and colon >= KEY_COLON_SHARE *
    beside. Counts of four or five numbers (a model tuned before `colon`) or none: no field."""
    if not counts:
        return frozenset()
    return frozenset(n for n, c in zip(field_names, counts)
                     if len(c) >= 7 and c[5] >= KEY_ALONE_MIN_PAGES and c[6] >= KEY_COLON_SHARE * c[5])


def longer_keys(counts, field_names) -> frozenset:
    """The fields whose labelled values followed a longer key of which one of their keywords is only
    a part at least KEY_LONGER_MIN times and KEY_LONGER_SHARE of those with a key beside them
    ("Grand Total 1,591,600"): the "keyed_layout" reading
    keeps their values after such keys (keyed_values' `longer`). From the stored keyed counts
    ([..., colon, longer] per field, tuning/keywords.py keyed_counts); counts of four, five or
    seven numbers (a model tuned before `longer`) or none: no field, the rule as it was."""
    if not counts:
        return frozenset()
    return frozenset(n for n, c in zip(field_names, counts)
                     if len(c) >= 8 and c[7] >= KEY_LONGER_MIN and c[7] >= KEY_LONGER_SHARE * c[5])


def reading_keywords(stored: dict | None, field_names) -> dict | None:
    """{field: frozenset of word keys} of a model's stored keywords (container.py "keywords", in
    the model's field order, under the fields' names now): what predict_page places values by;
    None where none are stored (the fields' names, the seed's rule). A ReadingKeywords whose
    `alone` and `digits` are key_rules of the stored "keyed" counts (none stored: no field)."""
    if not stored or stored.get("fields") is None:
        return None
    out = ReadingKeywords((n, frozenset(ks)) for n, ks in zip(field_names, stored["fields"]))
    out.alone, out.digits = key_rules(stored.get("keyed"), field_names)
    out.near = near_keys(stored.get("keyed"), field_names)
    out.inside = inside_keys(stored.get("keyed"), field_names)
    out.colon = colon_keys(stored.get("keyed"), field_names)
    out.longer = longer_keys(stored.get("keyed"), field_names)
    return out


def printings_by_rule(page: Page, fields, values: dict, keywords: dict | None = None) -> dict:
    """The "printing" decoding's {field: FieldValue or None}: each value of `values` (the joint
    decoding's) moved to the printing of the same value that the project's labelling rule would
    label, the rule itself (grounding.ground_answers, the function that grounds every answered
    label: the most exact run of the value's text, then the runs after the field's name on its
    row, then the last printing of a number and the first of a text; fields grounded together so
    that two do not take the same words when another printing is free). The value, its text and
    its confidence (the span's: how sure the model is of the value) stay; only its words move.
    A value the rule cannot place keeps its span's words. `keywords` ({field: set of word keys},
    a model's stored keywords, tuning/keywords.py): the printing after or under a field's
    keywords instead of after its name."""
    if _printing_rule is None:
        raise RuntimeError("the printing decoding needs the labelling rule: import dxstudio.grounding "
                           "(it hands its ground_answers to the engine) or read with decoding='joint'")
    fields = list(fields)
    answers = {f: v.text for f, v in values.items() if v is not None}
    if not answers:
        return dict(values)
    grounded = (_printing_rule(page, answers, fields) if keywords is None
                else _printing_rule(page, answers, fields, keywords))
    out: dict = {}
    for f in fields:
        v = values.get(f)
        if v is None:
            out[f] = None
            continue
        g = grounded[f]
        words = tuple(int(i) for i in g.get("words") or ())
        if g.get("status") not in ("exact", "normalized") or not words or words == v.words:
            out[f] = v
        else:
            out[f] = FieldValue(words, " ".join(page.words[w].text for w in words), v.confidence)
    return out


# The "keyed" decoding runs a value on over the next words of its keyed run only while each one's
# I- logit of the field is above its O logit less this (measured on FUNSD and SROIE at 50 pages,
# docs/base-model.md "Values after their keys": 2 to 8 read the same; without it a date ran on
# into the time printed after it)
KEYED_RUN_ON = 5.0


def keyed_values(page: Page, fields, values: dict, tag_logits, keywords: dict | None = None,
                 kernels: str = "fast", alone=(), digits=(), layout: bool = False, near=(), inside=(),
                 colon=(), longer=()) -> dict:
    """The "keyed" decoding's {field: FieldValue or None}: `values` (the printing reading's) where
    the page prints a field's keywords with words after them on their row (the project's rule,
    grounding.keyed_extents), two changes, the fields in schema order: a field with no value takes
    the first such run whose words no other field's value holds (cut at the first word one does);
    a value whose first word is such a run's first word and which ends inside it runs on over the
    run's next words while each one's I- logit of the field is above its O logit less KEYED_RUN_ON
    (the first that is not ends it). Other values stay as they are. A value's confidence is always the span's
    (tag_confidence of the field's B-, I- tags at its words: low where the model did not read
    it). keywords: as printings_by_rule (None: the fields' names).

    The "keyed_learned" reading (ReadingKeywords' sets): `digits`, fields whose keyed run is
    skipped (as if not printed) unless one of its words holds a digit; `alone`, fields read by
    their key alone: before the two changes, each of them in schema order whose value does not
    start at its first keyed run takes that run (cut at the first word an earlier one took) in
    place of the model's value, and the value of another field not in `alone` holding any of its
    words is dropped (it may then take its own keyed run; a later `alone` field's value there is
    replaced by its own run, if the page prints one); an `alone` field whose key is not printed with words after
    it keeps the model's value, and one whose value starts there is read as keyed reads it.

    The "keyed_layout" reading (layout=True): the runs are keyed_extents' with layout (a run goes
    on over the next rows that start where it starts), and first of all the value of a field of
    `near` (near_keys) that has none of the field's keywords beside or above it (grounding's
    keyword_near), or that follows a longer key of which the field's keyword is only a part
    ("Coupon Issue Date", "MESSAGE TO:"; grounding's after_part_of_a_key), is dropped, and the
    runs after such a longer key are none of the near field's (the schema's question is the key
    alone); a field of `inside` (inside_keys) with no value is filled not with its whole keyed run
    but with the span of the run the model scores best as the field (its B- then I- logits over
    O, summed; one holding a digit), the rest as above."""
    if _keyed_rule is None:
        raise RuntimeError("the keyed decoding needs the keyed rule: import dxstudio.grounding "
                           "(it hands its keyed_extents to the engine) or read with decoding='printing'")
    fields = list(fields)
    out = dict(values)
    if near and (_near_rule is None or _part_key_rule is None):
        raise RuntimeError("the keyed_layout decoding needs the near rules: import dxstudio.grounding")
    keys = keywords or {}

    def after_longer_key(f, start) -> bool:
        return f in near and f not in longer and _part_key_rule(page, start, keys.get(f, ()))

    for f in fields:
        v = out.get(f)
        if f in near and v is not None and v.words and (not _near_rule(page, v.words[0], keys.get(f, ()))
                                                        or after_longer_key(f, v.words[0])):
            out[f] = None
    runs = _keyed_rule(page, fields, keywords, layout=True, colon=colon) if layout \
        else _keyed_rule(page, fields, keywords)
    runs = {f: [r for r in rs if not after_longer_key(f, r[0])] for f, rs in runs.items()}
    logits = np.asarray(tag_logits)

    def value_of(c, a, b):
        span_tags = np.array([1 + 2 * c] + [2 + 2 * c] * (b - a), np.int64)
        conf = float(np.min(tag_confidence(logits[a: b + 1], span_tags, kernels)))
        words = tuple(range(a, b + 1))
        return FieldValue(words, " ".join(page.words[w].text for w in words), conf)

    def best_inside(c, a, b) -> tuple | None:
        """The span of words a..b whose B-, I- logits of field c over O sum highest, of those
        holding a digit (the first of equals); None where no word holds one."""
        best = pick = None
        for i in range(a, b + 1):
            score = float(logits[i, 1 + 2 * c]) - float(logits[i, 0])
            digit = False
            for j in range(i, b + 1):
                if j > i:
                    score += float(logits[j, 2 + 2 * c]) - float(logits[j, 0])
                digit = digit or any(ch.isdigit() for ch in page.words[j].text)
                if digit and (best is None or score > best):
                    best, pick = score, (i, j)
        return pick

    def cut(f, a, b, held) -> int | None:
        """The end of run (a, b) cut before its first word in held, or None where nothing is left
        or the cut run lacks the digit a field of `digits` needs."""
        end = next((j - 1 for j in range(a, b + 1) if j in held), b)
        if end < a:
            return None
        if f in digits and not any(ch.isdigit() for w in range(a, end + 1) for ch in page.words[w].text):
            return None
        return end

    taken: set = set()
    for c, f in enumerate(fields):
        if f not in alone:
            continue
        for a, b in runs.get(f, ()):
            end = cut(f, a, b, taken)
            if end is None:
                continue
            v = out.get(f)
            if v is not None and v.words and v.words[0] == a:
                break
            out[f] = value_of(c, a, end)
            held = set(range(a, end + 1))
            taken |= held
            for g, v in out.items():
                if g != f and g not in alone and v is not None and held.intersection(v.words):
                    out[g] = None
            break
    for c, f in enumerate(fields):
        others = {w for g, v in out.items() if g != f and v is not None for w in v.words}
        v = out.get(f)
        pick = None
        for a, b in runs.get(f, ()):
            end = cut(f, a, b, others)
            if end is None:
                continue
            if v is None:
                pick = (a, end)
                if f in inside:
                    pick = best_inside(c, a, end) or pick
                break
            if v.words and v.words[0] == a and v.words == tuple(range(a, v.words[-1] + 1)) and v.words[-1] < end:
                stop = v.words[-1]
                while stop < end and float(logits[stop + 1, 2 + 2 * c]) - float(logits[stop + 1, 0]) > -KEYED_RUN_ON:
                    stop += 1
                if stop > v.words[-1]:
                    pick = (a, stop)
                break
        if pick is None:
            continue
        out[f] = value_of(c, *pick)
    if layout:
        out = whole_numbers(page, fields, out, value_of)
    return out


# A number printed as one (a date, an amount, a time) that the page's OCR split into words: a word
# that ends in one of these after a digit ("8/", "3,") is continued by a next word that starts
# with a digit, and a word that ends in a digit by a next word that starts with one of
# NUMBER_LEADS and a digit ("2" "/15" "/90"). "," only before a year ("August 3," "1998").
NUMBER_TRAILS = "/-.:"
NUMBER_LEADS = "/-"
# ... and only where the next word is on the same row, at most this many word heights to the right
NUMBER_GAP = 1.0


def _splits_a_number(a, b) -> bool:
    """Whether words a, b (Words, b right after a in reading order) are two pieces of one number."""
    ta, tb = a.text, b.text
    if not ta or not tb:
        return False
    h = max(a.box[3] - a.box[1], 1e-9)
    cy = (b.box[1] + b.box[3]) / 2
    if not (a.box[1] <= cy <= a.box[3]) or not (-h <= b.box[0] - a.box[2] <= NUMBER_GAP * h):
        return False
    if len(ta) >= 2 and ta[-1] in NUMBER_TRAILS and ta[-2].isdigit() and tb[0].isdigit():
        return True
    if len(ta) >= 2 and ta[-1] == "," and ta[-2].isdigit() and len(tb) == 4 and tb.isdigit():
        return True
    return ta[-1].isdigit() and len(tb) >= 2 and tb[0] in NUMBER_LEADS and tb[1].isdigit()


def whole_numbers(page: Page, fields, values: dict, value_of) -> dict:
    """The "keyed_layout" reading's last rule: a value whose last word is the first piece of a
    number split by the OCR ("8/" "7/" "87", "2" "/15" "/90": _splits_a_number) runs on over the
    rest of it, word by word in reading order, while the next word is no other field's. The model
    often reads such a piece as O (a word that starts with "/" looks like no date it saw), so the
    words taken are the page's, not the model's: the value's confidence is recomputed over all of
    them (value_of, the span's tag confidence) and falls where the model read them as O."""
    out = dict(values)
    words = page.words
    for c, f in enumerate(fields):
        v = out.get(f)
        if v is None or not v.words or v.words != tuple(range(v.words[0], v.words[-1] + 1)):
            continue  # no value, or a value in pieces (value_of makes one run): left as read
        held = {w for g, u in out.items() if g != f and u is not None for w in u.words}
        last = v.words[-1]
        while last + 1 < len(words) and last + 1 not in held and _splits_a_number(words[last], words[last + 1]):
            last += 1
        if last > v.words[-1]:
            out[f] = value_of(c, v.words[0], last)
    return out


def keyed_reading(page: Page, fields, values: dict, tag_logits, keywords, kernels: str, decoding: str) -> dict:
    """keyed_values as `decoding` (one of KEYED_DECODINGS) reads: keyed with no learnt rule,
    keyed_learned with the keywords' `alone` and `digits` (a ReadingKeywords), keyed_layout with
    those, runs over several rows and the keywords' `near` and `inside`."""
    learned, layout = decoding in LEARNED_DECODINGS, decoding == "keyed_layout"

    def rule(name, applies):  # a learnt rule's fields (ReadingKeywords), where the reading has the rule
        return getattr(keywords, name, ()) if applies else ()

    return keyed_values(page, fields, values, tag_logits, keywords, kernels, rule("alone", learned),
                        rule("digits", learned), layout=layout, near=rule("near", layout),
                        inside=rule("inside", layout), colon=rule("colon", layout),
                        longer=rule("longer", layout))


def predict_page(cfg: ModelConfig, params_rt, page: Page, kernels: str = "fast",
                 decoding: str = DEFAULT_DECODING, keywords: dict | None = None) -> PagePrediction:
    """The page's tags and values read with `decoding`; keywords ({field: set of word keys},
    KEYWORD_DECODINGS only): where the values are placed (printings_by_rule), None: after the
    names; for "keyed_learned" its `alone` and `digits` (a ReadingKeywords) are the fields' learnt rules."""
    check_decoding(decoding)
    ops = Ops(kernels)
    fields = list(cfg.fields)
    result: dict = {f: None for f in fields}
    all_tags = np.zeros(len(page.words), np.int64)
    all_probs = np.zeros(len(page.words), np.float32)
    all_conf = np.zeros(len(page.words), np.float64)
    all_logits = np.zeros((len(page.words), 1 + 2 * len(fields)), np.float32) if decoding != "seed" else None
    starts = []
    for inp in iter_page_inputs(page, cfg):  # one window's inputs at a time
        out = forward(cfg, params_rt, inp, ops)
        if all_logits is not None:
            all_logits[inp.start: inp.start + inp.n] = out.tag_logits
            starts.append(inp.start)
        tags, probs = tags_and_probs(ops, out.tag_logits)
        conf = tag_confidence(out.tag_logits, tags, kernels)
        all_tags[inp.start: inp.start + inp.n] = tags
        all_probs[inp.start: inp.start + inp.n] = probs
        all_conf[inp.start: inp.start + inp.n] = conf
        for f, v in fields_from_tags(page, fields, tags, conf, inp.start).items():
            if v is not None and (result[f] is None or v.confidence > result[f].confidence):
                result[f] = v
    if all_logits is not None:  # the per-word tags stay the argmax's; the values are the spans'
        result = fields_from_logits(page, fields, all_logits, starts, kernels,
                                    joint=decoding in JOINT_DECODINGS)
        if decoding in KEYWORD_DECODINGS:
            result = printings_by_rule(page, fields, result, keywords)
        if decoding in KEYED_DECODINGS:
            result = keyed_reading(page, fields, result, all_logits, keywords, kernels, decoding)
    return PagePrediction(page.id, result, all_tags, all_probs, all_conf, decoding)


def field_threshold(field: str, thresholds: dict | None) -> float | None:
    """The threshold that decides a field's route: its own, else None. The pooled threshold is
    never used for a field that has none of its own (issue 21: no evidence, no local answer);
    a model without stored thresholds has none for any field."""
    if not thresholds:
        return None
    return (thresholds.get("fields") or {}).get(field)


# why a value is asked (route_reason)
BELOW_THRESHOLD = "below threshold"
NO_THRESHOLD = "no threshold"
NO_VALUE = "no value"


def route_reason(field: str, value, thresholds: dict | None) -> str | None:
    """None when the value is answered locally (its confidence at or above the field's own
    threshold), else why it is asked: "no value", "no threshold" (the field has none of its
    own) or "below threshold". value: a FieldValue, or a confidence (float), or None."""
    if value is None:
        return NO_VALUE
    t = field_threshold(field, thresholds)
    if t is None:
        return NO_THRESHOLD
    conf = value if isinstance(value, (int, float)) else value.confidence
    return None if conf >= t else BELOW_THRESHOLD


def route(field: str, value: FieldValue | None, thresholds: dict | None) -> str:
    """"local" when the value's confidence is at or above the field's own threshold, else "ask"
    (below it, no threshold of its own, or no value: route_reason says which)."""
    return "local" if route_reason(field, value, thresholds) is None else "ask"


def prediction_json(pred: PagePrediction, thresholds: dict | None = None) -> dict:
    """{"id", "decoding", "fields": {name: {"value", "words", "confidence", "route"[, "why"]}}};
    floats round-trip exactly; route as route() with the model's stored thresholds, an asked
    value's "why" as route_reason(): "below threshold", "no threshold" or "no value"; decoding:
    how the values were read (DECODINGS)."""
    fields = {}
    for f, v in pred.fields.items():
        if v is None:
            fields[f] = {"value": None, "words": [], "confidence": None, "route": "ask", "why": NO_VALUE}
            continue
        why = route_reason(f, v, thresholds)
        fields[f] = {"value": v.text, "words": list(v.words), "confidence": v.confidence,
                     "route": "local" if why is None else "ask"}
        if why is not None:
            fields[f]["why"] = why
    return {"id": pred.page_id, "decoding": pred.decoding, "fields": fields}


def document_json(document_id: str, records: list) -> dict:
    """One document's line from its pages' records (prediction_json's, in page order): each
    field's value is the most confident of the pages' values (ties: the earlier page), with
    the page that holds it; its route is that value's route (the rule per field is the page's,
    on the value the document keeps). {"id", "pages": [page ids], "fields": {name: {"value",
    "page", "page_number", "words", "confidence", "route"}}}."""
    fields = {}
    names = list(records[0]["fields"]) if records else []
    for name in names:
        best = None
        for k, r in enumerate(records):
            v = r["fields"][name]
            if v["value"] is not None and (best is None or v["confidence"] > best[1]["confidence"]):
                best = (r, v)
        if best is None:
            fields[name] = {"value": None, "page": None, "page_number": None, "words": [], "confidence": None,
                            "route": "ask", "why": NO_VALUE}
        else:
            r, v = best
            fields[name] = {"value": v["value"], "page": r["id"], "page_number": r.get("page_number", 1),
                            "words": v["words"], "confidence": v["confidence"], "route": v["route"]}
            if "why" in v:
                fields[name]["why"] = v["why"]
    out = {"id": document_id, "pages": [r["id"] for r in records], "fields": fields}
    if records and "decoding" in records[0]:
        out["decoding"] = records[0]["decoding"]
    return out
