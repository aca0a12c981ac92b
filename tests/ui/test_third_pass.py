"""The app's third pass (issue 23), each item driven with keys and clicks on the real window,
offscreen, on the 16-receipt project (tests/conftest.py) with tiny models made here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt, QTimer, QUrl, QMimeData
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.ui.conftest import click_page, show_active
from tests.ui.test_review_model import tiny_model

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "resources" / "sample"
WAIT_MS = 120_000


def flush_writes():
    """Wait for the decisions' label files (the app writes them on its writer thread; before
    the issue it wrote them at once, and these tests also run there: the old code must fail
    on what each item asks, not on a helper it lacked)."""
    import dxstudio.review as review
    getattr(review, "flush_label_writes", lambda: None)()


def button(panel, text):
    """The push button of `panel` showing `text` (found as a person finds it: by its text)."""
    from PySide6.QtWidgets import QPushButton
    found = [b for b in panel.findChildren(QPushButton) if b.text().replace("&", "") == text]
    assert found, f"no button {text!r}"
    return found[0]


def on_disk(root, pid):
    flush_writes()
    return json.loads((Path(root) / "labels" / f"{pid}.json").read_text())


def click_tab(qtbot, window, widget_or_index):
    index = widget_or_index if isinstance(widget_or_index, int) else window.tabs.indexOf(widget_or_index)
    bar = window.tabs.tabBar()
    qtbot.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(index).center())


def tab_of(window, name):
    return next(i for i in range(window.tabs.count()) if window.tabs.tabText(i).replace("&&", "&").startswith(name))


def add_field_by_keys(qtbot, window, name):
    """Add the field `name` on the Schema tab as a person does (the tab, Add field, the name typed,
    Return, Save schema) and wait for the save; the schema panel."""
    panel = window.schema_panel
    click_tab(qtbot, window, tab_of(window, "Schema"))
    qtbot.mouseClick(button(panel, "Add field"), Qt.LeftButton)
    editor = QApplication.focusWidget()
    editor.selectAll()
    qtbot.keyClicks(editor, name)
    qtbot.keyClick(editor, Qt.Key_Return)
    qtbot.mouseClick(panel.save_schema_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not getattr(panel, "schema_busy", False), timeout=WAIT_MS)
    return panel


def answer_next_box(button, seen: list):
    """Press `button` on the next message box that opens (modal: QTimer runs inside its loop)."""
    def answer():
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            seen.append(box.text())
            box.button(button).click()
        else:
            QTimer.singleShot(50, answer)
    QTimer.singleShot(50, answer)


def drop_files(panel, paths):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    panel.dropEvent(QDropEvent(QPointF(20, 20), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))


def click_cell(qtbot, table, row, column=0):
    """A click on a table's cell (selects its row)."""
    rect = table.visualItemRect(table.item(row, column))
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=rect.center())
    assert table.currentRow() == row


def first_with(window, status, plain=False):
    s = window.session
    for pid in s.page_ids:
        if s.statuses[pid].status == status and (not plain or not s.statuses[pid].message):
            return pid
    pytest.skip(f"no {status} page in the fixture")


def shown_text(widget) -> str:
    """The text of every label shown in `widget` (what a person reads there)."""
    from PySide6.QtWidgets import QLabel
    return " ".join(label.text() for label in widget.findChildren(QLabel) if label.isVisible())


def open_window(qtbot, root):
    from dxstudio.ui.app import MainWindow
    w = show_active(qtbot, MainWindow(root))
    if w.training_panel is not None:
        w.training_panel.show_dialogs = False
        w.runs_panel.show_dialogs = False
    return w


def finished_run(root, name="20260101-000000"):
    """A finished run of the project (tiny settings: seconds), as Fine-tune leaves it."""
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun

    flush_writes()  # (a window's decisions still on their way to disk)
    run = TuneRun.prepare(Project.open(root), Path(root) / "runs" / name)
    run.train()
    run.finish()
    return Path(root) / "runs" / name


def wait_answers(qtbot, w):
    qtbot.waitUntil(lambda: not w.model_answers.running, timeout=WAIT_MS)


def train_in_window(qtbot, w):
    """Press Fine-tune and wait for the run to end (stopped and joined before the test ends)."""
    panel = w.training_panel
    done = []
    panel.finished.connect(lambda *a: done.append(a))
    panel.failed.connect(lambda m: done.append(m))
    click_tab(qtbot, w, panel)
    qtbot.mouseClick(panel.fine_tune_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: bool(done) and not panel.is_running, timeout=WAIT_MS)
    panel.wait(60)
    return done[0]


@pytest.fixture
def win(qtbot, receipts_project, tmp_path, monkeypatch):
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    w = open_window(qtbot, receipts_project)
    yield w
    if w.training_panel is not None:
        w.training_panel.shutdown(60)
    w.model_answers.shutdown()
    w.extract_panel.shutdown()


