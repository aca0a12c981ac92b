"""Schema edits that keep the work (issue 23 items 2, 3): Qt-free, on the 16-receipt project.

A field added after labelling is left out of training and scoring (not the pages); a rename
carries the labels, the labelling model's answers and the model head mapping; a delete keeps
the data in the label files and says what is lost; undo and redo cover schema edits."""
from __future__ import annotations

import json

import pytest

from dxstudio.grounding import project_targets
from dxstudio.project import Field, Project
from dxstudio.review import ReviewSession, schema_change


def _labels(root, pid):
    return json.loads((root / "labels" / f"{pid}.json").read_text())


def _fields(session, **extra):
    return [f.to_dict() for f in session.project.schema] + [Field(n, d).to_dict() for n, d in extra.items()]


def test_a_new_field_leaves_the_field_out_not_the_pages(receipts_project):
    s = ReviewSession(receipts_project)
    kept = len(project_targets(s.project).kept)
    pid = next(p for p in s.page_ids if s.statuses[p].status == "unreviewed")
    s.goto(pid)
    s.accept()
    assert s.statuses[pid].status == "accepted"
    change = s.set_schema(_fields(s, date="the date"))
    assert change.added == ["date"] and "left out of training and scoring" in change.summary()
    t = project_targets(s.project)
    assert len(t.kept) == kept  # every page still trains on the other fields
    assert t.left_out == {"date": len(s.page_ids)}
    assert all("date" in pt.unscored for _, _, pt in t.kept)
    assert "date (not asked on 16 pages)" in t.left_out_note() and "Label pages" in t.left_out_note()
    # the accepted page stays accepted, and the reviewed count agrees with it
    assert s.statuses[pid].status == "accepted" and "date not asked yet" in s.statuses[pid].message
    assert s.counts()["accepted"] == s.reviewed_count() == 1
    # a person sets date on this page: its words are ignored by the loss while the field is left out
    s.set_field("date", [0])
    t = project_targets(s.project)
    row = next(r for r in t.kept if r[0] == pid)
    assert row[2].tags[0] == -1


def test_rename_carries_labels_answers_and_the_model_mapping(receipts_project):
    s = ReviewSession(receipts_project)
    root = s.project.root
    pid = s.page_ids[0]
    s.goto(pid)
    s.set_field("cash", [1])
    before = _labels(root, pid)
    fields = [dict(f, name="cash_paid") if f["name"] == "cash" else f for f in _fields(s)]
    change = schema_change(s.project, fields, {"cash": "cash_paid"})
    assert change.renamed == {"cash": "cash_paid"} and not change.added and not change.removed
    s.set_schema(fields, {"cash": "cash_paid"})
    after = _labels(root, pid)
    assert "cash" not in after["answers"] and after["answers"]["cash_paid"] == before["answers"]["cash"]
    assert after["grounding"]["cash_paid"] == before["grounding"]["cash"]
    assert after["review"]["fixes"]["cash_paid"] == [1]
    assert all(st.status != "error" for st in s.statuses.values())
    assert not any("not asked" in st.message for st in s.statuses.values())
    # a model trained before the rename reads the field under its new name
    old_model_fields = ["total", "subtotal", "tax", "cash", "change", "item"]
    assert Project.open(root).model_field_names(old_model_fields)[3] == "cash_paid"
    assert json.loads((root / "dxproject.json").read_text())["field_renames"] == {"cash": "cash_paid"}
    # undo puts everything back, redo renames again
    assert s.can_undo
    s.undo()
    assert s.field_names[3] == "cash" and _labels(root, pid)["review"]["fixes"]["cash"] == [1]
    assert "field_renames" not in json.loads((root / "dxproject.json").read_text())
    s.redo()
    assert s.field_names[3] == "cash_paid" and _labels(root, pid)["answers"]["cash_paid"] == before["answers"]["cash"]


def test_swap_of_two_names_and_chained_renames(receipts_project):
    s = ReviewSession(receipts_project)
    root = s.project.root
    pid = s.page_ids[0]
    before = _labels(root, pid)["answers"]
    fields = _fields(s)
    names = [f["name"] for f in fields]
    i, j = names.index("cash"), names.index("change")
    fields[i]["name"], fields[j]["name"] = "change", "cash"
    s.set_schema(fields, {"cash": "change", "change": "cash"})
    after = _labels(root, pid)["answers"]
    assert after["change"] == before["cash"] and after["cash"] == before["change"]
    p = s.project
    assert p.model_field_names(["total", "subtotal", "tax", "cash", "change", "item"])[3:5] == ["change", "cash"]


def test_delete_says_what_is_lost_and_undo_brings_it_back(receipts_project):
    s = ReviewSession(receipts_project)
    root = s.project.root
    pid = s.page_ids[0]
    s.goto(pid)
    s.set_field("tax", [2])
    fields = [f for f in _fields(s) if f["name"] != "tax"]
    change = schema_change(s.project, fields)
    assert list(change.removed) == ["tax"] and change.removed["tax"]["fixes"] == 1
    text = change.removal_text()
    assert "tax" in text and "1 set by a person" in text and "no longer" in text
    s.set_schema(fields)
    assert "tax" not in s.field_names
    assert _labels(root, pid)["review"]["fixes"]["tax"] == [2]  # kept in the file
    s.undo()
    assert "tax" in s.field_names and s.field_rows()[s.field_names.index("tax")].words == (2,)


def test_bad_renames_are_refused(receipts_project):
    from dxstudio.review import ReviewError

    s = ReviewSession(receipts_project)
    with pytest.raises(ReviewError, match="not a field"):
        schema_change(s.project, _fields(s), {"nope": "total"})
    with pytest.raises(ReviewError, match="not in the new schema"):
        schema_change(s.project, _fields(s), {"cash": "cash_paid"})
