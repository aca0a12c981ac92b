"""The field panel: each field's value, grounding status and words on the current page, with
the page decisions (accept, exclude, undo, redo, previous, next).

FieldPanel(session, actions) observes a dxstudio.review.ReviewSession. `actions` is the
main window's {name: QAction} (accept, exclude, undo, redo, prev, next): the panel's buttons
trigger the same actions as the keys, so there is one code path. The per-field buttons emit
setFieldRequested(name) (assign the selected words), clearFieldRequested(name) and
revertFieldRequested(name); a field whose document value is printed on another page
shows Go to page, which emits pageRequested(page id).

With the model's answers (panel.answers, a dxstudio.ui.model_answers.ModelAnswers), each row
also shows the model's value and confidence beside the label's, marked "agrees" or "differs",
and a "Use model (M)" button (useModelRequested(name)). One field is the current one
(framed; panel.current_field): a click on its row makes a field current, and on a new page it
is the first field where the model differs from the label. M takes the model's answer for
the current field.
"""
from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QFrame, QGridLayout, QHBoxLayout, QLabel, QPushButton, QScrollArea,
                               QSizePolicy, QToolButton, QVBoxLayout, QWidget)

from html import escape

from dxstudio.ui.layout_stop import LayoutStop, set_tip
from dxstudio.ui.page_list import STATUS_COLOURS, STATUS_LABELS
from dxstudio.ui.page_view import field_colours

GROUNDING_HELP = {
    "exact": "found on the page exactly as answered",
    "normalized": "found after normalizing case, spaces, punctuation or number format",
    "computed": "not printed (a sum or product of printed numbers): never labelled",
    "absent": "not on the page: the page is left out of training until fixed",
    "null": "no value on this page",
    "other_page": "the document's value is printed on another of its pages (Go to page shows it)",
    "fixed": "set by a person",
    "none": "not labelled yet",
    "not asked": "added to the schema after this page was labelled: left out of training until asked or set",
}
GROUNDING_COLOURS = {"exact": "#2B9348", "normalized": "#3A86FF", "computed": "#8D99AE", "absent": "#D7191C",
                     "null": "#8D99AE", "other_page": "#5E60CE", "fixed": "#7B2CBF", "none": "#ADB5BD",
                     "not asked": "#F4A300"}


# A field row's label keeps the room of up to this many lines from page to page (LayoutStop's
# keep_lines): a page switch then moves no row unless a text needs more.
ROW_LINES_KEPT = 2


def _restyle(widget, sheet: str) -> None:
    """setStyleSheet only when the sheet changes: each call re-polishes the widget under the
    window's style sheet (about 7 ms here), and the rows are refreshed on every page."""
    if widget.styleSheet() != sheet:
        widget.setStyleSheet(sheet)


def same_value_pairs(rows) -> list:
    """[(field, field, value)] of two fields with the same value on the page (total and
    subtotal): easily swapped, whatever their grounding says."""
    out = []
    for k, a in enumerate(rows):
        if not a.words or not a.text.strip():
            continue
        key = " ".join(a.text.split()).casefold()
        for b in rows[k + 1:]:
            if b.words and " ".join(b.text.split()).casefold() == key:
                out.append((a.name, b.name, a.text))
    return out


def _badge(text: str, colour: str) -> str:
    return (f"<span style='background:{colour}; color:white; border-radius:3px; padding:1px 4px;'>"
            f"&nbsp;{text}&nbsp;</span>")


