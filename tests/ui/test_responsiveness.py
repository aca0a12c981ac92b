"""What keeps the GUI thread short (issue 23's 50 ms rule; the times are in bench/ui_latency.py,
never here): work skipped or moved off the GUI thread, checked by what it does, not how fast."""
from __future__ import annotations

import json

from PySide6.QtCore import Qt

from dxstudio.review import ReviewSession


def _counting(monkeypatch, session):
    read = []
    real = ReviewSession._compute_status

    def counted(self, pid):
        read.append(pid)
        return real(self, pid)

    monkeypatch.setattr(ReviewSession, "_compute_status", counted)
    return read


def test_reload_reads_only_the_pages_whose_files_changed(receipts_project, monkeypatch):
    s = ReviewSession(receipts_project)
    pid = s.page_ids[3]
    read = _counting(monkeypatch, s)
    s.reload()
    assert read == []  # nothing changed on disk: every status kept
    path = receipts_project / "labels" / f"{pid}.json"
    labels = json.loads(path.read_text())
    labels["review"] = dict(labels.get("review") or {}, state="excluded", reason="a test")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(labels))
    tmp.replace(path)  # as another command writes it: atomically
    seen = []
    s.subscribe(lambda kind, p: seen.append(set(s.reload_changed)) if kind == "statuses" and p is None else None)
    s.reload()
    assert read == [pid] and seen == [{pid}]
    assert s.statuses[pid].status == "excluded" and s.reload_changed is None


def test_reload_after_a_schema_change_reads_every_page(receipts_project, monkeypatch):
    s = ReviewSession(receipts_project)
    project = s.project
    project.set_schema([f.to_dict() for f in project.schema] + [{"name": "date", "description": "", "weight": 1.0}])
    project.save()
    read = _counting(monkeypatch, s)
    s.reopen()  # a field more: every status again
    assert sorted(read) == s.page_ids and "not asked" in s.statuses[s.page_ids[0]].message
    read.clear()
    s.reload()
    assert read == []  # the same schema since: kept


def test_a_decision_redraws_nothing_it_did_not_change_and_the_list_keeps_its_items(window, qtbot):
    w = window
    s = w.session
    pid = next(p for p in s.page_ids if s.statuses[p].status == "unreviewed" and not s.statuses[p].message)
    w.goto(pid)
    rects = list(w.view._rects)
    items = dict(w.page_list._items)
    qtbot.keyClick(w.view, Qt.Key_U)  # (unreviewed already: no change, no redraw)
    # accepting changes no tag: the page's items stay as drawn until the next page is shown
    calls = []
    real = w.view._restyle
    w.view._restyle = lambda indices=None: (calls.append(indices), real(indices))
    s.accept()
    assert calls == [] and w.view._rects == rects
    w.view._restyle = real
    s.reload()
    assert w.page_list._items == items  # the same pages: the same list items, restyled in place
    qtbot.waitUntil(w.page_list.texts_ready, timeout=60000)  # the search's texts, read on a job
    assert all(w.page_list._text_cache[p] for p in s.page_ids)


def test_field_rows_are_kept_across_a_schema_edit(window, qtbot):
    w = window
    rows = list(w.field_panel.rows.values())
    fields = w.schema_panel.fields()
    fields[0] = dict(fields[0], name="total_paid")
    w.schema_panel.table.item(0, 0).setText("total_paid")
    assert w.schema_panel.save_schema()
    qtbot.waitUntil(lambda: not w.schema_panel.schema_busy, timeout=60000)
    assert w.session.field_names[0] == "total_paid"
    assert list(w.field_panel.rows.values()) == rows  # renamed in place, not made anew
    assert w.field_panel.rows["total_paid"].name == "total_paid"
    assert "total_paid" in w.field_panel.rows["total_paid"].set_button.toolTip()
    emitted = []
    w.field_panel.setFieldRequested.connect(emitted.append)
    qtbot.mouseClick(w.field_panel.rows["total_paid"].set_button, Qt.LeftButton)
    assert emitted == ["total_paid"]
