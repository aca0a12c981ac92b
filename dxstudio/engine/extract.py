"""Reading fields off the tags, window by window (docs/model.md "Reading fields off the tags").

Tag = argmax of the tag logits (ties: the lowest index), its probability from the softmax
(binary32, the library's exp), kept in `tag_probs`. A value's confidence is computed apart, in
binary64 from the same logits (`tag_confidence`), so that probabilities the binary32 softmax
rounds to the same value near 1 stay distinct and rank. Spans: B-c opens a span of c; I-c continues an open span of c
and otherwise opens one; O (or another field's tag) closes. A span's confidence is the lowest
confidence of its words' tags; a field's value is its most confident span (ties: the first).
A long page is read window by window; per field the best-confidence value wins (ties: the
earlier window).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .inputs import iter_page_inputs
from .layers import Ops, softmax_forward
from .model import forward
from .numerics import exp64
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
    e = exp64(np.ascontiguousarray(logits - top[:, None]), kernels)
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


def predict_page(cfg: ModelConfig, params_rt, page: Page, kernels: str = "fast") -> PagePrediction:
    ops = Ops(kernels)
    fields = list(cfg.fields)
    result: dict = {f: None for f in fields}
    all_tags = np.zeros(len(page.words), np.int64)
    all_probs = np.zeros(len(page.words), np.float32)
    all_conf = np.zeros(len(page.words), np.float64)
    for inp in iter_page_inputs(page, cfg):  # one window's inputs at a time
        out = forward(cfg, params_rt, inp, ops)
        tags, probs = tags_and_probs(ops, out.tag_logits)
        conf = tag_confidence(out.tag_logits, tags, kernels)
        all_tags[inp.start: inp.start + inp.n] = tags
        all_probs[inp.start: inp.start + inp.n] = probs
        all_conf[inp.start: inp.start + inp.n] = conf
        for f, v in fields_from_tags(page, fields, tags, conf, inp.start).items():
            if v is not None and (result[f] is None or v.confidence > result[f].confidence):
                result[f] = v
    return PagePrediction(page.id, result, all_tags, all_probs, all_conf)


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
    """{"id", "fields": {name: {"value", "words", "confidence", "route"[, "why"]}}}; floats
    round-trip exactly; route as route() with the model's stored thresholds, and an asked
    value's "why" as route_reason(): "below threshold", "no threshold" or "no value"."""
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
    return {"id": pred.page_id, "fields": fields}


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
    return {"id": document_id, "pages": [r["id"] for r in records], "fields": fields}
