"""The app's second pass (issue 12), each item driven with keys and clicks like a person would."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.ui.test_app import Endpoint

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "resources" / "sample"


def on_disk(window, pid):
    window.session.flush_writes()  # (the app writes a decision's file on its writer thread)
    return json.loads((window.project_root / "labels" / f"{pid}.json").read_text())


def click_tab(qtbot, window, index):
    bar = window.tabs.tabBar()
    qtbot.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(index).center())
    assert window.tabs.currentIndex() == index


def first_with(window, status, plain=False):
    s = window.session
    for pid in s.page_ids:
        if s.statuses[pid].status == status and (not plain or not s.statuses[pid].message):
            return pid
    pytest.skip(f"no {status} page in the fixture")


# -- defect 1: review keys only in Review ---------------------------------------------------

def test_review_keys_act_only_on_the_review_tab(window, qtbot):
    s = window.session
    pid = s.current
    click_tab(qtbot, window, 1)  # Schema & labels
    qtbot.keyClick(window, Qt.Key_A)
    qtbot.keyClick(window, Qt.Key_X)
    assert on_disk(window, pid)["review"]["state"] == "unreviewed" and s.current == pid
    click_tab(qtbot, window, 0)
    window.goto(first_with(window, "unreviewed", plain=True))
    accepted = s.current
    qtbot.keyClick(window.view, Qt.Key_A)
    assert on_disk(window, accepted)["review"]["state"] == "accepted"
    click_tab(qtbot, window, 2)  # Train: Ctrl+Z must not undo a decision on a page not shown
    qtbot.keyClick(window, Qt.Key_Z, Qt.ControlModifier)
    assert on_disk(window, accepted)["review"]["state"] == "accepted"
    assert not window.actions["undo"].isEnabled() and not window.actions["accept"].isEnabled()
    click_tab(qtbot, window, 0)
    qtbot.keyClick(window.view, Qt.Key_Z, Qt.ControlModifier)
    assert on_disk(window, accepted)["review"]["state"] == "unreviewed"


# -- defect 2: Tab after Add field -----------------------------------------------------------

def test_tab_after_add_field_edits_the_new_row(window, qtbot):
    panel = window.schema_panel
    click_tab(qtbot, window, 1)
    before = panel.fields()
    add = next(b for b in panel.findChildren(type(panel.save_schema_button)) if b.text() == "Add field")
    qtbot.mouseClick(add, Qt.LeftButton)
    editor = QApplication.focusWidget()
    editor.selectAll()
    qtbot.keyClicks(editor, "vendor")
    qtbot.keyClick(editor, Qt.Key_Tab)
    qtbot.keyClicks(QApplication.focusWidget(), "the shop's name")
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key_Return)
    qtbot.waitUntil(lambda: panel.fields()[-1]["description"] != "")  # the delegate commits queued
    after = panel.fields()
    assert after[:-1] == before  # no other field's description changed
    assert after[-1]["name"] == "vendor" and after[-1]["description"] == "the shop's name"


# -- defect 3: a new field is "not asked" until labelled -------------------------------------

def test_a_new_field_is_not_asked_until_labelled(window, qtbot, monkeypatch):
    from dxstudio.grounding import project_targets

    s = window.session
    pid = first_with(window, "unreviewed", plain=True)
    window.goto(pid)
    qtbot.keyClick(window.view, Qt.Key_A)
    assert s.statuses[pid].status == "accepted"
    old = on_disk(window, pid)
    kept_before = len(project_targets(s.project).kept)
    assert kept_before > 0
    # add a field through the schema editor
    panel = window.schema_panel
    click_tab(qtbot, window, 1)
    add = next(b for b in panel.findChildren(type(panel.save_schema_button)) if b.text() == "Add field")
    qtbot.mouseClick(add, Qt.LeftButton)
    editor = QApplication.focusWidget()
    editor.selectAll()
    qtbot.keyClicks(editor, "vendor")
    qtbot.keyClick(editor, Qt.Key_Return)
    qtbot.mouseClick(panel.save_schema_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not panel.schema_busy, timeout=60000)
    assert s.field_names[-1] == "vendor"
    # pages show it as not asked; the accepted page stays accepted (issue 23), with a note
    click_tab(qtbot, window, 0)
    window.goto(pid)
    row = next(r for r in s.field_rows() if r.name == "vendor")
    assert row.status == "not asked" and not row.words
    assert window.field_panel.rows["vendor"].value.text().endswith("not asked</i>")
    assert s.statuses[pid].status == "accepted" and "vendor not asked yet" in s.statuses[pid].message
    # training and scoring leave the field out, not the pages (issue 23)
    t = project_targets(s.project)
    assert len(t.kept) == kept_before and t.left_out == {"vendor": len(s.page_ids)}
    # Label pages asks only for the missing field, and changes no other label
    bodies = []
    endpoint = Endpoint({"vendor": "NOT ON THE PAGE"})
    orig = endpoint.server.RequestHandlerClass.do_POST

    def spy(handler):
        n = int(handler.headers.get("Content-Length", 0))
        body = handler.rfile.read(n)
        bodies.append(json.loads(body))
        handler.headers.replace_header("Content-Length", "0")
        orig(handler)
    endpoint.server.RequestHandlerClass.do_POST = spy
    try:
        panel.url.setText(endpoint.url)
        panel.model.setText("m")
        click_tab(qtbot, window, 1)
        with qtbot.waitSignal(panel.labellingFinished, timeout=60000):
            qtbot.mouseClick(panel.label_button, Qt.LeftButton)
    finally:
        endpoint.close()
    assert len(bodies) == len(s.page_ids)
    asked = json.dumps(bodies[0]["messages"])
    assert "vendor" in asked and "subtotal" not in asked and '"total"' not in asked
    new = on_disk(window, pid)
    assert {k: v for k, v in new["grounding"].items() if k != "vendor"} == old["grounding"]
    assert {k: v for k, v in new["answers"].items() if k != "vendor"} == old["answers"]
    assert new["answers"]["vendor"] == "NOT ON THE PAGE"
    assert new["review"]["state"] == "unreviewed"  # its new value was never seen: review again
    assert new["review"]["history"][-1]["op"] == "new fields asked"


# -- defect 5: accepting a page with conflicts says why and what to do ----------------------

def test_accepting_a_page_with_conflicts_says_why(window, qtbot):
    s = window.session
    window.goto(s.page_ids[0])
    qtbot.keyClick(window.view, Qt.Key_C)  # next page with conflicts
    pid = s.current
    assert s.statuses[pid].status == "conflicts"
    qtbot.keyClick(window.view, Qt.Key_A)
    assert on_disk(window, pid)["review"]["state"] == "accepted"
    assert s.current == pid  # stays, so the reason is on screen
    text = window.banner.text()
    assert window.banner.isVisible() and "but it" in text and "To use it" in text
    assert s.statuses[pid].message in text


# -- defect 9: fill opacity, hide, names ------------------------------------------------------

def test_fill_strength_hide_and_field_names(window, qtbot):
    s = window.session
    view = window.view
    pid = next((p for p in s.page_ids if s.goto(p) is None and any(r.words and not r.unscored
                                                                    for r in s.field_rows())), None)
    assert pid is not None
    row = next(r for r in s.field_rows() if r.words and not r.unscored)
    first = row.words[0]
    full = view.word_brush(first).color().alpha()
    assert row.name in view.name_labels()
    qtbot.keyClick(view, Qt.Key_BracketLeft)  # lighter
    lighter = view.word_brush(first).color().alpha()
    assert 0 < lighter < full and window.fill_bar.slider.value() == 90
    qtbot.keyClick(view, Qt.Key_H)  # hide the fills; the frames stay
    assert view.word_brush(first).style() == Qt.NoBrush and window.fill_bar.hide_box.isChecked()
    assert view.word_pen(first).color().alpha() > 0
    qtbot.keyClick(view, Qt.Key_H)
    assert view.word_brush(first).color().alpha() == lighter
    assert view.names_visible()
    for _ in range(12):  # a thumbnail-sized page would be covered by its tags: they go
        qtbot.keyClick(view, Qt.Key_Minus)
    assert not view.names_visible()
    qtbot.keyClick(view, Qt.Key_0)
    assert view.names_visible()
    bar = window.fill_bar
    qtbot.mouseClick(bar.names_box, Qt.LeftButton)
    assert view.name_labels() == []
    qtbot.mouseClick(bar.slider, Qt.LeftButton, pos=QPoint(2, bar.slider.height() // 2))
    assert bar.slider.value() < 90 and view.word_brush(first).color().alpha() < lighter


# -- minor items ------------------------------------------------------------------------------

def test_redo_is_enabled_right_after_undo(window, qtbot):
    window.goto(first_with(window, "unreviewed", plain=True))
    qtbot.keyClick(window.view, Qt.Key_A)
    redo = window.field_panel.buttons["redo"]
    assert not redo.isEnabled()
    qtbot.keyClick(window.view, Qt.Key_Z, Qt.ControlModifier)
    assert redo.isEnabled()
    qtbot.mouseClick(redo, Qt.LeftButton)
    assert not redo.isEnabled()


def test_exclude_advances_and_no_value_key(window, qtbot):
    s = window.session
    window.goto(s.page_ids[2])
    pid = s.current
    qtbot.keyClick(window.view, Qt.Key_X)
    assert on_disk(window, pid)["review"]["state"] == "excluded" and s.current == s.page_ids[3]
    first_field = s.field_names[0]
    qtbot.keyClick(window.view, Qt.Key_1, Qt.ControlModifier)
    assert on_disk(window, s.current)["review"]["fixes"][first_field] == []
    row = next(r for r in s.field_rows() if r.name == first_field)
    assert row.status == "fixed" and not row.words


def test_next_unreviewed_and_next_conflict_keys(window, qtbot):
    s = window.session
    window.goto(s.page_ids[0])
    qtbot.keyClick(window.view, Qt.Key_N)
    assert s.statuses[s.current].status == "unreviewed" and s.current != s.page_ids[0]
    qtbot.keyClick(window.view, Qt.Key_C)
    assert s.statuses[s.current].status == "conflicts"


def test_search_box_keys_keep_the_current_page(window, qtbot):
    s = window.session
    pl = window.page_list
    window.goto(s.page_ids[3])
    qtbot.keyClick(window.view, Qt.Key_F, Qt.ControlModifier)
    assert pl.search.hasFocus()
    qtbot.keyClicks(pl.search, s.page_ids[7])
    qtbot.keyClick(pl.search, Qt.Key_Return)  # opens the first match, keys back to the page
    assert s.current == s.page_ids[7] and window.view.hasFocus()
    qtbot.keyClick(window.view, Qt.Key_F, Qt.ControlModifier)
    qtbot.keyClick(pl.search, Qt.Key_Escape)  # clears; the page stays current and selected
    assert pl.search.text() == "" and s.current == s.page_ids[7]
    assert len(pl.visible_ids()) == len(s.page_ids)
    assert pl.list.currentItem().text() == s.page_ids[7] and window.view.hasFocus()
    qtbot.keyClick(window.view, Qt.Key_F, Qt.ControlModifier)
    qtbot.keyClick(pl.search, Qt.Key_Down)
    assert pl.list.hasFocus()


def test_filter_counts_progress_and_wording(window, qtbot):
    s = window.session
    c = s.counts()
    texts = [window.page_list.filter.itemText(k) for k in range(window.page_list.filter.count())]
    assert f"All pages ({len(s.page_ids)})" in texts and f"Unreviewed ({c['unreviewed']})" in texts
    if c["conflicts"]:
        assert f"{c['conflicts']} with conflicts" in window.counts_label.text()
        assert "has conflicts" not in window.counts_label.text().lower()
    assert window.page_list.progress.value() == 0
    window.goto(first_with(window, "unreviewed", plain=True))
    qtbot.keyClick(window.view, Qt.Key_A)
    qtbot.keyClick(window.view, Qt.Key_X)
    bar = window.page_list.progress
    assert bar.value() == 2 and bar.format() == f"2 of {len(s.page_ids)} reviewed"
    texts = [window.page_list.filter.itemText(k) for k in range(window.page_list.filter.count())]
    assert "Excluded (1)" in texts


def test_relaunch_opens_the_page_shown_last(window, qtbot, activate):
    from dxstudio.ui.app import MainWindow

    s = window.session
    for _ in range(5):
        qtbot.keyClick(window.view, Qt.Key_J)
    pid = s.current
    window.close()
    state = json.loads((window.project_root / ".cache" / "app-state.json").read_text())
    assert state == {"page": pid}
    again = activate(MainWindow(window.project_root))
    assert again.session.current == pid and again.page_list.list.currentItem().text() == pid


def test_window_shrinks_to_1010_and_fits_1280x1024(window, qtbot):
    assert window.minimumSizeHint().width() <= 1010 and window.minimumSize().width() <= 1010
    window.resize(1010, 640)
    QApplication.processEvents()
    assert window.width() == 1010
    from dxstudio.ui.app import fitted_size

    assert fitted_size(1280, 1024) == (1264, 880)  # fits a 1280x1024 screen with its frame
    assert fitted_size(1920, 1080) == (1400, 880)
    assert fitted_size(1024, 700) == (1008, 660)
    assert fitted_size(None, None) == (1400, 880) and fitted_size(800, 600) == (1400, 880)


def test_closing_during_training_asks_first(window, qtbot, monkeypatch):
    panel = window.training_panel
    if panel is None:
        pytest.skip("no training panel")
    monkeypatch.setattr(type(panel), "is_running", property(lambda self: True))
    window.confirm_close = True  # a person at a screen (the tests' fixture turns it off)
    stopped = []
    monkeypatch.setattr(panel, "shutdown", lambda *a, **k: stopped.append(1) or True)
    asked = []

    def answer(button):
        box = QApplication.activeModalWidget()
        asked.append(box.text() if box is not None else None)
        if box is not None:
            qtbot.mouseClick(box.button(button), Qt.LeftButton)

    QTimer.singleShot(200, lambda: answer(QMessageBox.StandardButton.No))
    window.close()
    assert asked and "Fine-tuning is still running" in asked[0]
    assert window.isVisible() and not stopped
    QTimer.singleShot(200, lambda: answer(QMessageBox.StandardButton.Yes))
    window.close()
    assert not window.isVisible() and stopped


# -- missing steps ----------------------------------------------------------------------------

def test_question_mark_shows_every_key(window, qtbot):
    qtbot.keyClick(window.view, Qt.Key_Question)
    qtbot.waitUntil(lambda: getattr(window, "keys_dialog", None) is not None and window.keys_dialog.isVisible())
    window.keys_dialog.close()
    click_tab(qtbot, window, 2)  # help works on every tab
    qtbot.keyClick(window, Qt.Key_F1)
    qtbot.waitUntil(lambda: window.keys_dialog.isVisible())
    rows = window.keys_dialog.rows()
    keys = " | ".join(k for k, _ in rows)
    for name, action in window.actions.items():
        if name.startswith(("field_", "no_value_")):
            continue
        for seq in action.shortcuts():
            assert seq.toString() in keys or seq.toString(seq.SequenceFormat.NativeText) in keys, name
    assert any("no value" in what for _, what in rows)


def test_export_reviewed_labels_as_jsonl_and_csv(window, qtbot, tmp_path, monkeypatch):
    import csv

    from PySide6.QtWidgets import QFileDialog

    s = window.session
    window.goto(first_with(window, "unreviewed", plain=True))
    pid = s.current
    rows = {r.name: r for r in s.field_rows()}
    qtbot.keyClick(window.view, Qt.Key_A)
    out = tmp_path / "reviewed.jsonl"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    qtbot.keyClick(window.view, Qt.Key_E, Qt.ControlModifier)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == [pid]
    for name, r in rows.items():
        assert lines[0]["fields"][name]["words"] == list(r.words)
        assert lines[0]["fields"][name]["value"] == (r.text or None)
    out = tmp_path / "reviewed.csv"
    qtbot.keyClick(window.view, Qt.Key_E, Qt.ControlModifier)
    table = list(csv.reader(out.open()))
    assert table[0] == ["id"] + s.field_names and table[1][0] == pid
    assert table[1][1:] == [rows[n].text for n in s.field_names]


def test_import_pages_in_the_background_with_a_report(window, qtbot, tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    page = json.loads((window.project_root / "pages" / f"{window.session.page_ids[0]}.json").read_text())
    for k in range(3):
        page["id"] = f"new_{k}"
        (src / f"new_{k}.json").write_text(json.dumps(page))
    (src / "broken.json").write_text("{not json")
    n_before = len(window.session.page_ids)
    qtbot.keyClick(window, Qt.Key_I, Qt.ControlModifier)
    dialog = window._jobs[-1]
    qtbot.waitExposed(dialog)
    dialog.format.setCurrentIndex(dialog.format.findData("json"))
    dialog.source.setText(str(src))
    with qtbot.waitSignal(dialog.imported, timeout=60000) as done:
        qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    assert done.args[0]["added"] == 3 and len(done.args[0]["errors"]) == 1
    text = dialog.report.toPlainText()
    assert "Added 3 page(s)" in text and "Skipped 1 file(s)" in text and "broken.json" in text
    # the window re-reads the project on a background job (issue 23): the pages are there once it is applied
    qtbot.waitUntil(lambda: len(window.session.page_ids) == n_before + 3 and not window.reloader.busy, timeout=60000)
    assert dialog.progress.value() == dialog.progress.maximum()


def test_new_project_from_the_file_menu(window, qtbot, tmp_path):
    from dxstudio.project import Project

    qtbot.keyClick(window, Qt.Key_N, Qt.ControlModifier)
    dialog = window._jobs[-1]
    qtbot.waitExposed(dialog)
    dialog.folder.setText(str(tmp_path / "invoices"))
    qtbot.keyClicks(dialog.name, "Invoices")
    qtbot.keyClicks(dialog.fields, "total, date = the invoice date")
    qtbot.mouseClick(dialog.create_button, Qt.LeftButton)
    p = Project.open(tmp_path / "invoices")
    assert p.name == "Invoices" and p.field_names == ["total", "date"]
    assert p.field("date").description == "the invoice date"
    opened = window._jobs[-1]
    assert opened is not dialog and opened.project_root == tmp_path / "invoices"
    assert "Import pages" in opened.banner.text()
    opened.close()
    # a folder that is already a project is refused with the file named
    dialog2_count = len(window._jobs)
    qtbot.keyClick(window, Qt.Key_N, Qt.ControlModifier)
    d2 = window._jobs[dialog2_count]
    d2.folder.setText(str(tmp_path / "invoices"))
    qtbot.mouseClick(d2.create_button, Qt.LeftButton)
    assert "already exists" in d2.message.text() and "dxproject.json" in d2.message.text()


def test_extract_tab_reads_pages_and_saves_json_lines(window, qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny", window.session.field_names)
    model = tmp_path / "m.safetensors"
    save_model(model, cfg, new_params(cfg, 1))
    panel = window.extract_panel
    assert panel.set_model(model) and "every value is asked" in panel.model_label.text()
    pages = [window.project_root / "pages" / f"{pid}.json" for pid in window.session.page_ids[:2]]
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    click_tab(qtbot, window, window.tabs.count() - 1)  # Extract, the last tab
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(p) for p in pages] + [str(bad)], ""))
    with qtbot.waitSignal(panel.finished, timeout=120000):
        qtbot.mouseClick(panel.open_button, Qt.LeftButton)
    assert len(panel.results) == 2 and len(panel.problems) == 1 and "bad.json" in panel.problems[0]
    assert panel.table.rowCount() == len(window.session.field_names)
    assert panel.view.page is not None and panel.view.page.id == window.session.page_ids[0]
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    qtbot.mouseClick(panel.save_button, Qt.LeftButton)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == window.session.page_ids[:2]
    assert set(lines[0]["fields"]) == set(window.session.field_names)
    for v in lines[0]["fields"].values():  # no stored threshold: every value is asked
        assert v["route"] == "ask" and (v["confidence"] is None or 0 <= v["confidence"] <= 1)




def test_the_sample_has_page_images_drawn_from_its_words(qtbot, activate, tmp_path, monkeypatch, qapp):
    from PySide6.QtGui import QImage

    from dxstudio.project import Project
    from dxstudio.ui.app import MainWindow, sample_project
    from dxstudio.ui.page_image import render_page_image

    if not (SAMPLE / "dxproject.json").exists():
        pytest.skip("no bundled sample")
    project = Project.open(SAMPLE)
    total = 0
    for pid in project.page_ids():
        page = project.load_page(pid)
        assert page.image == f"images/{pid}.png"
        path = SAMPLE / "pages" / page.image
        total += path.stat().st_size
    assert total < 3_000_000  # modest
    page = project.load_page(project.page_ids()[0])
    png = render_page_image(page)
    assert png == render_page_image(page)  # deterministic
    img = QImage.fromData(png)
    assert (img.width(), img.height()) == (round(page.width / 2), round(page.height / 2))
    assert "CC BY 4.0" in (SAMPLE / "CREDITS.md").read_text() and "page_image.py" in (SAMPLE / "CREDITS.md").read_text()
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    w = activate(MainWindow(sample_project()))
    assert w.view.has_image and not w.view.notice
    qtbot.keyClick(w.view, Qt.Key_J)
    assert w.view.has_image and not w.view.notice


def test_a_failing_endpoint_is_said_once_with_an_empty_bar(window, qtbot):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Refuse(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": "model not found"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    panel = window.schema_panel
    try:
        panel.url.setText(f"http://127.0.0.1:{server.server_address[1]}/v1")
        panel.model.setText("m")
        panel.force.setChecked(True)  # ask every page again
        click_tab(qtbot, window, 1)
        with qtbot.waitSignal(panel.labellingFinished, timeout=60000) as done:
            qtbot.mouseClick(panel.label_button, Qt.LeftButton)
    finally:
        server.shutdown()
        server.server_close()
    result = done.args[0]
    assert result["labelled"] == 0 and len(result["errors"]) == 3 and result["stopped"]
    text = panel.result.text()
    assert text.count("HTTP 404") == 1 and "3 page(s) failed" in text
    assert panel.progress.value() == 0 and panel.progress.format() == "0 of 3 page(s) labelled"


def test_dropping_pdfs_on_the_extract_tab(window, qtbot, tmp_path):
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent

    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params
    from tests.test_importers import minimal_pdf

    cfg = size_config("tiny", window.session.field_names)
    save_model(tmp_path / "m.safetensors", cfg, new_params(cfg, 2))
    panel = window.extract_panel
    assert panel.set_model(tmp_path / "m.safetensors")
    (tmp_path / "invoice.pdf").write_bytes(minimal_pdf([(72, 700, "Invoice No 42"), (72, 680, "Total 12.50")]))
    (tmp_path / "scan.pdf").write_bytes(minimal_pdf([]))
    click_tab(qtbot, window, window.tabs.count() - 1)  # Extract, the last tab
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / n)) for n in ("invoice.pdf", "scan.pdf")])
    enter = QDragEnterEvent(QPoint(20, 20), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    panel.dragEnterEvent(enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(20, 20), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.dropEvent(drop)  # (Qt delivers a drop only inside a real drag; the handler is the same)
    assert [r.page.id for r in panel.results] == ["invoice"]
    assert [w.text for w in panel.view.page.words][:3] == ["Invoice", "No", "42"]
    assert panel.view.has_image and not panel.view.notice  # the PDF page rendered under its fields
    image_dir = panel._image_dir
    assert image_dir.is_dir()
    window.close()
    assert not image_dir.exists()  # the rendered pages go with the window
    assert len(panel.problems) == 1 and "scan.pdf" in panel.problems[0] and "no text layer" in panel.problems[0]
    assert "1 file(s) skipped" in panel.note.text()


def _sroie_folder(dst, n: int):
    """A SROIE-shaped folder (box/*.csv with 8 corner numbers and the text, key/*.json) of n
    small receipts made here, so the import test needs no ../shared."""
    import json

    (dst / "box").mkdir(parents=True)
    (dst / "key").mkdir()
    for i in range(n):
        lines = [(f"SHOP {i} SDN BHD", 10), ("12 JALAN MAJU", 40), (f"0{i + 1}/03/2018", 70), (f"TOTAL {i + 5}.50", 100)]
        rows = [f"20,{y},300,{y},300,{y + 20},20,{y + 20},{text}" for text, y in lines]
        (dst / "box" / f"r{i:03d}.csv").write_text("\n".join(rows) + "\n")
        (dst / "key" / f"r{i:03d}.json").write_text(json.dumps({
            "company": f"SHOP {i} SDN BHD", "date": f"0{i + 1}/03/2018", "address": "12 JALAN MAJU",
            "total": f"{i + 5}.50"}))
    return dst


def test_import_into_a_new_project_brings_its_fields(qtbot, activate, tmp_path, monkeypatch):
    from dxstudio.project import Project
    from dxstudio.ui.app import MainWindow
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    Project.create(tmp_path / "p", "empty")
    w = activate(MainWindow(tmp_path / "p"))
    assert w.session.current is None and "Import pages" in w.banner.text()
    src = _sroie_folder(tmp_path / "src", 3)
    qtbot.keyClick(w, Qt.Key_I, Qt.ControlModifier)
    dialog = w._jobs[-1]
    dialog.format.setCurrentIndex(dialog.format.findData("sroie"))
    dialog.source.setText(str(src))
    with qtbot.waitSignal(dialog.imported, timeout=60000):
        qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: len(w.session.page_ids) == 3 and not w.reloader.busy, timeout=60000)  # (read on a job)
    assert len(w.session.page_ids) == 3 and w.session.current == w.session.page_ids[0]
    names = w.session.field_names
    assert names and [f["name"] for f in w.schema_panel.fields()] == names
    assert set(w.field_panel.rows) == set(names) and w.view.page is not None


def test_extract_shows_routes_from_a_models_stored_thresholds(window, qtbot, tmp_path, monkeypatch):
    """A model that carries LocalFirst thresholds (the tuner's, once stored) gets a route per value."""
    import dataclasses

    from dxstudio.engine import container
    from dxstudio.engine.config import size_config
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny", window.session.field_names)
    container.save_model(tmp_path / "m.safetensors", cfg, new_params(cfg, 3))
    real = container.load_model
    names = window.session.field_names
    # every value local, but field 1's only at 1 (each field by its own threshold: the pooled one is never used)
    th = {"pooled": 0.0, "fields": {names[0]: 1.0, **{n: 0.0 for n in names[1:]}}}

    def with_thresholds(path):
        return dataclasses.replace(real(path), thresholds=th)
    monkeypatch.setattr(container, "load_model", with_thresholds)
    panel = window.extract_panel
    assert panel.set_model(tmp_path / "m.safetensors") and "routes from its stored" in panel.model_label.text()
    click_tab(qtbot, window, window.tabs.count() - 1)  # Extract, the last tab
    pages = [window.project_root / "pages" / f"{pid}.json" for pid in window.session.page_ids[:3]]
    with qtbot.waitSignal(panel.finished, timeout=120000):
        assert panel.extract_files(pages)
    assert any(v["route"] == "local" for r in panel.results for v in r.fields.values())
    for r in panel.results:
        for name, v in r.fields.items():
            t = th["fields"].get(name)  # a field without its own threshold is asked
            want = "local" if t is not None and v["confidence"] is not None and v["confidence"] >= t else "ask"
            assert v["route"] == want, (name, v)
    routes = [panel.table.item(k, 3).text() for k in range(panel.table.rowCount())]
    assert routes == [v["route"] for v in panel.results[0].fields.values()]
