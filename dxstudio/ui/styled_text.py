"""StyledText: a short label made of a few styled runs (a colour, bold, italic, a badge's
background, a pixel size), laid out with one QTextLayout and painted by hand.

    label = StyledText(wrap=True)
    label.set_parts([("model:", Style(colour="#495057")), (" “12.50” 0.93 · ", None),
                     ("differs", Style(colour="#D7191C", bold=True))])
    label.text() -> the runs' plain text;  badge(text, colour) -> the runs of a status badge

A rich-text QLabel parses its HTML into a QTextDocument on every new text, and lays the
document out again for each size it is asked and for its paint. The field panel set about 15
such texts on every page switch (J, A, Q: each row's title and model line, the page's header
and status): about 3 ms of the GUI thread's parse at 1920x1080 (AMD Zen 3), then the layouts.
Here a new text is a list of runs, compared with the last (an unchanged text costs nothing),
and laid out once per width it is shown or measured at (one QTextLayout, no document).

wrap: the runs wrap at word boundaries (a word wider than the label breaks anywhere rather
than being cut), and the label has a height for each width (hasHeightForWidth); else one line,
as wide as its text, which is also its least width (as QLabel's without word wrap).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, QSize
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QTextCharFormat, QTextLayout, QTextOption
from PySide6.QtWidgets import QSizePolicy, QWidget

NO_WRAP = 1 << 24  # the width a line is laid out at when the text does not wrap


@dataclass(frozen=True)
class Style:
    colour: str | None = None  # the text's colour (None: the widget's palette)
    bold: bool = False
    italic: bool = False
    background: str | None = None  # a badge's fill behind the run
    pixel_size: int | None = None  # the run's font size (None: the widget's)


PLAIN = Style()


def badge(text: str, colour: str) -> list:
    """The runs of a status badge: white text on the colour, a space of fill either side."""
    return [(f"\u00a0{text}\u00a0", Style(colour="white", background=colour))]


class StyledText(QWidget):
    def __init__(self, wrap: bool = False, parent=None):
        super().__init__(parent)
        self._wrap = wrap
        self._parts: tuple = ()
        self._text = ""
        self._laid: dict = {}  # {width: (QTextLayout, height)}, a few widths
        self._least_width: int | None = None
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(wrap)
        self.setSizePolicy(policy)

    def set_parts(self, parts) -> None:
        """The text as runs [(text, Style or None)]; the same runs as shown change nothing."""
        parts = tuple((text, style or PLAIN) for text, style in parts if text)
        if parts == self._parts:
            return
        self._parts = parts
        self._text = "".join(text for text, _ in parts)
        self._forget()

    def text(self) -> str:
        return self._text

    def _forget(self) -> None:
        self._laid.clear()
        self._least_width = None
        self.updateGeometry()
        self.update()

    def _formats(self) -> list:
        out, start = [], 0
        for text, style in self._parts:
            if style != PLAIN:
                fmt = QTextCharFormat()
                if style.colour:
                    fmt.setForeground(QColor(style.colour))
                if style.background:
                    fmt.setBackground(QColor(style.background))
                if style.bold or style.italic or style.pixel_size:
                    font = QFont(self.font())
                    font.setBold(style.bold)
                    font.setItalic(style.italic)
                    if style.pixel_size:
                        font.setPixelSize(style.pixel_size)
                    fmt.setFont(font)
                run = QTextLayout.FormatRange()
                run.start, run.length, run.format = start, len(text), fmt
                out.append(run)
            start += len(text)
        return out

    def _layout(self, width: int, wrap_mode=QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere):
        """(the QTextLayout of the text at this width, its height in whole pixels)."""
        key = (width, wrap_mode)
        laid = self._laid.get(key)
        if laid is None:
            layout = QTextLayout(self._text, self.font())
            option = QTextOption()
            option.setWrapMode(wrap_mode if self._wrap and width < NO_WRAP else QTextOption.WrapMode.NoWrap)
            layout.setTextOption(option)
            layout.setFormats(self._formats())
            layout.beginLayout()
            y = 0.0
            while True:
                line = layout.createLine()
                if not line.isValid():
                    break
                line.setLineWidth(max(width, 1))
                line.setPosition(QPointF(0.0, y))
                y += line.height()
            layout.endLayout()
            if len(self._laid) >= 6:  # (a resize passes through many widths)
                self._laid.pop(next(iter(self._laid)))
            laid = self._laid[key] = (layout, math.ceil(y) if self._text else self.fontMetrics().height())
        return laid

    def _margins(self) -> tuple[int, int]:
        m = self.contentsMargins()
        return m.left() + m.right(), m.top() + m.bottom()

    def hasHeightForWidth(self) -> bool:
        return self._wrap

    def heightForWidth(self, width: int) -> int:
        across, down = self._margins()
        return self._layout(max(width - across, 1))[1] + down

    def _extent(self, width: int, wrap_mode=QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere) -> QSize:
        """The text's size laid out at this width (its widest line, its height)."""
        layout, height = self._layout(width, wrap_mode)
        wide = max((layout.lineAt(i).naturalTextWidth() for i in range(layout.lineCount())), default=0.0)
        return QSize(math.ceil(wide), height)

    def sizeHint(self) -> QSize:
        across, down = self._margins()
        size = self._extent(NO_WRAP)
        if self._wrap:  # (QLabel's guess for a word-wrapped text: 80 average characters, or a half or a quarter of that)
            width, lines = self.fontMetrics().averageCharWidth() * 80, self.fontMetrics().lineSpacing()
            if size.width() > width:
                size = self._extent(width)
            if size.height() < 4 * lines and size.width() > width // 2:
                size = self._extent(width // 2)
            if size.height() < 2 * lines and size.width() > width // 4:
                size = self._extent(width // 4)
        return QSize(size.width() + across, size.height() + down)

    def minimumSizeHint(self) -> QSize:
        if not self._wrap:
            return self.sizeHint()
        if self._least_width is None:  # the longest word (a wrapped label's least width, as QLabel's)
            self._least_width = self._extent(1, QTextOption.WrapMode.WordWrap).width()
        across, down = self._margins()
        return QSize(self._least_width + across, self._layout(NO_WRAP)[1] + down)  # (one line)

    def paintEvent(self, event):
        if not self._text:
            return
        rect = self.contentsRect()
        layout, _ = self._layout(rect.width() if self._wrap else NO_WRAP)
        p = QPainter(self)
        group = QPalette.ColorGroup.Active if self.isEnabled() else QPalette.ColorGroup.Disabled
        p.setPen(self.palette().color(group, self.foregroundRole()))
        p.setClipRect(rect)
        layout.draw(p, QPointF(rect.left(), rect.top()))

    def changeEvent(self, event):
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._forget()  # (the runs' fonts are made from the widget's)
        super().changeEvent(event)