# -- 1: Extract uses the project's model without a restart ------------------------------------

def test_1_extract_follows_use_this_model_and_keeps_a_dropped_file(win, qtbot, receipts_project, tmp_path):
    w, panel = win, win.extract_panel
    click_tab(qtbot, w, tab_of(w, "Extract"))
    assert "No model yet" in panel.model_label.text()
    page = receipts_project / "pages" / f"{w.session.page_ids[0]}.json"
    drop_files(panel, [page])  # no model yet: the file waits, it is not discarded
    assert "wait here" in panel.note.text() and panel._pending == [str(page)]
    # a run appears (as after Fine-tune elsewhere); Runs > Use this model
    finished_run(receipts_project)
    click_tab(qtbot, w, w.runs_panel)
    qtbot.mouseClick(w.runs_panel.refresh_button, Qt.LeftButton)
    w.runs_panel.select_runs([w.runs_panel.runs[0].name])
    qtbot.mouseClick(w.runs_panel.use_button, Qt.LeftButton)
    assert w.runs_panel.table.item(0, 5).text() == "yes"
    # Extract now reads with it, the dropped file included, and says no red error
    qtbot.waitUntil(lambda: not panel.running and len(panel.results) == 1, timeout=WAIT_MS)
    assert "20260101-000000" in panel.model_label.text() and "D7191C" not in panel.note.text()
    wait_answers(qtbot, w)


def test_1_model_button_clears_the_red_error(win, qtbot, tmp_path):
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    panel = win.extract_panel
    click_tab(qtbot, win, tab_of(win, "Extract"))
    page = win.project_root / "pages" / f"{win.session.page_ids[0]}.json"
    drop_files(panel, [page])  # no model yet: the red note, the file kept
    assert "D7191C" in panel.note.text()
    cfg = size_config("tiny", win.session.field_names)
    save_model(tmp_path / "m.safetensors", cfg, new_params(cfg, 2))
    from PySide6.QtWidgets import QFileDialog, QPushButton

    import dxstudio.ui.extract_panel as extract_panel
    picked = str(tmp_path / "m.safetensors")
    orig = extract_panel.QFileDialog.getOpenFileName
    extract_panel.QFileDialog.getOpenFileName = staticmethod(lambda *a, **k: (picked, ""))  # the person's pick
    try:
        button = next(b for b in panel.findChildren(QPushButton) if b.text() == "Model…")
        qtbot.mouseClick(button, Qt.LeftButton)
    finally:
        QFileDialog.getOpenFileName = orig
    assert panel.model_path is not None and str(panel.model_path) == picked
    assert "D7191C" not in panel.note.text()
    qtbot.waitUntil(lambda: not panel.running and len(panel.results) == 1, timeout=WAIT_MS)  # the kept file read


# -- 2: adding a field does not stop training --------------------------------------------------

def test_2_adding_a_field_leaves_it_out_and_training_goes_on(win, qtbot):
    w, s = win, win.session
    pid = first_with(w, "unreviewed", plain=True)
    w.goto(pid)
    qtbot.keyClick(w.view, Qt.Key_A)
    assert s.statuses[pid].status == "accepted"
    train_text_before = w.training_panel.breakdown_label.text()
    panel = add_field_by_keys(qtbot, w, "date")
    assert s.field_names[-1] == "date"
    # the accepted page stays accepted and the bar agrees with the counts
    assert s.statuses[pid].status == "accepted" and s.counts()["accepted"] == s.reviewed_count() == 1
    assert "left out of training and scoring" in panel.schema_note.text()  # Save schema says what it did
    # Train: the same pages train; the left-out field is named with its fix
    click_tab(qtbot, w, w.training_panel)
    counting = getattr(w.training_panel, "counting", lambda: False)
    qtbot.waitUntil(lambda: not counting(), timeout=WAIT_MS)  # counted off the GUI thread
    text = w.training_panel.breakdown_label.text()
    assert text.split(":")[0] == train_text_before.split(":")[0]  # "Trains on N pages"
    assert "date (not asked on 16 pages)" in text and "Label pages" in text
    result = train_in_window(qtbot, w)
    assert isinstance(result, tuple), result  # finished, not "0 usable pages"
    report = result[0]
    assert report["fields"]["date"]["threshold"] is None and report["fields"]["date"]["n_values"] == 0


# -- 3: rename carries the labels, delete asks, undo ---------------------------------------------

