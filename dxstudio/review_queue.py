"""The review queue after training, Qt-free: the project model's answers on the project's
pages (read once per model, cached), compared with the labels, and ranked uncertainty first.

The app's window (dxstudio.ui.model_answers.ModelAnswers) runs `answers_work` as a background
job and calls `compare`, `queue_key` and `next_in_queue` with what its session holds; nothing
here imports Qt, so the rules are tested (tests/test_review_queue.py) and usable without it.

    answers_work(project_root, model_path) -> work(job)   the job: every page read by the model,
        the answers kept per model file SHA-256 in `.cache/model-answers/<sha>.json` (written
        atomically; each page's entry carries its page file's SHA-256, so a changed page is
        read again and an unchanged one never is)
    compare(field_names, answers, labels, label_text) -> {field: FieldCompare}
    queue_key(status, comparison, place) -> (0 disagrees else 1, lowest confidence, place) | None
    next_in_queue(keyed, current, cursor) -> (key, page id) | None
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from dxstudio.engine.page import PageError
from dxstudio.fsutil import sha256_file, write_json_atomic
from dxstudio.project import Project, ProjectError, ProjectLayout

CACHE_FORMAT = 6  # 2: values read with the model's decoding (engine/extract.py model_decoding); 3: "printing" became the default decoding of a model with no stored thresholds; 4: "keyed" did; 5: "keyed_learned" did; 6: "keyed_layout" did
QUEUED = ("unreviewed", "conflicts")  # the page statuses the queue holds


@dataclass(frozen=True)
class Answer:
    words: tuple  # page word indices
    text: str
    confidence: float


@dataclass(frozen=True)
class FieldCompare:
    name: str
    label_words: tuple
    answer: Answer | None  # None: the model found no value
    agrees: bool  # the model's words are the label's (both empty counts), or the same value elsewhere
    elsewhere: bool = False  # the same value as the label's, printed at other words ("5.000" twice)


def same_text(a: str, b: str) -> bool:
    """Two values read the same (spaces and case aside)."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _decode(fields: dict) -> dict:
    out = {}
    for name, v in fields.items():
        out[name] = None if v is None else Answer(tuple(int(i) for i in v["words"]), str(v["text"]),
                                                  float(v["confidence"]))
    return out


def _encode(pred_fields: dict) -> dict:
    return {name: None if v is None else {"words": [int(i) for i in v.words], "text": v.text,
                                          "confidence": float(v.confidence)}
            for name, v in pred_fields.items()}


