"""Seeded augmentation of the labelled training pages (issue 20 item 2; docs/tuning.md
"Augmentation").

Each time a training page enters a step it may be read as a variant of itself, drawn from a
random stream keyed by (seed, step, page id) alone: the same variant at any degree, after a
resume, on any machine (SHA-256 counter blocks, no library generator). The settings (each
0 = off, the default):

    augment_values  the chance that a labelled value's digits are replaced by random digits
                    (the value keeps its shape: a date stays a date, an amount an amount)
    augment_swap    the chance that a labelled value's words are replaced by the words of
                    another training value of the same field and shape (value_pool: the same
                    number of words, each of the same shape), at every printing of it on the
                    page, so that the model reads a field by where it is printed rather than by
                    the values it has seen
    augment_case    the chance that each word is printed in another case (upper, lower or
                    capitalised, drawn): "To:" as "TO:", "DATE" as "Date"
    augment_drop    the chance that each O word is dropped (never a labelled word)
    augment_jitter  each word's box moved by up to this share of the page's width and height
    augment_shift   each line moved sideways by up to this share of the page's width

The targets follow the words (a dropped word's tag goes with it); ignored words (-1) stay.
"""
from __future__ import annotations

import hashlib
import struct

import numpy as np

from dxstudio.engine.page import Page, Word

AUGMENT_SETTINGS = ("augment_values", "augment_swap", "augment_case", "augment_drop", "augment_jitter",
                    "augment_shift")
_DIGITS = "0123456789"