def test_3_rename_carries_labels_and_model_answers_delete_asks_undo_restores(qtbot, receipts_project, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from dxstudio.project import Project
    tiny_model(receipts_project, Project.open(receipts_project).field_names)
    w = open_window(qtbot, receipts_project)
    wait_answers(qtbot, w)
    s, panel = w.session, w.schema_panel
    pid = s.current
    cash_before = next(r for r in s.field_rows() if r.name == "cash")
    click_tab(qtbot, w, tab_of(w, "Schema"))
    row = s.field_names.index("cash")
    table = panel.table
    rect = table.visualItemRect(table.item(row, 0))
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=rect.center())
    assert table.currentRow() == row
    qtbot.keyClick(table, Qt.Key_F2)  # edit the name
    editor = QApplication.focusWidget()
    editor.selectAll()
    qtbot.keyClicks(editor, "cash_paid")
    qtbot.keyClick(editor, Qt.Key_Return)
    qtbot.waitUntil(lambda: table.item(row, 0).text() == "cash_paid")
    qtbot.mouseClick(panel.save_schema_button, Qt.LeftButton)
    busy = lambda: getattr(panel, "schema_busy", False)
    qtbot.waitUntil(lambda: not busy(), timeout=WAIT_MS)
    assert "cash_paid" in s.field_names
    new = next(r for r in s.field_rows() if r.name == "cash_paid")
    assert new.status == cash_before.status != "not asked" and new.words == cash_before.words
    assert "Renamed cash → cash_paid" in panel.schema_note.text()
    assert "cash_paid" in on_disk(receipts_project, pid)["answers"]
    assert "cash_paid" in w.model_answers.comparison(pid)  # the model's head follows the rename
    # Undo (its button, Ctrl+Z on this tab) puts the name and the labels back
    undo = button(panel, "Undo schema edit")
    assert undo.isEnabled()
    qtbot.keyClick(panel.table, Qt.Key_Z, Qt.ControlModifier)
    qtbot.waitUntil(lambda: not busy(), timeout=WAIT_MS)
    assert "cash" in s.field_names and "cash" in on_disk(receipts_project, pid)["answers"]
    # a delete asks first and says what is lost; No keeps it
    click_cell(qtbot, table, s.field_names.index("tax"))
    qtbot.mouseClick(button(panel, "Remove field"), Qt.LeftButton)
    seen = []
    answer_next_box(QMessageBox.StandardButton.No, seen)
    qtbot.mouseClick(panel.save_schema_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not busy(), timeout=WAIT_MS)
    assert "tax" in s.field_names and "no longer shown, trained or scored" in seen[0] and "page(s)" in seen[0]
    click_cell(qtbot, table, [f["name"] for f in panel.fields()].index("tax"))
    qtbot.mouseClick(button(panel, "Remove field"), Qt.LeftButton)
    answer_next_box(QMessageBox.StandardButton.Yes, seen)
    qtbot.mouseClick(panel.save_schema_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not busy(), timeout=WAIT_MS)
    assert "tax" not in s.field_names
    qtbot.mouseClick(undo, Qt.LeftButton)
    qtbot.waitUntil(lambda: not busy(), timeout=WAIT_MS)
    assert "tax" in s.field_names and [f["name"] for f in panel.fields()] == s.field_names
    w.model_answers.shutdown()


# -- 4: Results and Extract say the same numbers, plainly ------------------------------------------

def test_4_results_columns_and_the_extract_tag_agree_with_the_table(win, qtbot, receipts_project):
    result = train_in_window(qtbot, win)
    assert isinstance(result, tuple), result
    r = win.results_panel
    assert r.table.columnCount() <= 6
    header = [r.table.horizontalHeaderItem(c).text() for c in range(r.table.columnCount())]
    assert "Value agreement" not in header and "Value agreement" in r.table.item(0, 2).toolTip().replace(
        "agreement", "Value agreement", 1) or "agreement" in r.table.item(0, 2).toolTip()
    texts = [r.bound_label.text(), r.threshold_label.text(), r.caveat_label.text()]
    assert not any("--" in t for t in texts)  # no command-line flag in the app
    assert r.bound_label.styleSheet() == "" and r.bound_label.text().count("color:") <= 1  # not everything red
    # Extract: the tag on the page shows the confidence as the table does
    panel = win.extract_panel
    click_tab(qtbot, win, tab_of(win, "Extract"))
    pid = r.heldout_ids[0]
    drop_files(panel, [receipts_project / "pages" / f"{pid}.json"])
    qtbot.waitUntil(lambda: not panel.running and bool(panel.results), timeout=WAIT_MS)
    res = panel.results[0]
    for k, name in enumerate(res.fields):
        conf = panel.table.item(k, 2).text()
        if conf:
            assert conf in panel.view.name_text[name]
            assert not (conf.startswith("1.0") and res.fields[name]["confidence"] < 1)


# -- 5: what a run starts from ---------------------------------------------------------------------

