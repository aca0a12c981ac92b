"""Page images drawn from a page's own words and boxes, for pages that come without one (the
bundled sample: CORD receipts whose words and boxes are CC BY 4.0, see resources/sample/CREDITS.md).

    render_page_image(page, scale=0.5) -> bytes      a PNG: each word's text in its box, black
                                                     on paper white, 16 grey levels
    write_sample_images(project_root, scale=0.5)     pages/images/<id>.png for every page, and
                                                     "image": "images/<id>.png" in its page JSON

Deterministic for a given Qt and font (the same bytes on every call); the text is fitted to
its box, so the image shows what the model reads, nothing more. Needs a QApplication (a QGuiApplication would do, but widgets made later would fail).
Regenerate the sample's images with `python -m dxstudio.ui.page_image resources/sample`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from dxstudio.fsutil import write_bytes_atomic, write_json_atomic
from dxstudio.project import Project

PAPER = 250  # grey level of the paper
INK = 20


def render_page_image(page, scale: float = 0.5) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter

    w = max(1, round(page.width * scale))
    h = max(1, round(page.height * scale))
    img = QImage(w, h, QImage.Format_Grayscale8)
    img.fill(QColor(PAPER, PAPER, PAPER))
    p = QPainter(img)
    p.setRenderHint(QPainter.TextAntialiasing, True)
    p.setPen(QColor(INK, INK, INK))
    for word in page.words:
        x0, y0, x1, y1 = (v * scale for v in word.box)
        bw, bh = max(x1 - x0, 1.0), max(y1 - y0, 1.0)
        font = QFont("DejaVu Sans Mono")
        font.setStyleHint(QFont.Monospace)
        font.setPixelSize(max(4, round(bh * 0.85)))
        fm = QFontMetricsF(font)
        tw = fm.horizontalAdvance(word.text) or 1.0
        p.save()
        p.translate(x0, y0)
        p.scale(bw / tw, 1.0)  # the text fills its box's width, as printed
        p.setFont(font)
        p.drawText(QRectF(0, 0, tw, bh), Qt.AlignLeft | Qt.AlignVCenter, word.text)
        p.restore()
    p.end()
    # 16 grey levels: text on paper needs no more, and the file is several times smaller
    indexed = img.convertToFormat(QImage.Format_Indexed8, [QColor(v, v, v).rgb() for v in range(0, 256, 17)],
                                  Qt.ThresholdDither)
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not indexed.save(buf, "PNG", 0):
        raise OSError(f"page {page.id}: Qt could not encode the image as PNG")
    buf.close()
    return bytes(data)


def write_sample_images(project_root, scale: float = 0.5) -> int:
    project = Project.open(project_root)
    out_dir = project.images_dir
    out_dir.mkdir(exist_ok=True)
    n = 0
    for pid in project.page_ids():
        page = project.load_page(pid)
        name = f"images/{pid}.png"
        write_bytes_atomic(out_dir / f"{pid}.png", render_page_image(page, scale))
        d = page.to_dict()
        d["image"] = name
        write_json_atomic(project.page_path(pid), d)
        n += 1
    return n


if __name__ == "__main__":
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication(sys.argv[:1])
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "resources/sample")
    print(f"{write_sample_images(root)} page images in {root / 'pages' / 'images'}")
