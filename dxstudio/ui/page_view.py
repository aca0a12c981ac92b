"""The page view: a page (its image, else each word's box with its text) with the BIO overlay.

Public API (also used by the results screen; keep it stable):

    field_colours(fields) -> {field: QColor}       a fixed palette, in schema order
    view = PageView(parent=None)
    view.show_page(page, tags, statuses=None, predictions=None, field_names=None, image_root=None)
        page         dxstudio.engine.page.Page
        tags         one int per word: 0 = O, 1 + 2c = B of field c, 2 + 2c = I of field c,
                     -1 = ignored by the loss (drawn hatched)
        statuses     {field: grounding status} shown in the tooltips (optional)
        predictions  a model's answers to draw beside the labels: a PagePrediction, or
                     {field: FieldValue | tuple of word indices | None}. Each predicted word
                     gets a green frame when the field's predicted words equal the labelled
                     ones (right) and a red dashed frame otherwise (wrong); see
                     `prediction_marks` {field: "right" | "wrong" | "missed"}.
        field_names  the schema's fields (colours and tag names); defaults to the last ones
        image_root   folder a relative page.image is resolved against
    view.update_tags(tags, statuses=None)      new tags for the page shown, keeping zoom and pan
    view.set_predictions(predictions)         draw a model's answers anew (None: remove them)
    view.clear_page(message)                  an empty view with a message (a broken page)
    view.word_brush(i) -> QBrush              the overlay fill of word i (tests read it)
    view.word_pen(i) -> QPen
    view.word_viewport_point(i) -> QPoint     where word i is on screen (for simulated clicks)
    view.selected_words() -> list[int];  view.set_selection(indices);  view.clear_selection()
    signals: selectionChanged(list), wordHovered(int) (-1 when the mouse leaves words)
    zoom: the wheel or +/- (zoom_in, zoom_out), fit_page (0); pan: drag with the middle or
    right button, or the scroll bars. A new page is fitted to the view (its image, else its
    words), and refitted on every resize or show until the person zooms or pans (is_fitted());
    0 fits it again. Selection: click, shift-click (adds a run from the last clicked word),
    ctrl-click (toggles), drag a rectangle with the left button.

B is drawn stronger (a denser fill and a heavier frame) than I (a lighter fill);
O words get a thin grey frame; words the loss ignores get a grey hatch. Each field's name is
drawn above its first word (show_names). The fills can be made lighter or hidden, so the text
of a page image under them stays readable: view.set_fill(opacity, visible) with opacity in
0..1 scaling the fills' alpha (on a page image the fills start at IMAGE_FILL of the full
alpha); FillBar(view) is the row of controls above the page (slider, Hide fills, Names).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (QCheckBox, QGraphicsItem, QGraphicsPixmapItem, QGraphicsRectItem, QGraphicsScene,
                               QGraphicsSimpleTextItem, QGraphicsView, QHBoxLayout, QLabel, QRubberBand,
                               QSlider, QWidget)

# Colour-blind-friendly qualitative palette (Okabe-Ito, then Tableau) in schema order.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#8C6D31", "#7F3C8D",
           "#11A579", "#3969AC", "#F2B701", "#E73F74"]
B_ALPHA = 170  # B is the stronger fill
I_ALPHA = 80
SELECTION_COLOUR = QColor("#1A1AFF")
RIGHT_COLOUR = QColor("#1B9E3A")
WRONG_COLOUR = QColor("#D7191C")
IGNORED_COLOUR = QColor(90, 90, 90, 150)
IMAGE_FILL = 0.4  # on a page image the fills start lighter: the printed value must stay readable


def field_colours(fields) -> dict:
    """{field: QColor}, one fixed colour per schema position."""
    return {name: QColor(PALETTE[i % len(PALETTE)]) for i, name in enumerate(fields)}


def tag_name(tag: int, field_names) -> str:
    if tag < 0:
        return "ignored by the loss"
    if tag == 0:
        return "O"
    c, inside = (tag - 1) // 2, (tag - 1) % 2 == 1
    name = field_names[c] if c < len(field_names) else f"field {c}"
    return f"{'I' if inside else 'B'}-{name}"


def short_name(name: str) -> str:
    """A field name's shortest tag: its first three letters and an ellipsis ("subtotal" -> "sub…")."""
    return name if len(name) <= 4 else name[:3] + "\u2026"


def _tag_texts(full: str, font: QFont, full_width: float, pad: float, shorter) -> list:
    """[(text, width in pixels)] of a tag, the full text first, then shorter forms (each once)."""
    from PySide6.QtGui import QFontMetricsF

    fm = QFontMetricsF(font)
    scale = full_width / max(1e-6, fm.horizontalAdvance(full))  # (the item's own width for the full text)
    out = [(full, full_width + pad)]
    for text in (shorter(full), short_name(shorter(full))):
        if text and all(text != t for t, _ in out):
            out.append((text, fm.horizontalAdvance(text) * scale + pad))
    return out


def _prediction_words(predictions) -> dict:
    fields = getattr(predictions, "fields", predictions) or {}
    out = {}
    for name, v in fields.items():
        if v is None:
            out[name] = ()
        elif hasattr(v, "words"):
            out[name] = tuple(int(i) for i in v.words)
        else:
            out[name] = tuple(int(i) for i in v)
    return out


def _label_words(tags, field_names) -> dict:
    """{field: word indices} read back off B/I tags (ignored words do not count)."""
    out = {name: [] for name in field_names}
    for i, t in enumerate(int(t) for t in tags):
        if t > 0:
            c = (t - 1) // 2
            if c < len(field_names):
                out[field_names[c]].append(i)
    return {k: tuple(v) for k, v in out.items()}


_PIXMAPS: "OrderedDict[tuple, QPixmap]" = OrderedDict()
PIXMAP_CACHE = 48  # page images kept decoded (a 432x648 grey receipt is 0.3 MB): J / K back and forth