def test_5_train_and_runs_say_what_a_run_starts_from(win, qtbot, receipts_project):
    finished_run(receipts_project)
    t = win.training_panel
    click_tab(qtbot, win, t)
    assert "a new tiny model" in shown_text(t) or "base model" in shown_text(t)
    runs = win.runs_panel
    click_tab(qtbot, win, runs)
    qtbot.mouseClick(runs.refresh_button, Qt.LeftButton)
    click_cell(qtbot, runs.table, [r.name for r in runs.runs].index("20260101-000000"))
    qtbot.mouseClick(runs.use_button, Qt.LeftButton)
    click_tab(qtbot, win, t)
    assert "the project's model, runs/20260101-000000/model.safetensors" in shown_text(t)
    result = train_in_window(qtbot, win)
    assert isinstance(result, tuple), result
    click_tab(qtbot, win, runs)
    qtbot.mouseClick(runs.refresh_button, Qt.LeftButton)
    newest = runs.runs[0].name
    assert newest != "20260101-000000"
    assert runs.table.item(0, 3).text().startswith("from run 20260101-000000")
    wait_answers(qtbot, win)


# -- 6: a run that ends offers Results, it does not switch -------------------------------------------

def test_6_a_finished_run_offers_results_without_leaving_review(win, qtbot):
    t = win.training_panel
    done = []
    t.finished.connect(lambda *a: done.append(a))
    click_tab(qtbot, win, t)
    qtbot.mouseClick(t.fine_tune_button, Qt.LeftButton)
    click_tab(qtbot, win, 0)  # back to reviewing while it trains
    qtbot.waitUntil(lambda: bool(done) and not t.is_running, timeout=WAIT_MS)
    t.wait(60)
    assert win.tabs.currentIndex() == 0
    assert win.show_results_button.isVisible() and win.tabs.tabText(win.tabs.indexOf(win.results_area)) == "Results •"
    qtbot.mouseClick(win.show_results_button, Qt.LeftButton)
    assert win.tabs.currentWidget() is win.results_area and win.tabs.tabText(win.tabs.currentIndex()) == "Results"
    wait_answers(qtbot, win)


# -- 7: the first run says the engine is being prepared, with progress; no estimate from it ------------------

def test_7_fine_tune_says_the_engine_is_being_prepared_and_estimates_nothing_yet(win, qtbot, monkeypatch):
    import threading

    from dxstudio.engine import readiness

    release = threading.Event()

    def prepare(progress=None):  # two parts compiled, then "compiling" until the test has looked
        for k, stage in enumerate(readiness.STAGES[:2], 1):
            progress(k, len(readiness.STAGES), stage)
        release.wait(WAIT_MS / 1000)
        return 1.0

    monkeypatch.setattr(readiness, "is_prepared", lambda: False)
    monkeypatch.setattr(readiness, "prepare", prepare)
    t = win.training_panel
    click_tab(qtbot, win, t)
    qtbot.mouseClick(t.fine_tune_button, Qt.LeftButton)
    try:
        qtbot.waitUntil(lambda: "2 of 4 parts compiled" in t.status_label.text(), timeout=WAIT_MS)
        assert "Preparing the engine (first run on this machine" in t.status_label.text()
        assert "left" not in t.time_label.text()  # no estimate from the preparing
        assert t.progress.value() == 0
    finally:
        release.set()
    qtbot.mouseClick(t.cancel_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not t.is_running, timeout=WAIT_MS)
    t.wait(60)


# -- 8: the banner keeps its room ---------------------------------------------------------------------

def test_8_the_page_does_not_move_when_a_note_comes_and_goes(win, qtbot):
    w = win
    click_page(qtbot, w, first_with(w, "unreviewed", plain=True))
    w.view.setFocus()
    y0 = w.view.mapTo(w, QPoint(0, 0)).y()
    assert w.banner.text() == ""
    qtbot.keyClick(w.view, Qt.Key_C)  # the next page with conflicts: its note comes
    assert w.session.statuses[w.session.current].status == "conflicts" and w.banner.text() != ""
    assert w.view.mapTo(w, QPoint(0, 0)).y() == y0
    # the next click lands on the word under it
    i = w.view.word_count() // 2
    qtbot.mouseClick(w.view.viewport(), Qt.LeftButton, Qt.NoModifier, w.view.word_viewport_point(i))
    assert w.view.selected_words() == [i]
    qtbot.keyClick(w.view, Qt.Key_Escape)
    qtbot.keyClick(w.view, Qt.Key_J)
    assert w.view.mapTo(w, QPoint(0, 0)).y() == y0


# -- 9: Undo's button follows the first edit ----------------------------------------------------------

