"""Reviewing a project's labels page by page: the app's data model, free of Qt.

    session = ReviewSession(project)          # or a project folder
    session.subscribe(lambda kind, page_id: ...)
    session.goto("receipt_00020")
    session.set_field("total", [41, 42])     # a person's fix: saved at once
    session.accept(); session.undo(); session.redo()

The view (dxstudio/ui) observes the session through `subscribe`; the session never
imports Qt. Every decision is written at once, atomically, into labels/<id>.json, the file
the trainer reads (review.state, review.fixes, review.reason), so what a person sees and
what the trainer uses cannot drift apart.

Undo and redo: the stacks live in memory for the session and span pages (undo goes back
to the page of the last decision and reverts it there), because a person who accepts a
page and moves on expects Ctrl+Z to undo that accept. Each decision, undo and redo is also
appended to the page's review.history as a log {op, field, before, after, at} (the last
HISTORY_LIMIT entries are kept), so a page's review can be audited after a restart.

Page statuses, in order of precedence:
  error       the page or its label file does not load (message names the file)
  excluded    a person excluded the page (review.state "excluded")
  conflicts   the trainer cannot use the page as it stands: a value that is not on the
              page (the page is excluded), or a field whose words are not one run or are
              shared with another field (ignored by the loss)
  accepted    a person accepted the page (and every field of the schema has been asked)
  unreviewed  everything else (including pages not labelled yet and pages with a field
              added to the schema since they were labelled, "not asked": see `message`)
"""
from __future__ import annotations

import copy
import json
import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np

from dxstudio.engine.config import size_config
from dxstudio.engine.page import Page, PageError
from dxstudio.fsutil import parse_json, write_bytes_atomic
from dxstudio.grounding import Excluded, not_asked_fields, page_targets
from dxstudio.project import (LabelError, LabelFile, Project, ProjectError, check_page_id, field_from, label_from_dict,
                               parse_schema)

STATUSES = ("unreviewed", "accepted", "excluded", "conflicts", "error")
HISTORY_LIMIT = 200


class ReviewError(ValueError):
    """An operation the current page does not allow; str() says why."""


def not_asked_note(names) -> str:
    """A page's note for fields not asked yet: what the trainer does with them and the fix."""
    one = len(names) == 1
    return (f"{', '.join(names)} not asked yet on this page: left out of training and scoring until "
            f"Label pages asks for {'it' if one else 'them'}, or you set {'it' if one else 'them'} here "
            f"(select words and press {'its' if one else 'the'} key, or Ctrl+key for no value)")


