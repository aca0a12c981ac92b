"""Review after training, uncertainty first: the project model's answers beside the labels.

The model is the project's model (dxproject.json "model"), else the newest run's
runs/<run>/model.safetensors (dxstudio.ui.extract_panel.newest_model). Reading the project's
pages with it runs as a background job (dxstudio.ui.jobs.Job) with progress; the answers are
kept per model file SHA-256 in memory and in `.cache/model-answers/<sha>.json` (written
atomically; each page's entry carries its page file's SHA-256, so a changed page is read
again and an unchanged one never is), so switching pages is instant and a restart reads
only what changed.

    answers = ModelAnswers(session)              # a QObject; signals changed(), progress(done, total)
    answers.start(model_path=None) -> bool       # the job; None: the project's model
    answers.for_page(pid) -> {field: Answer | None} | None
    answers.comparison(pid) -> {field: FieldCompare}   the model against the labels after review
    answers.queue() -> [page id]                 the review queue: pages not yet accepted or excluded,
                                                  those where the model disagrees with a label first,
                                                  then by the model's lowest confidence on the page
    answers.next_in_queue(current) -> page id | None   after the last page the queue opened
                                                  (the first time its top), from the top at the end
    answers.cancel(); answers.wait(timeout); answers.shutdown()

The rules (the job's work, the cache, the comparison, the queue's order) are Qt-free, in
dxstudio/review_queue.py; this module holds the session's state and the widgets. Labels are
compared on the GUI thread (a page's label words after review, display rules:
dxstudio.review.display_targets), cached per page and dropped when the session says the
page's labels changed, so the queue follows every decision.
"""
from __future__ import annotations

from pathlib import Path

from html import escape

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QProgressBar, QToolButton, QWidget

from dxstudio.project import Project, ProjectError
from dxstudio.review import label_words_of
from dxstudio import review_queue
from dxstudio.review_queue import Answer, FieldCompare, answers_work
from dxstudio.tuning import rundir
from dxstudio.ui.extract_panel import newest_model
from dxstudio.ui.jobs import Job, process_events_while

__all__ = ["Answer", "FieldCompare", "ModelAnswers", "ModelBar"]  # Answer, FieldCompare: dxstudio.review_queue's


