"""Reading fields off the tags, window by window (docs/model.md "Reading fields off the tags").

Tag = argmax of the tag logits (ties: the lowest index), its probability from the softmax
(binary32, the library's exp). Spans: B-c opens a span of c; I-c continues an open span of c
and otherwise opens one; O (or another field's tag) closes. A span's confidence is the lowest
probability of its words' tags; a field's value is its most confident span (ties: the first).
A long page is read window by window; per field the best-confidence value wins (ties: the
earlier window).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .inputs import page_inputs
from .layers import Ops, softmax_forward
from .model import forward
from .page import Page


@dataclass(frozen=True)
class FieldValue:
    words: tuple  # page word indices
    text: str
    confidence: float  # binary32 value, exactly representable in a Python float


@dataclass
class PagePrediction:
    page_id: str
    fields: dict  # name -> FieldValue or None
    tags: np.ndarray  # (n_words,) predicted tag per page word
    tag_probs: np.ndarray  # (n_words,) probability of that tag


def tags_and_probs(ops: Ops, tag_logits: np.ndarray):
    probs = softmax_forward(ops, tag_logits)
    tags = np.argmax(tag_logits, axis=1)  # first maximum = lowest index
    return tags, probs[np.arange(len(tags)), tags]


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


def predict_page(cfg: ModelConfig, params_rt, page: Page, kernels: str = "fast") -> PagePrediction:
    ops = Ops(kernels)
    fields = list(cfg.fields)
    result: dict = {f: None for f in fields}
    all_tags = np.zeros(len(page.words), np.int64)
    all_probs = np.zeros(len(page.words), np.float32)
    for inp in page_inputs(page, cfg):
        out = forward(cfg, params_rt, inp, ops)
        tags, probs = tags_and_probs(ops, out.tag_logits)
        all_tags[inp.start: inp.start + inp.n] = tags
        all_probs[inp.start: inp.start + inp.n] = probs
        for f, v in fields_from_tags(page, fields, tags, probs, inp.start).items():
            if v is not None and (result[f] is None or v.confidence > result[f].confidence):
                result[f] = v
    return PagePrediction(page.id, result, all_tags, all_probs)


def prediction_json(pred: PagePrediction) -> dict:
    """{"id", "fields": {name: {"value", "words", "confidence"}}}; floats round-trip exactly."""
    return {
        "id": pred.page_id,
        "fields": {
            f: ({"value": v.text, "words": list(v.words), "confidence": v.confidence} if v is not None
                else {"value": None, "words": [], "confidence": None})
            for f, v in pred.fields.items()
        },
    }
