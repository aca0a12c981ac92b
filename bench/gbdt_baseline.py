"""A gradient-boosted word classifier (LightGBM) as the classic baseline beside docextract-v0
(issue 11, docs/base-model.md "The gradient-boosted baseline").

    pip install dxstudio[baseline]        # lightgbm, a dev extra
    python bench/gbdt_baseline.py TRAIN_PROJECT EVAL_PROJECT [--out REPORT.json] [--trees N]

Trains on TRAIN_PROJECT's training pages (the same split `dxstudio tune` makes: the project's
settings, seed and held-out fraction, pages longer than the base model's window excluded the
same way) and scores EVAL_PROJECT's held-out pages exactly as `dxstudio eval` scores a model:
the same pages (`usable_split`), the same label rules, the same span reading
(`fields_from_tags`: a field's value is its most confident B/I run, confidence = the lowest
tag probability of its words) and the same scorer (`score_predictions` -> `score_pages`).
Prints one line per field and writes the report (same shape as eval's) with --out.

Each word is one row, its class the project's BIO tag (1 + 2K classes; words whose tag is
ignored, -1, are left out). Features (`word_features`, about 330): the word's shape (length,
digit/letter/upper shares, punctuation, a shape class), date/time/amount/phone/postcode
patterns, the amount's value and rank among the page's amounts (and how often it recurs), the
position of the word on the page and in its line, the line's index from top and bottom, a
keyword list looked for in the word, to its left on the same line, on the line above and to
its right, and the shape flags of the words before and after. Lines are words whose vertical
centres lie within half a word height, ordered by x.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

KEYWORDS = [
    "total", "subtotal", "sub", "tax", "gst", "vat", "sst", "service", "amount", "amt", "net",
    "rounding", "round", "adj", "cash", "change", "paid", "tender", "due", "balance", "discount",
    "qty", "price", "item", "incl", "excl", "rm", "myr", "$", "date", "time", "tel", "phone",
    "fax", "no", "invoice", "inv", "receipt", "bill", "doc", "cashier", "table", "sdn", "bhd",
    "enterprise", "trading", "restaurant", "store", "mart", "company", "co", "reg", "jalan",
    "jln", "taman", "lot", "no.", "kuala", "lumpur", "selangor", "johor", "malaysia", "road",
    "street", "thank", "you", "visa", "master", "card", "points", "member", "gst@6%", "sr",
]
KW_INDEX = {k: i for i, k in enumerate(KEYWORDS)}

DATE_RES = [
    re.compile(r"^\d{1,2}[/\-.]\d{1,2}[/\-.]\d{2,4}$"),
    re.compile(r"^\d{4}[/\-.]\d{1,2}[/\-.]\d{1,2}$"),
    re.compile(r"^\d{1,2}[/\-.\s]?(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*[/\-.\s]?\d{2,4}$", re.I),
    re.compile(r"^(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*$", re.I),
    re.compile(r"\d{1,2}[/\-.]\d{1,2}[/\-.]\d{2,4}"),  # a date inside a longer word
]
TIME_RES = [
    re.compile(r"^\d{1,2}:\d{2}(:\d{2})?$"),
    re.compile(r"^\d{1,2}:\d{2}(:\d{2})?\s*(am|pm)$", re.I),
    re.compile(r"^(am|pm)$", re.I),
    re.compile(r"\d{1,2}:\d{2}"),
]
AMOUNT_RE = re.compile(r"^[^\d\-]{0,3}-?\d{1,3}(,\d{3})*[.,]\d{2}[^\d]{0,2}$|^[^\d\-]{0,3}-?\d+[.,]\d{2}[^\d]{0,2}$")
INT_RE = re.compile(r"^\d+$")
PHONE_RE = re.compile(r"^\+?\(?\d{2,4}\)?[\- ]?\d{3,4}[\- ]?\d{3,5}$")
POSTCODE_RE = re.compile(r"^\d{5},?$")
SHAPES = ["X", "x", "Xx", "d", "d.d", "d,d", "d/d", "d-d", "d:d", "p", "Xd", "xd", "X.", "x.", "other"]


def _shape(text: str) -> int:
    s = re.sub(r"[A-Z]+", "X", text)
    s = re.sub(r"[a-z]+", "x", s)
    s = re.sub(r"\d+", "d", s)
    s = re.sub(r"[^Xxd.,/:\-]+", "p", s)
    for cand in (s, s[:3], s[:2]):
        if cand in SHAPES:
            return SHAPES.index(cand)
    return len(SHAPES) - 1


def amount_value(text: str) -> float | None:
    t = text.strip()
    if not AMOUNT_RE.match(t):
        return None
    digits = re.sub(r"[^\d.,\-]", "", t)
    if len(digits) >= 3 and digits[-3] in ".,":
        whole, cents = digits[:-3], digits[-2:]
        whole = re.sub(r"[.,]", "", whole)
        try:
            return float(f"{whole or '0'}.{cents}")
        except ValueError:
            return None
    return None


def _norm(text: str) -> str:
    return text.lower().strip(":;.,()[]*#=")


def _keys(text: str) -> list[int]:
    t = text.lower()
    out = [KW_INDEX[t]] if t in KW_INDEX else []
    n = _norm(t)
    if n != t and n in KW_INDEX:
        out.append(KW_INDEX[n])
    return out


def lines_of(page) -> tuple[np.ndarray, list[list[int]]]:
    """(line index per word, lines as word lists ordered by x), lines ordered top to bottom."""
    n = len(page.words)
    yc = np.array([(w.box[1] + w.box[3]) / 2 for w in page.words])
    hh = np.array([max(w.box[3] - w.box[1], 1e-6) for w in page.words])
    order = sorted(range(n), key=lambda i: (yc[i], page.words[i].box[0]))
    lines: list[list[int]] = []
    centre = []
    for i in order:
        if lines and abs(yc[i] - centre[-1]) <= 0.5 * hh[i]:
            lines[-1].append(i)
            centre[-1] = float(np.mean(yc[lines[-1]]))
        else:
            lines.append([i])
            centre.append(yc[i])
    line_of = np.zeros(n, np.int64)
    for li, ws in enumerate(lines):
        ws.sort(key=lambda i: page.words[i].box[0])
        for w in ws:
            line_of[w] = li
    return line_of, lines


def _basic(text: str) -> list[float]:
    n = max(len(text), 1)
    digits = sum(c.isdigit() for c in text)
    alpha = sum(c.isalpha() for c in text)
    upper = sum(c.isupper() for c in text)
    amt = amount_value(text)
    return [
        len(text), digits / n, alpha / n, upper / max(alpha, 1), float(text.isupper()), float(text.istitle()),
        float(":" in text), float("." in text), float("," in text), float("/" in text), float("-" in text),
        float(any(r.search(text) for r in DATE_RES)), float(any(r.search(text) for r in TIME_RES)),
        float(amt is not None), float(bool(INT_RE.match(text))), float(bool(PHONE_RE.match(text))),
        float(bool(POSTCODE_RE.match(text))),
    ]


N_BASIC = 17


def word_features(page) -> np.ndarray:
    """(n_words, n_features) float32 for one page."""
    n = len(page.words)
    texts = [w.text for w in page.words]
    W = max(float(page.width), 1e-6)
    H = max(float(page.height), 1e-6)
    line_of, lines = lines_of(page)
    n_lines = len(lines)
    basics = [_basic(t) for t in texts]
    shapes = [_shape(t) for t in texts]
    keys = [_keys(t) for t in texts]
    amounts = [amount_value(t) for t in texts]
    vals = sorted({a for a in amounts if a is not None}, reverse=True)
    rank = {v: i for i, v in enumerate(vals)}
    counts: dict = {}
    for a in amounts:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    # keywords per line, and word position within its line
    line_keys = [set() for _ in range(n_lines)]
    for li, ws in enumerate(lines):
        for w in ws:
            line_keys[li].update(keys[w])
    pos_in_line = np.zeros(n, np.int64)
    for ws in lines:
        for j, w in enumerate(ws):
            pos_in_line[w] = j
    K = len(KEYWORDS)
    rows = []
    for i in range(n):
        b = page.words[i].box
        li = int(line_of[i])
        ws = lines[li]
        j = int(pos_in_line[i])
        f = list(basics[i])
        f += [shapes[i]]
        a = amounts[i]
        f += [math.log1p(abs(a)) if a is not None else -1.0,
              rank[a] if a is not None else -1, (rank[a] / max(len(vals), 1)) if a is not None else -1.0,
              float(a is not None and rank[a] == 0), counts.get(a, 0) if a is not None else 0, len(vals)]
        # amounts that sum to another: is this one the sum of two others on the page?
        f += [float(a is not None and any(abs((a - v) - u) < 0.005 for v in vals[:12] for u in vals[:12]
                                          if v != a and u != a))]
        f += [b[0] / W, b[1] / H, b[2] / W, b[3] / H, (b[3] - b[1]) / H, i / max(n, 1),
              li, li / max(n_lines, 1), n_lines - 1 - li, j, len(ws), len(ws) - 1 - j, n]
        # keywords: in the word, left on its line, on the line above, right on its line, line below
        own = np.zeros(K, np.float32)
        left = np.zeros(K, np.float32)
        right = np.zeros(K, np.float32)
        for k in keys[i]:
            own[k] = 1
        for w in ws[:j]:
            for k in keys[w]:
                left[k] = 1
        for w in ws[j + 1:]:
            for k in keys[w]:
                right[k] = 1
        above = np.zeros(K, np.float32)
        if li > 0:
            for k in line_keys[li - 1]:
                above[k] = 1
        f += list(own) + list(left) + list(above) + list(right)
        # the line's content: amounts, digits, an amount at its end
        f += [float(any(amounts[w] is not None for w in ws)), float(amounts[ws[-1]] is not None),
              float(ws[-1] == i)]
        # neighbours in reading order and on the line
        for d in (-2, -1, 1, 2):
            k = i + d
            f += basics[k] + [shapes[k]] if 0 <= k < n else [-1.0] * (N_BASIC + 1)
        for d in (-1, 1):
            k = j + d
            f += basics[ws[k]] if 0 <= k < len(ws) else [-1.0] * N_BASIC
        rows.append(f)
    return np.asarray(rows, np.float32).reshape(n, -1)


def fill_missing(page, fields, probs, values: dict, floor: float) -> dict:
    """Fields the argmax reading left empty: the span starting at the word most likely B-c (when that
    probability >= floor), extended over the next words while P(I-c) > P(O); confidence = the
    lowest of those probabilities."""
    from dxstudio.engine.extract import FieldValue

    out = dict(values)
    for c, f in enumerate(fields):
        if out[f] is not None:
            continue
        b, i_ = 1 + 2 * c, 2 + 2 * c
        w = int(np.argmax(probs[:, b]))
        if probs[w, b] < floor:
            continue
        words, conf = [w], float(probs[w, b])
        while words[-1] + 1 < len(page.words) and probs[words[-1] + 1, i_] > probs[words[-1] + 1, 0]:
            words.append(words[-1] + 1)
            conf = min(conf, float(probs[words[-1], i_]))
        out[f] = FieldValue(tuple(words), " ".join(page.words[k].text for k in words), conf)
    return out


def diverged(losses, where: str = "") -> str | None:
    """Why a boosting run's training log loss (one value a round) says it diverged, else None:
    the loss may only fall; a final loss above twice its lowest plus 0.01 means the trees broke
    it (docs/base-model.md "The gradient-boosted baseline": 0.013 on SROIE all before lambda_l2)."""
    if not losses:
        return None
    low = min(losses)
    at = losses.index(low)
    if losses[-1] > 2 * low + 0.01 or not all(math.isfinite(x) for x in losses):
        first = next(i for i in range(at, len(losses)) if not (losses[i] <= 2 * low + 0.01))
        return (f"{where}the baseline diverged: its training log loss fell to {low:.4g} at round {at + 1}, "
                f"then rose to {losses[first]:.4g} at round {first + 1} and ends at {losses[-1]:.4g} "
                f"(raise --l2, or lower --lr)")
    return None


def _split(project_dir, max_words):
    from dxstudio.project import Project
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import resolve_settings

    project = Project.open(project_dir)
    settings = resolve_settings(project.settings, None)
    _, train, held = usable_split(project, settings, max_words, "the baseline")
    return project, settings, train, held


def main(argv=None) -> int:
    from dxstudio.engine.extract import DECODINGS

    ap = argparse.ArgumentParser(description="LightGBM word-classifier baseline, scored like dxstudio eval")
    ap.add_argument("train_project")
    ap.add_argument("eval_project")
    ap.add_argument("--out", help="report file (eval's shape)")
    ap.add_argument("--trees", type=int, default=300)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--l2", type=float, default=1.0,
                    help="LightGBM lambda_l2 (leaf-value regularisation; 0, LightGBM's default, let the "
                         "multiclass leaves blow up on SROIE's 378 receipts: docs/base-model.md)")
    ap.add_argument("--fill", type=float, default=0.05,
                    help="a field with no B/I run takes the word most likely B- of it when that probability "
                         "is at least this (0: off), extended by following words likelier I- of it than O")
    ap.add_argument("--field-boost", type=float, default=3.0,
                    help="B-/I- words weigh the field's weight times this (O words 1)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decoding", choices=("seed",) + tuple(d for d in DECODINGS if d != "seed"), default="seed",
                    help="how values are read off the word classes: seed = the seed's reader with --fill "
                         "(the baseline as measured so far), span = the model's span decoding on the log "
                         "probabilities (docs/model.md \"Span decoding\"; no --fill), joint = the best joint "
                         "assignment of spans, printing = joint, then each value at the printing the "
                         "labelling rule labels (engine/extract.py decode_joint, printings_by_rule), keyed = "
                         "printing, then the words after a field's keywords where it has no value "
                         "(keyed_values), keyed_learned = keyed with each field's rules learnt on the training "
                         "pages: read by its key alone, a digit's shape (--keywords learned), keyed_layout = "
                         "keyed_learned with values under their key, over several rows and whole keys")
    ap.add_argument("--keywords", choices=("name", "schema", "learned"), default="name",
                    help="printing only: the words each value is placed after (dxstudio's setting keywords, "
                         "tuning/keywords.py; learned: from these training pages); default name, the seed's rule")
    ap.add_argument("--all", action="store_true", dest="all_pages",
                    help="score every usable page of EVAL_PROJECT, as `dxstudio eval --all` does")
    a = ap.parse_args(argv)
    try:
        import lightgbm as lgb
    except ImportError:
        print("gbdt_baseline: lightgbm is not installed (pip install dxstudio[baseline])", file=sys.stderr)
        return 2
    from dxstudio.engine.config import size_config
    from dxstudio.engine.extract import (JOINT_DECODINGS, KEYED_DECODINGS, KEYWORD_DECODINGS, PagePrediction,
                                         fields_from_logits, fields_from_tags, keyed_reading, printings_by_rule)
    from dxstudio.tuning.evaluation import score_predictions

    max_words = size_config("base").max_words  # the model's pages: the same exclusions
    t0 = time.monotonic()
    project, settings, train, _ = _split(a.train_project, max_words)
    fields = project.field_names
    # the model's loss weights per tag (O 1, B-/I- the field's weight): the same per-word weights
    from dxstudio.tuning.schedule import class_weights_for
    tag_weight = class_weights_for([settings["field_weight"] if settings["field_weight"] is not None
                                    else f.weight for f in project.schema])
    xs, ys = [], []
    for _, page, t in train:
        X = word_features(page)
        y = np.asarray(t.tags, np.int64)
        keep = y >= 0
        xs.append(X[keep])
        ys.append(y[keep])
    X, y = np.concatenate(xs), np.concatenate(ys)
    n_classes = 1 + 2 * len(fields)
    present = sorted(set(y.tolist()))
    # LightGBM needs classes 0..C-1; a class never seen in training gets probability 0
    remap = {c: i for i, c in enumerate(present)}
    params = {"objective": "multiclass", "num_class": len(present), "num_leaves": a.leaves,
              "learning_rate": a.lr, "lambda_l2": a.l2, "min_data_in_leaf": 5, "feature_fraction": 0.5, "seed": a.seed,
              "deterministic": True, "force_row_wise": True, "num_threads": a.threads, "verbose": -1}
    if len(present) < 2:
        print(f"gbdt_baseline: {a.train_project}: the training pages have only one tag", file=sys.stderr)
        return 2
    data = lgb.Dataset(X, np.asarray([remap[c] for c in y.tolist()]),
                       weight=np.where(y > 0, tag_weight[y] * a.field_boost, 1.0))
    curve: dict = {}  # the training log loss every round (the training set as its own valid set: no extra pass)
    booster = lgb.train(params, data, num_boost_round=a.trees, valid_sets=[data], valid_names=["train"],
                        callbacks=[lgb.record_evaluation(curve)])
    t_train = time.monotonic() - t0
    losses = [float(x) for x in curve["train"]["multi_logloss"]]
    why = diverged(losses, f"gbdt_baseline: {a.train_project}: ")
    if why:
        print(why, file=sys.stderr)
        return 2

    eval_project, eval_settings, eval_train, held = _split(a.eval_project, max_words)
    if a.all_pages:  # every usable page, in the order `dxstudio eval --all` scores them
        from dxstudio.tuning import schedule

        rows = {r[0]: r for r in eval_train + held}
        held = [rows[i] for i in schedule.hash_order(list(rows), eval_settings["seed"])]
    if eval_project.field_names != fields:
        print(f"gbdt_baseline: {a.eval_project}: fields {eval_project.field_names} are not "
              f"{a.train_project}'s {fields}", file=sys.stderr)
        return 2
    from dxstudio.engine.extract import reading_keywords
    from dxstudio.tuning.keywords import field_keywords

    stored_kw = field_keywords(project.schema, train, a.keywords)
    reading = reading_keywords(stored_kw, fields)
    preds = []
    for pid, page, t in held:
        p = booster.predict(word_features(page)).reshape(len(page.words), -1)
        full = np.zeros((len(page.words), n_classes), np.float64)
        for c, i in remap.items():
            full[:, c] = p[:, i]
        tags = np.argmax(full, axis=1)
        probs = full[np.arange(len(tags)), tags]
        if a.decoding != "seed":  # log-probability differences: the margins the decoder reads
            values = fields_from_logits(page, fields, np.log(np.maximum(full, 1e-12)), (0,), "reference",
                                        joint=a.decoding in JOINT_DECODINGS)
            if a.decoding in KEYWORD_DECODINGS:
                values = printings_by_rule(page, fields, values, reading)
            if a.decoding in KEYED_DECODINGS:
                values = keyed_reading(page, fields, values, np.log(np.maximum(full, 1e-12)), reading, "reference",
                                       a.decoding)
        else:
            values = fields_from_tags(page, fields, tags, probs)
            if a.fill:
                values = fill_missing(page, fields, full, values, a.fill)
        pred = PagePrediction(pid, values, tags, probs, decoding=a.decoding)
        preds.append((pid, page, t, pred))
    report = score_predictions(fields, preds, eval_settings["share"], eval_settings["min_values"])
    agreements = [report["fields"][f]["agreement"] for f in fields]
    mean = float(np.mean([x for x in agreements if x is not None]))
    report["run"] = {"baseline": "lightgbm", "train_project": str(a.train_project), "train_pages": len(train),
                     "train_words": int(len(y)), "features": int(X.shape[1]), "eval_project": str(a.eval_project),
                     "heldout_pages": len(held), "decoding": a.decoding, "keywords": a.keywords, "trees": a.trees, "leaves": a.leaves, "lr": a.lr, "l2": a.l2,
                     "train_logloss": {"lowest": min(losses), "final": losses[-1]},
                     "train_seconds": round(t_train, 1), "mean_agreement": mean}
    print(f"{len(train)} training pages ({len(y)} words, {X.shape[1]} features, {t_train:.1f} s), "
          f"{len(held)} scored pages")
    for f in fields:
        print(f"{f:10s} {report['fields'][f]['agreement']:.3f}")
    print(f"mean       {mean:.3f}")
    if a.out:
        from dxstudio.fsutil import write_json_atomic
        write_json_atomic(a.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
