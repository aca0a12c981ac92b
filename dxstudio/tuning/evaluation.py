"""Scoring a model's held-out predictions: the report of a run and of `dxstudio eval`.

    report = score_predictions(fields, preds, share, min_values, by, rule)   # pages and documents
    thresholds = stored_thresholds(report)                 # what a tuned model file carries
    stored = at_stored_thresholds(report, model.thresholds)
    report = evaluate_model(model_path, project)           # `dxstudio eval`
"""
from __future__ import annotations

from dxstudio.engine.container import ModelFileError, load_model
from dxstudio.engine.extract import DEFAULT_DECODING, field_threshold, model_decoding, predict_page, reading_keywords
from dxstudio.engine.model import to_runtime
from dxstudio.fsutil import write_json_atomic
from dxstudio.grounding import value_key
from dxstudio.tuning import schedule
from dxstudio.tuning.keywords import field_keywords, reading_record
from dxstudio.tuning.localfirst import verdicts
from dxstudio.tuning.pages import usable_split
from dxstudio.tuning.scoring import (HeldOutDocument, HeldOutPage, bound_statement, clopper_pearson_lower,
                                     document_label, document_value, score_documents, score_pages)
from dxstudio.tuning.settings import TuneError, resolve_settings


def score_predictions(fields, preds, share, min_values, by: str = "words", rule: str = "seed") -> dict:
    """score_pages of the held-out pages, with "documents": score_documents of their documents."""
    pages = []
    for pid, page, t, pred in preds:
        prediction = {f: ((v.words, v.confidence) if v is not None else None) for f, v in pred.fields.items()}
        label = {f: tuple(t.field_words.get(f, ())) for f in fields}
        pages.append(HeldOutPage(pid, label, prediction, frozenset(t.unscored), value_matches(page, label, pred)))
    decodings = sorted({pred.decoding for _, _, _, pred in preds})
    if len(decodings) > 1:
        raise TuneError(f"predictions read with different decodings ({', '.join(decodings)}) cannot be scored together")
    report = score_pages(fields, pages, share, min_values, by, rule)
    report["decoding"] = decodings[0] if decodings else None  # how the values were read off the tags
    report["documents"] = score_documents(fields, held_out_documents(fields, preds, pages), share, min_values, by)
    return report


def held_out_documents(fields, preds, held_pages) -> list:
    """HeldOutDocument of the held-out pages grouped by document (documents in the order their
    first page comes, pages in page order), with the document value's value match: the most
    confident page's value against the label's words' text on the page that holds them."""
    by_doc: dict = {}
    for (pid, page, t, pred), hp in zip(preds, held_pages):
        by_doc.setdefault(page.document_id, []).append((page, pred, hp))
    out = []
    for doc_id, members in by_doc.items():
        members.sort(key=lambda m: (m[0].number, m[0].id))
        doc = HeldOutDocument(doc_id, tuple(hp for _, _, hp in members))
        pages_by_id = {page.id: (page, pred) for page, pred, _ in members}
        match = set()
        for f in fields:
            label, value = document_label(doc, f), document_value(doc, f)
            if not label or value is None:
                continue
            lpage = pages_by_id[label[0][0]][0]
            want = value_key(" ".join(lpage.words[i].text for i in sorted(label[0][1])))
            vpage, vpred = pages_by_id[value[0]]
            if want and value_key(vpred.fields[f].text) == want:
                match.add(f)
        out.append(HeldOutDocument(doc_id, doc.pages, frozenset(match)))
    return out


def value_matches(page, label: dict, pred) -> frozenset:
    """Fields whose predicted value equals the label's value after the grounding normalizer
    (grounding.value_key of the words' texts): the same amount read where it is printed again."""
    out = set()
    for f, words in label.items():
        v = pred.fields.get(f)
        if v is None or not words:
            continue
        want = value_key(" ".join(page.words[i].text for i in words))
        if want and value_key(v.text) == want:
            out.add(f)
    return frozenset(out)


def stored_thresholds(report: dict) -> dict:
    """The thresholds a tuned model file carries (container.py "thresholds"): the pooled one
    and each field's, with the share and min_values they were found with."""
    return {"pooled": report.get("threshold"),
            "fields": {name: f.get("threshold") for name, f in report["fields"].items()},
            "share": report.get("share"), "min_values": report.get("min_values"),
            "by": report.get("threshold_by", "words"), "rule": report.get("threshold_rule", "seed"),
            "decoding": report.get("decoding") or DEFAULT_DECODING}