def test_9_undo_button_is_enabled_after_the_first_decision(win, qtbot):
    """The first edit on the page shown (a field set by its key: the page stays) enables Undo
    at once, as Ctrl+Z works; so does an accept (the next page)."""
    w, s = win, win.session
    click_page(qtbot, w, first_with(w, "unreviewed", plain=True))
    pid = s.current
    undo = w.field_panel.buttons["undo"]
    assert not undo.isEnabled()
    w.view.setFocus()
    qtbot.mouseClick(w.view.viewport(), Qt.LeftButton, pos=w.view.word_viewport_point(1))  # the second word
    assert w.view.selected_words() == [1]
    item = s.field_names.index("item") + 1
    before = on_disk(w.project_root, pid)["review"].get("fixes", {}).get("item")
    qtbot.keyClick(w.view, getattr(Qt, f"Key_{item}"))
    assert s.current == pid and on_disk(w.project_root, pid)["review"]["fixes"]["item"] == [1]
    assert undo.isEnabled()  # the first edit, on the same page
    qtbot.mouseClick(undo, Qt.LeftButton)
    assert on_disk(w.project_root, pid)["review"].get("fixes", {}).get("item") == before
    qtbot.keyClick(w.view, Qt.Key_A)
    assert undo.isEnabled()
    qtbot.mouseClick(undo, Qt.LeftButton)
    assert on_disk(w.project_root, pid)["review"]["state"] == "unreviewed"


# -- 10: two fields with one value are flagged -----------------------------------------------------------

def test_10_two_fields_with_the_same_value_are_flagged(win, qtbot):
    w, s = win, win.session
    for pid in s.page_ids:  # a page where the total's text is printed at other words too
        s.goto(pid)
        rows = {r.name: r for r in s.field_rows()}
        t = rows["total"]
        if not t.words:
            continue
        others = [i for i, word in enumerate(s.page.words) if word.text == t.text and i not in t.words
                  and s.field_of_word(i) is None]
        if len(t.words) == 1 and others:
            break
    else:
        pytest.skip("no page prints its total twice")
    w.goto(pid)
    other = others[0]
    qtbot.mouseClick(w.view.viewport(), Qt.LeftButton, pos=w.view.word_viewport_point(other))
    assert w.view.selected_words() == [other]
    qtbot.keyClick(w.view, Qt.Key_2)  # subtotal = the same value as total
    assert "same as total" in w.field_panel.rows["subtotal"].title.text()
    assert "Same value in two fields: total and subtotal" in w.banner.text()


# -- 11: name tags beside values, names on the model's frames, same value not "differs" ------------------

def test_11_name_tags_avoid_other_words_and_model_frames_are_named(qtbot, receipts_project, tmp_path, monkeypatch):
    from dxstudio.project import Project
    from dxstudio.ui.model_answers import Answer

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    tiny_model(receipts_project, Project.open(receipts_project).field_names)
    w = open_window(qtbot, receipts_project)
    wait_answers(qtbot, w)
    s = w.session
    # every page at 1024x768, by J: the field names sit beside their values, not on other words
    # (the old code put each above its first word: 35 of the 68 tags covered a word)
    w.resize(1024, 768)
    qtbot.wait(50)
    click_page(qtbot, w, s.page_ids[1])
    click_page(qtbot, w, s.page_ids[0])
    w.view.setFocus()
    n_names = n_covering = 0
    model_named = False
    for _ in s.page_ids:
        tags = tag_boxes(w.view)
        names = [r for t, r, _ in tags if not t.startswith("model: ")]
        to_view = w.view.viewportTransform()
        words = [to_view.mapRect(w.view._rects[i].rect()) for i in range(w.view.word_count())]
        n_names += len(names)
        n_covering += sum(1 for r in names if any(r.adjusted(1, 1, -1, -1).intersects(x) for x in words))
        # the model's frames carry the field's name
        model_named |= any(t.startswith("model: ") for t, _, _ in tags)
        qtbot.keyClick(w.view, Qt.Key_J)
    assert n_names >= len(s.page_ids) and n_covering <= 2, (n_covering, n_names)
    assert model_named
    # the model reads the label's value at other words: "same value", not "differs"
    found = None
    for pid in s.page_ids:  # a page with a one-word value printed twice
        s.goto(pid)
        for row in s.field_rows():
            if row.words and len(row.words) == 1:
                twin = next((i for i, x in enumerate(s.page.words) if x.text == row.text and i not in row.words), None)
                if twin is not None:
                    found = (pid, row, twin)
                    break
        if found:
            break
    if found is None:
        pytest.skip("no value printed twice in the project")
    pid, row, twin = found
    w.goto(s.page_ids[0] if pid != s.page_ids[0] else s.page_ids[1])
    # the model's answer for it (as the job hands it over): the same text at the other words
    w.model_answers.answers[pid] = dict(w.model_answers.answers[pid])
    w.model_answers.answers[pid][row.name] = Answer((twin,), row.text, 0.9)
    w.model_answers._keys.pop(pid, None)
    click_page(qtbot, w, pid)  # the person opens the page
    assert "same value" in w.field_panel.rows[row.name].model_line.text()
    assert "differs" not in w.field_panel.rows[row.name].model_line.text()
    w.model_answers.shutdown()


