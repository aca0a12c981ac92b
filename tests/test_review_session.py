"""ReviewSession (dxstudio/review.py): decisions saved at once in the label files the trainer
reads, undo/redo across pages, statuses, and broken files that leave the rest usable."""
from __future__ import annotations

import json

import pytest

from dxstudio.grounding import Excluded, page_targets
from dxstudio.project import Project
from dxstudio.review import ReviewError, ReviewSession


def label_json(project_root, pid):
    return json.loads((project_root / "labels" / f"{pid}.json").read_text())


def first_grounded(session):
    """(page id, field, words) of the first page with a field grounded on 2+ words."""
    for pid in session.page_ids:
        session.goto(pid)
        for row in session.field_rows():
            if len(row.words) >= 2 and not row.unscored:
                return pid, row.name, row.words
    pytest.fail("no multi-word grounded field in the fixture")


def test_open_lists_pages_and_statuses(receipts_project):
    s = ReviewSession(receipts_project)
    assert len(s.page_ids) == 16
    assert s.current == s.page_ids[0]
    assert s.page is not None and len(s.tags) == len(s.page.words)
    counts = s.counts()
    assert sum(counts.values()) == 16
    assert counts["accepted"] == counts["excluded"] == counts["error"] == 0
    # a value not printed on the page (receipt_00056's subtotal) gives a page with conflicts
    assert [pid for pid, st in s.statuses.items() if st.status == "conflicts"] == ["receipt_00056"]
    assert "subtotal" in s.statuses["receipt_00056"].message


def test_tags_follow_the_grounding(receipts_project):
    s = ReviewSession(receipts_project)
    pid, name, words = first_grounded(s)
    c = s.field_names.index(name)
    assert s.tags[words[0]] == 1 + 2 * c
    assert all(s.tags[i] == 2 + 2 * c for i in words[1:])
    assert s.field_of_word(words[0]) == name


def test_set_field_saves_the_fix_and_the_trainer_sees_it(receipts_project):
    s = ReviewSession(receipts_project)
    pid, name, words = first_grounded(s)
    events = []
    s.subscribe(lambda kind, p: events.append((kind, p)))
    new_words = [words[0]]
    s.set_field(name, new_words)
    on_disk = label_json(receipts_project, pid)
    assert on_disk["review"]["fixes"][name] == new_words
    assert on_disk["review"]["history"][-1]["op"] == "set_field"
    assert ("labels", pid) in events
    # the trainer's targets, read afresh from disk, use the fix
    project = Project.open(receipts_project)
    t = page_targets(project.load_page(pid), project.load_labels(pid), project.field_names)
    if not isinstance(t, Excluded):
        assert t.field_words[name] == tuple(new_words)
    c = s.field_names.index(name)
    assert s.tags[words[0]] == 1 + 2 * c and s.tags[words[1]] != 2 + 2 * c


def test_accept_exclude_undo_redo_across_pages(receipts_project):
    s = ReviewSession(receipts_project)
    first, second = s.page_ids[0], s.page_ids[1]
    s.accept()
    assert label_json(receipts_project, first)["review"]["state"] == "accepted"
    assert s.next() and s.current == second
    s.exclude("blurred scan")
    d = label_json(receipts_project, second)
    assert d["review"]["state"] == "excluded" and d["review"]["reason"] == "blurred scan"
    assert s.statuses[second].status == "excluded"
    assert s.undo() == second
    assert label_json(receipts_project, second)["review"]["state"] == "unreviewed"
    assert "reason" not in label_json(receipts_project, second)["review"]
    # undo again goes back to the first page and reverts its accept
    assert s.undo() == first and s.current == first
    assert label_json(receipts_project, first)["review"]["state"] == "unreviewed"
    assert s.undo() is None
    assert s.redo() == first
    assert label_json(receipts_project, first)["review"]["state"] == "accepted"
    assert s.statuses[first].status in ("accepted", "conflicts")
    # a new decision clears the redo stack
    s.clear_field(s.field_names[0])
    assert not s.can_redo
    assert label_json(receipts_project, first)["review"]["fixes"][s.field_names[0]] == []


def test_revert_field_and_bad_field(receipts_project):
    s = ReviewSession(receipts_project)
    name = s.field_names[0]
    s.set_field(name, [0])
    s.revert_field(name)
    assert name not in label_json(receipts_project, s.current)["review"]["fixes"]
    with pytest.raises(ReviewError, match="not a field"):
        s.set_field("nope", [0])
    with pytest.raises(ReviewError, match="not on page"):
        s.set_field(name, [10 ** 6])


def test_broken_files_are_named_and_the_rest_works(receipts_project):
    ids = Project.open(receipts_project).page_ids()
    (receipts_project / "pages" / f"{ids[3]}.json").write_text("{ not json")
    (receipts_project / "labels" / f"{ids[5]}.json").write_text('{"page": 7}')
    s = ReviewSession(receipts_project)
    assert s.statuses[ids[3]].status == "error"
    assert f"{ids[3]}.json" in s.statuses[ids[3]].message and "not JSON" in s.statuses[ids[3]].message
    assert s.statuses[ids[5]].status == "error" and f"{ids[5]}.json" in s.statuses[ids[5]].message
    s.goto(ids[3])
    assert s.page is None and f"{ids[3]}.json" in s.error
    with pytest.raises(ReviewError, match=ids[3]):
        s.accept()
    assert s.next() and s.current == ids[4]
    s.accept()
    assert label_json(receipts_project, ids[4])["review"]["state"] == "accepted"


def test_filtered_navigation(receipts_project):
    s = ReviewSession(receipts_project)
    visible = s.page_ids[::3]
    s.goto(s.page_ids[1])
    assert s.next(visible) and s.current == s.page_ids[3]
    assert s.prev(visible) and s.current == s.page_ids[0]
    assert not s.prev(visible)


def test_set_schema_keeps_settings_saved_elsewhere(receipts_project):
    s = ReviewSession(receipts_project)
    other = Project.open(receipts_project)
    other.settings["epochs"] = 9
    other.save()
    fields = [f.to_dict() for f in s.project.schema] + [{"name": "vendor", "description": "shop", "weight": 2.0}]
    s.set_schema(fields)
    d = json.loads((receipts_project / "dxproject.json").read_text())
    assert d["settings"]["epochs"] == 9 and d["schema"][-1]["name"] == "vendor"
    assert s.field_names[-1] == "vendor"
    assert [r.name for r in s.field_rows()][-1] == "vendor"
    assert s.field_rows()[-1].words == ()