def evaluate_model(model_path, project, out_path=None, overrides: dict | None = None,
                   all_pages: bool = False) -> dict:
    """`dxstudio eval`: the same report for any model, on the project's held-out pages, or with
    all_pages on every usable page (a separate test project, no split). The report's `stored`
    says how the model's stored thresholds do on these pages (at_stored_thresholds)."""
    try:
        loaded = load_model(model_path)
    except ModelFileError as e:
        raise TuneError(str(e)) from None
    if project.model_field_names(loaded.cfg.fields) != project.field_names:
        raise TuneError(f"{model_path}: the model's fields {list(loaded.cfg.fields)} are not the "
                        f"project's schema {project.field_names} ({project.project_file})")
    settings = resolve_settings(project.settings, overrides, source=project.project_file)
    cfg = loaded.cfg.with_fields(project.field_names)  # renamed fields under their names now
    _, train, held = usable_split(project, settings, cfg.max_words, "evaluation")
    if all_pages:
        rows = {r[0]: r for r in train + held}
        held = [rows[i] for i in schedule.hash_order(list(rows), settings["seed"])]
    params = to_runtime(loaded.params)
    # the model's own reading (the one its thresholds were found with) unless --decoding says otherwise
    decoding = (overrides or {}).get("decoding") or model_decoding(loaded.thresholds)
    stored = eval_keywords(loaded, project, (overrides or {}).get("keywords"), model_path)
    reading = reading_keywords(stored, cfg.fields)
    preds = [(pid, page, t, predict_page(cfg, params, page, settings["kernels"], decoding, reading))
             for pid, page, t in held]
    by = (loaded.thresholds or {}).get("by") or settings["threshold_by"]  # the model's own rule
    report = score_predictions(list(cfg.fields), preds, settings["share"], settings["min_values"], by,
                               settings["threshold_rule"])
    report["keywords"] = reading_record(decoding, stored, cfg.fields)
    report["stored"] = at_stored_thresholds(report, loaded.thresholds)
    report["documents"]["stored"] = at_stored_thresholds(report["documents"], loaded.thresholds)
    # does the model's promise hold on these pages (eval --all on pages of a person's own)?
    report["stored"]["verdicts"] = {k: {"holds": v.holds, "text": v.text} for k, v in verdicts(report).items()}
    report["run"] = {"model": str(model_path), "heldout_pages": len(held),
                     "pages": "all usable pages" if all_pages else "the held-out pages of the split"}
    if out_path is not None:
        write_json_atomic(out_path, report)
    return report


def eval_keywords(loaded, project, source: str | None, model_path) -> dict | None:
    """The keywords `dxstudio eval` reads with (tuning/keywords.py): the model's own where the
    setting is not given (none stored: its fields' names); name: the names; schema: from the
    project's schema (names and descriptions); learned: the model's stored learnt keywords (a
    model that stores none is refused, naming it: its training pages are not at hand here)."""
    if source is None:
        return loaded.keywords
    if source == "name":
        return None
    if source == "schema":
        return field_keywords(project.schema, [], "schema")
    if not loaded.keywords or loaded.keywords.get("source") != "learned":
        raise TuneError(f"{model_path}: keywords = learned, but the model stores no learnt keywords (tuned "
                        f"with keywords = {(loaded.keywords or {}).get('source', 'name')}, or before they were "
                        f"stored); read it with --keywords name or schema, or tune it again")
    return loaded.keywords


def at_stored_thresholds(report: dict, thresholds: dict | None) -> dict:
    """Precision and coverage at a model's stored thresholds on the pages of `report`: per field
    (its own threshold; a field without one routes every value ask, the pooled threshold is never
    used for it) and pooled (every value routed by its field's threshold, as `dxstudio extract`
    does). {"thresholds", "fields": {NAME: {...}}, "pooled": {...}}
    with values, right, precision, precision_lower, value_precision, value_precision_lower,
    coverage, threshold, bound_statement; a model without thresholds answers nothing locally."""
    by = (thresholds or {}).get("by") or "words"

    def figures(rows, t, where=None):
        above = [r for r in rows if r[3] is not None and r[0] >= r[3]]
        n, vright = len(above), sum(r[2] for r in above)
        right = vright if by == "value" else sum(r[1] for r in above)
        lower = clopper_pearson_lower(right, n) if n else None
        return {"threshold": t, "values": n, "right": right,
                "precision": right / n if n else None, "precision_lower": lower,
                "value_precision": vright / n if n else None,
                "value_precision_lower": clopper_pearson_lower(vright, n) if n else None,
                "coverage": n / len(rows) if rows else None,
                "bound_statement": bound_statement(n, right, t or 0.0, lower, where=where) if n else
                "The model stores no LocalFirst threshold, so no values are answered locally." if not thresholds
                else "No threshold of its own, so every value is asked." if t is None and where is None
                else "No field has a threshold of its own, so every value is asked."
                if where is not None and not any(v is not None for v in (thresholds.get("fields") or {}).values())
                else "No value on these pages clears the stored threshold."}

    out, pooled_rows = {"thresholds": thresholds, "by": by, "fields": {}}, []
    for name, f in report["fields"].items():
        t = field_threshold(name, thresholds)
        rows = [(c, ok, vok, t) for c, ok, vok in f["confidences"]]
        pooled_rows += rows
        out["fields"][name] = figures(rows, t)
    out["pooled"] = figures(pooled_rows, thresholds.get("pooled") if thresholds else None,
                            "at or above their field's threshold")
    return out
