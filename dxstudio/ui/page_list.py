"""The page list: every page with its review status, a status filter (with counts), a
progress bar of the reviewed pages and a search box.

PageList(session) observes a dxstudio.review.ReviewSession; clicking a page calls
session.goto. visible_ids() is the filtered order that J/K follow. In the search box, Enter
opens the first match (or keeps the current page when it matches) and hands the keys back to
the page (leaveRequested), Down moves into the list, Esc clears the search; clearing it keeps
the current page selected and in view.
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem,
                               QProgressBar, QVBoxLayout, QWidget)

from dxstudio.review import STATUSES
from dxstudio.ui.layout_stop import set_tip
from dxstudio.ui.worker_process import PROCESS, search_text, page_texts_at

STATUS_COLOURS = {
    "unreviewed": "#ADB5BD",
    "accepted": "#2B9348",
    "excluded": "#6C757D",
    "conflicts": "#F4A300",
    "error": "#D7191C",
}
STATUS_LABELS = {
    "unreviewed": "Unreviewed",
    "accepted": "Accepted",
    "excluded": "Excluded",
    "conflicts": "Has conflicts",
    "error": "Cannot be read",
}
# "12 accepted, 4 with conflicts": the statuses as counts read in a sentence
QUEUE = "queue"  # the filter's item for the model's review queue
COUNT_WORDS = {"unreviewed": "unreviewed", "accepted": "accepted", "excluded": "excluded",
               "conflicts": "with conflicts", "error": "cannot be read"}


_ICONS: dict = {}


def status_icon(status: str, size: int = 12) -> QIcon:
    """The status's dot (one per status and size, drawn once: 200 pages share five icons)."""
    key = (status, size)
    if key not in _ICONS:
        _ICONS[key] = _draw_status_icon(status, size)
    return _ICONS[key]


def _draw_status_icon(status: str, size: int) -> QIcon:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.transparent)
    p = QPainter(pixmap)
    p.setRenderHint(QPainter.Antialiasing)
    p.setBrush(QBrush(QColor(STATUS_COLOURS.get(status, "#000000"))))
    p.setPen(Qt.NoPen)
    p.drawEllipse(1, 1, size - 2, size - 2)
    p.end()
    return QIcon(pixmap)


