"""Why a tuned model loses a field, page by page: every scored page of `dxstudio eval --all` looked at.

    python bench/field_errors.py MODEL EVAL_PROJECT [--decoding D] [--keywords K] [--train PROJECT]
        [--pages] [--out REPORT.json]

For each field and page the model's value (read as `dxstudio eval --all` reads it: the same
pages, decoding and keywords) is put beside the label's words, and the outcome is split finer
than the scorer's (dxstudio/tuning/scoring.py):
  right         the label's words exactly;
  both absent   no value on either side (right, but counted by `accuracy` only, never by
                `agreement`: agreement = right / pages where the label or the model has a value);
  missed        the label has a value, the model none; `best` is the field's best span over the
                page's logits with no 0 cut and no other field blocking it, `label` the score of
                the label's own span (decode_spans' score: l[B]-l[O] then l[I]-l[O]);
  spurious      the model has a value, the label none;
  cut short     the model's words are part of the label's;
  run on        the model's words hold the label's and more;
  overlap       some words shared, neither holds the other;
  other         no word shared (another value, or the same value at another printing:
                `same value` when the grounding normalizer says they are equal).
With --train the training project's count of labelled values per field is printed too (how many
examples of the field the tune saw). --pages prints every page's line. Research data (FUNSD,
SROIE): benchmarks only.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

OUTCOMES = ("right", "both absent", "missed", "spurious", "cut short", "run on", "overlap", "other")


def classify(label: tuple, pred: tuple | None) -> str:
    """The finer outcome of one field on one page: label words (() for none), predicted words or None."""
    lab, got = set(label), (set(pred) if pred is not None else None)
    if not lab:
        return "both absent" if got is None else "spurious"
    if got is None:
        return "missed"
    if got == lab:
        return "right"
    if got < lab:
        return "cut short"
    if got > lab:
        return "run on"
    return "overlap" if got & lab else "other"


def span_score(logits: np.ndarray, c: int, a: int, b: int) -> float:
    o = logits[:, 0].astype(np.float64)
    return float(logits[a, 1 + 2 * c] - o[a]) + sum(float(logits[j, 2 + 2 * c] - o[j]) for j in range(a + 1, b + 1))


def best_unblocked(logits: np.ndarray, c: int, starts) -> tuple | None:
    """(score, first, last) of field c's best span, any score (no 0 cut), no word blocked."""
    o = logits[:, 0].astype(np.float64)
    sb, si = logits[:, 1 + 2 * c] - o, logits[:, 2 + 2 * c] - o
    best, cur, cur_a = None, -np.inf, -1
    for i in range(len(sb)):
        ext = cur + float(si[i]) if i not in starts else -np.inf
        if ext > float(sb[i]):
            cur = ext
        else:
            cur, cur_a = float(sb[i]), i
        if best is None or cur > best[0]:
            best = (cur, cur_a, i)
    return best


def page_logits(cfg, params, page, kernels: str):
    from dxstudio.engine.inputs import iter_page_inputs
    from dxstudio.engine.layers import Ops
    from dxstudio.engine.model import forward

    ops = Ops(kernels)
    logits = np.zeros((len(page.words), 1 + 2 * len(cfg.fields)), np.float32)
    starts = []
    for inp in iter_page_inputs(page, cfg):
        logits[inp.start: inp.start + inp.n] = forward(cfg, params, inp, ops).tag_logits
        starts.append(inp.start)
    return logits, frozenset(starts)


