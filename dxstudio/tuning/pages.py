"""The pages a run trains on and holds out: the project's usable pages, its run's snapshot,
the split (the seed's single split or a fold), and the Train tab's counts.

    pt, train, held = usable_split(project, settings, max_words, "tuning")    # rows (id, Page, PageTargets)
    pt = snapshot_targets(project, rundir.read_snapshot(), max_words, rundir.snapshot_path)
    counts = training_breakdown(project)                                       # what a run would train on
"""
from __future__ import annotations

from dxstudio.documents import group_documents
from dxstudio.engine.page import PageError
from dxstudio.fsutil import JSONInputError, loads_json, parse_json
from dxstudio.grounding import ProjectTargets, project_targets, targets_of_read
from dxstudio.project import LabelError, label_from_dict
from dxstudio.tuning import schedule
from dxstudio.tuning.settings import DEFAULTS, TuneError


def review_state(label_raw: bytes) -> str:
    """The review state ("unreviewed", "accepted", "excluded") in a label file's bytes."""
    try:
        d = loads_json(label_raw) if label_raw else {}
    except JSONInputError:
        return "unreviewed"
    r = d.get("review") if isinstance(d, dict) else None
    return r.get("state", "unreviewed") if isinstance(r, dict) else "unreviewed"


NOT_ACCEPTED = "not accepted in review (the run trains on accepted pages only)"


def accepted_only_filter(pt):
    """The ProjectTargets with the pages a person has not accepted moved to `excluded`."""
    kept, excluded = [], list(pt.excluded)
    for row in pt.kept:
        if review_state(pt.sources[row[0]][1]) == "accepted":
            kept.append(row)
        else:
            excluded.append((row[0], NOT_ACCEPTED))
    return ProjectTargets(kept, excluded, pt.errors, {r[0]: pt.sources[r[0]] for r in kept}, pt.left_out)


def snapshot_targets(project, snapshot: dict, max_words: int, source, repeats: str = "o",
                     absent: str = "exclude") -> "ProjectTargets":
    """The targets of a run's snapshot (targets.json): its label bytes over the project's pages."""
    errors, read = [], []
    for pid, text in snapshot["labels"].items():
        raw = text.encode("utf-8")
        try:
            page, page_raw = project.read_page(pid)
            labels = label_from_dict(parse_json(raw, f"{source} ({pid})", LabelError), f"{source} ({pid})", pid)
        except (PageError, LabelError, ValueError) as e:
            errors.append((pid, str(e)))
            continue
        read.append((pid, page, page_raw, labels, raw))
    pt = targets_of_read(read, project.field_names, max_words, repeats, errors, (PageError, LabelError, ValueError),
                         absent)
    pt.excluded += [tuple(e) for e in snapshot.get("excluded", [])]
    pt.errors += [tuple(e) for e in snapshot.get("unreadable", [])]
    return pt


def run_targets_settings(settings: dict | None) -> tuple[str, str]:
    """(absent_value, repeats) a run builds its pages' targets with, from its settings. A key
    missing (a run stored before the setting existed) is the rule that run used: absent_value
    exclude, repeats o (the seed's), never today's default."""
    settings = settings or {}
    return settings.get("absent_value", "exclude"), settings.get("repeats", "o")