class PageList(QWidget):
    pageActivated = Signal(str)
    leaveRequested = Signal()  # Enter or Esc in the search box: the keys go back to the page
    searchChanged = Signal(str)  # the search text (the page's matching words are highlighted)

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search pages (id or text)…")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Filter the list by page id or by a word on the page (Ctrl+F)")
        self.filter = QComboBox()
        self.filter.addItem("All pages", None)
        for s in STATUSES:
            self.filter.addItem(status_icon(s), STATUS_LABELS[s], s)
        self.filter.addItem(status_icon("conflicts"), "Model's queue", QUEUE)
        self.filter.setToolTip("Show only pages with this status, or the model's review queue (Q's order)")
        self.queue_source = None  # a callable giving the model's review queue (set by the window)
        self._queue_len = 0
        self.hits = QLabel()
        self.hits.setStyleSheet("color: #495057; font-size: 11px;")
        self.list = QListWidget()
        self.list.setUniformItemSizes(True)
        self.list.setAlternatingRowColors(True)
        self.progress = QProgressBar()
        self.progress.setToolTip("Reviewed pages: accepted or excluded by a person")
        self.progress.setMaximumHeight(16)
        self.progress.setStyleSheet("QProgressBar { font-size: 11px; }")
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet("color: #495057; font-size: 11px;")
        top = QHBoxLayout()
        top.addWidget(self.filter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(QLabel("<b>Pages</b>"))
        layout.addWidget(self.search)
        layout.addWidget(self.hits)
        layout.addLayout(top)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.summary)
        self._items: dict[str, QListWidgetItem] = {}
        self._visible: list[str] = []  # the ids of the items shown (apply_filter)
        self._text_cache: dict[str, str] = {}
        self._styled: dict = {}  # page id -> the status its item shows
        self._syncing = False
        self.search.textChanged.connect(self.apply_filter)
        self.search.installEventFilter(self)
        self.filter.currentIndexChanged.connect(self.apply_filter)
        self.list.currentItemChanged.connect(self._on_current)
        session.subscribe(self._on_session)
        self.hits.hide()
        self._texts_job = None
        self._texts_again = False
        self.rebuild()

    # -- the pages' text for the search: read on a background job, so the first letter typed
    # does not read every page, and no turn of the event loop reads pages (a page file is
    # 2-10 ms to read and parse on a busy machine; 200 of them are seconds)
    def _read_texts_later(self) -> None:
        if self._texts_job is not None:
            self._texts_again = True  # the page list changed while it read: once more after
            return
        from dxstudio.ui.jobs import Job

        root, ids = str(self.session.project.root), list(self.session.page_ids)

        def work(job):  # read in the worker process, 25 pages a call: the reading's Python held
            for i in range(0, len(ids), 25):  # the GIL in turns with the GUI thread (issue 23)
                if job.cancelled.is_set():
                    break
                chunk = PROCESS.call(page_texts_at, root, ids[i:i + 25])
                if i + 25 < len(ids):
                    job.report(chunk)
                else:
                    return chunk
            return {}

        self._texts_again = False
        self._texts_job = Job(work, "dxstudio-page-texts", parent=self, pooled=True)
        self._texts_job.connect(self._on_texts, self._texts_done, lambda _m: self._texts_done({}))
        self._texts_job.start()

    def _on_texts(self, chunk: dict) -> None:
        self._text_cache.update(chunk)

    def _texts_done(self, chunk: dict) -> None:
        self._text_cache.update(chunk)
        job, self._texts_job = self._texts_job, None
        if job is not None:
            job.join()
            job.deleteLater()
        if self._texts_again:
            self._read_texts_later()
        elif self.search.text().strip():  # the texts read afresh may match otherwise (a reload)
            self.apply_filter()

    def texts_ready(self) -> bool:
        """Every page's text has been read (tests, the bench)."""
        return self._texts_job is None and all(pid in self._text_cache for pid in self.session.page_ids)

    def shutdown(self) -> None:
        if self._texts_job is not None:
            self._texts_job.cancel()
            self._texts_job.wait(30)

    # -- building ---------------------------------------------------------------------------
    def rebuild(self) -> None:
        """Every page's item from the session's page list and statuses. When the pages are the
        ones listed (a schema edit, a reload that found no new page) the items stay and only
        those whose status changed are restyled; the search's page texts are read again in the
        background (a reload may have found changed pages; until then the old texts serve)."""
        self._syncing = True
        ids = list(self.session.page_ids)
        if ids != list(self._items):
            self.list.clear()
            self._items.clear()
            self._styled = {}
            for pid in ids:
                item = QListWidgetItem(pid)
                item.setData(Qt.UserRole, pid)
                self.list.addItem(item)
                self._items[pid] = item
            self._visible = list(ids)  # (new items are shown; apply_filter below hides what it must)
            self._text_cache = {pid: t for pid, t in self._text_cache.items() if pid in self._items}
        for pid in ids:
            self._style_item(pid)
        self._update_summary()  # once, not once per page (it counts every page)
        self._syncing = False
        self.apply_filter()
        self._select_current()
        self._read_texts_later()

    def _update_item(self, pid: str) -> None:
        if self._style_item(pid):
            self._update_summary()

    def _style_item(self, pid: str) -> bool:
        """A page's icon, tooltip and colour from its status; False when it has no item."""
        item = self._items.get(pid)
        if item is None:
            return False
        st = self.session.statuses[pid]
        if self._styled.get(pid) == st:
            return True  # as drawn: setting an item's icon and tooltip costs a repaint of the list
        self._styled[pid] = st
        item.setIcon(status_icon(st.status))
        tip = f"{pid}: {STATUS_LABELS[st.status]}"
        if st.message:
            tip += f"\n{st.message}"
        item.setToolTip(tip)
        item.setForeground(QBrush(QColor("#D7191C" if st.status == "error" else "#212529")))
        return True

    def _update_summary(self) -> None:
        counts = self.session.counts()
        parts = [f"{counts[s]} {COUNT_WORDS[s]}" for s in STATUSES if counts[s]]
        total = len(self.session.page_ids)
        self.summary.setText(f"{total} pages: " + ", ".join(parts))
        for k in range(self.filter.count()):  # (a text set anew, even the same, makes the box lay out again)
            s = self.filter.itemData(k)
            if s == QUEUE:
                text = f"Model's queue ({self._queue_len})"
            else:
                text = f"{'All pages' if s is None else STATUS_LABELS[s]} ({total if s is None else counts[s]})"
            if self.filter.itemText(k) != text:
                self.filter.setItemText(k, text)
        reviewed = self.session.reviewed_count()
        if (self.progress.maximum(), self.progress.value()) != (max(1, total), reviewed):
            # QProgressBar.setValue repaints at once (with its parents under the window's style
            # sheet: 5-15 ms), and the turn's paint then draws it again: held to that one paint
            self.progress.setUpdatesEnabled(False)
            self.progress.setRange(0, max(1, total))
            self.progress.setValue(reviewed)
            self.progress.setUpdatesEnabled(True)
        # a page accepted by a person that still has conflicts is reviewed but not "accepted":
        # say so, so that the bar and the counts agree
        odd = sum(1 for pid in self.session.page_ids
                  if self.session._states.get(pid) == "accepted" and self.session.statuses[pid].status != "accepted")
        fmt = f"{reviewed} of {total} reviewed" + (f" ({odd} accepted with conflicts)" if odd else "")
        if self.progress.format() != fmt:
            self.progress.setFormat(fmt)
        tip = "Reviewed pages: accepted or excluded by a person" + \
            (f"; {odd} of the accepted still have conflicts, so the trainer cannot use them "
             f"as they stand and they count under “with conflicts”" if odd else "")
        set_tip(self.progress, tip)  # (a page switch changes no count: no ToolTipChange)

    def _queue(self) -> list:
        try:
            return list(self.queue_source()) if self.queue_source is not None else []
        except Exception:  # the model's answers are optional: no queue
            return []

    def update_queue(self) -> None:
        """The model's answers or a decision changed the queue: its count and, when it is the
        filter, the list."""
        self._queue_len = len(self._queue())
        self._update_summary()
        if self.filter.currentData() == QUEUE:
            self.apply_filter()

    # -- filtering --------------------------------------------------------------------------
    def _page_text(self, pid: str) -> str:
        if pid not in self._text_cache:  # searched before the job read it: read it now
            self._text_cache[pid] = search_text(self.session.project, pid)
        return self._text_cache[pid]

    def _matches(self, pid: str, queue=None) -> bool:
        wanted = self.filter.currentData()
        if wanted == QUEUE:
            if pid not in queue:
                return False
        elif wanted is not None and self.session.statuses[pid].status != wanted:
            return False
        q = self.search.text().strip().lower()
        return not q or q in pid.lower() or q in self._page_text(pid)

    def apply_filter(self) -> None:
        queue = set(self._queue()) if self.filter.currentData() == QUEUE else None
        visible = []
        for pid, item in self._items.items():
            shown = self._matches(pid, queue)
            item.setHidden(not shown)
            if shown:
                visible.append(pid)
        self._visible = visible
        current = self._items.get(self.session.current)
        if current is not None and not current.isHidden():  # e.g. the search was cleared
            self.list.scrollToItem(current)
        q = self.search.text().strip()
        if q:
            n = len(self.visible_ids())
            self.hits.setText(f"{n} page{'s' if n != 1 else ''} match “{q}”" if n else f"no page matches “{q}”")
            self.hits.show()
        else:
            self.hits.setText("")
            self.hits.hide()
        self.searchChanged.emit(q)

    def word_hits(self, page) -> list:
        """The words of `page` that the search matches (drawn highlighted on the page)."""
        q = self.search.text().strip().lower()
        if not q or page is None:
            return []
        parts = q.split()
        words = [w.text.lower() for w in page.words]
        out = set()
        for i in range(len(words)):  # a run of words that reads as the search (one word or several)
            if len(parts) == 1:
                if parts[0] in words[i]:
                    out.add(i)
            elif i + len(parts) <= len(words) and all(p in words[i + k] for k, p in enumerate(parts)):
                out.update(range(i, i + len(parts)))
        return sorted(out)

    def eventFilter(self, obj, event):
        if obj is self.search and event.type() == QEvent.KeyPress:
            key = event.key()
            if key in (Qt.Key_Return, Qt.Key_Enter):
                visible = self.visible_ids()
                if visible and self.session.current not in visible:
                    self.pageActivated.emit(visible[0])
                self.leaveRequested.emit()
                return True
            if key == Qt.Key_Down:
                self.list.setFocus()
                visible = self.visible_ids()
                if visible and self.session.current not in visible:
                    self.pageActivated.emit(visible[0])
                return True
            if key == Qt.Key_Escape:
                self.search.clear()
                self.leaveRequested.emit()
                return True
        return super().eventFilter(obj, event)

    def visible_ids(self) -> list[str]:
        """The pages the filter and the search show, in the list's order (kept by apply_filter,
        the only place that hides an item: J and K asked every item whether it was hidden, twice
        a key, 0.3 ms each with 200 pages)."""
        return list(self._visible)

    def set_status_filter(self, status: str | None) -> None:
        self.filter.setCurrentIndex(max(0, self.filter.findData(status)))

    # -- syncing with the session -----------------------------------------------------------
    def _select_current(self) -> None:
        item = self._items.get(self.session.current)
        if item is not None and self.list.currentItem() is not item:
            self._syncing = True
            self.list.setCurrentItem(item)
            self.list.scrollToItem(item)
            self._syncing = False

    def _on_current(self, item, _previous) -> None:
        if self._syncing or item is None:
            return
        pid = item.data(Qt.UserRole)
        if pid != self.session.current:
            self.pageActivated.emit(pid)

    def _on_session(self, kind: str, pid) -> None:
        if kind == "statuses" and pid is None:
            self.rebuild()
            return
        if kind in ("statuses", "labels"):
            # a page whose status changed stays visible until the filter changes, so the
            # person does not lose the page they are working on
            self._update_item(pid)
        if kind == "page":
            self._select_current()