class ModelAnswers(QObject):
    changed = Signal()  # answers arrived, a job ended, or the model changed
    progress = Signal(int, int)

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self.model_path: Path | None = None
        self.model_sha: str | None = None
        self.model_fields: list[str] = []
        self.answers: dict[str, dict] = {}  # page id -> {field: Answer | None}
        self.problems: list[str] = []
        self.error: str | None = None
        self.last_run: tuple | None = None  # (computed, reused, cancelled) of the last job
        self._by_sha: dict[str, dict] = {}  # every model read in this window: switching back is instant
        self._labels: dict[str, dict] = {}  # page id -> {field: label words}
        self._texts: dict[str, dict] = {}  # page id -> {field: the label's text}
        self._keys: _Keys = _Keys()  # page id -> its queue key (queue_key)
        self._queue_cache: tuple | None = None  # (the keys' version, page ids, [(key, page id)] sorted)
        self._ids: tuple = tuple(session.page_ids)  # the pages as the keys' places count them
        self._job: Job | None = None
        self._cursor: tuple | None = None  # the queue key of the last page the queue opened
        session.subscribe(self._on_session)

    # -- the job -----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._job is not None

    def start(self, model_path=None) -> bool:
        """Read the project's pages with the model (the project's, when None) in the background.
        False when there is no model or a job is already running."""
        if self.running:
            return False
        if model_path is None:  # dxproject.json as it is now: the Runs tab may have chosen another model
            try:
                model_path = newest_model(Project.open(self.session.project.root))
            except (ProjectError, OSError):
                model_path = newest_model(self.session.project)
        if model_path is None:
            self.model_path = None
            self.changed.emit()
            return False
        model_path = Path(model_path)
        if model_path != self.model_path:
            self.answers, self.model_sha, self.model_fields = {}, None, []
            self._keys.clear()
        self.model_path = model_path
        self.problems, self.error = [], None
        self._job = Job(answers_work(self.session.project.root, model_path), "dxstudio-model-answers",
                        parent=self)
        self._job.connect(self._on_event, self._on_done, self._on_failed)
        self._job.start()
        self.changed.emit()
        return True

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()

    def wait(self, timeout: float = 60.0) -> bool:
        """For tests and the screenshot command: process events until the job ends."""
        return process_events_while(lambda: self.running, timeout)

    def shutdown(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self._job.wait(60)

    def _on_event(self, event) -> None:
        kind = event[0]
        if kind == "model":
            _, sha, fields = event
            self.model_sha, self.model_fields = sha, list(fields)
            self.answers = self._by_sha.setdefault(sha, {})
            self._keys.clear()
            self.changed.emit()
        elif kind == "page":
            self.answers[event[1]] = event[2]
            self._keys.pop(event[1], None)
            if event[1] == self.session.current:
                self.changed.emit()
        elif kind == "progress":
            self.progress.emit(event[1], event[2])
        else:
            self.problems.append(event[1])

    def _finish_job(self) -> None:
        if self._job is not None:
            self._job.join()
            self._job.deleteLater()
        self._job = None

    def _on_done(self, result) -> None:
        self._finish_job()
        _, computed, reused, cancelled = result
        self.last_run = (computed, reused, cancelled)
        self.changed.emit()

    def _on_failed(self, message: str) -> None:
        self._finish_job()
        self.error = message
        self.changed.emit()

    # -- comparing with the labels -----------------------------------------------------------
    def _on_session(self, kind: str, pid) -> None:
        if kind in ("labels", "history", "statuses") and pid is not None:
            self._labels.pop(pid, None)
            self._texts.pop(pid, None)
            self._keys.pop(pid, None)
        elif kind == "statuses" and pid is None:  # reload, new schema: every page again
            changed = getattr(self.session, "reload_changed", None)  # a reload says which pages it read again
            staged = getattr(self.session, "staged_label_words", None)  # a reload's or schema edit's job read them
            ids = tuple(self.session.page_ids)
            same_places, self._ids = ids == self._ids, ids
            if changed is not None:
                for p in changed:
                    self._labels.pop(p, None)
                    self._texts.pop(p, None)
                    self._keys.pop(p, None)
                if not same_places:  # a key holds the page's place in the list
                    self._keys.clear()
            else:
                self._labels.clear()
                self._texts.clear()
                self._keys.clear()
            for p, (words, texts) in (staged or {}).items():
                self._labels[p], self._texts[p] = words, texts

    def label_words(self, pid: str) -> dict | None:
        """{field: label words after review} of a page (None when it cannot be read)."""
        s = self.session
        if pid == s.current and s.targets is not None:  # the session's, always up to date
            return {name: tuple(s.targets.field_words.get(name, ())) for name in s.field_names}
        if pid not in self._labels:
            try:
                project = s.project
                self._labels[pid], self._texts[pid] = label_words_of(project.load_page(pid), s._read_labels(pid)[0],
                                                                     s.field_names, s.max_words)
            except (ValueError, OSError):
                return None
        return self._labels[pid]

    def label_text(self, pid: str, name: str) -> str:
        s = self.session
        if pid == s.current and s.page is not None and s.targets is not None:
            return " ".join(s.page.words[i].text for i in s.targets.field_words.get(name, ()))
        return self._texts.get(pid, {}).get(name, "")

    def _renamed(self, answers: dict | None) -> dict | None:
        """A model's answers under the schema's names now (a model from before a rename)."""
        if answers is None or not self.model_fields:
            return answers
        names = self.session.project.model_field_names(self.model_fields)
        if names == self.model_fields:
            return answers
        m = dict(zip(self.model_fields, names))
        return {m.get(k, k): v for k, v in answers.items()}

    def for_page(self, pid: str) -> dict | None:
        return self._renamed(self.answers.get(pid))

    def comparison(self, pid: str) -> dict:
        """{field: FieldCompare} for the fields both the schema and the model have ({} when
        the page has no answers yet)."""
        answers = self.for_page(pid)
        labels = self.label_words(pid) if answers is not None else None
        if answers is None or labels is None:
            return {}
        return review_queue.compare(self.session.field_names, answers, labels, lambda name: self.label_text(pid, name))

    def disagreements(self, pid: str) -> list[str]:
        return [name for name, c in self.comparison(pid).items() if not c.agrees]

    def queue_key(self, pid: str) -> tuple | None:
        """queue_key_now, kept per page until its labels, its status or its answers change
        (moving between pages changes none of them: the queue is not recomputed per page)."""
        if pid not in self._keys:
            self._keys[pid] = self.queue_key_now(pid)
        return self._keys[pid]

    def queue_key_now(self, pid: str) -> tuple | None:
        """The page's rank now (dxstudio.review_queue.queue_key), or None for a page not queued."""
        st = self.session.statuses.get(pid)
        if st is None or st.status not in review_queue.QUEUED:  # no comparison (no page read) for the others
            return None
        return review_queue.queue_key(st.status, self.comparison(pid), self.session.page_ids.index(pid))

    def queue(self) -> list[str]:
        """The queue in order, sorted again only when a key changed (a decision, answers, a
        reload): a page switch asks for it twice (the bar's count, the list's) and a sort of
        every page's key each time was a few ms of the GUI thread per key press."""
        return [pid for _, pid in self._keyed_queue()]

    def _keyed_queue(self) -> list:
        """[(queue key, page id)] of the queued pages, sorted: sorted again only when a key
        changed (a decision, answers, a reload) or the pages did."""
        ids = self.session.page_ids
        cached = self._queue_cache
        if cached is not None and cached[0] == self._keys.version and cached[1] is ids:
            return cached[2]
        keyed = sorted((k, pid) for pid in ids if (k := self.queue_key(pid)) is not None)
        self._queue_cache = (self._keys.version, ids, keyed)
        return keyed

    def next_in_queue(self, current: str | None) -> str | None:
        """The next page of the queue: after the last page the queue opened (so after accepting
        that page, which moves to the list's next page, Q goes on down the queue); the first
        time, its top (the page shown aside); from the top again after the end."""
        found = self._next_in_queue(current)
        if found is None:
            return None
        self._cursor, pid = found
        return pid

    def peek_next_in_queue(self, current: str | None) -> str | None:
        """The page next_in_queue(current) would go to, without moving along the queue (the
        window has its image decoded in the background: Q, and A in a walk down the queue,
        opened a page no list neighbour's prefetch had read)."""
        found = self._next_in_queue(current)
        return None if found is None else found[1]

    def _next_in_queue(self, current: str | None):
        # (the sorted queue kept by _keyed_queue: every J asked every page's key for the prefetch's
        # peek, and sorted them; a sorted list is sorted again in one pass)
        return review_queue.next_in_queue(self._keyed_queue(), current, self._cursor)


class _Keys(dict):
    """The queue keys per page; `version` counts its changes (ModelAnswers.queue keeps its
    sorted list while it stays the same)."""
    version = 0

    def __setitem__(self, key, value):
        self.version += 1
        super().__setitem__(key, value)

    def pop(self, *args):
        self.version += 1
        return super().pop(*args)

    def clear(self):
        self.version += 1
        super().clear()


class ModelBar(QWidget):
    """The row above the Review page: which model, the job's progress, Read again / Cancel,
    whether the model's answers are drawn on the page, and the queue."""
    toggled = Signal(bool)

    def __init__(self, answers: ModelAnswers, parent=None):
        super().__init__(parent)
        self.answers = answers
        self.label = QLabel()
        self.label.setStyleSheet("color: #495057;")
        self.label.setTextFormat(Qt.RichText)
        self.label.setWordWrap(True)  # never widens the window
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setMaximumHeight(16)
        self.progress.hide()
        self.read_button = QToolButton()
        self.read_button.setText("Read again")
        self.read_button.setToolTip("Read every page of the project with the project's model, in the background "
                                    "(answers are cached per model file: pages read before are not read again)")
        self.read_button.clicked.connect(lambda: self.answers.start())
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.clicked.connect(self.answers.cancel)
        self.cancel_button.hide()
        self.show_box = QCheckBox("On the page")
        self.show_box.setToolTip("Frame the model's answers on the page: green where they are the label's "
                                 "words, red dashed where they differ")
        self.show_box.setChecked(True)
        self.show_box.toggled.connect(self.toggled)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.progress)
        lay.addWidget(self.cancel_button)
        lay.addWidget(self.show_box)
        lay.addWidget(self.read_button)
        answers.changed.connect(self.refresh)
        answers.progress.connect(self._on_progress)
        self._shown: tuple = (None, None, None)  # (model path, project root, the path as shown)
        self._state: tuple | None = None  # what the bar was last refreshed from
        self.refresh()

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.progress.setFormat(f"{done} of {total} pages")

    def _shown_path(self, model_path: Path, root) -> Path:
        """The model's path as shown (inside the project: relative to it), worked out once per
        model and project: the bar is refreshed on every decision and page switch, and the two
        `Path.resolve` calls (an lstat of each folder on the way) cost 2-3 ms of each J."""
        if self._shown[:2] != (model_path, root):
            try:
                shown = model_path.resolve().relative_to(Path(root).resolve())
            except (ValueError, OSError):
                shown = model_path
            self._shown = (model_path, root, shown)
        return self._shown[2]

    def refresh(self) -> None:
        # what the bar shows depends on these alone: a page switch (J, K, Q) changes none of
        # them, and the bar's texts and tooltip were set again on each (a tooltip's change
        # event, the queue's count over every page)
        if self._state_now() == self._state:
            return
        self._refresh()
        self._state = self._state_now()  # (after: the keys the refresh worked out count)

    def _state_now(self) -> tuple:
        a = self.answers
        return (a.model_path, a.session.project.root, a.running, a.error, len(a.answers), len(a.problems),
                a._keys.version, tuple(a.session.page_ids))

    def _refresh(self) -> None:
        a = self.answers
        running = a.running
        self.progress.setVisible(running)
        self.cancel_button.setVisible(running)
        self.read_button.setEnabled(not running)
        self.show_box.setVisible(bool(a.answers))
        self.read_button.setVisible(a.model_path is not None)
        if a.model_path is None:
            self.label.setText("<b>Model</b>: none yet. Fine-tune one (Train tab) to see its answers beside the "
                               "labels here, most uncertain pages first.")
            return
        shown = self._shown_path(a.model_path, a.session.project.root)
        if a.error:
            self.label.setText(f"<b>Model</b> {escape(str(shown))}: "
                               f"<span style='color:#D7191C'>{escape(a.error)}</span>")
            return
        if running:
            self.label.setText(f"<b>Model</b> {escape(str(shown))}: reading the pages…")
            return
        queue = a.queue()
        differ = sum(1 for pid in queue if a.queue_key(pid)[0] == 0)
        # short (two lines at most in a 1024 px window): the model's run folder, not its whole path
        name = shown.parent.name if shown.name == rundir.MODEL and shown.parent.name else shown.name
        text = f"<b>Model</b> {escape(name)} · queue {len(queue)} ({differ} differ) · <b>Q</b> · <b>M</b>"
        if a.problems:
            text += f" · <span style='color:#D7191C'>{len(a.problems)} not read</span>"
        self.label.setText(text)
        self.label.setToolTip(f"{shown}: {len(a.answers)} page(s) read; the queue is the {len(queue)} page(s) still "
                              f"to review, {differ} where the model differs from the labels first, then the "
                              f"least sure")
