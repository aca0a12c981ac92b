"""Review of a document's pages (issue 28): a field whose value is printed on another page of
the document says which page holds it, and Go to page shows that page."""
from __future__ import annotations

import json

from PySide6.QtCore import Qt

from dxstudio.labelling import import_answers_jsonl
from dxstudio.project import Project
from tests.test_documents import invoice_document


def test_the_review_shows_and_jumps_to_the_page_holding_a_value(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("DXSTUDIO_HOME", str(tmp_path / "home"))
    from dxstudio.ui.app import MainWindow
    from tests.ui.conftest import show_active

    project = Project.create(tmp_path / "proj", "docs", ["total", "number"])
    invoice_document(project)
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "inv", "answers": {"total": "30.00", "number": "4711"}}) + "\n")
    assert not import_answers_jsonl(project, tmp_path / "a.jsonl").errors
    w = show_active(qtbot, MainWindow(project.root))
    w.goto("inv-p1")
    rows = {r.name: r for r in w.session.field_rows()}
    assert rows["total"].status == "other_page" and rows["total"].page == "inv-p3"
    widget = w.field_panel.rows["total"]
    assert widget.goto_button.isVisible() and "page 3 (inv-p3)" in widget.detail.text()
    assert not w.field_panel.rows["number"].goto_button.isVisible()  # printed here
    qtbot.mouseClick(widget.goto_button, Qt.LeftButton)
    assert w.session.current == "inv-p3"
