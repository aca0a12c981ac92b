"""The app takes scans and photos: the Import dialog's `images` format, and a photo dropped on
the Extract tab read by OCR and shown with its fields (tests/test_ocr.py tests the OCR)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl

from dxstudio import ocr
from tests.test_ocr import WORDS, folded, text_image

_MISSING = ocr.installed("rapidocr")  # makes no engine: nothing is folded into the user's cache


@pytest.fixture(autouse=True, scope="module")
def ocr_model_cache(tmp_path_factory):
    """As tests/test_ocr.py: the folded models of this module's reads go to a temporary folder."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DXSTUDIO_OCR_CACHE", str(tmp_path_factory.mktemp("ocr-models")))
    mp.setattr(ocr, "_engines", {})
    yield
    mp.undo()


def test_import_dialog_offers_images(qtbot, tmp_path):
    from dxstudio.project import Project
    from dxstudio.ui.import_dialog import ImportDialog

    Project.create(tmp_path / "proj", "p")
    dialog = ImportDialog(tmp_path / "proj")
    qtbot.addWidget(dialog)
    index = dialog.format.findData("images")
    assert index >= 0
    dialog.format.setCurrentIndex(index)
    assert "OCR" in dialog.help.text() and "PNG" in dialog.help.text()


@pytest.mark.skipif(_MISSING is not None, reason=f"the ocr extra is not installed: {_MISSING}")
def test_a_photo_dropped_on_the_extract_tab_is_read_and_shown(window, qtbot, tmp_path):
    from PySide6.QtGui import QDropEvent

    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny", window.session.field_names)
    save_model(tmp_path / "m.safetensors", cfg, new_params(cfg, 2))
    panel = window.extract_panel
    assert panel.set_model(tmp_path / "m.safetensors")
    text_image().save(tmp_path / "photo.jpg", "JPEG", quality=92)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "photo.jpg"))])
    drop = QDropEvent(QPointF(20, 20), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    with qtbot.waitSignal(panel.finished, timeout=300000):
        panel.dropEvent(drop)
    assert [r.page.id for r in panel.results] == ["photo"] and not panel.problems
    page = panel.results[0].page
    assert page.ocr["engine"] == "rapidocr" and folded(WORDS) <= folded(w.text for w in page.words)
    assert panel.view.has_image and not panel.view.notice  # the photo under its fields

