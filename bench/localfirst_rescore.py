"""Re-read a finished cross-validated run (`dxstudio tune --folds K`, or the auto folds) with a
decoding, keeping two confidences per value, and measure the threshold rule on pages outside the
project (docs/tuning.md "The share: default 0.99, and 0.9 measured with span decoding", issue 21).

    python bench/localfirst_rescore.py predict RUN PROJECT TEST --out CACHE.json [--decoding span]
    python bench/localfirst_rescore.py table CACHE.json [CACHE2.json ...] [--share 0.99,0.95,0.9]
                                       [--level 0.95] [--kind prob,score,best] [--json]

predict: each fold's checkpoint (RUN/folds/<k>/checkpoint.safetensors) reads the pages that fold
held out, and the run's final model (RUN/model.safetensors) reads every usable page of TEST (a
project of pages outside PROJECT, as `dxstudio eval --all` reads them). Per field and value it
keeps [prob, score, exactly right, value right]: prob is the value's confidence as the package
stores it (the lowest binary64 tag probability of the span's words, engine/extract.py), score the
span decoding's score (the log probability ratio of the span over O, engine/extract.decode_spans),
mapped to score / (1 + score) so that it lies in (0, 1) in the same order. The values themselves
are the package's (checked against predict_page on every page). Nothing in RUN is written.

table: for each cache, share and level, each field's threshold by the bound rule
(scoring.bound_threshold) from the held-out values, then on the test values: per field and pooled
the share right among the values at or above the field's own threshold and the coverage. Kinds:
prob, score, and best (per field the kind of the higher held-out confidence AUC, chosen on the
held-out values only). Right means value right (the default threshold_by).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxstudio.engine.extract import decode_spans, fields_from_logits, predict_page  # noqa: E402
from dxstudio.engine.inputs import iter_page_inputs  # noqa: E402
from dxstudio.engine.layers import Ops  # noqa: E402
from dxstudio.engine.model import forward  # noqa: E402
from dxstudio.fsutil import write_json_atomic  # noqa: E402
from dxstudio.tuning.scoring import (bound_threshold, clopper_pearson_lower, confidence_auc,  # noqa: E402
                                     CONFIDENCE_LEVEL)


def _read(cfg, params_rt, page, kernels: str, decoding: str):
    """{field: (FieldValue, span score or None) or None}, the values predict_page gives."""
    ref = predict_page(cfg, params_rt, page, kernels, decoding)
    fields = list(cfg.fields)
    if decoding != "span":
        return {f: (None if v is None else (v, None)) for f, v in ref.fields.items()}
    ops = Ops(kernels)
    logits = np.zeros((len(page.words), 1 + 2 * len(fields)), np.float32)
    starts = []
    for inp in iter_page_inputs(page, cfg):
        out = forward(cfg, params_rt, inp, ops)
        logits[inp.start: inp.start + inp.n] = out.tag_logits
        starts.append(inp.start)
    mine = fields_from_logits(page, fields, logits, starts, kernels)
    if mine != ref.fields:
        raise SystemExit(f"page {page.id}: the re-read values differ from predict_page's")
    scores = {fields[c]: s for c, (s, _, _) in decode_spans(logits, len(fields), starts).items()}
    return {f: (None if v is None else (v, scores[f])) for f, v in mine.items()}


def _rows(cfg, params_rt, pages, kernels, decoding, out: dict) -> None:
    from dxstudio.tuning.evaluation import value_matches

    for pid, page, t in pages:
        read = _read(cfg, params_rt, page, kernels, decoding)
        label = {f: tuple(t.field_words.get(f, ())) for f in cfg.fields}

        class _P:  # value_matches reads pred.fields
            fields = {f: (None if r is None else r[0]) for f, r in read.items()}

        vm = value_matches(page, label, _P)
        for f in cfg.fields:
            r = read[f]
            if f in t.unscored or r is None:
                continue
            v, score = r
            exact = bool(label[f]) and frozenset(v.words) == frozenset(label[f])
            value_ok = exact or (bool(label[f]) and f in vm)
            s = None if score is None else float(score) / (1.0 + float(score))
            out.setdefault(f, []).append([v.confidence, s, exact, value_ok, pid])


def predict(run: Path, project_dir: Path, test_dir: Path, out: Path, decoding: str) -> None:
    from dxstudio.engine.container import load_model
    from dxstudio.engine.model import to_runtime
    from dxstudio.project import Project
    from dxstudio.tuning import schedule
    from dxstudio.tuning.folds import FoldedRun
    from dxstudio.tuning.checkpoint import read_checkpoint
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import resolve_settings

    project = Project.open(project_dir)
    info = json.loads((run / "settings.json").read_text(encoding="utf-8"))
    k = info["folds"]
    # the run's own share (it is in the fingerprint; it never changes the weights)
    fr = FoldedRun.prepare(project, run, {"folds": k, "decoding": decoding, "share": info["settings"]["share"]})
    kernels = fr.settings["kernels"]
    heldout: dict = {}
    for part in fr.folds:
        meta, tensors = read_checkpoint(part.checkpoint_path)
        if meta.get("fingerprint") != part.fingerprint or meta["step"] != part.total_steps:
            raise SystemExit(f"{part.checkpoint_path}: not this run's finished fold")
        params = {n[len("param/"):]: v for n, v in tensors.items() if n.startswith("param/")}
        _rows(part.cfg, params, part.heldout_pages, kernels, decoding, heldout)
        print(f"{part.run_dir}: {len(part.heldout_pages)} held-out pages read", file=sys.stderr)
    loaded = load_model(run / "model.safetensors")
    test = Project.open(test_dir)
    settings = resolve_settings(test.settings, {"decoding": decoding})
    cfg = loaded.cfg.with_fields(test.field_names)
    _, train, held = usable_split(test, settings, cfg.max_words, "evaluation")
    rows = {r[0]: r for r in train + held}
    pages = [rows[i] for i in schedule.hash_order(list(rows), settings["seed"])]
    test_rows: dict = {}
    _rows(cfg, to_runtime(loaded.params), pages, kernels, decoding, test_rows)
    print(f"{test_dir}: {len(pages)} test pages read", file=sys.stderr)
    write_json_atomic(out, {"run": str(run), "project": str(project_dir), "test": str(test_dir),
                            "decoding": decoding, "folds": k, "heldout_pages": len(fr.heldout_pages),
                            "test_pages": len(pages), "fields": list(cfg.fields),
                            "heldout": heldout, "test_values": test_rows})


KIND_COL = {"prob": 0, "score": 1}


def _kind_for(rows, kind: str) -> str:
    if kind != "best":
        return kind
    aucs = {k: confidence_auc([(r[c], r[3]) for r in rows]) for k, c in KIND_COL.items()}
    return max(("prob", "score"), key=lambda k: (-1 if aucs[k] is None else aucs[k], k == "prob"))


def figures(cache: dict, share: float, level: float, kind: str) -> dict:
    out, n_all, n_vals, right_all = {"fields": {}}, 0, 0, 0
    for f in cache["fields"]:
        held = cache["heldout"].get(f, [])
        test = cache["test_values"].get(f, [])
        k = _kind_for(held, kind)
        c = KIND_COL[k]
        t = bound_threshold([(r[c], r[3]) for r in held], share, level) if held else None
        above = [r for r in test if t is not None and r[c] >= t]
        right = sum(bool(r[3]) for r in above)
        h_above = [r for r in held if t is not None and r[c] >= t]
        promise = clopper_pearson_lower(sum(bool(r[3]) for r in h_above), len(h_above), level) if h_above else None
        out["fields"][f] = {"kind": k, "threshold": t, "promise": promise, "values": len(above), "right": right, "n_values": len(test),
                            "heldout_values": len(held), "heldout_right": sum(bool(r[3]) for r in held),
                            "heldout_auc": confidence_auc([(r[c], r[3]) for r in held]),
                            "test_auc": confidence_auc([(r[c], r[3]) for r in test]),
                            "precision": right / len(above) if above else None,
                            "coverage": len(above) / len(test) if test else None}
        n_all += len(above)
        n_vals += len(test)
        right_all += right
    promises = [f["promise"] for f in out["fields"].values() if f["promise"] is not None]
    # the one sentence's claim: the weakest field's held-out bound, rounded down to a percent
    claim = math.floor(min(promises) * 100 + 1e-9) / 100 if promises else None
    out["claim"] = claim
    out["holds"] = all(f["precision"] is None or f["precision"] >= claim - 1e-12 for f in out["fields"].values()) \
        if claim is not None else None
    out["pooled"] = {"values": n_all, "right": right_all, "precision": right_all / n_all if n_all else None,
                     "precision_lower": clopper_pearson_lower(right_all, n_all) if n_all else None,
                     "coverage": n_all / n_vals if n_vals else None}
    return out


def _pct(x):
    return "-" if x is None else f"{x * 100:.1f}%"


def row(label: str, share: float, level: float, kind: str, fig: dict) -> str:
    per = "; ".join(
        f"{n} " + ("none" if f["threshold"] is None else
                   f"{f['right']}/{f['values']} ({_pct(f['precision'])}, cov {f['coverage']:.2f})")
        + (f" [{f['kind']}]" if kind == "best" else "")
        for n, f in fig["fields"].items())
    p = fig["pooled"]
    cov = "-" if p["coverage"] is None else f"{p['coverage']:.3f}"
    claim = "-" if fig["claim"] is None else f"{fig['claim'] * 100:.0f}% " + ("holds" if fig["holds"] else "FAILS")
    return (f"| {label} | {kind} | {share:g} | {level:g} | {per} | {p['right']}/{p['values']} ({_pct(p['precision'])}) "
            f"| {cov} | {claim} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict")
    p.add_argument("run", type=Path)
    p.add_argument("project", type=Path)
    p.add_argument("test", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--decoding", default="span", choices=("span", "seed"))
    t = sub.add_parser("table")
    t.add_argument("caches", nargs="+", type=Path)
    t.add_argument("--share", default="0.99,0.97,0.95,0.9")
    t.add_argument("--level", default=str(CONFIDENCE_LEVEL))
    t.add_argument("--kind", default="prob,score,best")
    t.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "predict":
        predict(a.run, a.project, a.test, a.out, a.decoding)
        return 0
    results = []
    for path in a.caches:
        cache = json.loads(path.read_text(encoding="utf-8"))
        for kind in a.kind.split(","):
            for level in (float(x) for x in a.level.split(",")):
                for share in (float(x) for x in a.share.split(",")):
                    fig = figures(cache, share, level, kind)
                    results.append({"cache": path.stem, "kind": kind, "share": share, "level": level, **fig})
                    if not a.json:
                        print(row(path.stem, share, level, kind, fig))
    if a.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
