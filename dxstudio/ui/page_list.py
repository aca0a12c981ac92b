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


def status_icon(status: str, size: int = 12) -> QIcon:
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
        self._text_cache: dict[str, str] = {}
        self._syncing = False
        self.search.textChanged.connect(self.apply_filter)
        self.search.installEventFilter(self)
        self.filter.currentIndexChanged.connect(self.apply_filter)
        self.list.currentItemChanged.connect(self._on_current)
        session.subscribe(self._on_session)
        self.hits.hide()
        self.rebuild()
        # the pages' text for the search, read a few pages at a time while the window is idle,
        # so the first letter typed does not read every page at once
        from PySide6.QtCore import QTimer
        self._warm = QTimer(self)
        self._warm.setInterval(0)
        self._warm.timeout.connect(self._warm_texts)
        self._warm.start()

    def _warm_texts(self) -> None:
        todo = [pid for pid in self.session.page_ids if pid not in self._text_cache][:10]
        for pid in todo:
            self._page_text(pid)
        if not todo:
            self._warm.stop()

    # -- building ---------------------------------------------------------------------------
    def rebuild(self) -> None:
        self._syncing = True
        self.list.clear()
        self._items.clear()
        self._text_cache.clear()
        if hasattr(self, "_warm"):
            self._warm.start()
        for pid in self.session.page_ids:
            item = QListWidgetItem(pid)
            item.setData(Qt.UserRole, pid)
            self.list.addItem(item)
            self._items[pid] = item
            self._style_item(pid)
        self._update_summary()  # once, not once per page (it counts every page)
        self._syncing = False
        self.apply_filter()
        self._select_current()

    def _update_item(self, pid: str) -> None:
        if self._style_item(pid):
            self._update_summary()

    def _style_item(self, pid: str) -> bool:
        """A page's icon, tooltip and colour from its status; False when it has no item."""
        item = self._items.get(pid)
        if item is None:
            return False
        st = self.session.statuses[pid]
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
        for k in range(self.filter.count()):
            s = self.filter.itemData(k)
            if s == QUEUE:
                self.filter.setItemText(k, f"Model's queue ({self._queue_len})")
                continue
            n = total if s is None else counts[s]
            self.filter.setItemText(k, f"{'All pages' if s is None else STATUS_LABELS[s]} ({n})")
        reviewed = self.session.reviewed_count()
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(reviewed)
        # a page accepted by a person that still has conflicts is reviewed but not "accepted":
        # say so, so that the bar and the counts agree
        odd = sum(1 for pid in self.session.page_ids
                  if self.session._states.get(pid) == "accepted" and self.session.statuses[pid].status != "accepted")
        self.progress.setFormat(f"{reviewed} of {total} reviewed" +
                                (f" ({odd} accepted with conflicts)" if odd else ""))
        self.progress.setToolTip("Reviewed pages: accepted or excluded by a person" +
                                 (f"; {odd} of the accepted still have conflicts, so the trainer cannot use them "
                                  f"as they stand and they count under “with conflicts”" if odd else ""))

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
        if pid not in self._text_cache:
            try:
                page = self.session.project.load_page(pid)
                self._text_cache[pid] = " ".join(w.text for w in page.words).lower()
            except Exception:  # a broken page is still found by its id
                self._text_cache[pid] = ""
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
        for pid, item in self._items.items():
            item.setHidden(not self._matches(pid, queue))
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
        return [pid for pid, item in self._items.items() if not item.isHidden()]

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