def usable_split(project, settings: dict, max_words: int, purpose: str, fold: tuple | None = None, pt=None):
    """(ProjectTargets, training rows, held-out rows) of the project's usable pages, each row
    (id, Page, PageTargets), split by the settings' seed and held-out fraction; with fold
    (k, K) the held-out rows are every K-th page of the hash order from position k
    (schedule.fold_split), with (None, K) every page trains and none is held out. With the
    setting accepted_only, only the pages a person accepted are usable. `pt`: targets already
    read (a run's snapshot); default: the project's label files now."""
    if pt is None:
        absent, repeats = run_targets_settings(settings)
        pt = project_targets(project, max_words=max_words, repeats=repeats, absent=absent)
    if settings.get("accepted_only"):
        pt = accepted_only_filter(pt)
    pt = _document_problems(pt)
    by_id = {pid: (pid, page, t) for pid, page, t in pt.kept}
    if len(by_id) < 2:
        accepted = " with accepted_only (accept pages in Review, or turn the setting off)" \
            if settings.get("accepted_only") else ""
        raise TuneError(
            f"{project.root}: {len(by_id)} usable page(s){accepted}; {purpose} needs at least 2 "
            f"(one to train on, one held out). Excluded: {len(pt.excluded)}, unreadable: {len(pt.errors)}")
    # a document's pages stay together: the split hashes document ids (a page of its own: its id)
    documents = {}
    for pid, page, _ in sorted(pt.kept, key=lambda r: (r[1].document_id, r[1].number, r[0])):
        documents.setdefault(page.document_id, []).append(pid)
    if len(documents) < 2:
        raise TuneError(f"{project.root}: the {len(by_id)} usable pages are all of document "
                        f"{next(iter(documents))}; {purpose} needs at least 2 documents (one to train on, "
                        f"one held out: a document's pages are never split between the two)")
    if fold is None:
        train_ids, held_ids = schedule.split_documents(documents, settings["seed"], settings["heldout_fraction"])
    else:
        k, n_folds = fold
        check_folds(n_folds, len(documents), project)
        if k is None:
            train_ids, held_ids = schedule.document_pages_order(documents, settings["seed"]), []
        else:
            train_ids, held_ids = schedule.fold_split_documents(documents, settings["seed"], n_folds, k)
    return pt, [by_id[i] for i in train_ids], [by_id[i] for i in held_ids]


def _document_problems(pt):
    """The targets without the pages of documents that have a problem (two pages with one
    number, an id that is also a page's own): those pages move to `excluded` with the problem."""
    docs = group_documents([page for _, page, _ in pt.kept])
    if not docs.problems:
        return pt
    why = dict(docs.problems)
    kept = [r for r in pt.kept if r[0] in docs.of_page]
    moved = [(pid, why.get(page.document_id) or why.get(pid, "document problem")) for pid, page, _ in pt.kept
             if pid not in docs.of_page]
    return ProjectTargets(kept, pt.excluded + moved, pt.errors, {k: v for k, v in pt.sources.items()
                                                                  if k in docs.of_page})


def check_folds(n_folds, n_usable: int, project=None) -> int:
    """K folds need 2 <= K <= the usable pages (each fold holds out at least one page)."""
    where = f"{project.root}: " if project is not None else ""
    if isinstance(n_folds, bool) or not isinstance(n_folds, int) or n_folds < 2:
        raise TuneError(f"{where}--folds must be an integer >= 2, not {n_folds!r}")
    if n_folds > n_usable:
        raise TuneError(f"{where}--folds {n_folds} is more than the {n_usable} usable pages "
                        f"(each fold holds out at least one page)")
    return n_folds


def training_breakdown(project, accepted_only: bool = False, absent: str | None = None) -> dict:
    """What a run would train on, in the words of the Train tab: counts of the pages that train
    (accepted; fixed but not accepted; unreviewed whose values were found on the page) and of
    those left out (excluded by a person; with conflicts; not labelled yet; not accepted, with
    accepted_only; unreadable). "usable": the pages split into training and held-out pages.
    absent: the absent_value a run would use (None: the project's setting, else the default),
    so a page `ignore` keeps counts as training, not as a conflict."""
    if absent is None:
        absent = (getattr(project, "settings", None) or {}).get("absent_value") or DEFAULTS["absent_value"]
    pt = project_targets(project, absent=absent)
    c = dict.fromkeys(("accepted", "fixed", "unreviewed", "excluded", "conflicts", "not_labelled",
                       "not_accepted", "unreadable"), 0)
    for pid, _, _ in pt.kept:
        raw = pt.sources[pid][1]
        state = review_state(raw)
        if state == "accepted":
            c["accepted"] += 1
            continue
        try:
            d = loads_json(raw)
            fixed = bool(d.get("review", {}).get("fixes"))
        except (JSONInputError, AttributeError):
            fixed = False
        if accepted_only:
            c["not_accepted"] += 1
        else:
            c["fixed" if fixed else "unreviewed"] += 1
    for pid, reason in pt.excluded:
        if reason == "not labelled yet":
            c["not_labelled"] += 1
        else:
            raw = b""
            try:
                raw = project.label_path(pid).read_bytes()
            except OSError:
                pass
            c["excluded" if review_state(raw) == "excluded" else "conflicts"] += 1
    c["unreadable"] = len(pt.errors)
    c["usable"] = c["accepted"] + c["fixed"] + c["unreviewed"]
    c["left_out"] = dict(pt.left_out)  # {field: pages where not asked}: left out of training and scoring
    return c