class MemoLabel(QLabel):
    """A QLabel that keeps its measures (its height at each width asked, its size hint and its
    least size) for the last few texts it has shown, until its format or look changes. A page
    switch sets the field rows' texts, and each new text was measured by QLabel again: a rich
    text laid out three to five times, 0.2-0.5 ms a label (a row's title, its status badge in
    it, 4-5 of them a J at 1920x1080). Most of these texts come back on the next pages (a
    row's title changes only with its field's status: a handful of texts), and a text shown
    before is now measured from memory. What QLabel measures depends on the text, its format,
    the word wrap, indent, margin, alignment, contents margins and greatest width (all in the key) and on the
    font and style (a change of either clears the memory, changeEvent)."""

    KEPT = 16  # texts remembered per label

    def __init__(self, *args):
        super().__init__(*args)
        self._measures: dict = {}  # {key of the text and its layout: {"h": {width: height}, "hint", "least"}}

    def _memo(self) -> dict:
        m = self.contentsMargins()
        key = (self.text(), self.textFormat(), self.wordWrap(), self.indent(), self.margin(), int(self.alignment()),
               m.left(), m.top(), m.right(), m.bottom(), self.maximumWidth())
        memo = self._measures.get(key)
        if memo is None:
            if len(self._measures) >= self.KEPT:
                self._measures.pop(next(iter(self._measures)))
            memo = self._measures[key] = {"h": {}}
        return memo

    def heightForWidth(self, width: int) -> int:
        heights = self._memo()["h"]
        h = heights.get(width)
        if h is None:
            h = heights[width] = super().heightForWidth(width)
        return h

    def _kept_size(self, name: str, measure) -> QSize:
        memo = self._memo()
        size = memo.get(name)
        if size is None:
            size = memo[name] = measure()
        return QSize(size)

    def sizeHint(self):
        return self._kept_size("hint", super().sizeHint)

    def minimumSizeHint(self):
        return self._kept_size("least", super().minimumSizeHint)

    def changeEvent(self, event):
        self._measures = {}  # a font, a style sheet, enabled or not: measured again
        super().changeEvent(event)