def tag_boxes(view):
    """The viewport rects of the tags drawn at a fixed screen size (the labels' field names and
    the model frames' names: items that ignore the view's zoom), read from the items themselves."""
    from PySide6.QtWidgets import QGraphicsItem
    out = []
    # the view's own lists, and no parentItem() call: a label's tag is a box (the even items of
    # _name_items) with its text as a child (the odd ones), the model's tags are top-level text
    # items. Asking a child text for its parentItem() here, or taking every item's wrapper from
    # scene().items(), left a wrapper that crashed the garbage collection after test_fourth_pass's
    # test_6 (a segfault in gc, seen in three full runs; issue 23, round 8)
    for item in [*view._name_items[0::2], *view._prediction_items]:
        if item.isVisible() and item.flags() & QGraphicsItem.GraphicsItemFlag.ItemIgnoresTransformations:
            rect = item.deviceTransform(view.viewportTransform()).mapRect(item.boundingRect())
            text = item.text() if hasattr(item, "text") else "field name"
            out.append((text, rect, item.opacity()))
    return out


def test_11_tags_stay_inside_the_view_at_1024x768_and_beside_the_values(qtbot, receipts_project, tmp_path,
                                                                         monkeypatch):
    """At 1024x768 a value at the page's right edge (a receipt's amounts) keeps its tags in view:
    the model's "model: field" name went on past the frame's end, out of the page's area (the
    view cannot even scroll there), and a field name wider than its value did the same."""
    from dxstudio.project import Project
    from dxstudio.ui.model_answers import Answer

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    tiny_model(receipts_project, Project.open(receipts_project).field_names)
    w = open_window(qtbot, receipts_project)
    wait_answers(qtbot, w)
    w.resize(1024, 768)
    qtbot.wait(50)
    s, a = w.session, w.model_answers
    # the model reads each page's rightmost word as its subtotal, its second rightmost as its tax
    # (and nothing else: the tiny model's own answers are arbitrary)
    for pid in s.page_ids:
        page = s.project.load_page(pid)
        order = sorted(range(len(page.words)), key=lambda i: -page.words[i].box[2])
        a.answers[pid] = {name: None for name in s.field_names}
        for name, i in (("subtotal", order[0]), ("tax", order[1])):
            a.answers[pid][name] = Answer((i,), page.words[i].text, 0.9)
        getattr(a, "_keys", {}).pop(pid, None)  # (its queue key: the old code kept none)
    click_page(qtbot, w, s.page_ids[1])  # (the window opened on the first: drawn before the answers)
    w.view.setFocus()
    viewport = w.view.viewport().rect()
    covering = named = 0
    for _ in range(6):  # six pages, by J
        assert w.view.is_fitted()
        tags = tag_boxes(w.view)
        # (since m23's fourth pass a tag with no free place is shortened, "subtotal", "sub…", or
        # left out: it never covers a value)
        named += any(t in ("model: subtotal", "subtotal", "sub\u2026") for t, _, _ in tags)
        for text, rect, _ in tags:
            assert viewport.contains(rect.toRect().adjusted(1, 1, -1, -1)), (s.current, text, rect, viewport)
        to_view = w.view.viewportTransform()
        words = [to_view.mapRect(w.view._rects[i].rect()) for i in range(w.view.word_count())]
        covering += sum(1 for _, rect, _ in tags if any(rect.adjusted(1, 1, -1, -1).intersects(x) for x in words))
        qtbot.keyClick(w.view, Qt.Key_J)
    assert covering == 0  # no tag covers a word (the third pass allowed about one a page)
    assert named >= 5, named  # the subtotal's model name is shown on nearly every page
    w.model_answers.shutdown()


# -- 12: the queue: A walks it, it is a filter, Shift+M takes every answer ---------------------------

def test_12_queue_walk_filter_and_take_all(qtbot, receipts_project, tmp_path, monkeypatch):
    from dxstudio.project import Project

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    tiny_model(receipts_project, Project.open(receipts_project).field_names)
    w = open_window(qtbot, receipts_project)
    wait_answers(qtbot, w)
    s, a = w.session, w.model_answers
    queue = a.queue()
    assert len(queue) >= 3
    # the page filter has the queue
    combo = w.page_list.filter
    k = combo.findData("queue")
    assert combo.itemText(k) == f"Model's queue ({len(queue)})"
    combo.setFocus()
    for _ in range(combo.count()):  # the arrow keys on the filter, as a person picks it
        if combo.currentIndex() == k:
            break
        qtbot.keyClick(combo, Qt.Key_Down)
    assert combo.currentIndex() == k
    assert set(w.page_list.visible_ids()) == set(queue)
    while combo.currentIndex() > 0:
        qtbot.keyClick(combo, Qt.Key_Up)
    assert set(w.page_list.visible_ids()) == set(s.page_ids)
    w.view.setFocus()
    # Q opens the queue's top; Shift+M takes all the model's answers as one decision
    qtbot.keyClick(w.view, Qt.Key_Q)
    first = s.current
    differ = a.disagreements(first)
    assert first == queue[0] and differ
    qtbot.keyClick(w.view, Qt.Key_M, Qt.ShiftModifier)
    fixes = on_disk(receipts_project, first)["review"]["fixes"]
    comp = a.comparison(first)
    assert all(fixes[n] == list(comp[n].answer.words if comp[n].answer else []) for n in differ)
    qtbot.keyClick(w.view, Qt.Key_Z, Qt.ControlModifier)  # one undo takes all of them back
    assert not on_disk(receipts_project, first)["review"].get("fixes")
    # A on a page Q opened goes to the queue's next page, not the list's next
    if s.statuses[first].status == "conflicts":
        pytest.skip("the queue's top has conflicts (accept stays there)")
    qtbot.keyClick(w.view, Qt.Key_A)
    assert s.current == queue[1] and s.current != s.page_ids[s.page_ids.index(first) + 1] or \
        queue[1] == s.page_ids[s.page_ids.index(first) + 1]
    w.model_answers.shutdown()


