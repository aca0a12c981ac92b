"""The main window as a whole: the bundled sample, the tabs, the schema editor, "Label pages"
in the background against a real HTTP endpoint on 127.0.0.1, and closing."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from dxstudio.project import Project, ProjectError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "resources" / "sample"


def test_sample_is_copied_once_to_a_writable_place(tmp_path, monkeypatch):
    from dxstudio.ui.app import sample_project

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    path = sample_project()
    assert path == tmp_path / "home" / "sample"
    project = Project.open(path)
    assert len(project.page_ids()) == len(Project.open(SAMPLE).page_ids()) >= 20
    assert (path / "CREDITS.md").is_file() and "CC BY 4.0" in (path / "CREDITS.md").read_text()
    # a review in the copy survives: the second start does not copy again
    labels = project.load_labels(project.page_ids()[0])
    labels.review["state"] = "accepted"
    project.save_labels(project.page_ids()[0], labels)
    assert sample_project() == path
    assert Project.open(path).load_labels(project.page_ids()[0]).state == "accepted"
    assert Project.open(SAMPLE).load_labels(project.page_ids()[0]).state == "unreviewed"


def test_sample_opens_with_grounded_labels(qtbot, activate, tmp_path, monkeypatch):
    from dxstudio.ui.app import MainWindow, sample_project

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    w = activate(MainWindow(sample_project()))
    assert [w.tabs.tabText(i) for i in range(w.tabs.count())] == ["Review", "Schema && labels", "Train", "Results",
                                                                  "Runs", "Extract"]
    counts = w.session.counts()
    assert counts["error"] == 0 and counts["unreviewed"] >= 0.8 * len(w.session.page_ids)
    assert any(t > 0 for t in w.view.tags)  # the first page has labelled words drawn
    from dxstudio.grounding import project_targets
    assert len(project_targets(w.session.project).kept) >= 0.8 * len(w.session.page_ids)


def test_training_tab_is_the_training_panel(window):
    from dxstudio.ui.results_tab import ResultsPanel
    from dxstudio.ui.train_tab import TrainingPanel

    assert isinstance(window.training_panel, TrainingPanel)
    assert isinstance(window.results_panel, ResultsPanel)
    assert window.tabs.widget(2) is window.training_panel


def test_close_stops_training_and_labelling_and_keeps_the_checkpoint(window, qtbot):
    # both background jobs running when the window closes: closing stops them (no mocks: the
    # run's checkpoint, its missing report and the endpoint's request count say so)
    from dxstudio.ui.train_tab import checkpoint_step

    training, schema = window.training_panel, window.schema_panel
    pages = len(window.session.page_ids)
    endpoint = Endpoint({n: None for n in window.session.field_names}, delay=1.0)  # 16 s for all pages
    try:
        training.show_dialogs = False
        training.inputs["epochs"].setValue(200)  # long enough that it cannot end on its own first
        run_dir = training.fine_tune()
        qtbot.waitUntil(lambda: len(training.loss_steps) >= 1, timeout=60000)
        schema.url.setText(endpoint.url)
        schema.model.setText("test-model")
        schema.force.setChecked(True)  # ask again for pages that have answers
        schema.start_labelling()
        qtbot.waitUntil(lambda: endpoint.requests >= 1, timeout=60000)
        assert training.is_running and schema.running
        window.confirm_close = False  # the question a person gets is tested in test_second_pass.py
        window.close()
        assert not training.is_running
        step = checkpoint_step(run_dir)
        assert step is not None and 1 <= step < training.total_steps
        assert not (run_dir / "report.json").exists()
        asked = endpoint.requests
        qtbot.wait(1000)  # the labelling worker asks no more
        assert endpoint.requests == asked < pages
    finally:
        endpoint.close()


def test_schema_editor_saves_and_keeps_other_settings(window, monkeypatch):
    panel = window.schema_panel
    root = window.project_root
    # another panel saves settings meanwhile: the schema save must keep them
    other = Project.open(root)
    other.settings["epochs"] = 7
    other.save()
    panel.add_field()
    last = panel.table.rowCount() - 1
    panel.table.item(last, 0).setText("vendor_name")
    panel.table.item(last, 1).setText("the shop's name")
    assert panel.save_schema() and panel.wait_schema(60)  # (the files are written on a background job)
    d = json.loads((root / "dxproject.json").read_text())
    assert d["schema"][-1]["name"] == "vendor_name" and d["settings"]["epochs"] == 7
    assert "vendor_name" in window.field_panel.rows
    assert window.actions["field_%d" % len(d["schema"])].text().startswith("vendor_name")
    # a bad name is refused with a message and nothing is written
    shown = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a: shown.append(a[2]))
    panel.table.item(last, 0).setText("2 bad")
    assert not panel.save_schema()
    assert "'2 bad'" in shown[0]
    assert json.loads((root / "dxproject.json").read_text())["schema"][-1]["name"] == "vendor_name"


class Endpoint:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that answers each page after `delay`."""

    def __init__(self, answers: dict, delay: float = 0.0):
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests += 1
                time.sleep(delay)
                body = json.dumps({"choices": [{"message": {"content": json.dumps(answers)}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def unlabelled(receipts_project):
    """The receipts project with its answers removed (as if just imported from PDFs)."""
    for p in (receipts_project / "labels").glob("*.json"):
        p.unlink()
    return receipts_project


def test_label_pages_in_the_background_with_progress(qtbot, activate, unlabelled, tmp_path, monkeypatch):
    from dxstudio.ui.app import MainWindow

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    w = activate(MainWindow(unlabelled))
    assert w.session.statuses[w.session.page_ids[0]].message == "not labelled yet"
    names = w.session.field_names
    endpoint = Endpoint({n: None for n in names} | {names[0]: "TOTAL"}, delay=0.05)
    try:
        panel = w.schema_panel
        panel.url.setText(endpoint.url)
        panel.model.setText("test-model")
        ticks = []
        timer = QTimer()
        timer.timeout.connect(lambda: ticks.append(1))
        timer.start(10)
        with qtbot.waitSignal(panel.labellingFinished, timeout=60000) as done:
            panel.label_button.click()
            assert panel.running and not panel.label_button.isEnabled()
        timer.stop()
        result = done.args[0]
        assert result["labelled"] == len(w.session.page_ids) and not result["cancelled"]
        assert len(ticks) >= 3  # the event loop kept turning while the worker asked
        assert panel.progress.value() == panel.progress.maximum() == len(w.session.page_ids)
        d = json.loads((unlabelled / "dxproject.json").read_text())
        assert d["labelling"]["url"] == endpoint.url and d["labelling"]["model"] == "test-model"
        labels = json.loads((unlabelled / "labels" / f"{w.session.page_ids[0]}.json").read_text())
        assert labels["answers"][names[0]] == "TOTAL" and labels["answer_source"] == "llm"
        assert w.session.statuses[w.session.page_ids[0]].message != "not labelled yet"
        assert "Labelled 16 page(s)" in panel.result.text()
    finally:
        endpoint.close()


def test_label_pages_cancel_keeps_what_was_done(qtbot, activate, unlabelled, tmp_path, monkeypatch):
    from dxstudio.ui.app import MainWindow

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    w = activate(MainWindow(unlabelled))
    names = w.session.field_names
    endpoint = Endpoint({n: None for n in names}, delay=0.2)
    try:
        panel = w.schema_panel
        panel.url.setText(endpoint.url)
        panel.model.setText("test-model")
        with qtbot.waitSignal(panel.labellingFinished, timeout=60000) as done:
            panel.label_button.click()
            qtbot.waitUntil(lambda: endpoint.requests >= 2, timeout=30000)
            # a decision now could be overwritten by the worker: it waits, and says so
            qtbot.keyClick(w.view, Qt.Key_A)
            assert "Labelling is running" in w.statusBar().currentMessage()
            panel.cancel_button.click()
        assert done.args[0]["cancelled"]
        first = unlabelled / "labels" / f"{w.session.page_ids[0]}.json"
        assert not first.exists() or json.loads(first.read_text())["review"]["state"] == "unreviewed"
        labelled = len(list((unlabelled / "labels").glob("*.json")))
        assert 1 <= labelled < len(w.session.page_ids)
        assert "Cancelled" in panel.result.text() and panel.label_button.isEnabled()
    finally:
        endpoint.close()


def test_label_pages_without_an_endpoint_points_at_the_endpoint_box(window, qtbot, monkeypatch):
    monkeypatch.delenv("DXSTUDIO_LABEL_URL", raising=False)
    panel = window.schema_panel
    panel.url.setText("")
    failed = []
    panel.labellingFinished.connect(failed.append)
    window.tabs.setCurrentIndex(0)
    qtbot.mouseClick(panel.label_button, Qt.LeftButton)
    assert not panel.running and not failed
    text = panel.result.text()
    assert "Endpoint URL box" in text and "dxproject.json" not in text
    assert text.count("Endpoint") == 1  # said once
    assert window.tabs.currentIndex() == 1 and "D7191C" in panel.url.styleSheet()
    assert panel.progress.value() == 0 and panel.progress.format() == "not running"  # no full bar


def test_run_app_reports_a_bad_project(tmp_path, monkeypatch, qapp):
    from dxstudio.ui import app as app_module

    shown = []
    monkeypatch.setattr(QMessageBox, "critical", lambda *a: shown.append(a[2]))
    assert app_module.run_app(str(tmp_path / "nowhere")) == 2
    assert "nowhere" in shown[0]


def test_run_app_without_a_path_opens_the_sample(qapp, tmp_path, monkeypatch):
    from dxstudio.ui import app as app_module

    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    opened = []

    def close_windows():
        for w in qapp.topLevelWidgets():
            if isinstance(w, app_module.MainWindow) and w.isVisible():
                opened.append(w.project_root)
                w.close()
        # closing the last window ends run_app's event loop (no quit(): it would stick)

    QTimer.singleShot(300, close_windows)
    fallback = QTimer()  # should another test's window stay open, end the loop anyway
    fallback.setSingleShot(True)
    fallback.timeout.connect(qapp.quit)
    fallback.start(15000)
    assert app_module.run_app(None) == 0
    fallback.stop()
    assert opened == [tmp_path / "home" / "sample"]
    # leave no closed main window behind: later tests need to activate their own windows
    for w in qapp.topLevelWidgets():
        if isinstance(w, app_module.MainWindow):
            w.deleteLater()
    QApplication.processEvents()


def test_a_sample_folder_the_app_did_not_make_is_never_deleted(tmp_path, monkeypatch):
    """Issue 9 item 16: $DXSTUDIO_HOME/sample without dxproject.json is someone else's."""
    from dxstudio.ui.app import sample_project

    home = tmp_path / "home"
    monkeypatch.setenv("DXSTUDIO_HOME", str(home))
    (home / "sample").mkdir(parents=True)
    (home / "sample" / "thesis.tex").write_text("three years of work")
    with pytest.raises(ProjectError, match="not a dxstudio project") as e:
        sample_project()
    assert str(home / "sample") in str(e.value)
    assert (home / "sample" / "thesis.tex").read_text() == "three years of work"
    # a stray .sample-copying folder without the app's mark is left alone too
    (home / "sample" / "thesis.tex").unlink()
    (home / "sample").rmdir()
    (home / ".sample-copying").mkdir()
    (home / ".sample-copying" / "notes.txt").write_text("mine")
    with pytest.raises(ProjectError, match="not made by dxstudio"):
        sample_project()
    assert (home / ".sample-copying" / "notes.txt").read_text() == "mine"
    # an empty sample folder holds nothing to lose: the copy goes there
    (home / ".sample-copying" / "notes.txt").unlink()
    (home / ".sample-copying").rmdir()
    (home / "sample").mkdir()
    assert (sample_project() / "dxproject.json").is_file()
    assert not (home / ".sample-copying").exists()
    assert not (home / "sample" / ".dxstudio-sample-copy").exists()