_DECODED: "OrderedDict[tuple, QImage]" = OrderedDict()  # decoded off the GUI thread (prefetch_images)
_DECODED_LOCK = threading.Lock()
_PREFETCH: dict = {"thread": None, "wanted": None}  # the prefetch thread and the request it has not taken yet
_PREFETCH_WAKE = threading.Condition()  # guards _PREFETCH; notified on a new request


def _image_key(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path), st.st_mtime_ns, st.st_size)


def prefetch_images(paths) -> None:
    """Decode these page images on a background thread (QImage, safe off the GUI thread), so
    that showing their page next (J, K, Q) only turns the image into a pixmap: decoding a
    page's PNG was the largest share of a page switch's own work. A newer request replaces
    one not started yet; images already decoded are skipped. paths: a list, or a function
    that returns one, called on that thread (the pages' files are read there too). The thread
    is started once and waits for the next request (a thread start cost the page switch 3-11
    ms of waiting under load)."""
    with _PREFETCH_WAKE:
        _PREFETCH["wanted"] = paths
        t = _PREFETCH["thread"]
        if t is None or not t.is_alive():
            t = _PREFETCH["thread"] = threading.Thread(target=_prefetch_run, name="dxstudio-page-images",
                                                        daemon=True)
            t.start()
        _PREFETCH_WAKE.notify()


def _prefetch_run() -> None:
    while True:
        with _PREFETCH_WAKE:
            while _PREFETCH["wanted"] is None:
                _PREFETCH_WAKE.wait()
            paths, _PREFETCH["wanted"] = _PREFETCH["wanted"], None
        try:
            paths = [Path(p) for p in (paths() if callable(paths) else paths) if p]
        except Exception:  # (a page that does not load: shown, and named, when it is opened)
            paths = []
        for path in paths:
            key = _image_key(path)
            if key is None or key in _PIXMAPS:
                continue
            with _DECODED_LOCK:
                if key in _DECODED:
                    continue
            image = QImage(str(path))
            if image.isNull():
                continue
            # in the format a pixmap keeps (the sample's PNGs are 8-bit palette images): turning
            # it into the pixmap on the GUI thread is then a copy, not a conversion of each pixel
            image = image.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied if image.hasAlphaChannel()
                                          else QImage.Format.Format_RGB32)
            with _DECODED_LOCK:
                _DECODED[key] = image
                while len(_DECODED) > 8:
                    _DECODED.popitem(last=False)


def _pixmap(path: Path) -> QPixmap:
    """The image at path, decoded once while the file stays the same (its size and time): a
    page switch draws it without reading and decoding the file again (and a page prefetched
    by prefetch_images without decoding it on the GUI thread at all). A null pixmap when it
    is missing or unreadable."""
    key = _image_key(path)
    if key is None:
        return QPixmap()
    pixmap = _PIXMAPS.get(key)
    if pixmap is None:
        with _DECODED_LOCK:
            image = _DECODED.pop(key, None)
        if image is not None:
            pixmap = QPixmap.fromImage(image)
        else:
            pixmap = QPixmap(str(path)) if path.is_file() else QPixmap()
        if pixmap.isNull():
            return pixmap
        _PIXMAPS[key] = pixmap
        while len(_PIXMAPS) > PIXMAP_CACHE:
            _PIXMAPS.popitem(last=False)
    else:
        _PIXMAPS.move_to_end(key)
    return pixmap


class _PageImageItem(QGraphicsPixmapItem):
    """The page's image. Its first paint draws it scaled straight onto the view; from then on
    it is drawn from a pixmap at the screen's pixels (DeviceCoordinateCache), made again only
    when the zoom or the size changes: scaled smoothly (SmoothPixmapTransform) at every paint
    of the view, a hover, a selection or a decision's restyle repainted it at full cost.
    The cache is not made in the page switch's own paint: making it there filled a pixmap of
    the view's size, scaled the image into it and then blended it onto the view, 2.8 ms of
    the view's 4.3 ms a J at 1920x1080 against 1.7 for the image drawn straight (Zen 5,
    docs/app.md); a later repaint makes it (its first, a hover or a decision, pays those
    1-2 ms)."""

    def __init__(self, pixmap):
        super().__init__(pixmap)
        self._cache_asked = False

    def paint(self, painter, option, widget=None):
        super().paint(painter, option, widget)
        if not self._cache_asked:
            self._cache_asked = True
            QTimer.singleShot(0, self._cache_on)  # (after this paint: not while the scene draws)

    def _cache_on(self) -> None:
        try:
            if self.scene() is not None:
                self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        except RuntimeError:  # (the page was left and its item deleted before the timer)
            pass


