"""What a real-window walk found (issue 23, m23: Xvfb at 1280x1024 under openbox, xdotool's keys
and clicks on the bundled sample; docs/app.md says what was seen). Each test drives the app with
input events and failed on the code before its fix."""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from tests.ui.conftest import click_page, click_tab

WAIT_MS = 120000


def test_accept_stays_where_it_is_when_a_page_has_a_note(win, qtbot):
    """The walk: the field panel repeated the page's note (a conflict, a field not asked) under
    its badge, one to five lines, and the buttons under it moved with every page: the click
    aimed at Accept on the next page landed on Previous. The note is the banner's (which keeps
    its room); the panel shows the badge, the note in its tooltip."""
    w, s = win, win.session
    plain = next(p for p in s.page_ids if s.statuses[p].status == "unreviewed" and not s.statuses[p].message)
    click_page(qtbot, w, plain)
    w.view.setFocus()
    accept = w.field_panel.buttons["accept"]
    y0 = accept.mapTo(w, QPoint(0, 0)).y()
    qtbot.keyClick(w.view, Qt.Key_C)  # the next page with conflicts: its note comes
    qtbot.wait(100)  # (the layout is redone on a posted event)
    st = s.statuses[s.current]
    assert st.status == "conflicts" and st.message and st.message in w.banner.text()
    assert accept.mapTo(w, QPoint(0, 0)).y() == y0
    assert w.field_panel.state.toolTip() == st.message
    # the click on Accept lands on Accept: the page with conflicts cannot be accepted, so
    # take one without a note again and click where Accept was
    where = accept.mapTo(w, accept.rect().center())  # (where it was on the page with conflicts)
    click_page(qtbot, w, plain)
    qtbot.wait(100)
    target = w.childAt(where)
    assert target is accept
    qtbot.mouseClick(target, Qt.LeftButton, pos=target.mapFrom(w, where))
    assert s.statuses[plain].status == "accepted"


def test_save_schema_leaves_the_focus_in_the_schema_not_in_the_endpoint_box(win, qtbot):
    """The walk: after Save schema (pressed with the keyboard or clicked), the disabled button
    passed the focus on to the Endpoint URL box, so the next keys typed went there."""
    w = win
    panel = w.schema_panel
    click_tab(qtbot, w, panel)
    url_before = panel.url.text()
    qtbot.mouseClick(next(b for b in panel.findChildren(type(panel.save_schema_button))
                          if b.text() == "Add field"), Qt.LeftButton)
    editor = QApplication.focusWidget()
    qtbot.keyClicks(editor, "date")
    qtbot.keyClick(editor, Qt.Key_Return)
    panel.save_schema_button.setFocus()
    qtbot.keyClick(panel.save_schema_button, Qt.Key_Space)  # Save schema, by the keyboard
    qtbot.waitUntil(lambda: not panel.schema_busy, timeout=WAIT_MS)
    assert w.session.field_names[-1] == "date"
    focused = QApplication.focusWidget()
    assert focused is not panel.url
    qtbot.keyClicks(focused, "xyz")
    assert panel.url.text() == url_before
    # what Save schema did is said once, under the schema (not again under Label pages)
    assert "Added date" in panel.schema_note.text() and "date" not in panel.result.text()


def test_extract_says_every_value_is_asked_for_a_model_whose_run_found_no_threshold(win, qtbot, tmp_path,
                                                                                  monkeypatch):
    """The walk: a run that found no LocalFirst threshold stores one per field, each None; Extract
    said "routes from its stored LocalFirst thresholds: local at or above, ask below" above a
    table where every value was "ask". It says every value is asked; with some fields' own
    thresholds it names them."""
    from PySide6.QtWidgets import QFileDialog, QPushButton

    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    w = win
    fields = w.session.field_names
    cfg = size_config("tiny", fields)
    none_of_their_own = tmp_path / "none.safetensors"
    save_model(none_of_their_own, cfg, new_params(cfg, 1),
               thresholds={"pooled": None, "fields": {f: None for f in fields}, "share": 0.99, "min_values": 5})
    some = tmp_path / "some.safetensors"
    save_model(some, cfg, new_params(cfg, 1),
               thresholds={"pooled": 0.9, "fields": {fields[0]: 0.9, **{f: None for f in fields[1:]}},
                           "share": 0.99, "min_values": 5})
    panel = w.extract_panel
    click_tab(qtbot, w, panel)
    model_button = next(b for b in panel.findChildren(QPushButton) if b.text().startswith("Model"))
    for path in (none_of_their_own, some):
        monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, p=path, **k: (str(p), "")))
        qtbot.mouseClick(model_button, Qt.LeftButton)
        text = panel.model_label.text()
        assert path.name in text
        if path is none_of_their_own:
            assert "every value is asked" in text and "local at or above" not in text
        else:
            assert f"({fields[0]}: local at or above" in text and "the other fields have none" in text