def read_cache(path: Path, model_sha: str) -> dict:
    """{page id: {"sha", "fields"}} from a cache file, or {} when it is missing or not ours."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(d, dict) or d.get("format") != CACHE_FORMAT or d.get("model_sha256") != model_sha:
        return {}
    pages = d.get("pages")
    return pages if isinstance(pages, dict) else {}


def answers_work(project_root, model_path):
    """The job's work (job: .report(event) and .cancelled, a threading.Event, as
    dxstudio.ui.jobs.Job gives): read every page of the project with the model, reusing the
    cache. Reports ("model", sha, fields), ("page", pid, {field: Answer | None}), ("progress",
    done, total) and ("problem", message) for a page that cannot be read (the rest go on);
    returns (sha, pages read by the model now, pages from the cache, cancelled)."""
    def work(job):
        # the engine (Numba) is imported in the job's thread, not when the window opens
        from dxstudio.engine.container import load_model
        import dxstudio.grounding  # noqa: F401 (hands the printing decoding its labelling rule)
        from dxstudio.engine.extract import model_decoding, predict_page, reading_keywords
        from dxstudio.engine.model import to_runtime

        project = Project.open(project_root)
        sha = sha256_file(model_path)
        loaded = load_model(model_path)
        job.report(("model", sha, list(loaded.cfg.fields)))
        params = None  # converted on the first page the cache does not have
        cache_file = ProjectLayout(project_root).answers_cache_file(sha)
        cached = read_cache(cache_file, sha)
        pages: dict = {}
        pids = project.page_ids()
        computed = reused = 0
        cancelled = False
        for k, pid in enumerate(pids):
            if job.cancelled.is_set():
                cancelled = True
                break
            job.report(("progress", k, len(pids)))
            try:
                page, raw = project.read_page(pid)
            except (PageError, ProjectError, OSError) as e:
                job.report(("problem", str(e)))
                continue
            page_sha = hashlib.sha256(raw).hexdigest()
            entry = cached.get(pid)
            if isinstance(entry, dict) and entry.get("sha") == page_sha and isinstance(entry.get("fields"), dict):
                try:
                    fields = _decode(entry["fields"])
                    reused += 1
                except (KeyError, TypeError, ValueError):
                    entry = None
            else:
                entry = None
            if entry is None:
                if params is None:
                    params = to_runtime(loaded.params)
                try:
                    pred = predict_page(loaded.cfg, params, page, decoding=model_decoding(loaded.thresholds),
                                        keywords=reading_keywords(loaded.keywords, loaded.cfg.fields))
                except Exception as e:  # one page never stops the rest
                    job.report(("problem", f"{project.page_path(pid)}: {type(e).__name__}: {e}"))
                    continue
                entry = {"sha": page_sha, "fields": _encode(pred.fields)}
                fields = _decode(entry["fields"])
                computed += 1
            pages[pid] = entry
            job.report(("page", pid, fields))
        job.report(("progress", len(pages) if cancelled else len(pids), len(pids)))
        if computed:  # what was read is kept, even when cancelled
            merged = {**cached, **pages} if cancelled else pages
            try:
                write_json_atomic(cache_file, {"format": CACHE_FORMAT, "model_sha256": sha,
                                               "model": str(model_path), "pages": merged}, indent=None)
            except OSError as e:
                job.report(("problem", f"{cache_file}: cannot write the cache ({e.strerror or e})"))
        return sha, computed, reused, cancelled
    return work


def compare(field_names, answers: dict, labels: dict, label_text) -> dict:
    """{field: FieldCompare} for the fields of field_names (the schema's, in order) the model
    answered. answers: {field: Answer | None}; labels: {field: label words after review};
    label_text(field) -> the label's text. The model agrees where its words are the label's
    (both empty counts), or where it read the label's value at other words (`elsewhere`)."""
    out = {}
    for name in field_names:
        if name not in answers:
            continue
        a = answers[name]
        got = tuple(a.words if a is not None else ())
        want = tuple(labels.get(name, ()))
        elsewhere = bool(got != want and got and want and same_text(label_text(name), a.text))
        out[name] = FieldCompare(name, want, a, got == want or elsewhere, elsewhere)
    return out


def queue_key(status: str | None, comparison: dict, place: int) -> tuple | None:
    """A page's rank in the review queue: (0 when the model disagrees with a label else 1, the
    lowest confidence of the model's values on the page, the page's place in the project), or
    None for a page not queued (accepted, excluded, no status, or no answers to compare)."""
    if status not in QUEUED or not comparison:
        return None
    confs = [c.answer.confidence for c in comparison.values() if c.answer is not None]
    disagree = any(not c.agrees for c in comparison.values())
    return (0 if disagree else 1, min(confs) if confs else 1.0, place)


def next_in_queue(keyed, current: str | None, cursor: tuple | None) -> tuple | None:
    """(key, page id) of the next page of the queue, keyed [(key, page id)]: the first after
    the cursor (the key of the last page the queue opened) other than current; the first time
    (cursor None), the top; from the top again after the end; None when no other page is queued."""
    others = sorted((k, pid) for k, pid in keyed if pid != current)
    if not others:
        return None
    after = [(k, pid) for k, pid in others if cursor is None or k > cursor]
    return (after or others)[0]