class Stream:
    """Uniform numbers in [0, 1) from SHA-256(key, counter): platform- and version-independent."""

    def __init__(self, *key):
        self._key = repr(key).encode("utf-8")
        self._counter = 0
        self._buf: list = []

    def uniform(self) -> float:
        if not self._buf:
            block = hashlib.sha256(self._key + struct.pack("<Q", self._counter)).digest()
            self._counter += 1
            self._buf = [int.from_bytes(block[i: i + 8], "little") >> 11 for i in range(0, 32, 8)][::-1]
        return self._buf.pop() / float(1 << 53)

    def below(self, n: int) -> int:
        return min(n - 1, int(self.uniform() * n))

    def between(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self.uniform()


def enabled(settings: dict) -> bool:
    return any(float(settings.get(k) or 0) > 0 for k in AUGMENT_SETTINGS)


def _new_digits(text: str, rnd: Stream) -> str:
    out = []
    for k, ch in enumerate(text):
        if ch in _DIGITS:
            lead = k == 0 or text[k - 1] not in _DIGITS
            # a number's first digit stays non-zero when it was (no "07.50" from "17.50")
            out.append(str(1 + rnd.below(9)) if lead and ch != "0" else str(rnd.below(10)))
        else:
            out.append(ch)
    return "".join(out)


def word_shape(text: str) -> str:
    """A word's shape: each run of digits one "9", each run of letters (any case) one "a", every
    other character itself ("2/18/80" -> "9/9/9", "K." -> "a.", "Sparrow" -> "a")."""
    out = []
    for ch in text:
        c = "9" if ch.isdigit() else "a" if ch.isalpha() else ch
        if not (out and out[-1] == c and c in "9a"):
            out.append(c)
    return "".join(out)


def _value_runs(tags) -> list:
    """(field, start, end) of each labelled value: a B- tag and the I- tags of its field after it
    (an I- tag with no B- before it opens a value too)."""
    out, i = [], 0
    while i < len(tags):
        t = int(tags[i])
        if t <= 0:
            i += 1
            continue
        field = (t - 1) // 2
        j = i + 1
        while j < len(tags) and int(tags[j]) > 0 and (int(tags[j]) - 1) // 2 == field and int(tags[j]) % 2 == 0:
            j += 1
        out.append((field, i, j))
        i = j
    return out


def value_pool(pages) -> dict:
    """{(field, shapes): sorted distinct word tuples} of the labelled values of the training pages
    [(page, tags), ...]: what augment_swap draws a value's replacement from (sorted, so the pool
    does not depend on the pages' order)."""
    pool: dict = {}
    for page, tags in pages:
        for field, i, j in _value_runs(np.asarray(tags, np.int64)):
            texts = tuple(w.text for w in page.words[i:j])
            pool.setdefault((field, tuple(word_shape(t) for t in texts)), set()).add(texts)
    return {key: sorted(values) for key, values in pool.items()}


def _replace_everywhere(texts: list, original: list, own: tuple, new: tuple) -> None:
    """Every printing of the value `own` on the page (a run of words whose original texts are its
    words: the labelled one and its repeats, a total printed twice) takes the words `new`, so the
    page stays consistent with itself."""
    n = len(own)
    for k in range(len(original) - n + 1):
        if tuple(original[k:k + n]) == own:
            texts[k:k + n] = new


def _lines(words) -> list:
    """Runs of consecutive words (reading order) whose vertical centres lie within half a word
    height of the run's first word."""
    out, cur = [], []
    for i, w in enumerate(words):
        cy, h = (w.box[1] + w.box[3]) / 2, max(w.box[3] - w.box[1], 1e-9)
        if cur:
            f = words[cur[0]].box
            if abs(cy - (f[1] + f[3]) / 2) <= max(f[3] - f[1], h) / 2:
                cur.append(i)
                continue
            out.append(cur)
        cur = [i]
    if cur:
        out.append(cur)
    return out


def augment_page(page: Page, tags, settings: dict, seed: int, step: int,
                 pool: dict | None = None) -> tuple[Page, np.ndarray]:
    """A variant of `page` and its tags (int64, -1 ignored, 0 O, B-/I- > 0) for this step; `pool`
    (value_pool of the training pages) is what augment_swap draws from."""
    tags = np.asarray(tags, np.int64)
    if len(tags) != len(page.words):
        raise ValueError(f"page {page.id}: {len(tags)} tags for {len(page.words)} words")
    rnd = Stream("dxstudio-augment-v1", int(seed), int(step), page.id)
    p_val = float(settings.get("augment_values") or 0)
    p_swap = float(settings.get("augment_swap") or 0)
    p_case = float(settings.get("augment_case") or 0)
    p_drop = float(settings.get("augment_drop") or 0)
    jitter = float(settings.get("augment_jitter") or 0)
    shift = float(settings.get("augment_shift") or 0)
    texts = [w.text for w in page.words]
    boxes = [list(w.box) for w in page.words]
    if p_swap > 0 and pool is None:
        raise ValueError("augment_swap needs the pool of the training pages' values (value_pool)")
    original = [w.text for w in page.words]
    for field, i, j in _value_runs(tags) if p_val > 0 or p_swap > 0 else ():
        if p_swap > 0 and rnd.uniform() < p_swap:
            own = tuple(original[i:j])
            others = [v for v in pool.get((field, tuple(word_shape(t) for t in own)), ()) if v != own]
            if others:
                _replace_everywhere(texts, original, own, others[rnd.below(len(others))])
        if p_val > 0 and rnd.uniform() < p_val:
            for k in range(i, j):
                texts[k] = _new_digits(texts[k], rnd)
    if p_case > 0:
        for k, text in enumerate(texts):
            if rnd.uniform() < p_case:
                texts[k] = (str.upper, str.lower, str.capitalize)[rnd.below(3)](text)
    if shift > 0:
        for line in _lines(page.words):
            dx = rnd.between(-shift, shift) * page.width
            for k in line:
                boxes[k][0] += dx
                boxes[k][2] += dx
    if jitter > 0:
        for b in boxes:
            dx, dy = rnd.between(-jitter, jitter) * page.width, rnd.between(-jitter, jitter) * page.height
            b[0] += dx
            b[2] += dx
            b[1] += dy
            b[3] += dy
    keep = list(range(len(tags)))
    if p_drop > 0:
        keep = [k for k in keep if not (int(tags[k]) == 0 and rnd.uniform() < p_drop)]
        if not keep:
            keep = [0]
    words = []
    for k in keep:
        x0, y0, x1, y1 = boxes[k]
        # inside the page (the box keeps its size where it fits)
        dx = -min(x0, 0.0) - max(x1 - page.width, 0.0)
        dy = -min(y0, 0.0) - max(y1 - page.height, 0.0)
        x0, x1 = max(0.0, x0 + dx), min(page.width, x1 + dx)
        y0, y1 = max(0.0, y0 + dy), min(page.height, y1 + dy)
        words.append(Word(texts[k], (x0, y0, x1, y1)))
    return Page(page.id, page.width, page.height, tuple(words), page.image), tags[keep]