def analyse(model_path, eval_project, decoding: str | None = None, keywords: str | None = None,
            train_project=None) -> dict:
    import dxstudio.grounding  # noqa: F401  (hands the labelling rule to the printing reading)
    from dxstudio.engine.container import load_model
    from dxstudio.engine.extract import model_decoding, predict_page, reading_keywords
    from dxstudio.engine.model import to_runtime
    from dxstudio.grounding import value_key
    from dxstudio.project import Project
    from dxstudio.tuning import schedule
    from dxstudio.tuning.evaluation import eval_keywords
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import resolve_settings

    project = Project.open(eval_project)
    loaded = load_model(model_path)
    settings = resolve_settings(project.settings, None, source=project.project_file)
    cfg = loaded.cfg.with_fields(project.field_names)
    _, train, held = usable_split(project, settings, cfg.max_words, "analysis")
    rows = {r[0]: r for r in train + held}
    held = [rows[i] for i in schedule.hash_order(list(rows), settings["seed"])]  # as eval --all
    params = to_runtime(loaded.params)
    decoding = decoding or model_decoding(loaded.thresholds)
    reading = reading_keywords(eval_keywords(loaded, project, keywords, model_path), cfg.fields)
    fields = list(cfg.fields)
    counts = {f: Counter() for f in fields}
    pages = []
    for pid, page, t in held:
        pred = predict_page(cfg, params, page, settings["kernels"], decoding, reading)
        logits, starts = page_logits(cfg, params, page, settings["kernels"])
        row = {"id": pid, "fields": {}}
        for c, f in enumerate(fields):
            if f in t.unscored:
                counts[f]["unscored"] += 1
                continue
            label = tuple(sorted(t.field_words.get(f, ())))
            v = pred.fields.get(f)
            got = tuple(v.words) if v is not None else None
            kind = classify(label, got)
            text = lambda ws: " ".join(page.words[i].text for i in ws)  # noqa: E731
            item = {"outcome": kind, "label": text(label) if label else None,
                    "model": v.text if v is not None else None}
            if kind == "other" and value_key(text(label)) == value_key(v.text):
                item["outcome"] = kind = "other (same value)"
            if label:
                item["label_score"] = round(span_score(logits, c, label[0], label[-1]), 2) \
                    if label == tuple(range(label[0], label[-1] + 1)) else None
            if kind == "missed":
                b = best_unblocked(logits, c, starts)
                item["best"] = None if b is None else {"score": round(b[0], 2), "text": text(range(b[1], b[2] + 1))}
            counts[f][kind] += 1
            row["fields"][f] = item
        pages.append(row)
    out = {"model": str(model_path), "project": str(eval_project), "decoding": decoding,
           "keywords": keywords, "pages": pages, "fields": {}}
    train_values = None
    if train_project is not None:
        tproj = Project.open(train_project)
        tset = resolve_settings(tproj.settings, None, source=tproj.project_file)
        _, ttrain, _ = usable_split(tproj, tset, cfg.max_words, "analysis")
        train_values = {f: sum(1 for _, _, t in ttrain if t.field_words.get(f)) for f in fields}
        out["train_pages"] = len(ttrain)
    for f in fields:
        n = counts[f]
        either = sum(v for k, v in n.items() if k not in ("both absent", "unscored"))
        scored = either + n["both absent"]
        out["fields"][f] = {"counts": dict(n), "labelled": sum(v for k, v in n.items()
                                                               if k not in ("both absent", "spurious", "unscored")),
                            "agreement": n["right"] / either if either else None,
                            "accuracy": (n["right"] + n["both absent"]) / scored if scored else None,
                            "train_values": None if train_values is None else train_values[f]}
    return out


def summary_text(rep: dict) -> str:
    lines = [f"{rep['model']} on {rep['project']} ({rep['decoding']}; {len(rep['pages'])} pages"
             + (f"; {rep['train_pages']} training pages" if "train_pages" in rep else "") + ")",
             "| field | train values | labelled | agreement | accuracy (both absent right) | "
             + " | ".join(OUTCOMES[:-1]) + " | other (any) | unscored |",
             "|---" * (len(OUTCOMES) + 6) + "|"]
    for f, s in rep["fields"].items():
        n = s["counts"]
        other = n.get("other", 0) + n.get("other (same value)", 0)
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        lines.append(f"| {f} | {s['train_values'] if s['train_values'] is not None else '-'} | {s['labelled']} | "
                     f"{fmt(s['agreement'])} | {fmt(s['accuracy'])} | "
                     + " | ".join(str(n.get(k, 0)) for k in OUTCOMES[:-1])
                     + f" | {other} ({n.get('other (same value)', 0)} same value) | {n.get('unscored', 0)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("project")
    ap.add_argument("--decoding", default=None)
    ap.add_argument("--keywords", default=None, choices=("name", "schema", "learned"))
    ap.add_argument("--train", default=None, help="the training project (counts its labelled values per field)")
    ap.add_argument("--pages", action="store_true", help="print every page's fields")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rep = analyse(a.model, a.project, a.decoding, a.keywords, a.train)
    if a.pages:
        for p in rep["pages"]:
            for f, item in p["fields"].items():
                if item["outcome"] in ("right", "both absent"):
                    continue
                extra = ""
                if "best" in item:
                    extra = f" best={item['best']}"
                print(f"{p['id']} {f:8s} {item['outcome']:18s} label={item['label']!r} model={item['model']!r} "
                      f"label_score={item.get('label_score')}{extra}")
    print(summary_text(rep))
    if a.out:
        from dxstudio.fsutil import write_json_atomic

        write_json_atomic(a.out, rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
