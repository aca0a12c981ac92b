"""Per-document against per-page scores on multi-page documents (issue 28, docs/tuning.md).

    nice -n 10 python bench/documents_eval.py generated  WORK [--train-docs 40 --test-docs 20]
    nice -n 10 python bench/documents_eval.py invoice2data WORK   (after `generated`: its model)
    nice -n 10 python bench/documents_eval.py funsd WORK [--bind 3]

generated: invoices from bench/multipage_invoices.py (2-4 pages, the total on the last page only,
the header on every page); a project of --train-docs documents is tuned (the settings' defaults
but --epochs, from the shipped base), and the model is evaluated with `eval --all` on a separate
project of --test-docs documents (other seed): per page and per document, and the stored
thresholds applied per document.
invoice2data: the 11 invoices of ../shared/data/invoice2data-samples (two of them two pages),
each one document, fields vendor (issuer), invoice_number, total (amount), answered per
document from `expected` and grounded across pages; evaluated with the `generated` model.
funsd: FUNSD forms bound --bind at a time into one document, field `date` (the answer linked to
a question "DATE:"), with exactly one form of each document printing a date, at a random
place; trained on the training split's forms one page each, evaluated on documents bound from
the testing split's forms.
Prints one JSON object: the figures docs/tuning.md tables. FUNSD is research data: used here to
measure only, nothing trained here is shipped.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.common import DATA  # noqa: E402
from bench.multipage_invoices import generate, write  # noqa: E402
from dxstudio.engine.page import Page, Word  # noqa: E402
from dxstudio.importers import funsd_page, import_pages  # noqa: E402
from dxstudio.labelling import import_answers_jsonl  # noqa: E402
from dxstudio.project import Project  # noqa: E402
from dxstudio.tuning import evaluate_model, prepare_run  # noqa: E402
from dxstudio.tuning.scoring import document_summary  # noqa: E402

INVOICE_FIELDS = ["vendor", "invoice_number", "total"]


def _fresh(path: Path, fields) -> Project:
    if path.exists():
        shutil.rmtree(path)
    return Project.create(path, path.name, fields)


def _answers(project: Project, lines) -> dict:
    path = project.root / "answers.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = import_answers_jsonl(project, path)
    return {"documents": len(rep.documents), "pages": len(rep.labelled), "errors": len(rep.errors)}


def _train(project: Project, run_dir: Path, epochs: int) -> tuple[Path, float]:
    t = time.monotonic()
    run = prepare_run(project, run_dir, {"epochs": epochs, "degree": 1}, None)
    run.train(overwrite=True)
    run.finish()
    return run_dir / "model.safetensors", round(time.monotonic() - t, 1)


def _figures(report: dict) -> dict:
    s = document_summary(report)
    docs = report["documents"]
    stored_page = report["stored"]["pooled"]
    stored_doc = docs["stored"]["pooled"]
    pick = lambda d: {k: d.get(k) for k in ("threshold", "values", "right", "precision", "precision_lower",  # noqa: E731
                                           "value_precision", "coverage")}
    return {"documents": s["documents"], "multi_page": s["multi_page"], "pages": s["pages"],
            "agreement": {"per_page": s["per_page"], "per_document": s["per_document"]},
            "fields": {name: {"page": {k: report["fields"][name][k] for k in ("agreement", "value_agreement", "recall")},
                              "document": {k: docs["fields"][name][k] for k in ("agreement", "value_agreement", "recall")},
                              "document_outcomes": docs["fields"][name]["outcomes"],
                              "page_outcomes": report["fields"][name]["outcomes"]}
                       for name in report["fields"]},
            "stored_thresholds": report["stored"]["thresholds"],
            "at_stored_per_page": pick(stored_page), "at_stored_per_document": pick(stored_doc),
            "suggested_per_document": docs["threshold"], "suggested_per_page": report["threshold"]}


def _excluded(project: Project) -> dict:
    from dxstudio.grounding import project_targets

    pt = project_targets(project)
    return {"kept_pages": len(pt.kept), **pt.summary()}


def run_generated(work: Path, train_docs: int, test_docs: int, epochs: int) -> dict:
    out = {}
    for name, n, seed in (("train", train_docs, 1), ("test", test_docs, 2)):
        src = work / f"gen-{name}"
        if src.exists():
            shutil.rmtree(src)
        write(src, generate(n, seed))
        proj = _fresh(work / f"proj-gen-{name}", INVOICE_FIELDS)
        import_pages("json", src / "pages", proj)
        lines = [json.loads(x) for x in (src / "answers.jsonl").read_text().splitlines()]
        out[f"{name}_labels"] = _answers(proj, lines)
        out[f"{name}_targets"] = _excluded(proj)
    model, secs = _train(Project.open(work / "proj-gen-train"), work / "run-gen", epochs)
    out["train_seconds"] = secs
    report = evaluate_model(model, Project.open(work / "proj-gen-test"), all_pages=True)
    out["eval_all"] = _figures(report)
    return out


def _invoice2data_pages(path: Path) -> list[Page]:
    d = json.loads(path.read_text())
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem)
    pages = []
    for k, p in enumerate(d["pages"], 1):
        words = tuple(Word(w["text"], tuple(float(v) for v in w["box"])) for w in p["words"] if w["text"].strip())
        many = len(d["pages"]) > 1
        pages.append(Page(f"{stem}-p{k}" if many else stem, float(p["width"]), float(p["height"]), words, None,
                          stem if many else None, k if many else None))
    return pages


def run_invoice2data(work: Path) -> dict:
    proj = _fresh(work / "proj-i2d", INVOICE_FIELDS)
    lines = []
    for path in sorted((DATA / "invoice2data-samples" / "json").glob("*.json")):
        pages = _invoice2data_pages(path)
        for p in pages:
            proj.add_page(p)
        exp = json.loads(path.read_text())["expected"][0]
        amount = exp.get("amount")
        lines.append({"id": pages[0].document_id,
                      "answers": {"vendor": exp.get("issuer"), "invoice_number": exp.get("invoice_number"),
                                  "total": None if amount is None else f"{amount:.2f}"}})
    out = {"labels": _answers(proj, lines), "targets": _excluded(proj)}
    model = work / "run-gen" / "model.safetensors"
    try:
        out["eval_all"] = _figures(evaluate_model(model, proj, all_pages=True))
    except Exception as e:  # too few usable documents: say so
        out["eval_all"] = {"error": str(e)}
    return out


def _funsd_date(path: Path) -> str | None:
    d = json.loads(path.read_text())
    ents = {e["id"]: e for e in d["form"]}
    for e in d["form"]:
        if e["label"] == "question" and re.fullmatch(r"\s*date\s*:?\s*", e["text"], re.I):
            for a, b in e["linking"]:
                if a == e["id"] and b in ents and ents[b]["label"] == "answer" and ents[b]["text"].strip():
                    return ents[b]["text"].strip()
    return None


def run_funsd(work: Path, bind: int, epochs: int) -> dict:
    root = DATA / "funsd"
    train = _fresh(work / "proj-funsd-train", ["date"])
    lines = []
    for path in sorted((root / "training_data" / "annotations").glob("*.json")):
        page = funsd_page(path)
        train.add_page(page)
        lines.append({"id": page.id, "answers": {"date": _funsd_date(path)}})
    out = {"train_labels": _answers(train, lines), "train_targets": _excluded(train)}
    test = _fresh(work / "proj-funsd-test", ["date"])
    paths = sorted((root / "testing_data" / "annotations").glob("*.json"))
    dated = [p for p in paths if _funsd_date(p)]
    undated = [p for p in paths if not _funsd_date(p)]
    rng = random.Random(28)
    rng.shuffle(dated)
    rng.shuffle(undated)
    lines = []
    for i, with_date in enumerate(dated):
        others = undated[(bind - 1) * i:(bind - 1) * (i + 1)]
        if len(others) < bind - 1:
            break
        members = others[:]
        members.insert(rng.randrange(bind), with_date)  # the dated form at a random place
        doc = f"funsd-doc{i:02d}"
        for k, path in enumerate(members, 1):
            test.add_page(replace(funsd_page(path), id=f"{doc}-p{k}", document=doc, page_number=k))
        lines.append({"id": doc, "answers": {"date": _funsd_date(with_date)}})
    out["test_labels"] = _answers(test, lines)
    out["test_targets"] = _excluded(test)
    model, secs = _train(Project.open(train.root), work / "run-funsd", epochs)
    out["train_seconds"] = secs
    out["eval_all"] = _figures(evaluate_model(model, Project.open(test.root), all_pages=True))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["generated", "invoice2data", "funsd"])
    ap.add_argument("work")
    ap.add_argument("--train-docs", type=int, default=40)
    ap.add_argument("--test-docs", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--bind", type=int, default=3)
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.what == "generated":
        out = run_generated(work, args.train_docs, args.test_docs, args.epochs)
    elif args.what == "invoice2data":
        out = run_invoice2data(work)
    else:
        out = run_funsd(work, args.bind, args.epochs)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
