"""The development benchmark (issue 20 item 4): learning curves on public sets with a fixed schema.

    python bench/learning_curve.py SET [SET...] --work DIR [--sizes 25,50,100,all] [--degree N]
        [--decodings span,seed,printing] [--no-gbdt] [--tune "OPTIONS" --tag SUFFIX]
        [--seeds 1,2 [--seed-sizes 50]] [--docs docs/base-model.md]

SET is one of:
  sroie  ../shared/data/sroie-train, the 4 fields of `dxstudio import sroie` (company, date,
         address, total). Training projects: the first N receipts of 000-399 and 600-625 ("all":
         every one of them); scored on receipts 400-599 (never in a training project).
  funsd  ../shared/data/funsd with a fixed schema of four fields read off its key-value links:
         date, to, from, cc (the answer linked from the first question whose text is "Date:",
         "To:", "From:" or "cc:", in reading order; null where the form has none; several answer
         boxes of one question join, with any unlinked piece read between two of them on their
         line ("November [12,] 1999"); linked words that are still not one run in reading order
         are all kept, so the page's targets leave that field unscored on that form). Training
         projects: the first N forms of training_data (149 in all) in SHA-256 order of their
         file names; scored on testing_data (50).
  sroie_renamed  the sroie projects with company, date, address, total renamed heading, when,
         where, to_pay (names no generic class of the base matches: a custom schema).
  cord   ../shared/data/cord-v1-train, the 5 fields of `dxstudio import cord` (total, subtotal, tax,
         cash, change: amounts that look alike). Training projects: the first N of receipts 0-599;
         scored on receipts 600-799. CORD is a pretraining source of the shipped base (all 800
         receipts): its figures overstate a new kind of document.
  cord_renamed  the cord projects with the fields renamed to_pay, before_levies, levy, handed_over,
         handed_back (a custom schema).
SROIE and FUNSD are research-only data: tests and benchmarks only, never training anything shipped.

For each set and size: `dxstudio tune PROJECT` with the defaults (a start from the shipped base)
and `--degree N`; then `dxstudio eval MODEL EVAL_PROJECT --all --decoding D` for each decoding
(the same model read each way: engine/extract.py "span", the seed's "seed", "printing", "keyed",
"keyed_learned"); then
bench/gbdt_baseline.py PROJECT EVAL_PROJECT --all --decoding D for each decoding (LightGBM on the
same training pages, scored on the same pages; seed = its reader as measured so far, with
--fill). Runs whose report exists under DIR are not repeated. Prints a markdown table per set (agreement per field and mean, the commands below it) and one JSON line; with --docs,
the table replaces the text between `<!-- learning-curve SET -->` and `<!-- /learning-curve SET -->`
in that file (written atomically; markers missing: an error naming the file).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

FUNSD_FIELDS = ("date", "to", "from", "cc")
SROIE_TRAIN = list(range(0, 400)) + list(range(600, 626))
SROIE_EVAL = list(range(400, 600))


class BenchError(RuntimeError):
    pass


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env).returncode
    if rc not in (0, 1):  # 1: done, some inputs failed (named in the log)
        raise BenchError(f"{' '.join(cmd)} failed (exit {rc}); see {log}")
    return time.perf_counter() - t0


def _write_project(dst: Path, name: str, schema: list[str], fraction: float, pages: dict, labels: dict) -> Path:
    """A project folder with these pages ({id: page dict}) and label files ({id: label dict})."""
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "pages").mkdir(parents=True)
    (dst / "labels").mkdir()
    proj = {"name": name, "schema": [{"name": f, "description": "", "weight": 1.0} for f in schema],
            "settings": {"heldout_fraction": fraction}}
    (dst / "dxproject.json").write_text(json.dumps(proj, indent=2), encoding="utf-8")
    for pid, d in pages.items():
        (dst / "pages" / f"{pid}.json").write_text(json.dumps(d), encoding="utf-8")
    for pid, d in labels.items():
        (dst / "labels" / f"{pid}.json").write_text(json.dumps(d), encoding="utf-8")
    return dst


def _one_heldout(n: int) -> float:
    """A held-out fraction that keeps about one page out of n (the split needs one), the rest train."""
    return round(0.9 / n, 6)


def _imported_projects(work: Path, kind: str, data: Path, train_ids: list, eval_ids: list,
                       sizes: list) -> tuple[dict, Path]:
    """{size name: training project} of the first N of train_ids ("all": all), and the scoring
    project of eval_ids, cut from `dxstudio import KIND DATA` (page ids as the import names them)."""
    src = work / f"{kind}_import"
    if not (src / "dxproject.json").exists():
        _run([sys.executable, "-m", "dxstudio.cli", "import", kind, str(data), str(src)], work / f"{kind}_import.log")
    proj = json.loads((src / "dxproject.json").read_text(encoding="utf-8"))
    schema = [f["name"] for f in proj["schema"]]

    def cut(ids):
        pages = {i: json.loads((src / "pages" / f"{i}.json").read_text()) for i in ids}
        labels = {i: json.loads((src / "labels" / f"{i}.json").read_text())
                  for i in ids if (src / "labels" / f"{i}.json").exists()}
        return pages, labels

    out = {}
    for size in sizes:
        ids = train_ids if size == "all" else train_ids[:size]
        dst = work / f"{kind}_{size}"
        if not (dst / "dxproject.json").exists():
            _write_project(dst, dst.name, schema, _one_heldout(len(ids)), *cut(ids))
        out[size] = dst
    ev = work / f"{kind}_eval"
    if not (ev / "dxproject.json").exists():
        _write_project(ev, ev.name, schema, 0.5, *cut(eval_ids))
    return out, ev


# ---- SROIE --------------------------------------------------------------------------------
def sroie_projects(work: Path, sizes: list) -> tuple[dict, Path]:
    """{size name: training project}, scoring project; from `dxstudio import sroie`."""
    return _imported_projects(work, "sroie", DATA / "sroie-train", [f"{i:03d}" for i in SROIE_TRAIN],
                              [f"{i:03d}" for i in SROIE_EVAL], sizes)


# ---- FUNSD --------------------------------------------------------------------------------
def _key(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def _extent(e: dict) -> tuple:
    ws = [w["box"] for w in e["words"] if w["text"].strip()]
    return min(b[0] for b in ws), min(b[1] for b in ws), max(b[2] for b in ws), max(b[3] for b in ws)


def _line_piece(gap: dict, left: dict, right: dict) -> bool:
    """Whether `gap`, an entity read between two answer boxes of one question, is an unlinked
    piece of the same value: it has no links, it lies on the line of both (its vertical centre
    inside each one's extent) and between them (right of `left`'s start, left of `right`'s end)."""
    if gap.get("linking"):
        return False
    gx0, gy0, gx1, gy1 = _extent(gap)
    cy = (gy0 + gy1) / 2
    for e in (left, right):
        x0, y0, x1, y1 = _extent(e)
        if not y0 <= cy <= y1:
            return False
    return _extent(left)[0] <= gx0 and gx1 <= _extent(right)[2]


def funsd_labelled(path: Path) -> tuple[dict, dict]:
    """(page dict, label dict) of one FUNSD form: the page as `dxstudio import funsd` reads it,
    the label the fixed schema's values as a person's accepted fixes (word indices)."""
    from dxstudio.importers import funsd_page, reading_order

    page = funsd_page(path)
    form = json.loads(path.read_text(encoding="utf-8"))["form"]
    # the importer's entity order (entities without words are left out, as there)
    kept = [e for e in form if any(isinstance(w.get("text"), str) and w["text"].strip() for w in e["words"])]
    boxes = []
    for e in kept:
        ws = [w["box"] for w in e["words"] if w["text"].strip()]
        boxes.append((min(b[0] for b in ws), min(b[1] for b in ws), max(b[2] for b in ws), max(b[3] for b in ws)))
    order = reading_order(boxes)
    first_word, pos = {}, 0
    for i in order:
        n = sum(1 for w in kept[i]["words"] if w["text"].strip())
        first_word[kept[i]["id"]] = (pos, n)
        pos += n
    if pos != len(page.words):
        raise BenchError(f"{path}: {pos} words from the entities, the page has {len(page.words)}")
    by_id = {e["id"]: e for e in kept}
    rank = {kept[i]["id"]: r for r, i in enumerate(order)}
    ordered_ids = [kept[i]["id"] for i in order]
    fixes = {}
    for field in FUNSD_FIELDS:
        qs = sorted((e for e in kept if e["label"] == "question" and _key(e["text"]) == _key(field)),
                    key=lambda e: rank[e["id"]])
        for q in qs:
            answers = sorted({b for a, b in q.get("linking", []) if a == q["id"] and b in by_id
                              and by_id[b]["label"] == "answer"}, key=lambda b: rank[b])
            if not answers:
                continue
            parts = list(answers[:1])
            for a, b in zip(answers, answers[1:]):
                gap = ordered_ids[rank[a] + 1: rank[b]]
                if all(_line_piece(by_id[g], by_id[a], by_id[b]) for g in gap):
                    parts.extend(gap)  # "November [12,] 1999": an unlinked piece of the value's line
                parts.append(b)
            runs = [list(range(first_word[b][0], first_word[b][0] + first_word[b][1])) for b in parts]
            # one run: the value; else every linked word (not one run: the page's targets leave
            # the field unscored there and the loss ignores its words, rather than a part of it
            # standing for the whole)
            fixes[field] = [w for r in runs for w in r]
            break
    label = {"page": page.id, "answers": {f: None for f in FUNSD_FIELDS if f not in fixes},
             "review": {"state": "accepted", "fixes": fixes, "history": []}}
    return page.to_dict(), label


def funsd_projects(work: Path, sizes: list) -> tuple[dict, Path]:
    def build(files):
        pages, labels = {}, {}
        for f in files:
            p, lab = funsd_labelled(f)
            pages[p["id"]], labels[p["id"]] = p, lab
        return pages, labels

    # training forms in a fixed shuffled order (SHA-256 of the name): sorted by name, the first
    # ones are mostly of one kind
    train = sorted((DATA / "funsd" / "training_data" / "annotations").glob("*.json"),
                   key=lambda p: hashlib.sha256(p.name.encode()).hexdigest())
    test = sorted((DATA / "funsd" / "testing_data" / "annotations").glob("*.json"))
    if not train or not test:
        raise BenchError(f"{DATA / 'funsd'}: no FUNSD annotations found")
    out = {}
    for size in sizes:
        files = train if size == "all" else train[:size]
        dst = work / f"funsd_{size}"
        if not (dst / "dxproject.json").exists():
            _write_project(dst, dst.name, list(FUNSD_FIELDS), _one_heldout(len(files)), *build(files))
        out[size] = dst
    ev = work / "funsd_eval"
    if not (ev / "dxproject.json").exists():
        _write_project(ev, ev.name, list(FUNSD_FIELDS), 0.5, *build(test))
    return out, ev


# ---- SROIE under a custom schema ----------------------------------------------------------
# The sroie projects with their fields renamed to names that match no generic class of the base
# (dxstudio.corpus.generic.match_field gives None for each; "shop" and "amount" would match
# company and total): a user's own schema on a new kind of document, whose tag rows start from
# the run's draw (or head_init = imprint), not from the base's classes.
SROIE_RENAMES = {"company": "heading", "date": "when", "address": "where", "total": "to_pay"}


def _renamed_copy(src: Path, dst: Path, renames: dict) -> Path:
    from dxstudio.corpus.generic import match_field
    from dxstudio.project import Project

    matched = {new: match_field(new) for new in renames.values() if match_field(new) is not None}
    if matched:
        raise BenchError(f"renamed fields still match a generic class: {matched}")
    if (dst / "dxproject.json").exists():
        return dst
    tmp = dst.with_name(dst.name + ".part")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp)
    proj = Project.open(tmp)
    _, problems = proj.rename_fields_in_labels(renames)
    if problems:
        raise BenchError(f"{tmp}: label files not renamed: {problems[:3]}")
    data = json.loads((tmp / "dxproject.json").read_text(encoding="utf-8"))
    data["name"] = dst.name
    data["schema"] = [dict(f, name=renames.get(f["name"], f["name"]), description="") for f in data["schema"]]
    (tmp / "dxproject.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    tmp.rename(dst)
    return dst


def sroie_renamed_projects(work: Path, sizes: list) -> tuple[dict, Path]:
    """The sroie projects (the same pages, labels and split) with SROIE_RENAMES applied."""
    projects, ev = sroie_projects(work, sizes)
    out = {size: _renamed_copy(p, work / f"sroie_renamed_{size}", SROIE_RENAMES) for size, p in projects.items()}
    return out, _renamed_copy(ev, work / "sroie_renamed_eval", SROIE_RENAMES)


# ---- CORD (a pretraining source of the shipped base: its figures are not those of a new kind of document)
CORD_TRAIN = list(range(0, 600))
CORD_EVAL = list(range(600, 800))
CORD_RENAMES = {"total": "to_pay", "subtotal": "before_levies", "tax": "levy", "cash": "handed_over",
                "change": "handed_back"}


def cord_projects(work: Path, sizes: list) -> tuple[dict, Path]:
    """{size name: training project}, scoring project; from `dxstudio import cord` (total, subtotal,
    tax, cash, change). Training projects: the first N of receipts 0-599 ("all": all 600); scored
    on receipts 600-799."""
    return _imported_projects(work, "cord", DATA / "cord-v1-train", [f"receipt_{i:05d}" for i in CORD_TRAIN],
                              [f"receipt_{i:05d}" for i in CORD_EVAL], sizes)


def cord_renamed_projects(work: Path, sizes: list) -> tuple[dict, Path]:
    """The cord projects with CORD_RENAMES applied (a custom schema of look-alike amounts)."""
    projects, ev = cord_projects(work, sizes)
    out = {size: _renamed_copy(p, work / f"cord_renamed_{size}", CORD_RENAMES) for size, p in projects.items()}
    return out, _renamed_copy(ev, work / "cord_renamed_eval", CORD_RENAMES)


SETS = {"sroie": sroie_projects, "funsd": funsd_projects, "sroie_renamed": sroie_renamed_projects,
        "cord": cord_projects, "cord_renamed": cord_renamed_projects}


# ---- runs and the table ---------------------------------------------------------------------
def model_with_keywords(run: Path, proj: Path, source: str) -> Path:
    """The run's model, or where it stores no keywords of `source` (tuned before the setting
    keywords, or for learned before their keyed counts of eight numbers were stored: the same
    weights, the reading differs), a copy of it beside it
    (model.kw-SOURCE.safetensors) with the keywords tune stores now: learnt from the same
    training pages (the run's split of its project: usable_split and the early-stop carve,
    with the run's settings), as TuneRun._load_targets learns them."""
    from dxstudio.engine.container import load_model, model_bytes
    from dxstudio.fsutil import write_bytes_atomic
    from dxstudio.project import Project
    from dxstudio.tuning import early_stop
    from dxstudio.tuning.keywords import field_keywords
    from dxstudio.tuning.pages import usable_split

    def current(stored: dict) -> bool:  # learned keywords with today's keyed counts (eight numbers)
        return stored.get("source") == source and (
            source != "learned" or all(len(c) >= 8 for c in stored.get("keyed") or [[]]))

    path = run / "model.safetensors"
    loaded = load_model(path)
    stored = loaded.keywords or {}
    if source == "name" or current(stored):
        return path
    out = run / f"model.kw-{source}.safetensors"
    if out.exists() and current(load_model(out).keywords or {}):
        return out
    settings = json.loads((run / "report.json").read_text())["run"]["settings"]
    project = Project.open(proj)
    if [f.name for f in project.schema] != list(loaded.cfg.fields):
        raise BenchError(f"{proj}: schema {project.field_names} is not {path}'s fields {list(loaded.cfg.fields)}")
    _, train, _ = usable_split(project, settings, loaded.cfg.max_words, "tuning", None)
    train, _ = early_stop.carve(train, settings, f"{proj}: ")
    if len(train) != json.loads((run / "report.json").read_text())["run"]["train_pages"]:
        raise BenchError(f"{proj}: {len(train)} training pages now, the run had another count")
    kw = field_keywords(project.schema, train, source)
    write_bytes_atomic(out, model_bytes(loaded.cfg, loaded.params, loaded.summary, loaded.thresholds, kw))
    return out


def _agreements(report: dict) -> dict:
    return {f: v["agreement"] for f, v in report["fields"].items()}


def _value_agreements(report: dict) -> dict:
    """Agreement counting the same value read at another printing (scoring.py value_agreement)."""
    return {f: v.get("value_agreement") for f, v in report["fields"].items()}


def _mean(vals) -> float | None:
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _readings(decodings: list, keywords: list) -> list:
    """(decoding, keywords source or None: the model's own) of each reading: printing and keyed
    once per keywords source where sources are given."""
    out = []
    for d in decodings:
        if d in ("printing", "keyed", "keyed_learned", "keyed_layout") and keywords:
            out += [(d, k) for k in keywords]
        else:
            out.append((d, None))
    return out


def run_set(name: str, work: Path, sizes: list, decodings: list, degree: int, gbdt: bool, tune_opts: list,
            tag: str = "", seeds=(1,), seed_sizes=None, gbdt_decodings=None, keywords=()) -> dict:
    """The rows of one set: per size, the model tuned with each tune seed (seeds after the first
    only at `seed_sizes`, None: every size) and read with each decoding, then (per decoding) its
    mean over the seeds where there are several, then the baseline read with each decoding."""
    projects, ev = SETS[name](work, sizes)
    py = [sys.executable, "-m", "dxstudio.cli"]
    rows = []
    opts_text = ", " + " ".join(tune_opts) if tune_opts else ""
    for size, proj in projects.items():
        size_seeds = [s for k, s in enumerate(seeds) if k == 0 or seed_sizes is None or size in seed_sizes]
        by_dec: dict = {}
        for seed in size_seeds:
            stag = tag + ("" if seed == 1 else f"_s{seed}")
            opts = list(tune_opts) + ([] if seed == 1 else ["--seed", str(seed)])
            run = work / "runs" / f"{name}_{size}{stag}"
            tune_cmd = py + ["tune", str(proj), *opts, "--degree", str(degree), "--out", str(run), "--overwrite"]
            tune_s = None
            if not (run / "model.safetensors").exists() or not (run / "report.json").exists():
                print(f"[{name} {size} seed {seed}] tune ...", file=sys.stderr, flush=True)
                tune_s = _run(tune_cmd, work / f"{name}_{size}{stag}.tune.log")
            train_pages = json.loads((run / "report.json").read_text())["run"]["train_pages"]
            for dec, kw in _readings(decodings, keywords):
                rep = work / f"{name}_{size}{stag}.{dec}{'' if kw is None else '-kw' + kw}.eval.json"
                model = run / "model.safetensors" if kw is None else model_with_keywords(run, proj, kw)
                eval_cmd = py + ["eval", str(model), str(ev), "--all", "--decoding", dec,
                                 *([] if kw is None else ["--keywords", kw]), "--out", str(rep)]
                if not rep.exists():
                    print(f"[{name} {size} seed {seed}] eval --decoding {dec} ...", file=sys.stderr, flush=True)
                    _run(eval_cmd, work / f"{name}_{size}{stag}.{dec}.eval.log")
                report = json.loads(rep.read_text())
                if report.get("decoding") != dec:
                    raise BenchError(f"{rep}: read with decoding {report.get('decoding')!r}, not {dec!r}")
                if kw is not None and (report.get("keywords") or {}).get("source") != kw:
                    raise BenchError(f"{rep}: read with keywords {report.get('keywords')!r}, not {kw!r}")
                seed_text = f", seed {seed}" if len(size_seeds) > 1 else ""
                dec = dec if kw is None else f"{dec}, keywords {kw}"
                rows.append({"size": size, "train_pages": train_pages, "seed": seed,
                             "reader": f"dxstudio ({dec}{opts_text}{seed_text})",
                             "decoding": report.get("decoding"), "fields": _agreements(report),
                             "value_fields": _value_agreements(report),
                             "pages": report["run"]["heldout_pages"], "tune_s": tune_s,
                             "commands": ["dxstudio " + " ".join(tune_cmd[len(py):]),
                                          "dxstudio " + " ".join(eval_cmd[len(py):])]})
                by_dec.setdefault(dec, []).append(rows[-1])
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if len(size_seeds) > 1:
            for dec, rs in by_dec.items():
                rows.append({"size": size, "train_pages": "/".join(str(r["train_pages"]) for r in rs), "seed": None,
                             "reader": f"**dxstudio ({dec}{opts_text}), mean of seeds "
                                       f"{', '.join(str(r['seed']) for r in rs)}**",
                             "decoding": dec, "fields": {f: _mean([r["fields"][f] for r in rs]) for f in rs[0]["fields"]},
                             "value_fields": {f: _mean([r["value_fields"][f] for r in rs]) for f in rs[0]["fields"]},
                             "pages": rs[0]["pages"], "tune_s": None, "commands": []})
        train_pages = rows[-1]["train_pages"] if rows else None
        for dec, kw in _readings((decodings if gbdt_decodings is None else gbdt_decodings) if gbdt else [],
                                 keywords):
            suffix = ("gbdt" if dec == "seed" else f"gbdt-{dec}") + ("" if kw in (None, "name") else f"-kw{kw}")
            rep = work / f"{name}_{size}.{suffix}.eval.json"
            cmd = [sys.executable, str(REPO / "bench" / "gbdt_baseline.py"), str(proj), str(ev), "--all",
                   "--decoding", dec, *([] if kw in (None, "name") else ["--keywords", kw]), "--out", str(rep)]
            if not rep.exists():
                print(f"[{name} {size}] gbdt --decoding {dec} ...", file=sys.stderr, flush=True)
                _run(cmd, work / f"{name}_{size}.{suffix}.log")
            report = json.loads(rep.read_text())
            rows.append({"size": size, "train_pages": report["run"]["train_pages"], "seed": None,
                         "reader": f"gradient-boosted baseline ({dec}{'' if kw is None else ', keywords ' + kw})",
                         "decoding": None, "fields": _agreements(report), "value_fields": _value_agreements(report),
                         "pages": report["run"]["heldout_pages"],
                         "tune_s": None, "commands": ["python bench/gbdt_baseline.py " + " ".join(cmd[2:])]})
    return {"set": name, "rows": rows}


def table(result: dict) -> str:
    rows = result["rows"]
    fields = list(rows[0]["fields"]) if rows else []
    lines = ["| project | training pages | model | " + " | ".join(fields)
             + " | mean | value agreement (mean) | pages scored |",
             "|---" * (len(fields) + 6) + "|"]
    for r in rows:
        vals = [r["fields"][f] for f in fields]
        r["mean"] = _mean(vals)
        r["value_mean"] = _mean([(r.get("value_fields") or {}).get(f) for f in fields])
        lines.append(f"| {result['set']}_{r['size']} | {r['train_pages']} | {r['reader']} | "
                     + " | ".join(_fmt(v) for v in vals) + f" | **{_fmt(r['mean'])}** | {_fmt(r['value_mean'])} "
                     f"| {r['pages']} |")
    lines.append("")
    lines.append("Commands (run from the repository root; `python bench/learning_curve.py "
                 f"{result['set']} --work DIR` runs them all):")
    lines.append("")
    seen = set()
    for r in rows:
        for c in r["commands"]:
            if c not in seen:
                seen.add(c)
                lines.append(f"    {c}")
    return "\n".join(lines)


def replace_in_doc(doc: Path, name: str, text: str) -> None:
    from dxstudio.fsutil import write_bytes_atomic

    start, end = f"<!-- learning-curve {name} -->", f"<!-- /learning-curve {name} -->"
    body = doc.read_text(encoding="utf-8")
    if start not in body or end not in body or body.index(start) > body.index(end):
        raise BenchError(f"{doc}: no '{start}' ... '{end}' markers to put the {name} table between")
    head, rest = body.split(start, 1)
    _, tail = rest.split(end, 1)
    write_bytes_atomic(doc, (head + start + "\n" + text + "\n" + end + tail).encode("utf-8"))


def _sizes(text: str) -> list:
    out = []
    for s in text.split(","):
        s = s.strip()
        if s == "all":
            out.append("all")
        elif s.isdigit() and int(s) > 1:
            out.append(int(s))
        else:
            raise argparse.ArgumentTypeError(f"sizes must be integers above 1 or 'all', not {s!r}")
    return out


def _seeds(text: str) -> list:
    out = []
    for s in text.split(","):
        s = s.strip()
        if not s.isdigit() or int(s) < 1 or int(s) in out:
            raise argparse.ArgumentTypeError(f"seeds must be distinct integers of 1 or more, not {s!r}")
        out.append(int(s))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="+", choices=sorted(SETS))
    ap.add_argument("--work", required=True, help="folder for the projects, runs and reports (reused)")
    ap.add_argument("--sizes", type=_sizes, default=[25, 50, 100, "all"])
    ap.add_argument("--decodings", default="span,seed")
    ap.add_argument("--degree", type=int, default=1)
    ap.add_argument("--no-gbdt", dest="gbdt", action="store_false")
    ap.add_argument("--gbdt-decodings", default=None,
                    help="the readings of the baseline (default: those of --decodings); each trains it once")
    ap.add_argument("--tune", default="", help='more dxstudio tune options, in one string ("--epochs 8")')
    ap.add_argument("--tag", default="", help="a suffix for the run names (runs with other --tune options)")
    ap.add_argument("--seeds", type=_seeds, default=[1],
                    help="tune seeds (dxstudio tune --seed), comma-separated; runs of seed S > 1 are named "
                         "..._sS, and each size with several gets a mean row (default 1)")
    ap.add_argument("--seed-sizes", type=_sizes, default=None,
                    help="the sizes the seeds after the first are tuned at (default: every size)")
    ap.add_argument("--keywords", default="",
                    help="printing readings, one per keywords source (name, schema, learned: `dxstudio eval "
                         "--keywords`; a model tuned before the setting gets its learnt keywords from the same "
                         "training pages, model_with_keywords); default: the model's own")
    ap.add_argument("--docs", type=Path, help="markdown file whose learning-curve tables to regenerate")
    a = ap.parse_args(argv)
    from dxstudio.engine.extract import DECODINGS

    decodings = [d for d in a.decodings.split(",") if d]
    gbdt_decodings = None if a.gbdt_decodings is None else [d for d in a.gbdt_decodings.split(",") if d]
    for opt, decs in (("--decodings", decodings), ("--gbdt-decodings", gbdt_decodings or [])):
        bad = [d for d in decs if d not in DECODINGS]
        if bad:
            ap.error(f"{opt}: {', '.join(map(repr, bad))} is not a decoding ({', '.join(DECODINGS)})")
    keywords = [k for k in a.keywords.split(",") if k]
    bad = [k for k in keywords if k not in ("name", "schema", "learned")]
    if bad:
        ap.error(f"--keywords: {', '.join(map(repr, bad))} is not name, schema or learned")
    work = Path(a.work)
    (work / "runs").mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for name in a.sets:
            res = run_set(name, work, a.sizes, decodings, a.degree, a.gbdt, shlex.split(a.tune), a.tag,
                          a.seeds, a.seed_sizes, gbdt_decodings, keywords)
            text = table(res)
            print(f"\n### {name}\n\n{text}\n", flush=True)
            if a.docs:
                replace_in_doc(a.docs, name, text)
            results.append(res)
    except BenchError as e:
        print(f"learning_curve: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"sets": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