class PageView(QGraphicsView):
    selectionChanged = Signal(list)
    wordHovered = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.scene().setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)
        self.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing | QPainter.SmoothPixmapTransform)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.AnchorViewCenter)
        self.setBackgroundBrush(QColor("#E9ECEF"))
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.StrongFocus)
        self.page = None
        self.tags = []
        self.field_names: list[str] = []
        self.colours: dict = {}
        self.statuses: dict = {}
        self.prediction_marks: dict = {}
        self.notice = ""  # e.g. "image not found: ..."; the window shows it
        self._rects: list[QGraphicsRectItem] = []  # the page's words (the first of _word_pool)
        self._word_pool: list[QGraphicsRectItem] = []  # word items kept from page to page
        self._prediction_items = []
        self._selected: set[int] = set()
        self._anchor: int | None = None
        self._press: QPoint | None = None
        self._pan_from: QPoint | None = None
        self._band = QRubberBand(QRubberBand.Rectangle, self.viewport())
        self._hovered = -1
        self._auto_fit = True  # the page fills the view until the person zooms or pans
        self.fill_opacity = 1.0  # the person's choice, 0..1 (FillBar)
        self.fills_visible = True
        self.show_names = True
        self.name_text: dict = {}  # {field: text drawn instead of its name} (the Extract tab's confidences)
        self.has_image = False
        self._name_items = []
        self._highlight: set[int] = set()  # words matching the search (drawn with a yellow frame)
        self._highlight_items = []
        self._cursor: int | None = None  # the word the arrow keys move from
        self._predictions_drawn = None  # (page, tags, fields, {field: words}) the frames show
        self._content = QRectF()  # what fit_page shows: the page, or its words without an image

    # -- showing a page ----------------------------------------------------------------------
    def clear_page(self, message: str = "") -> None:
        self._predictions_drawn = None
        self.scene().clear()
        self._word_pool = []
        self._rects, self._prediction_items, self._name_items = [], [], []
        self._highlight_items, self._cursor = [], None
        self.page, self.tags, self._selected, self._anchor = None, [], set(), None
        self.prediction_marks = {}
        self.setBackgroundBrush(QColor("#E9ECEF"))
        if message:
            item = QGraphicsSimpleTextItem(message)
            f = QFont()
            f.setPointSize(12)
            item.setFont(f)
            item.setBrush(QBrush(WRONG_COLOUR))
            self.scene().addItem(item)
            self.scene().setSceneRect(item.boundingRect().adjusted(-20, -20, 20, 20))
            self.resetTransform()
        self.selectionChanged.emit([])

    def show_page(self, page, tags, statuses=None, predictions=None, field_names=None, image_root=None) -> None:
        if field_names is not None:
            self.field_names = list(field_names)
            self.colours = field_colours(self.field_names)
        self._clear_but_words()
        self.page = page
        self.tags = [int(t) for t in tags]
        if len(self.tags) != len(page.words):
            raise ValueError(f"page {page.id}: {len(self.tags)} tags for {len(page.words)} words")
        self.statuses = dict(statuses or {})
        self._selected, self._anchor = set(), None
        self.notice = ""
        scene = self.scene()
        w, h = float(page.width), float(page.height)
        has_image = self._add_image(page, image_root)
        self.has_image = has_image
        # Without an image the view shows the words on white, edge to edge: the page's own
        # edge would only show as a grey band beside a strip of words, like a scroll bar.
        self.setBackgroundBrush(QColor("#E9ECEF") if has_image else QColor(Qt.white))
        self._rects = self._word_items(len(page.words))
        for i, word in enumerate(page.words):
            x0, y0, x1, y1 = word.box
            rect = QRectF(x0, y0, max(x1 - x0, 1.0), max(y1 - y0, 1.0))
            item = self._rects[i]
            item.setRect(rect)
            item.setData(0, i)
            item.setToolTip(self._tooltip(i))
            if not has_image:
                self._add_text(word.text, rect)
        # (the name tags are placed once, below by fit_page, at the page's zoom and beside the
        # model's tags: placing them here too was a second placement of every tag a page switch)
        self._restyle(place_names=False)
        self.prediction_marks = {}
        self._predictions_drawn = (id(page), tuple(self.tags), tuple(self.field_names), _prediction_words(predictions)
                                   if predictions is not None else None)
        if predictions is not None:
            self._draw_predictions(predictions)
        self._draw_highlight()
        # What the view shows: the page, or without an image its words (a receipt is often a
        # narrow strip of a large page). The scene is exactly that area with a margin, so the
        # fitted page has no scroll bars and zooming in scrolls over the content only.
        content = QRectF(0, 0, w, h)
        if self._rects:
            words = self._rects[0].rect()
            for r in self._rects[1:]:
                words = words.united(r.rect())
            if not has_image:
                content = words
            else:  # the printed area with a margin of paper: a receipt is not lost in its scan
                margin = 0.04 * max(w, h)
                content = words.adjusted(-margin, -margin, margin, margin).intersected(content)
        pad = 0.03 * max(content.width(), content.height())
        self._content = content.adjusted(-pad, -pad, pad, pad)
        scene.setSceneRect(self._content)
        self._auto_fit = True
        self.fit_page()
        self.selectionChanged.emit([])

    def _clear_but_words(self) -> None:
        """Remove what the page shown drew (its image, texts, frames, tags) but its word items,
        which the next page uses again: a page switch made 135 items anew, polished, indexed
        and destroyed as many (the scene has no index: a few hundred items are found faster
        by a look at each than by keeping a tree of them up to date)."""
        scene = self.scene()
        keep = set(self._word_pool)
        for item in scene.items():
            if item not in keep and item.parentItem() is None:
                scene.removeItem(item)
        self._rects, self._prediction_items, self._name_items = [], [], []
        self._highlight_items, self._cursor = [], None

    def _word_items(self, n: int) -> list:
        """n word items: those of the page shown before, then new ones; the others hidden."""
        pool = self._word_pool
        while len(pool) < n:
            item = QGraphicsRectItem()
            item.setAcceptHoverEvents(True)
            item.setZValue(1)
            self.scene().addItem(item)
            pool.append(item)
        for item in pool[:n]:
            if not item.isVisible():
                item.show()
        for item in pool[n:]:
            if item.isVisible():
                item.hide()
                item.setData(0, None)  # (no word: word_at passes it by)
        return pool[:n]

    def update_tags(self, tags, statuses=None) -> None:
        """New tags for the page already shown (after a fix): restyle without moving the view."""
        if self.page is None:
            return
        tags = [int(t) for t in tags]
        if len(tags) != len(self._rects):
            raise ValueError(f"page {self.page.id}: {len(tags)} tags for {len(self._rects)} words")
        if tags == self.tags and (statuses is None or dict(statuses) == self.statuses):
            return  # as drawn (an accept changes no label): no restyle of every word
        self.tags = tags
        if statuses is not None:
            self.statuses = dict(statuses)
        for i, item in enumerate(self._rects):
            item.setToolTip(self._tooltip(i))
        self._restyle()

    def _add_image(self, page, image_root) -> bool:
        if not page.image:
            return False
        path = Path(page.image)
        if not path.is_absolute() and image_root is not None:
            path = Path(image_root) / path
        pixmap = _pixmap(path)
        if pixmap.isNull():
            self.notice = f"image not found or unreadable: {path}; showing the words' boxes"
            return False
        item = _PageImageItem(pixmap)
        item.setTransformationMode(Qt.SmoothTransformation)
        item.setScale(float(page.width) / pixmap.width())
        # a page whose image has another aspect than its size: stretch the height too
        sy = float(page.height) / pixmap.height()
        if abs(sy - item.scale()) > 1e-3 * sy:
            item.setScale(1.0)
            from PySide6.QtGui import QTransform
            item.setTransform(QTransform.fromScale(float(page.width) / pixmap.width(), sy))
        item.setZValue(-5)
        # (drawn from a pixmap at the screen's pixels once it has been painted: _PageImageItem)
        self.scene().addItem(item)
        return True

    def _add_text(self, text: str, rect: QRectF) -> None:
        item = QGraphicsSimpleTextItem(text)
        f = QFont("DejaVu Sans")
        f.setPixelSize(max(1, int(rect.height() * 0.72)))
        item.setFont(f)
        item.setBrush(QBrush(QColor("#212529")))
        br = item.boundingRect()
        scale = min(1.0, rect.width() / br.width()) if br.width() > 0 else 1.0
        item.setScale(scale)
        item.setPos(rect.left(), rect.top() + (rect.height() - br.height() * scale) / 2)
        item.setZValue(2)
        item.setAcceptedMouseButtons(Qt.NoButton)
        self.scene().addItem(item)

    def _tooltip(self, i: int) -> str:
        word = self.page.words[i]
        tag = self.tags[i]
        lines = [f"<b>{word.text}</b>  (word {i})", f"tag: {tag_name(tag, self.field_names)}"]
        field = None
        if tag > 0 and (tag - 1) // 2 < len(self.field_names):
            field = self.field_names[(tag - 1) // 2]
        elif tag < 0:
            lines.append("not scored: its field is not one run of words or shares a word")
        if field is not None:
            lines.append(f"field: {field}")
            lines.append(f"grounding: {self.statuses.get(field, 'unknown')}")
        return "<br>".join(lines)

    # -- styling -----------------------------------------------------------------------------
    def _brush_for(self, tag: int) -> QBrush:
        if tag < 0:
            return QBrush(IGNORED_COLOUR, Qt.BDiagPattern)
        if tag == 0:
            return QBrush(Qt.NoBrush)
        if not self.fills_visible:
            return QBrush(Qt.NoBrush)
        c, inside = (tag - 1) // 2, (tag - 1) % 2 == 1
        colour = QColor(PALETTE[c % len(PALETTE)])
        scale = self.fill_opacity * (IMAGE_FILL if self.has_image else 1.0)
        colour.setAlpha(round((I_ALPHA if inside else B_ALPHA) * scale))
        return QBrush(colour)

    def _pen_for(self, i: int) -> QPen:
        tag = self.tags[i]
        if i in self._selected:
            pen = QPen(SELECTION_COLOUR, 2.5)
            pen.setCosmetic(True)
            return pen
        if tag > 0:
            colour = QColor(PALETTE[((tag - 1) // 2) % len(PALETTE)])
            pen = QPen(colour.darker(130), 1.5 if (tag - 1) % 2 == 0 else 1.0)
        elif tag < 0:
            pen = QPen(IGNORED_COLOUR, 1.0, Qt.DashLine)
        else:
            pen = QPen(QColor(120, 120, 120, 110), 0.8)
        pen.setCosmetic(True)
        return pen

    def _restyle(self, indices=None, place_names: bool = True) -> None:
        for i in (range(len(self._rects)) if indices is None else indices):
            self._rects[i].setBrush(self._brush_for(self.tags[i]))
            self._rects[i].setPen(self._pen_for(i))
        if indices is None:
            self._draw_names(place_names)

    def set_fill(self, opacity: float | None = None, visible: bool | None = None, names: bool | None = None) -> None:
        """The fills' strength (0..1 of the full alpha), whether they are drawn at all, and
        whether the field names are drawn above their words."""
        if opacity is not None:
            self.fill_opacity = max(0.0, min(1.0, float(opacity)))
        if visible is not None:
            self.fills_visible = bool(visible)
        if names is not None:
            self.show_names = bool(names)
        if self.page is not None:
            self._restyle()

    def _draw_names(self, place: bool = True) -> None:
        """The labels' field-name tags made anew; place: shown or hidden and placed for the
        zoom now (show_page has them placed once, by fit_page, with the model's tags)."""
        for item in self._name_items:
            if item.parentItem() is None:
                self.scene().removeItem(item)
        self._name_items = []
        if not self.show_names or self.page is None:
            return
        firsts = {}
        for i, t in enumerate(self.tags):
            if t > 0:
                c = (t - 1) // 2
                firsts.setdefault(c, i)
        for c, i in firsts.items():
            name = self.field_names[c] if c < len(self.field_names) else f"field {c}"
            rect = self._rects[i].rect()
            colour = QColor(PALETTE[c % len(PALETTE)])
            # a tag of fixed screen size (11 px) just above the field's first word, at any zoom
            text = QGraphicsSimpleTextItem(self.name_text.get(name, name))
            f = QFont("DejaVu Sans")
            f.setPixelSize(11)
            f.setBold(True)
            text.setFont(f)
            text.setBrush(QBrush(QColor("white")))
            br = text.boundingRect()
            back = QGraphicsRectItem(QRectF(-2, -br.height() - 1, br.width() + 4, br.height()))
            back.setFlag(QGraphicsRectItem.ItemIgnoresTransformations, True)
            back.setPos(rect.left(), rect.top())
            back.setBrush(QBrush(colour.darker(115)))
            back.setPen(QPen(Qt.NoPen))
            back.setZValue(4)
            back.setAcceptedMouseButtons(Qt.NoButton)
            text.setParentItem(back)
            text.setPos(0, -br.height() - 1)
            text.setAcceptedMouseButtons(Qt.NoButton)
            back.setData(1, (c, i, br.width() + 4, br.height()))
            back.setData(2, _tag_texts(text.text(), f, br.width(), 4, short_name))
            self.scene().addItem(back)
            self._name_items += [back, text]
        if place:
            self._sync_names()

    def _place_names(self) -> None:
        """Put each tag (a label's field name, then a model frame's "model: field") where it
        stays inside the page's area (the scene: all that the view can show, so a tag never
        sticks out of the view at the page's right edge) and covers no other word or tag at
        the zoom shown. A label's name: above its first word (left-aligned, else ending where
        the value ends), else below it, else left or right of the field's words; a model's
        name: under the end of its frame, else under its start, above it, or beside it. Where
        every place covers something, the first place inside the page, half transparent so the
        words under it stay readable; a tag wider than the page is pushed in at its left."""
        scale = self.transform().m11() or 1.0
        # what the view shows: the page's area, and around it the view's room when it is wider
        # (a narrow receipt fitted by its height), but never past the view's edge
        bounds = self.sceneRect().united(self.mapToScene(self.viewport().rect()).boundingRect())
        bx0, by0, bx1, by1 = bounds.left(), bounds.top(), bounds.right(), bounds.bottom()
        words = [r.rect().getCoords() for r in self._rects]
        placed: list[tuple] = []
        eps = 0.5 / scale  # half a pixel: a tag may touch its neighbour's edge
        labels = self.show_names and bool(self._name_items) and self._names_fit()

        def covers(x0, y0, x1, y1, boxes) -> bool:
            return any(x0 < b[2] - eps and b[0] + eps < x1 and y0 < b[3] - eps and b[1] + eps < y1 for b in boxes)

        def place(candidates, w, h):
            """(x, y, clear) of the first candidate top-left inside the bounds that covers
            nothing, else of the one inside them that covers least (a tag hidden under another
            counts twice a word), else the first pushed inside."""
            # only the words near the tag's candidates can be covered (a page has ~100-300)
            xs = [c[0] for c in candidates]
            ys = [c[1] for c in candidates]
            near_box = (min(xs), min(ys), max(xs) + w, max(ys) + h)
            near = [b for b in words if b[0] < near_box[2] and near_box[0] < b[2] and b[1] < near_box[3]
                    and near_box[1] < b[3]]
            inside = [(x, y) for x, y in candidates
                      if x >= bx0 - eps and y >= by0 - eps and x + w <= bx1 + eps and y + h <= by1 + eps]
            for x, y in inside:
                box = (x, y, x + w, y + h)
                if not covers(*box, near) and not covers(*box, placed):
                    return x, y, True
            if inside:
                def cost(c):
                    box = (c[0], c[1], c[0] + w, c[1] + h)
                    return sum(1 for b in near if covers(*box, (b,))) + 2 * sum(1 for b in placed if covers(*box, (b,)))
                return (*min(inside, key=cost), False)
            x, y = candidates[0]
            x = max(bx0, min(x, bx1 - w))
            y = max(by0, min(y, by1 - h))
            return x, y, False

        def place_elided(options, candidates_for, h):
            """The first of a tag's texts (its full text, then shorter) that has a free place:
            (text, width, x, y); None when none has (the tag is then not drawn: a tag over a
            value hid it, and two tags over each other could be read as neither)."""
            for text, tw in options:
                w = tw / scale
                x, y, clear = place(candidates_for(w), w, h)
                if clear:
                    return text, tw, x, y
            return None

        for back in self._name_items if labels else ():
            if back.parentItem() is not None or back.data(1) is None:
                continue
            c, first, tw, th = back.data(1)
            own = [k for k, t in enumerate(self.tags) if t > 0 and (t - 1) // 2 == c]
            last = words[own[-1]] if own else words[first]
            word = words[first]
            h = (th + 1) / scale
            right = max(word[2], last[2]) if last[1] < word[3] else word[2]  # the value's end on its first line

            def label_places(w, word=word, last=last, right=right, h=h):
                return [(word[0] - 2 / scale, word[1] - h),  # above (the default)
                        (right - w, word[1] - h),  # above, ending where the value ends
                        (word[0] - 2 / scale, word[3]),  # below
                        (right - w, word[3]),  # below, ending where the value ends
                        (word[0] - w - 3 / scale, word[1]),  # left
                        (last[2] + 3 / scale, last[1])]  # right
            got = place_elided(back.data(2) or [(None, tw)], label_places, h)
            if got is None:
                back.setVisible(False)  # (its field is said in the word's tooltip and the field panel)
                continue
            text, tw, x, y = got
            if text is not None:
                self._set_label_tag_text(back, text, tw)
            w = tw / scale
            placed.append((x, y, x + w, y + h))
            # the tag's own rect is drawn from (-2, -th - 1) of its position
            back.setPos(x + 2 / scale, y + h)
            back.setVisible(True)
            back.setOpacity(1.0)
        for tag in self._prediction_items:
            data = tag.data(1)
            if not isinstance(tag, QGraphicsSimpleTextItem) or data is None:
                continue
            first, last_i, tw, th = data
            word, last = words[first], words[last_i]
            h = th / scale
            pad = 3 / scale  # the frame is 3 scene units around the words, the tag 2 px below it

            def model_places(w, word=word, last=last, h=h, pad=pad):
                return [(last[2] + pad, last[3] + pad),  # under the end of the frame, after it
                        (last[2] + pad - w, last[3] + pad),  # under the frame, ending with it
                        (word[0] - pad, word[3] + pad),  # under the frame's start
                        (last[2] + pad - w, word[1] - pad - h),  # above, ending with the frame
                        (word[0] - pad - w, word[1]),  # left of the frame
                        (last[2] + pad + 2 / scale, last[1])]  # right of the frame
            got = place_elided(tag.data(2) or [(tag.text(), tw)], model_places, h)
            if got is None:
                tag.setVisible(False)  # (the frame's tooltip names it: "model: total (wrong)")
                continue
            text, tw, x, y = got
            if tag.text() != text:
                tag.setText(text)
            w = tw / scale
            placed.append((x, y, x + w, y + h))
            tag.setPos(x, y)
            tag.setVisible(True)
            tag.setOpacity(1.0)

    def _set_label_tag_text(self, back, text: str, width: float) -> None:
        """A label's name tag shows `text` (its name or a shorter form), its box `width` wide."""
        # (the tag's text item is the one after its box in _name_items: no wrapper made anew from
        # childItems(), which crashed the scene's clearing before)
        k = next((j for j, it in enumerate(self._name_items) if it is back), None)
        child = self._name_items[k + 1] if k is not None and k + 1 < len(self._name_items) else None
        if not isinstance(child, QGraphicsSimpleTextItem) or child.text() == text:
            return
        child.setText(text)
        r = back.rect()
        back.setRect(QRectF(r.left(), r.top(), width, r.height()))

    def _names_fit(self) -> bool:
        """The words are big enough on screen to carry the 11 px name tags."""
        if not self._rects:
            return False
        heights = sorted(r.rect().height() for r in self._rects)
        return self.transform().m11() * heights[len(heights) // 2] >= 12.0

    def _sync_names(self) -> None:
        """Name tags only while the words are big enough on screen to carry them (a page
        shrunk to a thumbnail would be covered by its tags); every tag placed for the zoom."""
        if not self._rects:
            return
        if self._name_items:
            visible = self._names_fit()
            for item in self._name_items:
                if item.parentItem() is None:
                    item.setVisible(visible)
        self._place_names()

    def tag_rects(self) -> dict:
        """{tag text: the scene rect it covers} of every tag shown, the labels' field names and
        the model frames' names (tests check where they are)."""
        out = dict(self.name_rects())
        scale = self.transform().m11() or 1.0
        for tag in self._prediction_items:
            data = tag.data(1)
            if isinstance(tag, QGraphicsSimpleTextItem) and data is not None and tag.isVisible():
                pos = tag.pos()
                full = (tag.data(2) or [(tag.text(), 0)])[0][0]
                out[full] = QRectF(pos.x(), pos.y(), tag.boundingRect().width() / scale, data[3] / scale)
        return out

    def name_rects(self) -> dict:
        """{field name: the scene rect its tag covers} (tests check what it overlaps)."""
        scale = self.transform().m11() or 1.0
        out = {}
        for back in self._name_items:
            if back.parentItem() is not None or back.data(1) is None or not back.isVisible():
                continue
            c, _, tw, th = back.data(1)
            tw = back.rect().width()  # (a shorter form of the name where the full one had no room)
            name = self.field_names[c] if c < len(self.field_names) else f"field {c}"
            pos = back.pos()
            out[name] = QRectF(pos.x() - 2 / scale, pos.y() - (th + 1) / scale, tw / scale, th / scale)
        return out

    def names_visible(self) -> bool:
        return any(it.isVisible() for it in self._name_items if it.parentItem() is None)

    def name_labels(self) -> list[str]:
        """The field names drawn on the page (tests read them)."""
        return [it.text() for it in self._name_items if isinstance(it, QGraphicsSimpleTextItem)]

    def word_brush(self, i: int) -> QBrush:
        return self._rects[i].brush()

    def word_pen(self, i: int) -> QPen:
        return self._rects[i].pen()

    def word_count(self) -> int:
        return len(self._rects)

    def word_viewport_point(self, i: int) -> QPoint:
        return self.mapFromScene(self._rects[i].rect().center())

    # -- predictions (results screen) -----------------------------------------------------
    def set_predictions(self, predictions) -> None:
        """Draw a model's answers anew over the page shown (None: none), against its tags now."""
        drawn = (id(self.page), tuple(self.tags), tuple(self.field_names), _prediction_words(predictions)
                 if predictions is not None else None)
        if self.page is not None and drawn == self._predictions_drawn:
            return  # the same frames over the same labels of the same page
        self._predictions_drawn = drawn
        for item in self._prediction_items:
            self.scene().removeItem(item)
        self._prediction_items = []
        self.prediction_marks = {}
        if predictions is not None and self.page is not None:
            self._draw_predictions(predictions)
            self._place_names()  # the model's names beside the labels' ones

    def _draw_predictions(self, predictions) -> None:
        predicted = _prediction_words(predictions)
        labelled = _label_words(self.tags, self.field_names)
        for name in self.field_names:
            got, want = predicted.get(name, ()), labelled.get(name, ())
            if not got and not want:
                continue
            if got and tuple(got) == tuple(want):
                mark = "right"
            elif got:
                mark = "wrong"
            else:
                mark = "missed"
            self.prediction_marks[name] = mark
            for i in got:
                if not 0 <= i < len(self._rects):
                    continue
                r = self._rects[i].rect().adjusted(-3, -3, 3, 3)
                pen = QPen(RIGHT_COLOUR if mark == "right" else WRONG_COLOUR, 2.5,
                           Qt.SolidLine if mark == "right" else Qt.DashLine)
                pen.setCosmetic(True)
                item = self.scene().addRect(r, pen, QBrush(Qt.NoBrush))
                item.setZValue(3)
                item.setToolTip(f"model: {name} ({mark})")
                self._prediction_items.append(item)
            inside = [i for i in got if 0 <= i < len(self._rects)]
            if inside:  # the model's field name, small, under the end of its frame (_place_names)
                last = self._rects[inside[-1]].rect()
                tag = QGraphicsSimpleTextItem(f"model: {name}")
                f = QFont("DejaVu Sans")
                f.setPixelSize(9)
                tag.setFont(f)
                tag.setBrush(QBrush(RIGHT_COLOUR if mark == "right" else WRONG_COLOUR))
                tag.setFlag(QGraphicsSimpleTextItem.ItemIgnoresTransformations, True)
                tag.setPos(last.right() + 3, last.bottom() + 2)  # (placed by _place_names)
                tag.setZValue(3)
                tag.setAcceptedMouseButtons(Qt.NoButton)
                br = tag.boundingRect()
                tag.setData(1, (inside[0], inside[-1], br.width(), br.height()))
                tag.setData(2, _tag_texts(tag.text(), f, br.width(), 0, lambda t, n=name: n))
                self.scene().addItem(tag)
                self._prediction_items.append(tag)

    def prediction_labels(self) -> list[str]:
        """The field names written beside the model's frames (tests read them)."""
        return [(it.data(2) or [(it.text(), 0)])[0][0] for it in self._prediction_items
                if isinstance(it, QGraphicsSimpleTextItem)]  # (the full name, also where a shorter one is drawn)

    # -- search hits ------------------------------------------------------------------------
    def set_highlight(self, indices) -> None:
        """Frame these words (a search's hits) in yellow; [] removes the frames."""
        self._highlight = {int(i) for i in indices}
        if self.page is not None:
            self._draw_highlight()

    def highlighted_words(self) -> list[int]:
        return sorted(i for i in self._highlight if 0 <= i < len(self._rects))

    def _draw_highlight(self) -> None:
        for item in self._highlight_items:
            self.scene().removeItem(item)
        self._highlight_items = []
        for i in self.highlighted_words():
            r = self._rects[i].rect().adjusted(-2, -2, 2, 2)
            pen = QPen(QColor("#FFB000"), 3.0)
            pen.setCosmetic(True)
            item = self.scene().addRect(r, pen, QBrush(QColor(255, 214, 0, 70)))
            item.setZValue(2.5)
            item.setAcceptedMouseButtons(Qt.NoButton)
            self._highlight_items.append(item)

    # -- selection ---------------------------------------------------------------------------
    def selected_words(self) -> list[int]:
        return sorted(self._selected)

    def set_selection(self, indices) -> None:
        old = self._selected
        self._selected = {int(i) for i in indices if 0 <= int(i) < len(self._rects)}
        self._restyle(old | self._selected)
        self.selectionChanged.emit(self.selected_words())

    def clear_selection(self) -> None:
        """No word selected; the arrow keys go on from the word they were at (set a field from
        the keyboard, then move on)."""
        self._anchor = None
        self.set_selection([])

    def word_at(self, viewport_pos: QPoint) -> int:
        for item in self.items(viewport_pos):
            if item in self._name_items:
                continue
            idx = item.data(0)
            if isinstance(item, QGraphicsRectItem) and idx is not None:
                return int(idx)
        return -1

    def _click(self, i: int, modifiers) -> None:
        if i < 0:
            if not modifiers & (Qt.ShiftModifier | Qt.ControlModifier):
                self.clear_selection()
            return
        if modifiers & Qt.ShiftModifier and self._anchor is not None:
            lo, hi = sorted((self._anchor, i))
            self.set_selection(self._selected | set(range(lo, hi + 1)))
        elif modifiers & Qt.ControlModifier:
            self.set_selection(self._selected ^ {i})
            self._anchor = i
        else:
            self.set_selection([i])
            self._anchor = i
        self._cursor = i

    def mousePressEvent(self, event):
        if event.button() in (Qt.MiddleButton, Qt.RightButton):
            self._pan_from = event.position().toPoint()
            self.viewport().setCursor(Qt.ClosedHandCursor)
            event.accept()
            return
        if event.button() == Qt.LeftButton and self.page is not None:
            self._press = event.position().toPoint()
            self._band.setGeometry(self._press.x(), self._press.y(), 0, 0)
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event):
        pos = event.position().toPoint()
        if self._pan_from is not None:
            delta = pos - self._pan_from
            self._pan_from = pos
            if not delta.isNull():
                self._auto_fit = False  # the person placed the page; a resize must not undo it
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - delta.x())
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() - delta.y())
            return
        if self._press is not None and (pos - self._press).manhattanLength() > 4:
            self._band.setGeometry(QRect(self._press, pos).normalized())
            self._band.show()
            return
        hovered = self.word_at(pos) if self.page is not None else -1
        if hovered != self._hovered:
            self._hovered = hovered
            self.wordHovered.emit(hovered)
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event):
        if self._pan_from is not None and event.button() in (Qt.MiddleButton, Qt.RightButton):
            self._pan_from = None
            self.viewport().unsetCursor()
            return
        if self._press is not None and event.button() == Qt.LeftButton:
            pos = event.position().toPoint()
            mods = event.modifiers()
            if self._band.isVisible():
                self._band.hide()
                area = self.mapToScene(self._band.geometry()).boundingRect()
                hits = {i for i, r in enumerate(self._rects) if area.intersects(r.rect())}
                keep = self._selected if mods & (Qt.ShiftModifier | Qt.ControlModifier) else set()
                self.set_selection(keep | hits)
                if hits:
                    self._anchor = max(hits)
            else:
                self._click(self.word_at(pos), mods)
            self._press = None
            return
        super().mouseReleaseEvent(event)

    def leaveEvent(self, event):
        if self._hovered != -1:
            self._hovered = -1
            self.wordHovered.emit(-1)
        super().leaveEvent(event)

    # -- zoom and pan ------------------------------------------------------------------------
    def zoom_by(self, factor: float) -> None:
        self._auto_fit = False
        current = self.transform().m11()
        factor = max(0.05 / current, min(factor, 40.0 / current))
        self.scale(factor, factor)
        self._sync_names()

    def zoom_in(self) -> None:
        self.zoom_by(1.25)

    def zoom_out(self) -> None:
        self.zoom_by(0.8)

    def fit_page(self) -> None:
        """Show the whole page, and keep doing so on every resize until the person zooms or pans."""
        self._auto_fit = True
        if self.page is not None:
            self.fitInView(self._content, Qt.KeepAspectRatio)
            self._sync_names()

    def is_fitted(self) -> bool:
        """True while the view follows its size (no zoom or pan since the page was shown or 0)."""
        return self._auto_fit

    def zoom_level(self) -> float:
        return self.transform().m11()

    def wheelEvent(self, event):
        delta = event.angleDelta().y()
        if delta:
            self.zoom_by(1.0015 ** delta)
            event.accept()

    def _next_word(self, i: int, key) -> int:
        """The word after (Right), before (Left), on the row below (Down) or above (Up) word i."""
        n = len(self._rects)
        if key == Qt.Key_Right:
            return min(n - 1, i + 1)
        if key == Qt.Key_Left:
            return max(0, i - 1)
        here = self._rects[i].rect()
        cx, cy, h = here.center().x(), here.center().y(), max(here.height(), 1.0)
        best, best_d = i, None
        for k, item in enumerate(self._rects):
            r = item.rect()
            dy = r.center().y() - cy
            if (key == Qt.Key_Down and dy > 0.5 * h) or (key == Qt.Key_Up and dy < -0.5 * h):
                d = (abs(dy) / h) * 4 + abs(r.center().x() - cx) / h
                if best_d is None or d < best_d:
                    best, best_d = k, d
        return best

    def move_cursor(self, key, extend: bool = False) -> int:
        """The arrow keys: select the next word in that direction (Shift: add it to the
        selection, as a run from the anchor for Left / Right). Returns the word."""
        if self.page is None or not self._rects:
            return -1
        start = self._cursor if self._cursor is not None else (
            max(self._selected) if self._selected else (self._hovered if self._hovered >= 0 else -1))
        if start is None or start < 0:
            nxt = 0
        else:
            nxt = self._next_word(start, key)
        self._cursor = nxt
        if extend and self._anchor is not None:
            if key in (Qt.Key_Left, Qt.Key_Right):
                lo, hi = sorted((self._anchor, nxt))
                self.set_selection(set(range(lo, hi + 1)))
            else:
                self.set_selection(self._selected | {nxt})
        else:
            self.set_selection([nxt])
            self._anchor = nxt
        self.ensureVisible(self._rects[nxt].rect(), 20, 20)
        return nxt

    def keyPressEvent(self, event):
        key = event.key()
        if key in (Qt.Key_Left, Qt.Key_Right, Qt.Key_Up, Qt.Key_Down) and self.page is not None \
                and not event.modifiers() & (Qt.ControlModifier | Qt.AltModifier):
            self.move_cursor(key, extend=bool(event.modifiers() & Qt.ShiftModifier))
            event.accept()
            return
        if key in (Qt.Key_Plus, Qt.Key_Equal):
            self.zoom_in()
        elif key == Qt.Key_Minus:
            self.zoom_out()
        elif key == Qt.Key_0:
            self.fit_page()
        elif key == Qt.Key_Escape:
            self.clear_selection()
        else:
            super().keyPressEvent(event)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        # keep the whole page in view until the person zooms or pans: a view is often first
        # filled while its tab is hidden or its splitter not laid out, at a provisional size
        if self.page is not None and self._auto_fit:
            self.fit_page()

    def showEvent(self, event):
        super().showEvent(event)
        if self.page is not None and self._auto_fit:
            self.fit_page()


class FillBar(QWidget):
    """The controls of a PageView's overlay: fill strength, Hide fills (H), field names."""

    def __init__(self, view: PageView, parent=None):
        super().__init__(parent)
        self.view = view
        self.slider = QSlider(Qt.Horizontal)
        self.slider.setRange(0, 100)
        self.slider.setSingleStep(10)
        self.slider.setPageStep(20)
        self.slider.setValue(round(view.fill_opacity * 100))
        self.slider.setMaximumWidth(160)
        self.slider.setToolTip("How strong the fields' fills are ([ lighter, ] stronger); on page images they "
                               f"start at {round(IMAGE_FILL * 100)}% so the printed words stay readable")
        self.slider.setFocusPolicy(Qt.ClickFocus)
        self.hide_box = QCheckBox("Hide fills (H)")
        self.hide_box.setFocusPolicy(Qt.ClickFocus)
        self.names_box = QCheckBox("Field names")
        self.names_box.setChecked(view.show_names)
        self.names_box.setFocusPolicy(Qt.ClickFocus)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.addWidget(QLabel("Fill"))
        layout.addWidget(self.slider)
        layout.addWidget(self.hide_box)
        layout.addWidget(self.names_box)
        layout.addStretch(1)
        self.slider.valueChanged.connect(lambda v: view.set_fill(opacity=v / 100))
        self.hide_box.toggled.connect(lambda on: view.set_fill(visible=not on))
        self.names_box.toggled.connect(lambda on: view.set_fill(names=on))

    def toggle(self) -> None:
        self.hide_box.setChecked(not self.hide_box.isChecked())

    def step(self, direction: int) -> None:
        self.slider.setValue(self.slider.value() + direction * self.slider.singleStep())