# -- 13: Results at 1024x768 ------------------------------------------------------------------------

def test_13_results_and_review_at_1024x768(win, qtbot, receipts_project):
    result = train_in_window(qtbot, win)
    assert isinstance(result, tuple), result
    wait_answers(qtbot, win)
    win.resize(1024, 768)
    click_tab(qtbot, win, tab_of(win, "Results"))
    r = win.results_panel
    qtbot.waitUntil(lambda: r.labels_view.height() >= 300, timeout=10000)  # readable previews (it scrolls)
    # worst first: the share of right values never falls down the list
    def share(pid):
        v = [o for o in r.page_outcomes[pid].values() if o in ("correct", "wrong", "missed", "spurious")]
        return v.count("correct") / len(v) if v else 2.0
    shares = [share(p) for p in r.heldout_ids]
    assert shares == sorted(shares) and r.current_page == r.heldout_ids[0]
    # Review at 1024x768: the model's row stays short and every field's Use model fits its panel
    click_tab(qtbot, win, 0)
    qtbot.wait(50)
    bar = win.model_bar.label
    assert bar.height() <= bar.fontMetrics().lineSpacing() * 3 + 8
    for row in win.field_panel.rows.values():
        if row.use_button.isVisible():
            right = row.use_button.mapTo(win.field_panel, QPoint(row.use_button.width(), 0)).x()
            assert right <= win.field_panel.width()


# -- 14: a failed start leaves nothing behind, a stale error goes, the model in use is shown -----------

def test_14_failed_start_stale_error_and_model_in_use(win, qtbot, receipts_project):
    t, runs = win.training_panel, win.runs_panel
    click_tab(qtbot, win, t)
    box = t.inputs["accepted_only"]
    box.setFocus()
    qtbot.keyClick(box, Qt.Key_Space)  # nothing accepted yet: the run cannot start
    assert box.isChecked()
    failed = []
    t.failed.connect(failed.append)
    qtbot.mouseClick(t.fine_tune_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: bool(failed) and not t.is_running, timeout=WAIT_MS)
    t.wait(60)
    assert t.error_label.isVisible() and "usable page" in t.last_error
    assert not any((receipts_project / "runs").iterdir())  # no "no step yet, 0 of ?" run
    click_tab(qtbot, win, runs)
    assert runs.table.rowCount() == 0
    # the person accepts two pages: the error about them goes when Train is shown again
    click_tab(qtbot, win, 0)
    for _ in range(2):
        win.goto(first_with(win, "unreviewed", plain=True))
        qtbot.keyClick(win.view, Qt.Key_A)
    click_tab(qtbot, win, t)
    qtbot.waitUntil(lambda: not t.counting() and t.last_error is None, timeout=WAIT_MS)
    assert not t.error_label.isVisible()
    # Runs says which model Review uses when none was chosen: the newest run's
    tiny_model(receipts_project, win.session.field_names)
    click_tab(qtbot, win, runs)
    qtbot.mouseClick(runs.refresh_button, Qt.LeftButton)
    assert runs.table.item(0, 5).text() == "yes (newest run: none chosen)"


# -- 15: unsaved schema edits, a key without words, accepted with conflicts -----------------------------