class WrapLabel(MemoLabel):
    """A word-wrapped MemoLabel. A page switch sets the rows' texts, and the layouts above them
    (the row, its model line, the rows' box, the scroll area) then asked each label's height at
    the same width about ten times, each a new layout of its text (50 µs for the rich model
    line): 45-50 calls a label per J at 1920x1080, 4 ms of it (bench notes in docs/app.md)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.setWordWrap(True)


def _stop(label: QLabel, keep_lines: int = 0) -> LayoutStop:
    """label in a LayoutStop that follows its width (its height: its lines at that width;
    keep_lines: the room of the most lines it has had there, up to keep_lines, its text at
    the top of the room)."""
    if keep_lines:
        label.setAlignment(Qt.AlignLeft | Qt.AlignTop)
    return LayoutStop(label, follow_width=True, keep_lines=keep_lines)


class _RowsLayout(QVBoxLayout):
    """The field rows' layout: the rows keep their width whether the panel's scroll bar shows
    or not, the bar's room left empty at the right while it is hidden. A page whose rows
    crossed the panel's height showed or hid the bar, and every row got narrower or wider:
    each row and each of its labels was laid out and measured again, and all were repainted
    (7 J in 100 at 1920x1080, 33-58 ms of the GUI thread against 28-34 at the median, a
    throwaway)."""

    scroll: QScrollArea | None = None  # the scroll area the rows are in

    def setGeometry(self, rect):
        if self.scroll is not None:
            # (the rows' width: the scroll area's less the bar's, whether the bar shows or not)
            rows = self.scroll.contentsRect().width() - self.scroll.verticalScrollBar().sizeHint().width()
            if 0 < rows < rect.width():
                rect = QRect(rect.x(), rect.y(), rows, rect.height())
        super().setGeometry(rect)


class _CurrentFrame(QWidget):
    """The current field's frame: 2 px of blue over the row's top, right and bottom edges (the
    field's colour stays on the left), round at the right like the row. It takes no clicks."""

    COLOUR = "#1A1AFF"

    def __init__(self, row: QWidget):
        super().__init__(row)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setAttribute(Qt.WidgetAttribute.WA_NoSystemBackground)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        # Always shown, drawn only when on: showing or hiding a child asks its parent's layout
        # for a new layout (the row's, then the rows' box's), one more each page switch.
        self.on = False

    def set_on(self, on: bool) -> None:
        if on != self.on:
            self.on = on
            self.update(self.mask())  # (its edges: the row's texts and buttons are not painted again)

    def fit(self, rect) -> None:
        """Cover the row's rect, masked to the edges it draws on (4 px of the top, right and
        bottom; the row's contents start 6 px in): a new text in the row, or the frame drawn or
        not, repaints none of the other (the whole row's texts and buttons were painted again
        when the current field changed, and the frame with every text of its row)."""
        from PySide6.QtGui import QRegion

        self.setGeometry(rect)
        w, h, edge = rect.width(), rect.height(), 4
        self.setMask(QRegion(0, 0, w, edge) + QRegion(0, h - edge, w, edge) + QRegion(w - edge, 0, edge, h))

    def paintEvent(self, event):
        from PySide6.QtGui import QPainter, QPainterPath, QPen

        if not self.on:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pen = QPen(QColor(self.COLOUR), 2.0)
        pen.setJoinStyle(Qt.PenJoinStyle.MiterJoin)
        p.setPen(pen)
        w, h, r, left = self.width() - 1.0, self.height() - 1.0, 3.0, 6.0
        path = QPainterPath()
        path.moveTo(left, 1.0)
        path.lineTo(w - r, 1.0)
        path.quadTo(w, 1.0, w, 1.0 + r)
        path.lineTo(w, h - r)
        path.quadTo(w, h, w - r, h)
        path.lineTo(left, h)
        p.drawPath(path)


class FieldRowWidget(QFrame):
    def __init__(self, key: int, name: str, colour: QColor, panel: "FieldPanel"):
        super().__init__()
        self.name = name
        self.setFrameShape(QFrame.StyledPanel)
        self.setObjectName("fieldRow")
        # One style sheet, never changed: the current field's blue frame is a child drawn over
        # the row's edge (_CurrentFrame), shown or hidden. Changing the row's look by a
        # property or a style sheet re-polished the row and sent it a StyleChange, which laid
        # out every row's word-wrapped labels again (10-20 ms of each page switch).
        edge = f"border-left: 6px solid {colour.name()};"
        self.setStyleSheet(
            f"#fieldRow {{ {edge} border-top: 1px solid #DEE2E6; border-right: 1px solid #DEE2E6; "
            f"border-bottom: 1px solid #DEE2E6; background: white; border-radius: 4px; }}")
        self.frame = _CurrentFrame(self)
        self.title = MemoLabel()  # (its texts: the field's name and status, a few a row)
        self.title.setTextFormat(Qt.RichText)
        self.value = WrapLabel()
        self.value.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.value.setStyleSheet("font-size: 14px; font-family: 'DejaVu Sans Mono', monospace;")
        self.detail = WrapLabel()
        self.detail.setStyleSheet("color: #6C757D; font-size: 11px;")
        shortcut = f" ({key})" if key <= 9 else ""
        self.key = key
        self.set_button = QToolButton()
        self.set_button.setText(f"Set{shortcut}")
        self.clear_button = QToolButton()
        self.clear_button.setText("No value")
        self.revert_button = QToolButton()
        self.revert_button.setText("Revert")
        self.model_line = WrapLabel()
        self.model_line.setTextFormat(Qt.RichText)
        # each label in a LayoutStop: a page's new texts lay the rows out again only where a
        # label's number of lines changed (field_panel's rows were 6-9 ms of each J); the model
        # line's is shown and hidden with the model's answers
        self.model_room = _stop(self.model_line, keep_lines=ROW_LINES_KEPT)
        self.model_room.hide()
        self.use_button = QToolButton()
        self.use_button.setText("Use model (M)")
        self.use_button.hide()
        self.set_name(name)
        self.use_button.clicked.connect(lambda: panel.useModelRequested.emit(self.name))
        self.goto_button = QToolButton()  # a document's value printed on another page: jump there
        self.goto_button.setText("Go to page")
        self.goto_button.hide()
        self.goto_button.clicked.connect(lambda: self.target_page and panel.pageRequested.emit(self.target_page))
        self.target_page = None
        self.panel = panel
        self.colour = colour
        self.current = False
        self.set_button.clicked.connect(lambda: panel.setFieldRequested.emit(self.name))
        self.clear_button.clicked.connect(lambda: panel.clearFieldRequested.emit(self.name))
        self.revert_button.clicked.connect(lambda: panel.revertFieldRequested.emit(self.name))
        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        for b in (self.set_button, self.clear_button, self.revert_button, self.goto_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        # Use model sits on the model's own line: a narrow panel (1024 px screens) never hides it
        model_row = QHBoxLayout()
        model_row.setSpacing(4)
        model_row.addWidget(self.model_room, 1)
        model_row.addWidget(self.use_button, 0, Qt.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.setSpacing(3)
        for label in (self.title, self.value, self.detail):
            layout.addWidget(_stop(label, keep_lines=ROW_LINES_KEPT))
        layout.addLayout(model_row)
        layout.addLayout(buttons)
        self.frame.raise_()  # (over the row's children, which were made after it)

    def set_name(self, name: str) -> None:
        """The field this row shows (a row is kept for its place when the schema changes: its
        key and colour are its place's)."""
        self.name = name
        key = self.key
        self.set_button.setToolTip(f"Make the selected words the value of {name}" +
                                   (f"  [key {key}]" if key <= 9 else ""))
        self.clear_button.setToolTip(f"{name} has no value on this page" + (f"  [Ctrl+{key}]" if key <= 9 else ""))
        self.revert_button.setToolTip(f"Drop your fix: use the labelling model's words for {name} again")
        self.use_button.setToolTip(f"Take the model's answer as the value of {name} (undo with Ctrl+Z)")

    def set_current(self, current: bool) -> None:
        """Frame the row (the current field) or not: the frame is drawn or not, nothing of the
        row is polished or laid out again."""
        self.current = current
        self.frame.set_on(current)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self.frame.fit(self.rect())

    def show_model(self, compare) -> None:
        """The model's answer for this field (a FieldCompare), or None to hide the line."""
        if compare is None:
            self.model_room.hide()
            self.use_button.hide()
            return
        a = compare.answer
        value = f"“{escape(a.text)}” {a.confidence:.2f}" if a is not None else "<i>no value</i>"
        if compare.elsewhere:
            mark = "<span style='color:#1B9E3A'><b>same value</b></span> (printed at other words)"
        elif compare.agrees:
            mark = "<span style='color:#1B9E3A'><b>agrees</b></span>"
        else:
            mark = "<span style='color:#D7191C'><b>differs</b></span>"
        self.model_line.setText(f"<span style='color:#495057'>model:</span> {value} · {mark}")
        self.model_room.show()
        self.use_button.show()
        self.use_button.setEnabled(not compare.agrees)

    def mousePressEvent(self, event):
        self.panel.set_current_field(self.name)
        super().mousePressEvent(event)

    def show_row(self, row, same_as: str | None = None) -> None:
        colour = GROUNDING_COLOURS.get(row.status, "#6C757D")
        key = f"<span style='color:#6C757D'>[{self.key}]</span> " if self.key <= 9 else ""
        extra = " " + _badge("not scored", "#F4A300") if row.unscored else ""
        if same_as:
            extra += " " + _badge(f"same as {same_as}: check", "#D55E00")
        self.same_as = same_as
        self.title.setText(f"{key}<b>{row.name}</b> &nbsp;{_badge(row.status, colour)}{extra}")
        empty = "not asked" if row.status == "not asked" else "no value"
        self.value.setText(row.text if row.words else f"<i style='color:#ADB5BD'>{empty}</i>")
        self.value.setTextFormat(Qt.PlainText if row.words else Qt.RichText)
        parts = []
        if row.answer is not None and row.answer != row.text:
            parts.append(f"labelling model: “{row.answer}”")
        if row.words:
            parts.append("words " + ", ".join(str(i) for i in row.words))
        if row.status == "null" and row.reason in ("", "no value"):
            parts.append("the answer says this page has none")  # not "no value" twice
        else:
            parts.append(row.reason or GROUNDING_HELP.get(row.status, ""))
        if row.unscored:
            parts.append("ignored by the loss: its words are not one run or are shared with another field")
        self.detail.setText(" · ".join(p for p in parts if p))
        set_tip(self, GROUNDING_HELP.get(row.status, ""))
        self.revert_button.setEnabled(row.status == "fixed")
        self.target_page = getattr(row, "page", None)
        self.goto_button.setVisible(self.target_page is not None)
        if self.target_page is not None:
            set_tip(self.goto_button, f"Show page {self.target_page}, which holds the document's {row.name}")


class FieldPanel(QWidget):
    setFieldRequested = Signal(str)
    pageRequested = Signal(str)  # a page id to show (the page of the document holding a value)
    clearFieldRequested = Signal(str)
    revertFieldRequested = Signal(str)
    useModelRequested = Signal(str)

    def __init__(self, session, actions: dict, parent=None):
        super().__init__(parent)
        self.session = session
        self.actions = actions
        self.answers = None  # ModelAnswers, set by the window
        self.current_field: str | None = None
        self._current_page: str | None = None
        self.setMinimumWidth(300)
        self.header = QLabel()
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.state = WrapLabel()  # (the page's status badge: a few texts)
        self.state.setTextFormat(Qt.RichText)
        self.selection = QLabel()
        self.selection.setWordWrap(True)
        self.selection.setStyleSheet("color: #1A1AFF;")
        self.rows_box = QWidget()
        self.rows_layout = _RowsLayout(self.rows_box)
        # (a new size of the box repaints only what it uncovers: its rows keep their places)
        self.rows_box.setAttribute(Qt.WidgetAttribute.WA_StaticContents)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(6)
        scroll = QScrollArea()
        self._scroll = scroll
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.rows_box)
        scroll.setFrameShape(QFrame.NoFrame)
        self.rows_layout.scroll = scroll
        grid = QGridLayout()
        grid.setSpacing(4)
        self.buttons: dict[str, QPushButton] = {}
        for k, (name, text) in enumerate([("accept", "Accept page"), ("exclude", "Exclude page"),
                                          ("prev", "◀ Previous"), ("next", "Next ▶"),
                                          ("undo", "Undo"), ("redo", "Redo")]):
            b = QPushButton(text)
            action = actions[name]
            b.setToolTip(f"{action.toolTip()}  [{action.shortcut().toString()}]")
            b.clicked.connect(action.trigger)
            b.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
            self.buttons[name] = b
            if name == "accept":
                b.setStyleSheet("QPushButton { background: #2B9348; color: white; font-weight: bold; padding: 5px; }")
            grid.addWidget(b, k // 2, k % 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(_stop(self.header))
        layout.addWidget(_stop(self.state))
        layout.addLayout(grid)
        layout.addWidget(_stop(self.selection))
        layout.addWidget(scroll, 1)
        self.rows: dict[str, FieldRowWidget] = {}
        session.subscribe(self._on_session)
        self.build_rows()
        self.refresh()

    def build_rows(self) -> None:
        """A row per field of the schema. The rows of the places that stay are kept, renamed
        (a row's key and colour are its place's): a schema edit adds or removes rows, it does
        not build all of them again (each row is a dozen widgets to make and polish)."""
        kept = list(self.rows.values())
        while self.rows_layout.count():
            item = self.rows_layout.takeAt(0)
            if item.widget() is not None and item.widget() not in kept:
                item.widget().deleteLater()
        names = self.session.field_names
        for w in kept[len(names):]:
            w.deleteLater()
        kept = kept[:len(names)]
        self.rows.clear()
        colours = field_colours(names)
        for k, name in enumerate(names, 1):
            if k <= len(kept):
                w = kept[k - 1]
                w.set_name(name)
                w.show_model(None)
            else:
                w = FieldRowWidget(k, name, colours[name], self)
            self.rows[name] = w
            self.rows_layout.addWidget(w)
        self.rows_layout.addStretch(1)

    def refresh(self) -> None:
        s = self.session
        self.buttons["undo"].setEnabled(s.can_undo)
        self.buttons["redo"].setEnabled(s.can_redo)
        if s.current is None:
            self.header.setText("<b>No pages</b> — import pages into the project first")
            self.state.setText("")
            return
        pos = s.page_ids.index(s.current) + 1
        self.header.setText(f"<span style='font-size:15px'><b>{s.current}</b></span> "
                            f"<span style='color:#6C757D'>page {pos} of {len(s.page_ids)}</span>")
        st = s.statuses[s.current]
        # the badge only: the status's note (a conflict, a field not asked, the exclusion's reason)
        # is the banner's above the page, which keeps its room. Said here too, it came and went
        # with the page (one to five lines) and moved Accept and the buttons under it: a click
        # aimed at Accept on the next page landed on Previous (seen in a real-window walk).
        self.state.setText(_badge(STATUS_LABELS[st.status], STATUS_COLOURS[st.status]))
        set_tip(self.state, st.message)
        rows = s.field_rows()
        same = {}
        for a, b, _ in same_value_pairs(rows):
            same.setdefault(a, b)
            same.setdefault(b, a)
        for w in self.rows.values():
            w.setEnabled(bool(rows))
        for row in rows:
            if row.name in self.rows:
                self.rows[row.name].show_row(row, same.get(row.name))
        self.show_model()

    def show_model(self) -> None:
        """The model's answers on the rows, and the current field."""
        s = self.session
        comp = self.answers.comparison(s.current) if self.answers is not None and s.current else {}
        for name, w in self.rows.items():
            w.show_model(comp.get(name))
        if s.current != self._current_page:  # a new page: start at its first disagreement
            self._current_page = s.current
            differs = [n for n, c in comp.items() if not c.agrees]
            self.current_field = differs[0] if differs else None
        elif comp and self.current_field is not None and comp.get(self.current_field) is not None \
                and comp[self.current_field].agrees:  # taken: on to the next disagreement
            differs = [n for n, c in comp.items() if not c.agrees]
            self.current_field = differs[0] if differs else self.current_field
        for name, w in self.rows.items():
            w.set_current(name == self.current_field)
        self._show_current_row()

    def set_current_field(self, name: str | None) -> None:
        self.current_field = name if name in self.rows else None
        for n, w in self.rows.items():
            w.set_current(n == self.current_field)
        self._show_current_row()

    def _show_current_row(self) -> None:
        """The current field's row scrolled into view (at 1024x768 it sat below the fold)."""
        row = self.rows.get(self.current_field) if self.current_field else None
        if row is not None:
            from PySide6.QtCore import QTimer

            QTimer.singleShot(0, lambda: self._scroll.ensureWidgetVisible(row, 0, 6)
                              if self.rows.get(self.current_field) is row else None)

    def show_selection(self, words: list, page) -> None:
        if not words or page is None:
            self.selection.setText("Select words (click, shift-click, drag), then press a field's key 1–9.")
            _restyle(self.selection, "color: #6C757D;")
            return
        text = " ".join(page.words[i].text for i in words)
        _restyle(self.selection, "color: #1A1AFF;")
        self.selection.setText(f"Selected {len(words)} word{'s' if len(words) > 1 else ''}: “{text[:120]}”")

    def _on_session(self, kind: str, pid) -> None:
        if kind == "history":  # after a "labels" notice: only can_undo / can_redo changed
            self.buttons["undo"].setEnabled(self.session.can_undo)
            self.buttons["redo"].setEnabled(self.session.can_redo)
            return
        if kind == "statuses" and pid is not None:
            return  # the page's "labels" or "page" notice follows, and refreshes
        if kind == "statuses" and pid is None:
            if list(self.rows) != list(self.session.field_names):  # the same fields keep their rows
                self.build_rows()
            if self.session.page_ids:
                return  # the session goes to its current page next, and that notice refreshes
        self.refresh()
