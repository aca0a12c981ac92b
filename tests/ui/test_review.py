"""The Review tab driven like a person would: clicks on the page view's words, keys, buttons.
Each decision must be in labels/<id>.json on disk at once."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from dxstudio.ui.page_view import B_ALPHA, I_ALPHA, IMAGE_FILL, field_colours


def on_disk(window, pid=None):
    window.session.flush_writes()  # (the app writes a decision's file on its writer thread)
    pid = pid or window.session.current
    return json.loads((window.project_root / "labels" / f"{pid}.json").read_text())


def goto_multiword_field(window):
    """Go to a page with a field grounded on 2+ words; (field, words)."""
    s = window.session
    for pid in s.page_ids:
        s.goto(pid)
        for row in s.field_rows():
            if len(row.words) >= 2 and not row.unscored:
                return row.name, row.words
    pytest.fail("no multi-word grounded field in the fixture")


def click_word(qtbot, window, i, modifier=Qt.NoModifier):
    qtbot.mouseClick(window.view.viewport(), Qt.LeftButton, modifier, window.view.word_viewport_point(i))


def test_overlay_colours_follow_the_tags(window):
    name, words = goto_multiword_field(window)
    view = window.view
    c = window.session.field_names.index(name)
    colour = field_colours(window.session.field_names)[name]
    b = view.word_brush(words[0]).color()
    i = view.word_brush(words[1]).color()
    assert (b.red(), b.green(), b.blue()) == (colour.red(), colour.green(), colour.blue())
    assert (i.red(), i.green(), i.blue()) == (colour.red(), colour.green(), colour.blue())
    scale = IMAGE_FILL if view.has_image else 1.0  # on a page image the fills start lighter
    assert view.fill_opacity == 1.0
    assert b.alpha() == round(B_ALPHA * scale) > i.alpha() == round(I_ALPHA * scale)  # B is stronger than I
    assert view.tags[words[0]] == 1 + 2 * c
    # an O word has no fill
    o_word = next(k for k, t in enumerate(view.tags) if t == 0)
    assert view.word_brush(o_word).style() == Qt.NoBrush
    # two fields get different colours
    colours = field_colours(window.session.field_names)
    assert len({colours[n].name() for n in window.session.field_names}) == len(window.session.field_names)
    # the tooltip names the word, its tag, field and grounding status
    tip = view._rects[words[0]].toolTip()
    assert view.page.words[words[0]].text in tip and f"B-{name}" in tip and "grounding:" in tip


def test_ignored_words_are_hatched(window):
    """Two fields claiming one word: the trainer ignores both (target -1); the view hatches them."""
    s = window.session
    name, words = goto_multiword_field(window)
    other = next(n for n in s.field_names if n != name)
    s.set_field(other, [words[0]])
    assert s.tags[words[0]] == -1 and s.tags[words[1]] == -1
    assert window.view.word_brush(words[0]).style() == Qt.BDiagPattern
    assert s.statuses[s.current].status == "conflicts"


def test_fix_a_field_by_clicks_and_a_key(window, qtbot):
    s = window.session
    name, words = goto_multiword_field(window)
    pid = s.current
    target = s.field_names[0]
    # choose three consecutive words that are O now
    start = next(k for k in range(len(s.tags) - 2) if all(s.tags[k + j] == 0 for j in range(3)))
    click_word(qtbot, window, start)
    click_word(qtbot, window, start + 2, Qt.ShiftModifier)
    assert window.view.selected_words() == [start, start + 1, start + 2]
    qtbot.keyClick(window.view, Qt.Key_1)
    assert on_disk(window, pid)["review"]["fixes"][target] == [start, start + 1, start + 2]
    colour = field_colours(s.field_names)[target]
    assert window.view.word_brush(start).color().rgb() == colour.rgb()
    scale = IMAGE_FILL if window.view.has_image else 1.0
    assert window.view.word_brush(start).color().alpha() == round(B_ALPHA * scale)
    assert window.view.word_brush(start + 1).color().alpha() == round(I_ALPHA * scale)
    assert window.field_panel.rows[target].title.text().count("fixed") == 1
    # ctrl-click toggles one word out of a new selection; Delete removes it from its field
    click_word(qtbot, window, start + 2)
    qtbot.keyClick(window.view, Qt.Key_Delete)
    assert on_disk(window, pid)["review"]["fixes"][target] == [start, start + 1]


def test_rubber_band_selects_words(window, qtbot):
    view = window.view
    a, b = view.word_viewport_point(0), view.word_viewport_point(1)
    from PySide6.QtCore import QPoint
    lo = QPoint(min(a.x(), b.x()) - 2, min(a.y(), b.y()) - 2)
    hi = QPoint(max(a.x(), b.x()) + 2, max(a.y(), b.y()) + 2)
    qtbot.mousePress(view.viewport(), Qt.LeftButton, Qt.NoModifier, lo)
    qtbot.mouseMove(view.viewport(), hi)
    qtbot.mouseRelease(view.viewport(), Qt.LeftButton, Qt.NoModifier, hi)
    assert {0, 1} <= set(view.selected_words())


def test_accept_exclude_undo_redo_with_keys(window, qtbot):
    s = window.session
    # a page without conflicts (accepting one with conflicts stays there to say why)
    window.goto(next(pid for pid in s.page_ids if s.statuses[pid].status == "unreviewed"))
    first = s.current
    qtbot.keyClick(window.view, Qt.Key_A)
    assert on_disk(window, first)["review"]["state"] == "accepted"
    second = s.current
    assert second != first  # accept moves on
    qtbot.keyClick(window.view, Qt.Key_X)
    assert on_disk(window, second)["review"]["state"] == "excluded"
    assert "Excluded" in window.statusBar().currentMessage()  # (the banner is the page shown now)
    qtbot.keyClick(window.view, Qt.Key_Z, Qt.ControlModifier)
    assert on_disk(window, second)["review"]["state"] == "unreviewed"
    qtbot.keyClick(window.view, Qt.Key_Z, Qt.ControlModifier)
    assert s.current == first and on_disk(window, first)["review"]["state"] == "unreviewed"
    qtbot.keyClick(window.view, Qt.Key_Z, Qt.ControlModifier | Qt.ShiftModifier)
    assert on_disk(window, first)["review"]["state"] == "accepted"
    item = window.page_list._items[first]
    assert "Accepted" in item.toolTip() or "conflicts" in item.toolTip().lower()


def test_j_k_navigation_follows_the_filtered_list(window, qtbot):
    s = window.session
    assert s.current == s.page_ids[0]
    qtbot.keyClick(window.view, Qt.Key_J)
    assert s.current == s.page_ids[1]
    assert window.page_list.list.currentItem().text() == s.page_ids[1]
    qtbot.keyClick(window.view, Qt.Key_K)
    assert s.current == s.page_ids[0]
    # the buttons do the same
    next_button = next(b for b in window.field_panel.findChildren(QPushButton) if "Next" in b.text())
    qtbot.mouseClick(next_button, Qt.LeftButton)
    assert s.current == s.page_ids[1]
    # search by a word's text narrows the list; J stays within it
    word = max((w.text for w in s.project.load_page(s.page_ids[5]).words), key=len)
    window.page_list.search.setText(word)
    visible = window.page_list.visible_ids()
    assert s.page_ids[5] in visible and len(visible) < len(s.page_ids)
    assert all(word.lower() in " ".join(w.text for w in s.project.load_page(p).words).lower() for p in visible)
    qtbot.keyClick(window.view, Qt.Key_J)
    assert s.current == next(p for p in visible if s.page_ids.index(p) > 1)
    window.page_list.search.clear()
    window.page_list.set_status_filter("accepted")
    assert window.page_list.visible_ids() == []


def test_zoom_keys_and_fit(window, qtbot):
    view = window.view
    before = view.zoom_level()
    qtbot.keyClick(view, Qt.Key_Plus)
    assert view.zoom_level() == pytest.approx(before * 1.25)
    qtbot.keyClick(view, Qt.Key_Minus)
    assert view.zoom_level() == pytest.approx(before)
    view.zoom_by(3.0)
    qtbot.keyClick(view, Qt.Key_0)
    assert view.zoom_level() == pytest.approx(before)


def test_broken_page_and_label_file_are_named_and_the_rest_works(qtbot, activate, receipts_project, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from dxstudio.project import Project
    from dxstudio.ui.app import MainWindow

    ids = Project.open(receipts_project).page_ids()
    (receipts_project / "pages" / f"{ids[1]}.json").write_text('{"id": "x", "width": 10}')
    (receipts_project / "labels" / f"{ids[2]}.json").write_text("[1, 2")
    w = activate(MainWindow(receipts_project))
    assert "2 page(s) cannot be read" in w.statusBar().currentMessage()
    w.session.goto(ids[1])
    assert w.banner.isVisible() and f"{ids[1]}.json" in w.banner.text()
    assert w.view.word_count() == 0
    w.statusBar().clearMessage()
    qtbot.keyClick(w.view, Qt.Key_A)  # refused with a message naming the file, nothing written
    assert f"{ids[1]}.json" in w.statusBar().currentMessage()
    w.session.flush_writes()
    assert not (receipts_project / "labels" / f"{ids[1]}.json").exists() or \
        json.loads((receipts_project / "labels" / f"{ids[1]}.json").read_text())["review"]["state"] == "unreviewed"
    qtbot.keyClick(w.view, Qt.Key_J)
    assert w.session.current == ids[2] and f"{ids[2]}.json" in w.banner.text() and "not JSON" in w.banner.text()
    assert "Cannot be read" in w.page_list._items[ids[2]].toolTip()
    qtbot.keyClick(w.view, Qt.Key_J)
    assert w.session.current == ids[3] and w.view.word_count() > 0
    qtbot.keyClick(w.view, Qt.Key_A)
    w.session.flush_writes()
    assert json.loads((receipts_project / "labels" / f"{ids[3]}.json").read_text())["review"]["state"] == "accepted"


def test_page_image_drawn_and_a_missing_image_named(qtbot, activate, receipts_project, tmp_path, monkeypatch):
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QGraphicsPixmapItem

    from dxstudio.project import Project
    from dxstudio.ui.app import MainWindow

    ids = Project.open(receipts_project).page_ids()
    pages = receipts_project / "pages"
    first = json.loads((pages / f"{ids[0]}.json").read_text())
    image = QImage(int(first["width"]) // 4, int(first["height"]) // 4, QImage.Format_RGB32)
    image.fill(0xFFF0F0F0)
    assert image.save(str(pages / "scan0.png"))
    first["image"] = "scan0.png"  # relative: next to the page file
    (pages / f"{ids[0]}.json").write_text(json.dumps(first))
    second = json.loads((pages / f"{ids[1]}.json").read_text())
    second["image"] = str(tmp_path / "gone.png")
    (pages / f"{ids[1]}.json").write_text(json.dumps(second))

    w = activate(MainWindow(receipts_project))
    pixmaps = [i for i in w.view.scene().items() if isinstance(i, QGraphicsPixmapItem)]
    assert len(pixmaps) == 1
    assert pixmaps[0].sceneBoundingRect().width() == pytest.approx(first["width"], rel=1e-3)
    qtbot.keyClick(w.view, Qt.Key_J)
    assert not [i for i in w.view.scene().items() if isinstance(i, QGraphicsPixmapItem)]
    assert "gone.png" in w.banner.text() and w.view.word_count() == len(second["words"])


def test_hover_shows_word_tag_field_and_grounding(window, qtbot):
    name, words = goto_multiword_field(window)
    view = window.view
    qtbot.mouseMove(view.viewport(), view.word_viewport_point(words[1]))
    qtbot.waitUntil(lambda: f"I-{name}" in window.hover_label.text(), timeout=5000)
    text = window.hover_label.text()
    assert view.page.words[words[1]].text in text and f"{name}: " in text
    status = next(r.status for r in window.session.field_rows() if r.name == name)
    assert status in text


def test_right_drag_pans_the_zoomed_page(window, qtbot):
    view = window.view
    view.zoom_by(4.0)
    bar = view.verticalScrollBar()
    bar.setValue((bar.minimum() + bar.maximum()) // 2)
    before = bar.value()
    centre = view.viewport().rect().center()
    from PySide6.QtCore import QPoint
    qtbot.mousePress(view.viewport(), Qt.RightButton, Qt.NoModifier, centre)
    qtbot.mouseMove(view.viewport(), centre + QPoint(0, 60))
    qtbot.mouseRelease(view.viewport(), Qt.RightButton, Qt.NoModifier, centre + QPoint(0, 60))
    assert bar.value() == before - 60
    assert view.selected_words() == []  # panning selects nothing
    view.resize(view.width() - 40, view.height() - 40)  # a resize keeps where the person panned
    assert not view.is_fitted()


def _strip_page():
    """A receipt-like page: a narrow column of words in the middle of a large page."""
    from dxstudio.engine.page import Page, Word

    words = tuple(Word(f"w{i}", (900.0, 1500.0 + 60 * i, 1300.0, 1550.0 + 60 * i)) for i in range(12))
    return Page("strip", 2304.0, 4096.0, words)


def test_a_page_is_fitted_at_its_final_size_until_zoomed_or_panned(qtbot):
    from PySide6.QtWidgets import QTabWidget, QWidget

    from dxstudio.ui.page_view import PageView

    # filled while its tab is hidden and tiny, as the Results tab's views are
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    tabs.addTab(QWidget(), "first")
    view = PageView()
    tabs.addTab(view, "second")
    tabs.resize(300, 200)
    tabs.show()
    qtbot.waitExposed(tabs)
    page = _strip_page()
    view.show_page(page, [0] * len(page.words), field_names=["total"])
    tabs.resize(900, 700)
    tabs.setCurrentIndex(1)
    qtbot.waitUntil(lambda: view.viewport().height() > 500, timeout=5000)

    def all_words_visible():
        shown = view.mapToScene(view.viewport().rect()).boundingRect()
        return all(shown.contains(view._rects[i].rect()) for i in range(len(page.words)))

    fitted = view.zoom_level()
    assert all_words_visible()
    assert not view.horizontalScrollBar().isVisible() and not view.verticalScrollBar().isVisible()
    # the words fill the view's height (not zoomed in on part of them, nor lost in the page)
    words_height = view.mapFromScene(view._rects[-1].rect().bottomLeft()).y() - \
        view.mapFromScene(view._rects[0].rect().topLeft()).y()
    assert words_height > 0.8 * view.viewport().height()

    tabs.resize(600, 450)  # smaller: refitted
    qtbot.waitUntil(lambda: view.zoom_level() < fitted, timeout=5000)
    assert all_words_visible() and view.is_fitted()

    view.zoom_in()  # the person zoomed: a resize keeps their zoom
    zoomed = view.zoom_level()
    tabs.resize(900, 700)
    qtbot.wait(50)
    assert view.zoom_level() == pytest.approx(zoomed) and not view.is_fitted()
    qtbot.keyClick(view, Qt.Key_0)  # 0 fits again, and follows resizes again
    assert view.is_fitted() and all_words_visible()