def label_bytes(labels: LabelFile) -> bytes:
    """A label file's bytes, as Project.save_labels writes them."""
    return (json.dumps(labels.to_dict(), indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")


_WRITERS: "weakref.WeakSet[LabelWriter]" = weakref.WeakSet()


def flush_label_writes(timeout: float | None = None) -> bool:
    """Wait until every LabelWriter of this process has written what it was given (any
    thread; call it before reading label files that a review window may be writing: Label
    pages, a count, a training run, an export). True when nothing is pending."""
    return all(w.flush(timeout) for w in list(_WRITERS))


class LabelWriter:
    """Writes a review session's label files on a background thread, in the order given,
    each atomically (dxstudio.fsutil.write_bytes_atomic: temp file, fsync, rename): a
    decision's fsync no longer waits on the GUI thread. The session keeps the bytes it gave
    (`latest`) so a page read again before its write is done shows the new labels. The
    thread is not a daemon (a process that exits waits for it) and ends when nothing is
    left; flush() waits for what is pending, close() too (the window's close). A failed
    write (a full disk) is kept in `failures` and passed to on_error(page_id, path, error)
    on the writer's thread."""

    def __init__(self, on_error=None):
        self.on_error = on_error
        self.failures: list = []  # [(page id, path, error)]
        self._cond = threading.Condition()
        self._queue: deque = deque()  # (page id, path, bytes)
        self._latest: dict = {}  # page id -> (bytes, queued count): the newest bytes not yet written
        self._thread: threading.Thread | None = None
        self._busy = False
        self.written = 0  # files written (tests)
        _WRITERS.add(self)

    def submit(self, page_id: str, path, data: bytes) -> None:
        with self._cond:
            self._queue.append((page_id, str(path), data))
            n = self._latest.get(page_id, (None, 0))[1]
            self._latest[page_id] = (data, n + 1)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dxstudio-label-writer")
                self._thread.start()

    def pending(self, page_id: str | None = None) -> bool:
        with self._cond:
            return (page_id in self._latest) if page_id is not None else bool(self._queue or self._busy)

    def latest(self, page_id: str) -> bytes | None:
        """The bytes last given for page_id while they are not all written yet, else None."""
        with self._cond:
            got = self._latest.get(page_id)
            return got[0] if got is not None else None

    def flush(self, timeout: float | None = None) -> bool:
        if self._thread is threading.current_thread():
            return True
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    close = flush

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._busy = False
                    self._cond.notify_all()
                    return
                page_id, path, data = self._queue.popleft()
                # a later write of the same file makes this one moot: write only the last
                superseded = any(p == path for _, p, _ in self._queue)
                self._busy = True
            error = None
            if not superseded:
                try:
                    write_bytes_atomic(path, data)
                except OSError as e:
                    error = e
            with self._cond:
                data_n = self._latest.get(page_id)
                if data_n is not None:
                    n = data_n[1] - 1
                    if n <= 0:
                        del self._latest[page_id]
                    else:
                        self._latest[page_id] = (data_n[0], n)
                if not superseded and error is None:
                    self.written += 1
                if error is not None:
                    self.failures.append((page_id, path, error))
            if error is not None and self.on_error is not None:
                try:
                    self.on_error(page_id, path, error)
                except Exception:  # (the callback's problem must not stop the writes after it)
                    pass


@dataclass
class PageStatus:
    status: str  # one of STATUSES
    message: str = ""  # why (the error, the exclusion reason, the conflicts)


@dataclass
class FieldRow:
    """One field of the current page as the field panel shows it."""
    name: str
    index: int  # position in the schema (the field's colour and its key 1-9)
    answer: str | None  # the labelling model's answer
    status: str  # grounding status, "fixed" for a person's fix, "none" when not labelled
    words: tuple  # word indices the trainer uses (after fixes)
    text: str  # those words' texts joined by spaces
    reason: str = ""
    unscored: bool = False  # not one run, or shares a word: ignored by the loss
    page: str | None = None  # status other_page: the page of the document that holds the value


@dataclass
class _Decision:
    page_id: str
    op: str
    field: str | None
    before: dict
    after: dict


@dataclass
class _SchemaEdit:
    """A schema edit on the undo stack: the schema and the rename map before and after, and
    the renames {old: new} it made in the label files."""
    before: list
    after: list
    renames: dict
    map_before: dict
    map_after: dict
    page_id: str | None = None
    op: str = "schema"


@dataclass
class SchemaChange:
    """What saving a schema edit does, for the person to confirm (schema_change)."""
    added: list  # new field names
    removed: dict  # {name: Project.field_usage(name)}
    renamed: dict  # {old: new}
    renamed_usage: dict  # {old: Project.field_usage(old)}
    labelled_pages: int  # pages with the labelling model's answers (a new field is not asked there)

    @property
    def any(self) -> bool:
        return bool(self.added or self.removed or self.renamed)

    def removal_text(self) -> str:
        """What a delete loses, in words ("" when nothing is removed)."""
        parts = []
        for name, u in self.removed.items():
            parts.append(f"“{name}”: its values on {u['values']} page(s) ({u['fixes']} set by a person, "
                         f"{u['accepted']} on accepted pages) are no longer shown, trained or scored, and the "
                         f"model's answers for it are no longer used")
        return "; ".join(parts)

    def summary(self) -> str:
        out = []
        if self.renamed:
            out.append("Renamed " + ", ".join(
                f"{o} → {n} (its labels on {self.renamed_usage[o]['values']} page(s), the labelling model's "
                f"answers and the model's answers go with it)" for o, n in self.renamed.items()))
        if self.added:
            names = ", ".join(self.added)
            one = len(self.added) == 1
            out.append(f"Added {names}: not asked yet on the {self.labelled_pages} labelled page(s), so "
                       f"{'it is' if one else 'they are'} left out of training and scoring (the other fields "
                       f"still train) until Label pages asks for {'it' if one else 'them'} or you set "
                       f"{'it' if one else 'them'} in Review")
        if self.removed:
            out.append("Removed " + self.removal_text())
        return ". ".join(out) + ("." if out else "")


def write_schema(project, fields, renames: dict, field_map: dict | None) -> list:
    """A schema edit onto disk: the labels renamed first (each file atomic), then dxproject.json
    with the fields and the rename map (field_map as it is, or the renames recorded onto the
    project's). A failure between the two leaves labels under names the schema does not have
    yet, which a retry renames again. Returns the rename's problems (files it could not change)."""
    problems = []
    if renames:
        _, problems = project.rename_fields_in_labels(renames)
    project.set_schema(fields)
    if field_map is None:
        project.record_renames(renames)
    else:
        project.field_renames = field_map
    project.save()
    return problems


def _field_dicts(fields) -> list:
    return [field_from(f).to_dict() for f in fields]


def schema_change(project, fields, renames=None) -> SchemaChange:
    """What replacing the schema by `fields` with renames {old: new} would do (nothing saved).
    Raises ProjectError for a bad schema, ReviewError for a rename that does not fit it."""
    new = parse_schema([f if not isinstance(f, dict) else dict(f) for f in fields], str(project.project_file))
    renames = dict(renames or {})
    old_names = project.field_names
    new_names = [f.name for f in new]
    for o, n in renames.items():
        if o not in old_names:
            raise ReviewError(f"cannot rename {o!r}: it is not a field of the schema ({', '.join(old_names)})")
        if n not in new_names:
            raise ReviewError(f"cannot rename {o!r} to {n!r}: {n!r} is not in the new schema")
    if len(set(renames.values())) != len(renames):
        raise ReviewError("two fields cannot be renamed to the same name")
    renamed_to = set(renames.values())
    kept_old = [n for n in old_names if n not in renames]
    added = [n for n in new_names if n not in renamed_to and n not in kept_old]
    removed = [n for n in kept_old if n not in new_names]
    labelled = 0
    for pid in project.page_ids():
        try:
            labelled += project.load_labels(pid).labelled
        except (LabelError, OSError):
            pass
    return SchemaChange(added, {n: project.field_usage(n) for n in removed},
                        {o: n for o, n in renames.items() if o != n},
                        {o: project.field_usage(o) for o, n in renames.items() if o != n}, labelled)


def _snapshot(labels: LabelFile) -> dict:
    r = labels.review
    snap = {"state": r.get("state", "unreviewed"), "fixes": copy.deepcopy(r.get("fixes", {}))}
    if r.get("reason"):
        snap["reason"] = r["reason"]
    return snap


def _restore(labels: LabelFile, snap: dict) -> None:
    labels.review["state"] = snap["state"]
    labels.review["fixes"] = copy.deepcopy(snap["fixes"])
    if snap.get("reason"):
        labels.review["reason"] = snap["reason"]
    else:
        labels.review.pop("reason", None)


def display_targets(page: Page, labels: LabelFile, field_names, max_words: int | None = None):
    """(PageTargets, conflicts) for drawing a page whatever its review state.

    The trainer's page_targets excludes a whole page for an excluded review or a value not
    on the page; a reviewer still wants to see every other field's words. This runs the
    same rules on a copy where the exclusion is lifted and absent values count as no value,
    and returns the conflicts it lifted as text (empty when the trainer uses the page as is)."""
    conflicts = []
    view = copy.deepcopy(labels)
    for name in not_asked_fields(labels, field_names):  # shown as "not asked", drawn as no value
        view.grounding[name] = {"status": "null", "words": [], "reason": "not asked"}
    for name in field_names:
        g = view.grounding.get(name)
        if name not in view.fixes and g is not None and g.get("status") == "absent":
            conflicts.append(f"{name}: {g.get('reason') or 'the value is not on the page'}")
            view.grounding[name] = {"status": "null", "words": [], "reason": "absent"}
    view.review["state"] = "accepted"  # lifts "excluded" and "not labelled yet"
    t = page_targets(page, view, field_names, max_words)
    if isinstance(t, Excluded):  # cannot happen after lifting; keep the trainer's reason
        raise ReviewError(t.reason)
    for name in sorted(t.unscored):
        conflicts.append(f"{name}: words are not one run or are shared with another field (ignored by the loss)")
    return t, conflicts


def label_words_of(page: Page, labels: LabelFile, field_names, max_words: int | None = None) -> tuple:
    """({field: label words after review}, {field: their text}) of a page, as the review queue
    compares them with the model's answers (display_targets' words: a page's conflicts lifted)."""
    targets, _ = display_targets(page, labels, field_names, max_words)
    words = {name: tuple(targets.field_words.get(name, ())) for name in field_names}
    return words, {name: " ".join(page.words[i].text for i in w) for name, w in words.items()}


@dataclass
class ReloadScan:
    """What ReviewSession.reload_scan read off the GUI thread, for reload_apply."""
    base: Project  # the session's project when the scan began (another one since: the scan is stale)
    project: Project  # the project it read (base, or base read again by reopen)
    max_words: int | None
    basis: tuple  # the schema's fields and the model's window it read with
    incremental: bool  # it compared with the session's file keys (False: every page was read)
    since: int  # the session's write count when it began
    page_ids: list
    statuses: dict  # page id -> PageStatus, of the pages whose files changed
    states: dict  # page id -> review state, of those pages
    file_keys: dict  # page id -> the files' keys before they were read, of those pages
    label_words: dict  # page id -> (label words, texts), of those the review queue ranks


class ReviewSession:
    """The current page of a project under review, its labels and the statuses of all pages."""

    def __init__(self, project, max_words: int | None = None):
        self.project = project if isinstance(project, Project) else Project.open(project)
        self.max_words = max_words if max_words is not None else self._model_max_words()
        self.page_ids: list[str] = self.project.page_ids()
        self.statuses: dict[str, PageStatus] = {}
        self._states: dict[str, str] = {}  # review state of each page's label file
        self.current: str | None = None
        self.page: Page | None = None
        self.labels: LabelFile | None = None
        self._labels_raw: bytes | None = None  # the label file's bytes as this session last read or wrote them
        self.targets = None  # PageTargets of the current page (display rules)
        self.error: str | None = None  # why the current page cannot be shown
        self._undo: list[_Decision] = []
        self._redo: list[_Decision] = []
        self._observers: list = []
        self.rename_problems: list = []  # label files a rename could not rewrite: [(file, problem)]
        self._file_keys: dict[str, tuple] = {}  # page id -> the files its status was read from (_file_key)
        self._basis = self._status_basis()
        self.reload_changed: set | None = None  # during a reload's "statuses" notice: the pages read again
        self.staged_label_words: dict | None = None  # during a "statuses" notice: label words a job read
        self._write_count = 0  # label files this session wrote (a reload scan's result is older than the later ones)
        self._written: dict[str, int] = {}  # page id -> _write_count at its last write
        # None: each decision's file is written before the call returns; a LabelWriter (the
        # app's): written on its thread, read back from it until then (flush_writes waits)
        self.label_writer: LabelWriter | None = None
        for pid in self.page_ids:
            self.statuses[pid] = self._compute_status(pid)
        if self.page_ids:
            self.goto(self.page_ids[0], notify=False)

    # -- observers -------------------------------------------------------------------------
    def subscribe(self, fn) -> None:
        """fn(kind, page_id) after each change; kind is "page" (another page is current),
        "labels" (the current page's labels changed), "statuses" (the list changed) or
        "history" (after an undo or redo: can_undo / can_redo changed)."""
        self._observers.append(fn)

    def unsubscribe(self, fn) -> None:
        if fn in self._observers:
            self._observers.remove(fn)

    def _notify(self, kind: str, page_id: str | None) -> None:
        for fn in list(self._observers):
            fn(kind, page_id)

    # -- writing label files ---------------------------------------------------------------
    def flush_writes(self, timeout: float | None = None) -> bool:
        """Wait until the label writer (if any) has written every decision (any thread)."""
        w = getattr(self, "label_writer", None)
        return w.flush(timeout) if w is not None else True

    def _read_labels(self, page_id: str) -> tuple:
        """(LabelFile, bytes) of a page: the bytes still on their way to disk if there are."""
        w = getattr(self, "label_writer", None)
        raw = w.latest(page_id) if w is not None else None
        if raw is None:
            return self.project.read_labels(page_id)
        path = self.project.label_path(page_id)
        return label_from_dict(parse_json(raw, path, LabelError), str(path), page_id), raw

    def write_failed(self, page_id: str) -> None:
        """The label writer could not write page_id's file (a full disk): the file is as
        before. The page is read again from disk when it is the current one (once nothing
        more is pending for it), and by the next reload in any case."""
        self._file_keys.pop(page_id, None)
        w = self.label_writer
        if page_id == self.current and (w is None or not w.pending(page_id)):
            self.goto(page_id)

    # -- derived state ---------------------------------------------------------------------
    @property
    def field_names(self) -> list[str]:
        return self.project.field_names

    def _model_max_words(self) -> int | None:
        """The model's window (max_words) of the size the project's settings name, or None
        when they do not resolve. The settings table is dxstudio.tuning's: the one import of
        the layer below (docs: review sits above tuning), deferred since tuning imports the
        engine's compiled kernels (Numba)."""
        from dxstudio.tuning import TuneError, resolve_settings

        try:
            return size_config(resolve_settings(self.project.settings)["size"]).max_words
        except (TuneError, ValueError):
            return None

    @property
    def tags(self) -> np.ndarray:
        """Tag per word of the current page (0 = O, 1+2c = B, 2+2c = I, -1 = ignored by the loss)."""
        if self.targets is None:
            return np.zeros(0, np.int64)
        return self.targets.tags

    def _file_key(self, pid: str) -> tuple:
        """What the page's status was read from, as the file system tells it cheaply: the page
        file's and the label file's (inode, size, time) (an atomic write makes a new inode)."""
        out = []
        dirs = getattr(self, "_dirs", None)
        if dirs is None or dirs[0] is not self.project:  # (plain strings: a pathlib join per file costs more than the stat)
            dirs = self._dirs = (self.project, str(self.project.pages_dir), str(self.project.labels_dir))
        name = check_page_id(pid) + ".json"
        for folder in dirs[1:]:
            try:
                st = os.stat(os.path.join(folder, name))
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except (OSError, ValueError):
                out.append(None)
        return tuple(out)

    def _status_basis(self) -> tuple:
        """What every status also depends on: the schema's fields and the model's window."""
        return tuple(self.field_names), self.max_words

    def _compute_status(self, pid: str) -> PageStatus:
        keys = getattr(self, "_file_keys", None)
        if keys is not None:  # taken before the read: a file changed meanwhile is read again next time
            keys[pid] = self._file_key(pid)
        try:
            page = self.project.load_page(pid)
            labels = self.project.load_labels(pid)
            self._states[pid] = labels.state
            return self._status_of(page, labels)
        except (PageError, LabelError, ProjectError, ReviewError) as e:
            return PageStatus("error", str(e))

    def _status_of(self, page: Page, labels: LabelFile) -> PageStatus:
        state = labels.state
        if state == "excluded":
            return PageStatus("excluded", labels.review.get("reason") or "excluded in review")
        _, conflicts = display_targets(page, labels, self.field_names, self.max_words)
        if conflicts:
            return PageStatus("conflicts", "; ".join(conflicts))
        missing = not_asked_fields(labels, self.field_names)
        if state == "accepted":  # a field added since does not undo a person's decision
            return PageStatus("accepted", not_asked_note(missing) if missing else "")
        if missing:
            return PageStatus("unreviewed", not_asked_note(missing))
        if not labels.labelled and not labels.fixes:
            return PageStatus("unreviewed", "not labelled yet")
        return PageStatus("unreviewed")

    def counts(self) -> dict:
        out = {s: 0 for s in STATUSES}
        for st in self.statuses.values():
            out[st.status] += 1
        return out

    def reviewed_count(self) -> int:
        """Pages a person has decided on: accepted or excluded (the label files' review state)."""
        return sum(1 for pid in self.page_ids if self._states.get(pid) in ("accepted", "excluded"))

    def field_rows(self) -> list[FieldRow]:
        """The fields of the current page (empty when the page did not load)."""
        if self.page is None or self.labels is None or self.targets is None:
            return []
        rows = []
        answers = self.labels.answers or {}
        missing = set(not_asked_fields(self.labels, self.field_names))
        for c, name in enumerate(self.field_names):
            words = tuple(self.targets.field_words.get(name, ()))
            g = self.labels.grounding.get(name, {})
            if name in self.labels.fixes:
                status, reason = "fixed", "set by a person"
            elif not self.labels.labelled:
                status, reason = "none", "not labelled yet"
            elif name in missing:
                status, reason = "not asked", ("added to the schema after this page was labelled: "
                                               "Label pages asks for it, or set it here")
            else:
                status, reason = g.get("status", "null"), g.get("reason", "")
            rows.append(FieldRow(name, c, answers.get(name), status, words,
                                 " ".join(self.page.words[i].text for i in words), reason,
                                 name in self.targets.unscored,
                                 g.get("page") if status == "other_page" else None))
        return rows

    def field_of_word(self, index: int) -> str | None:
        """The field whose words include word `index` on the current page (after fixes)."""
        if self.targets is None:
            return None
        for name, words in self.targets.field_words.items():
            if index in words:
                return name
        return None

    # -- navigation ------------------------------------------------------------------------
    def goto(self, page_id: str, notify: bool = True) -> None:
        if page_id not in self.statuses:
            raise ReviewError(f"no page {page_id!r} in {self.project.root}")
        self.current = page_id
        self.page = self.labels = self.targets = self._labels_raw = None
        self.error = None
        try:
            self.page = self.project.load_page(page_id)
            self.labels, self._labels_raw = self._read_labels(page_id)
            self._refresh_current()
        except (PageError, LabelError, ProjectError, ReviewError) as e:
            self.page = self.labels = self.targets = None
            self.error = str(e)
            self._set_status(page_id, PageStatus("error", self.error), notify)
        if notify:
            self._notify("page", page_id)

    def _refresh_current(self) -> None:
        self.targets, _ = display_targets(self.page, self.labels, self.field_names, self.max_words)
        self._states[self.current] = self.labels.state
        self._set_status(self.current, self._status_of(self.page, self.labels), True)

    def _set_status(self, pid: str, status: PageStatus, notify: bool) -> None:
        if self.statuses.get(pid) != status:
            self.statuses[pid] = status
            if notify:
                self._notify("statuses", pid)

    def _step(self, delta: int, ids=None) -> bool:
        ids = self.page_ids if ids is None else list(ids)
        if not ids:
            return False
        if self.current in ids:
            k = ids.index(self.current) + delta
        else:  # the current page is filtered out: go to the nearest one in that direction
            order = self.page_ids.index(self.current) if self.current in self.page_ids else -1
            after = [i for i, p in enumerate(ids) if self.page_ids.index(p) > order]
            k = (after[0] if after else len(ids)) if delta > 0 else (after[0] - 1 if after else len(ids) - 1)
        if not 0 <= k < len(ids):
            return False
        self.goto(ids[k])
        return True

    def next(self, ids=None) -> bool:
        """Go to the next page (of `ids`, the visible list, when given); False at the end."""
        return self._step(1, ids)

    def prev(self, ids=None) -> bool:
        return self._step(-1, ids)

    def reload(self) -> None:
        """Re-read the project's page list, every status and the current page from disk. A page
        whose page and label files are the ones its status was read from (the same inode, size
        and time), under the same schema, keeps its status: after an import, Label pages or an
        Extract page, only the files that changed are read (reading all 200 pages took a third
        of a second on the GUI thread). The observers of the "statuses" notice find the pages
        read again in `reload_changed` (None: every page).

        reload() is reload_apply(reload_scan()()) in one go; the app runs the scan (every
        file's stat, the pages that changed) on a background thread and applies its result on
        the GUI thread, which then stats and reads nothing but the current page."""
        self.reload_apply(self.reload_scan()())

    def reload_scan(self, reopen: bool = False):
        """The slow half of reload, safe on a worker thread: returns a function of no arguments
        that lists the pages, stats their files and reads the status of each page whose files
        changed, touching nothing of this session (it reads a snapshot taken here). Its result
        goes to reload_apply on the session's thread. reopen: dxproject.json is read again
        first, on the worker too (an import may have added fields): reopen()'s slow half."""
        base, max_words, basis0 = self.project, self.max_words, self._status_basis()
        known0 = dict(self._file_keys) if basis0 == self._basis else {}
        since = self._write_count
        root = self.project.root
        writer = self.label_writer

        def scan() -> ReloadScan:
            if writer is not None:
                writer.flush()  # the decisions on their way to disk are read as written
            shadow = ReviewSession.__new__(ReviewSession)  # reads statuses, nothing else
            shadow.project, shadow.max_words, shadow._states, shadow._file_keys = base, max_words, {}, {}
            if reopen:
                shadow.project = Project.open(root)
                shadow.max_words = shadow._model_max_words()
            project = shadow.project
            basis = shadow._status_basis()
            incremental = basis == basis0
            known = known0 if incremental else {}  # another schema: every page again
            ids = project.page_ids()
            statuses, words = {}, {}
            for pid in ids:
                key = shadow._file_key(pid)
                if pid in known and known[pid] == key:
                    continue
                statuses[pid] = shadow._compute_status(pid)  # (its file key taken again, before the read)
                if statuses[pid].status in ("unreviewed", "conflicts"):  # the pages the review queue ranks
                    try:  # their label words, so the queue does not read them on the GUI thread
                        words[pid] = label_words_of(project.load_page(pid), project.load_labels(pid),
                                                    project.field_names, max_words)
                    except (ValueError, OSError):
                        pass
            return ReloadScan(base, project, shadow.max_words, basis, incremental, since, ids, statuses,
                              shadow._states, shadow._file_keys, words)
        return scan

    def reload_apply(self, scan: "ReloadScan") -> bool:
        """The quick half of reload, on the session's thread: the scan's statuses become the
        session's (it stats and reads no file but the current page's), the "statuses" notice,
        then the current page again. False, and nothing changed, when the scan is stale (the
        schema or the project changed while it ran): scan again. A page this session wrote
        since the scan began keeps the status the session gave it and is read again next time."""
        if scan.base is not self.project or (scan.project is scan.base and scan.basis != self._status_basis()):
            return False
        self.project, self.max_words = scan.project, scan.max_words
        keep = scan.incremental
        statuses, changed = {}, set()
        for pid in scan.page_ids:
            written = self._written.get(pid, 0) > scan.since
            if pid in scan.statuses and not (written and pid in self.statuses):
                statuses[pid] = scan.statuses[pid]
                self._file_keys[pid] = scan.file_keys[pid]
                if pid in scan.states:
                    self._states[pid] = scan.states[pid]
                changed.add(pid)
            elif pid in self.statuses:
                statuses[pid] = self.statuses[pid]
                if written:  # the file is the session's newer write: its key is not the one read
                    self._file_keys.pop(pid, None)
            else:  # (a page the scan kept that this session has not seen: cannot happen, but stay whole)
                statuses[pid] = PageStatus("error", f"{self.project.label_path(pid)}: not read yet: reload again")
                self._file_keys.pop(pid, None)
        for pid in set(self._file_keys) - set(scan.page_ids):
            del self._file_keys[pid]
        self.page_ids, self.statuses, self._basis = list(scan.page_ids), statuses, scan.basis
        current = self.current if self.current in self.statuses else (self.page_ids[0] if self.page_ids else None)
        self.reload_changed = changed if keep else None
        self.staged_label_words = {p: w for p, w in scan.label_words.items() if p in changed}
        try:
            self._notify("statuses", None)
        finally:
            self.reload_changed = None
            self.staged_label_words = None
        if current is not None:
            self.goto(current)
        return True

    def reopen(self) -> None:
        """Re-read dxproject.json (an import may have added fields) and then every page."""
        self.reload_apply(self.reload_scan(reopen=True)())

    def set_schema(self, fields, renames=None) -> SchemaChange:
        """Replace the schema (names, descriptions, weights), save dxproject.json and re-read;
        an undoable edit (undo / redo). renames {old: new}: fields renamed, whose labels (the
        labelling model's answers, their grounding, a person's fixes) move to the new name in
        every label file, and whose model answers follow (Project.field_renames). A field
        removed keeps its data in the label files (undo brings it back). dxproject.json is read
        afresh first, so settings another panel saved are kept. Returns the SchemaChange."""
        project = Project.open(self.project.root)
        change = schema_change(project, fields, renames)
        before = [f.to_dict() for f in project.schema]
        after = _field_dicts(fields)
        if before == after and not change.renamed:
            return change
        edit = _SchemaEdit(before, after, dict(change.renamed), project.field_renames, {}, self.current)
        self._apply_schema(project, after, change.renamed, None)
        edit.map_after = self.project.field_renames
        self._undo.append(edit)
        self._redo.clear()
        self._notify("history", self.current)
        return change

    # -- a schema edit in two halves: the files on a background thread, the session on the GUI's
    def stage_schema(self, fields, renames=None, undo: bool | None = None, run=None) -> dict:
        """The slow half of set_schema (or of undo / redo of a schema edit with undo=True/False),
        safe on a worker thread: it rewrites the label files and dxproject.json and reads every
        page's status afresh, touching nothing of this session. commit_schema(staged) then makes
        it current on the session's thread. Raises ProjectError / ReviewError like set_schema.
        The work after flush_writes is stage_schema_at(*schema_stage_args(...)), called here or
        by run(stage_schema_at, *args): the app passes its worker process's call
        (dxstudio.ui.worker_process), so that work's Python does not share the GUI's GIL."""
        self.flush_writes()  # the label files it rewrites hold every decision made before
        args = self.schema_stage_args(fields, renames, undo)
        return run(stage_schema_at, *args) if run is not None else stage_schema_at(*args)

    def schema_stage_args(self, fields, renames=None, undo: bool | None = None) -> tuple:
        """stage_schema_at's arguments for this session's project: plain values that a pipe can
        carry to another process (the edit undone or redone is a copy there)."""
        edit = None if undo is None else (self._undo[-1] if undo else self._redo[-1])
        return (str(self.project.root), fields, renames, undo, edit, self.current)

    def commit_schema(self, staged: dict):
        """The quick half: the staged project and statuses become the session's; the edit goes
        on the undo stack (or moves between the stacks for an undo / redo). Returns the change."""
        if staged.get("edit") is None:
            return staged["change"]
        self.project, self.max_words = staged["project"], staged["max_words"]
        self.page_ids, self.statuses = staged["page_ids"], staged["statuses"]
        self._states = dict(staged["states"])
        self._file_keys = dict(staged.get("file_keys") or {})
        self._basis = staged.get("basis") or self._status_basis()
        self.rename_problems = staged["problems"]
        undo, edit = staged["undo"], staged["edit"]
        if undo is None:
            self._undo.append(edit)
            self._redo.clear()
        elif undo:
            self._redo.append(self._undo.pop())
        else:
            self._undo.append(self._redo.pop())
        current = self.current if self.current in self.statuses else (self.page_ids[0] if self.page_ids else None)
        # {page id: (label words, their texts)} read by the job, for the observers of this notice only
        self.staged_label_words = staged.get("label_words")
        try:
            self._notify("statuses", None)
        finally:
            self.staged_label_words = None
        if current is not None:
            self.goto(current)
        self._notify("history", self.current)
        return staged["change"]

    def _apply_schema(self, project, fields, renames: dict, field_map: dict | None) -> None:
        """Labels renamed first (each file atomic), then dxproject.json: a failure between the two
        leaves labels under names the schema does not have yet, which a retry renames again."""
        self.flush_writes()
        problems = write_schema(project, fields, renames, field_map)
        if problems:
            self.rename_problems = problems
        self.project = project
        self.max_words = self._model_max_words()
        self.reload()

    def _replay_schema(self, edit: _SchemaEdit, undo: bool) -> None:
        project = Project.open(self.project.root)
        if undo:
            self._apply_schema(project, edit.before, {n: o for o, n in edit.renames.items()}, edit.map_before)
        else:
            self._apply_schema(project, edit.after, edit.renames, edit.map_after)

    # -- decisions -------------------------------------------------------------------------
    def _require_page(self) -> None:
        if self.page is None or self.labels is None:
            raise ReviewError(self.error or "no page is open")

    def _check_field(self, name: str) -> None:
        if name not in self.field_names:
            raise ReviewError(f"{name!r} is not a field of the schema ({', '.join(self.field_names)})")

    def _apply(self, op: str, field_name: str | None, change) -> None:
        """Apply `change(labels)` to a copy, save it, then make it current: a failed save
        leaves both the file and the session as they were."""
        self._require_page()
        new = copy.deepcopy(self.labels)
        before = _snapshot(new)
        change(new)
        after = _snapshot(new)
        if after == before:
            return
        decision = _Decision(self.current, op, field_name, before, after)
        self._write(new, self.current, op, field_name, before, after)
        self._undo.append(decision)
        self._redo.clear()
        self._notify("history", self.current)  # can_undo changed after the "labels" notice

    def _write(self, labels: LabelFile, page_id: str, op: str, field_name, before: dict, after: dict) -> None:
        entry = {"op": op, "before": before, "after": after, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if field_name is not None:
            entry["field"] = field_name
        self._check_unchanged(page_id)
        history = labels.review.setdefault("history", [])
        history.append(entry)
        del history[:-HISTORY_LIMIT]
        path = self.project.label_path(page_id)
        if labels.page != page_id:
            raise LabelError(f"{path}: label file is for page {labels.page!r}, not {page_id!r}")
        data = label_bytes(labels)
        if self.label_writer is not None:
            self.label_writer.submit(page_id, path, data)  # (written on its thread: no fsync waited on here)
        else:
            write_bytes_atomic(path, data)
        self._write_count += 1
        self._written[page_id] = self._write_count
        self._labels_raw = data
        self.labels = labels
        self._refresh_current()
        self._notify("labels", page_id)

    def _disk_bytes(self, page_id: str) -> bytes | None:
        path = self.project.label_path(page_id)
        try:
            return path.read_bytes() if path.is_file() else b""
        except OSError:
            return None

    def _check_unchanged(self, page_id: str) -> None:
        """Refuse to write over a label file that changed on disk since this session read it
        (`label --jsonl`, a re-import or another window wrote new answers): the page is reloaded
        with what is on disk now and ReviewError says so; nothing is overwritten."""
        if page_id == self.current and self._labels_raw is not None:
            w = self.label_writer
            on_the_way = w.latest(page_id) if w is not None else None
            if on_the_way is not None:  # this session's own write, not done yet: the disk will hold it
                if on_the_way == self._labels_raw:
                    return
            elif self._disk_bytes(page_id) == self._labels_raw:
                return
        path = self.project.label_path(page_id)
        self.goto(page_id)
        raise ReviewError(f"{path}: changed on disk since this page was shown (another command or window "
                          f"wrote it); the page was reloaded with what is there now: check it and decide again")

    def set_field(self, name: str, word_indices) -> None:
        """A person's fix: the field's value is exactly these words ([] = no value)."""
        self._require_page()
        self._check_field(name)
        words = sorted({int(i) for i in word_indices})
        bad = [i for i in words if not 0 <= i < len(self.page.words)]
        if bad:
            raise ReviewError(f"word {bad[0]} is not on page {self.current} ({len(self.page.words)} words)")
        self._apply("set_field", name, lambda lf: lf.review.setdefault("fixes", {}).__setitem__(name, words))

    def set_fields(self, values: dict, op: str = "set_fields") -> None:
        """Several fixes as one decision (one undo): {field: word indices ([] = no value)}."""
        self._require_page()
        clean = {}
        for name, word_indices in values.items():
            self._check_field(name)
            words = sorted({int(i) for i in word_indices})
            bad = [i for i in words if not 0 <= i < len(self.page.words)]
            if bad:
                raise ReviewError(f"word {bad[0]} is not on page {self.current} ({len(self.page.words)} words)")
            clean[name] = words

        def change(lf):
            fixes = lf.review.setdefault("fixes", {})
            for name, words in clean.items():
                fixes[name] = words
        self._apply(op, None, change)

    def clear_field(self, name: str) -> None:
        """The field has no value on this page."""
        self.set_field(name, [])

    def revert_field(self, name: str) -> None:
        """Drop a person's fix: the labelling model's grounded words count again."""
        self._require_page()
        self._check_field(name)
        self._apply("revert_field", name, lambda lf: lf.review.setdefault("fixes", {}).pop(name, None))

    def accept(self) -> None:
        def change(lf):
            lf.review["state"] = "accepted"
            lf.review.pop("reason", None)
        self._apply("accept", None, change)

    def exclude(self, reason: str = "excluded in review") -> None:
        def change(lf):
            lf.review["state"] = "excluded"
            lf.review["reason"] = reason or "excluded in review"
        self._apply("exclude", None, change)

    def mark_unreviewed(self) -> None:
        def change(lf):
            lf.review["state"] = "unreviewed"
            lf.review.pop("reason", None)
        self._apply("unreview", None, change)

    @property
    def can_undo(self) -> bool:
        return bool(self._undo)

    @property
    def can_redo(self) -> bool:
        return bool(self._redo)

    def _replay(self, d: _Decision, snap: dict, op: str) -> None:
        if self.current != d.page_id:
            self.goto(d.page_id)
        self._require_page()
        new = copy.deepcopy(self.labels)
        before = _snapshot(new)
        _restore(new, snap)
        self._write(new, d.page_id, op, d.field, before, snap)

    def undo(self) -> str | None:
        """Revert the last decision (on whichever page it was); returns its page id or None."""
        if not self._undo:
            return None
        d = self._undo.pop()
        if isinstance(d, _SchemaEdit):
            try:
                self._replay_schema(d, undo=True)
            except Exception:
                self._undo.append(d)
                raise
            self._redo.append(d)
            self._notify("history", self.current)
            return self.current
        try:
            self._replay(d, d.before, "undo " + d.op)
        except Exception:
            self._undo.append(d)
            raise
        self._redo.append(d)
        self._notify("history", d.page_id)  # can_undo / can_redo changed after the "labels" notice
        return d.page_id

    def redo(self) -> str | None:
        if not self._redo:
            return None
        d = self._redo.pop()
        if isinstance(d, _SchemaEdit):
            try:
                self._replay_schema(d, undo=False)
            except Exception:
                self._redo.append(d)
                raise
            self._undo.append(d)
            self._notify("history", self.current)
            return self.current
        try:
            self._replay(d, d.after, "redo " + d.op)
        except Exception:
            self._redo.append(d)
            raise
        self._undo.append(d)
        self._notify("history", d.page_id)
        return d.page_id


# ---------------------------------------------------------------------------------------
# Export of the reviewed labels

EXPORT_FORMATS = ("jsonl", "csv")


def stage_schema_at(root, fields, renames, undo, edit, current) -> dict:
    """ReviewSession.stage_schema's work on the project at root as it is on disk (the session's
    writes flushed first): fields / renames the new schema (undo None), else the edit undone
    (undo True) or redone (False); current the page shown. Returns what commit_schema takes."""
    project = Project.open(root)
    if undo is None:
        change = schema_change(project, fields, renames)
        before = [f.to_dict() for f in project.schema]
        after = _field_dicts(fields)
        edit = _SchemaEdit(before, after, dict(change.renamed), project.field_renames, {}, current)
        if before == after and not change.renamed:
            return {"change": change, "edit": None}
        target, moves, fmap = after, change.renamed, None
    else:
        change = None
        target = edit.before if undo else edit.after
        moves = {n: o for o, n in edit.renames.items()} if undo else edit.renames
        fmap = edit.map_before if undo else edit.map_after
    problems = write_schema(project, target, moves, fmap)
    if undo is None:
        edit.map_after = project.field_renames
    shadow = ReviewSession.__new__(ReviewSession)  # reads statuses with the new schema, nothing else
    shadow.project, shadow._states, shadow._file_keys = project, {}, {}
    shadow.max_words = shadow._model_max_words()
    ids = project.page_ids()
    statuses, words = {}, {}
    for pid in ids:
        statuses[pid] = shadow._compute_status(pid)
        if statuses[pid].status in ("unreviewed", "conflicts"):  # the pages the review queue ranks
            try:  # their label words with the new schema, so the queue is not re-read on the GUI thread
                words[pid] = label_words_of(project.load_page(pid), project.load_labels(pid),
                                            project.field_names, shadow.max_words)
            except (ValueError, OSError):
                pass
    return {"change": change, "edit": edit, "undo": undo, "project": project, "max_words": shadow.max_words,
            "page_ids": ids, "statuses": statuses, "states": shadow._states, "problems": problems,
            "label_words": words, "file_keys": shadow._file_keys, "basis": (tuple(project.field_names),
                                                                            shadow.max_words)}


def reviewed_labels(project, max_words: int | None = None) -> list[dict]:
    """The pages a person accepted that the trainer uses as they stand (no conflicts, every
    field asked), in page order: {"id", "fields": {field: {"value": text or None, "words": [...]}}}.
    A value's text is its words' texts joined by spaces, as the trainer sees it."""
    out = []
    names = project.field_names
    for pid in project.page_ids():
        try:
            labels = project.load_labels(pid)
            if labels.state != "accepted":
                continue
            page = project.load_page(pid)
            t = page_targets(page, labels, names, max_words)
        except (PageError, LabelError, ProjectError):
            continue
        if isinstance(t, Excluded) or t.unscored:
            continue
        fields = {}
        for name in names:
            words = [int(i) for i in t.field_words.get(name, ())]
            fields[name] = {"value": " ".join(page.words[i].text for i in words) if words else None,
                            "words": words}
        out.append({"id": pid, "fields": fields})
    return out


def export_reviewed(project, path, fmt: str | None = None, max_words: int | None = None) -> int:
    """Write the reviewed labels (reviewed_labels) to `path` as JSON lines or CSV (one row per
    page, a column per field; an empty cell is no value), atomically. fmt defaults to the
    file's suffix. Returns the number of pages written."""
    import csv
    import io
    import json
    from pathlib import Path

    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".").lower()
    if fmt not in EXPORT_FORMATS:
        raise ReviewError(f"{path}: export as {' or '.join(EXPORT_FORMATS)} (the file name's suffix), not {fmt!r}")
    rows = reviewed_labels(project, max_words)
    if fmt == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["id"] + project.field_names)
        for r in rows:
            w.writerow([r["id"]] + [r["fields"][n]["value"] or "" for n in project.field_names])
        text = buf.getvalue()
    write_bytes_atomic(path, text.encode("utf-8"))
    return len(rows)