def test_15_unsaved_schema_key_without_words_and_the_reviewed_count(win, qtbot):
    w, panel = win, win.schema_panel
    schema_tab = tab_of(w, "Schema")
    click_tab(qtbot, w, schema_tab)
    table = panel.table
    saved = table.item(0, 1).text()
    click_cell(qtbot, table, 0, 1)
    qtbot.keyClick(table, Qt.Key_F2)  # the description typed into the cell's editor
    editor = QApplication.focusWidget()
    assert editor is not table and hasattr(editor, "selectAll"), editor
    editor.selectAll()
    qtbot.keyClicks(editor, "an edited description")
    qtbot.keyClick(editor, Qt.Key_Return)  # the editor commits it
    qtbot.waitUntil(lambda: table.item(0, 1).text() == "an edited description", timeout=5000)
    seen = []
    answer_next_box(QMessageBox.StandardButton.Cancel, seen)  # "Stay"
    click_tab(qtbot, w, 0)
    qtbot.waitUntil(lambda: w.tabs.currentIndex() == schema_tab and bool(seen), timeout=5000)
    assert "not saved" in seen[0] and table.item(0, 1).text() == "an edited description"
    answer_next_box(QMessageBox.StandardButton.Discard, seen)
    click_tab(qtbot, w, 0)
    qtbot.waitUntil(lambda: w.tabs.currentIndex() == 0, timeout=5000)
    qtbot.wait(100)
    assert w.tabs.currentIndex() == 0 and table.item(0, 1).text() == saved  # discarded
    # a field key with no words selected says so where the person looks
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=10000)
    w.view.setFocus()
    w.view.clear_selection()
    qtbot.keyClick(w.view, Qt.Key_1)
    assert "No words selected for total" in w.banner.text()
    # accepting a page with conflicts: the bar says how it counts
    w.goto(first_with(w, "conflicts"))
    qtbot.keyClick(w.view, Qt.Key_A)
    fmt = w.page_list.progress.format()
    assert fmt.startswith("1 of 16 reviewed") and "1 accepted with conflicts" in fmt


# -- 16: words by keyboard, search hits --------------------------------------------------------------

def test_16_select_words_with_the_keyboard_and_search_hits(win, qtbot):
    w, s = win, win.session
    w.goto(first_with(w, "unreviewed", plain=True))
    w.view.clear_selection()
    qtbot.keyClick(w.view, Qt.Key_Right)
    assert w.view.selected_words() == [0]
    qtbot.keyClick(w.view, Qt.Key_Right)
    qtbot.keyClick(w.view, Qt.Key_Right, Qt.ShiftModifier)
    assert w.view.selected_words() == [1, 2]
    item = s.field_names.index("item") + 1
    qtbot.keyClick(w.view, getattr(Qt, f"Key_{item}"))
    assert on_disk(w.project_root, s.current)["review"]["fixes"]["item"] == [1, 2]
    qtbot.keyClick(w.view, Qt.Key_Down)
    assert len(w.view.selected_words()) == 1 and w.view.selected_words()[0] > 2
    # search: the count of matching pages and the matches on the page
    qtbot.keyClick(w, Qt.Key_F, Qt.ControlModifier)
    word = s.page.words[0].text
    qtbot.keyClicks(w.page_list.search, word)
    n = len(w.page_list.visible_ids())
    assert w.page_list.hits.text().startswith(f"{n} page") and w.page_list.hits.isVisible()
    assert 0 in w.view.highlighted_words()
    qtbot.keyClick(w.page_list.search, Qt.Key_Escape)
    assert not w.view.highlighted_words() and not w.page_list.hits.isVisible()


# -- 17: Extract corrects an ask and adds the page to the project ---------------------------------------

def test_17_extract_corrects_a_value_and_the_page_joins_the_project(win, qtbot, receipts_project, tmp_path):
    from dxstudio.grounding import project_targets
    tiny_model(receipts_project, win.session.field_names)
    panel = win.extract_panel
    click_tab(qtbot, win, tab_of(win, "Extract"))
    assert "20260101-000000" in panel.model_label.text()  # showing the tab took the project's model
    new = sorted((SAMPLE / "pages").glob("*.json"))[40]  # a receipt not in the project
    assert not (receipts_project / "pages" / new.name).exists()
    drop_files(panel, [new])
    qtbot.waitUntil(lambda: not panel.running and bool(panel.results), timeout=WAIT_MS)
    r = panel.results[0]
    names = list(r.fields)
    k = names.index("total")
    rect = panel.table.visualItemRect(panel.table.item(k, 0))
    qtbot.mouseClick(panel.table.viewport(), Qt.LeftButton, pos=rect.center())
    panel.view.setFocus()
    panel.view.clear_selection()
    qtbot.keyClick(panel.view, Qt.Key_Right)  # the first word, by keyboard
    qtbot.mouseClick(panel.set_button, Qt.LeftButton)
    assert r.fields["total"]["route"] == "person" and r.fields["total"]["words"] == [0]
    assert panel.table.item(k, 3).text() == "person"
    qtbot.mouseClick(panel.add_button, Qt.LeftButton)
    pid = new.stem
    # Review reads the project again on a background job (issue 23): the page is listed once it is applied
    qtbot.waitUntil(lambda: pid in win.session.statuses and not win.reloader.busy, timeout=60000)
    assert win.session.statuses[pid].status in ("accepted", "conflicts")
    labels = on_disk(receipts_project, pid)
    assert labels["review"]["state"] == "accepted" and labels["review"]["fixes"]["total"] == [0]
    kept = {row[0]: row[2] for row in project_targets(win.session.project).kept}
    assert pid in kept and kept[pid].field_words["total"] == (0,)  # the next Fine-tune learns it
    wait_answers(qtbot, win)
