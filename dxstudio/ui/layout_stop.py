"""LayoutStop: one widget, laid out by hand inside a widget with no layout of its own, whose
new text or look asks the layouts above for a new layout only when its size hints changed.

    LayoutStop(child, height=None, parent=None, least_only=False, follow_width=False, keep_lines=0)
    set_tip(widget, text)   setToolTip only when the tip changes

A size-hint change inside a widget (QLabel.setText always asks for one) goes up through the
layouts to the window, and each layout on the way is done again; the tab widget answers by
repainting the whole tab (QTabWidget's own layout). Here the request stops, and goes on only
when the widget's hints did change. On a page switch the banner's new note and the field rows'
texts repainted all of the Review tab (the page list, the page, every button): 6-8 ms of the GUI
thread each time at 1920x1080 (AVX2 Zen 3).

height: a fixed room of that height (the banner's), whatever the widget's hints.
least_only: only a new minimum size goes on (a tab's page: its size hint only sizes a window
not shown yet, and the Review tab's changed with every page's field rows).
follow_width: for a word-wrapped label: the room is the child's height at the stop's width
(QWidget.heightForWidth), and the stop tells its layout no height-for-width of its own. What
goes on is a new height at the width the stop has, or, for a label that does not wrap, a new
least width wider than the stop; a new preferred width alone does not (the field panel's rows
are as wide as the panel, whatever their texts prefer), nor a wrapped label's new longest word
(it is asked at the next layout of the stop: a new height, a new width). A new width (the
panel resized) measures the child again. A page switch set three wrapped labels' texts in each
field row, and with height-for-width labels every text asked the row, the rows' box and the
scroll area to lay out again at the same width (6-9 ms of a J at 1920x1080), though the labels
kept their number of lines nearly always.
keep_lines (follows the width too): the room is at least the tallest the child has been at
this width, up to that many lines, so a text with fewer lines than one before leaves its room
empty below it rather than moving what is under it (a field row's model line, one line on
this page and two on the next: the rows under it, and the panel's scroll bar, moved on every
other J, and were laid out and painted again). A taller text gets its room, and gives it
back on the next page.
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtWidgets import QSizePolicy, QWidget


def set_tip(widget: QWidget, text: str) -> None:
    """setToolTip only when the tip changes: each call sends the widget a ToolTipChange event,
    and a page switch set the same tips again (the field rows, the status badge, the page list's
    progress bar)."""
    if widget.toolTip() != text:
        widget.setToolTip(text)


class LayoutStop(QWidget):
    def __init__(self, child: QWidget, height: int | None = None, parent=None, least_only: bool = False,
                 follow_width: bool = False, keep_lines: int = 0):
        super().__init__(parent)
        self.child = child
        self._least_only = least_only
        self._follow_width = follow_width or keep_lines > 0
        self._keep_lines = keep_lines
        self._kept: dict[int, int] = {}  # keep_lines: {width: the tallest room of at most keep_lines lines yet}
        child.setParent(self)
        self._height = height
        self._hints = None
        if height is not None:
            self.setFixedHeight(height)
            self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        elif self._follow_width:  # (its height is the child's at its width: no height-for-width above it)
            self.setSizePolicy(child.sizePolicy().horizontalPolicy(), QSizePolicy.Policy.Fixed)
        else:
            self.setSizePolicy(child.sizePolicy())

    def _room(self) -> int:
        """follow_width: the child's height at the stop's width (keep_lines: at least the
        tallest it has been at that width, up to keep_lines lines)."""
        child, width = self.child, self.width()
        height = child.heightForWidth(width) if child.hasHeightForWidth() else child.sizeHint().height()
        if self._keep_lines:
            margins = child.contentsMargins()
            # (half a line of slack: a rich text's lines are not exactly the font's line spacing)
            most = (self._keep_lines + 0.5) * child.fontMetrics().lineSpacing() + margins.top() + margins.bottom()
            kept = self._kept.get(width, 0)
            if kept < height <= most:
                if len(self._kept) >= 8 and width not in self._kept:  # (a few widths: a resize passes many)
                    self._kept.pop(next(iter(self._kept)))
                self._kept[width] = kept = height
            height = max(height, kept)
        return height

    def sizeHint(self):
        if self._height is not None:
            return QSize(0, self._height)
        if self._follow_width:
            return QSize(self.child.sizeHint().width(), self._room())
        return self.child.sizeHint()

    def minimumSizeHint(self):
        if self._height is not None:
            return QSize(0, self._height)
        least, hint = self.child.minimumSize(), self.child.minimumSizeHint()
        if self._follow_width:
            return QSize(least.width() or hint.width(), self._room())
        return QSize(least.width() or hint.width(), least.height() or hint.height())

    def _pass_on_new_hints(self) -> None:
        if self._follow_width:
            # the room at this width, and for a label that does not wrap its least width (its
            # whole text). A wrapped label's least width (its longest word) is not asked here:
            # QLabel measures it, and its preferred size, by laying its text out three to five
            # times (0.3-0.5 ms for a rich text), which was most of what a new text cost; the
            # layout asks it when it lays the stop out.
            room = self._room()
            least = 0 if self.child.hasHeightForWidth() else self.child.minimumSizeHint().width()
            kept = self._hints
            if kept is not None and room == kept[0] and least <= max(kept[1], self.width()):
                return  # (a least width that still fits changes nothing on screen)
            self._hints = (room, least)
            self.updateGeometry()
            return
        hints = (None if self._least_only else self.sizeHint(), self.minimumSizeHint())
        if hints != self._hints:  # (the window's layout needs to know)
            self._hints = hints
            self.updateGeometry()

    def event(self, event):
        if event.type() == QEvent.Type.LayoutRequest:
            self._pass_on_new_hints()
            return True
        return super().event(event)

    def showEvent(self, event):
        # (a hidden widget is asked for no new layout: what changed while hidden counts now)
        super().showEvent(event)
        self._pass_on_new_hints()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self.child.setGeometry(self.rect())
        if self._follow_width and event.size().width() != event.oldSize().width():
            self._pass_on_new_hints()  # (more or fewer lines at the new width)
