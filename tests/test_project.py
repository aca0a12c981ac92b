import json
import os

import pytest

from dxstudio.engine.page import Page, PageError, Word
from dxstudio.project import (Field, LabelError, LabelFile, Project, ProjectError, is_safe_page_id,
                              safe_page_id)


def make_page(pid="p1", texts=("Total", "12.50")):
    words = tuple(Word(t, (10.0 * i, 5.0, 10.0 * i + 8, 12.0)) for i, t in enumerate(texts))
    return Page(pid, 100.0, 50.0, words)


@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "proj", "demo", [Field("total", "the amount paid", 4.0), "date"])


def test_create_open_round_trip(project, tmp_path):
    assert (project.root / "pages").is_dir() and (project.root / "labels").is_dir()
    assert project.runs_dir == project.root / "runs" and project.runs_dir.is_dir()
    again = Project.open(project.root)
    assert again.name == "demo"
    assert again.field_names == ["total", "date"]
    assert again.schema[0] == Field("total", "the amount paid", 4.0)
    assert again.schema[1].weight == 3.0  # the default
    assert again.labelling["api_key_env"] == "DXSTUDIO_LABEL_API_KEY"
    assert again.settings == {}


def test_settings_and_unknown_keys_survive_a_save(project):
    raw = json.loads(project.project_file.read_text())
    raw["future_key"] = {"x": 1}
    raw["settings"] = {"epochs": 7, "someone_elses": [1, 2]}
    project.project_file.write_text(json.dumps(raw))
    p = Project.open(project.root)
    p.settings["lr"] = 0.001
    p.add_fields(["vendor"])
    p.model = p.root / "runs" / "r1" / "model.safetensors"
    p.save()
    raw2 = json.loads(p.project_file.read_text())
    assert raw2["future_key"] == {"x": 1}
    assert raw2["settings"] == {"epochs": 7, "someone_elses": [1, 2], "lr": 0.001}
    assert raw2["model"] == "runs/r1/model.safetensors"
    q = Project.open(p.root)
    assert q.field_names == ["total", "date", "vendor"]
    assert q.model == p.root / "runs" / "r1" / "model.safetensors"


def test_create_refuses_an_existing_project(project):
    with pytest.raises(ProjectError, match="already exists"):
        Project.create(project.root, "again")


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"schema": []}', "'name'"),
    ('{"name": "x", "schema": {}}', "list of fields"),
    ('{"name": "x", "schema": [{"name": "a"}, {"name": "a"}]}', "appears twice"),
    ('{"name": "x", "schema": [{"name": "B-x y"}]}', "field name"),
    ('{"name": "x", "schema": [{"name": "a", "weight": 0}]}', "positive number"),
    ('{"name": "x", "schema": [{"name": "a", "colour": 1}]}', "unknown keys"),
    ('{"name": "x", "settings": []}', "'settings' must be an object"),
    ('{"name": "x", "labelling": {"api_key": "sk-1"}}', "do not store the API key"),
    ('{"name": "x", "labelling": {"url": 5}}', "labelling 'url'"),
])
def test_bad_project_file_names_the_file(tmp_path, content, message):
    root = tmp_path / "bad"
    root.mkdir()
    (root / "dxproject.json").write_text(content)
    with pytest.raises(ProjectError) as e:
        Project.open(root)
    assert "dxproject.json" in str(e.value)
    assert message in str(e.value)


def test_missing_project(tmp_path):
    with pytest.raises(ProjectError, match="no such project folder"):
        Project.open(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProjectError, match="dxproject.json: not found"):
        Project.open(tmp_path / "empty")


def test_page_ids_are_safe_file_names(project):
    assert is_safe_page_id("receipt_00001") and is_safe_page_id("a.b-c")
    for bad in ("", "../x", "a/b", ".hidden", "-x", "a b", "x" * 121, "a..b", 5):
        assert not is_safe_page_id(bad)
    assert safe_page_id("My Invoice (2).pdf") == "My_Invoice_2_.pdf"
    assert is_safe_page_id(safe_page_id("../../etc/passwd"))
    with pytest.raises(ProjectError, match="not a valid page id"):
        project.page_path("../escape")
    with pytest.raises(ProjectError, match="not a valid page id"):
        project.add_page(make_page("bad id"))


def test_pages_add_load_and_list(project):
    assert project.page_ids() == []
    assert project.add_page(make_page("b")) == "added"
    assert project.add_page(make_page("a")) == "added"
    assert project.add_page(make_page("a")) == "unchanged"
    (project.pages_dir / ".a.json.123.tmp").write_text("half a write")  # debris of a crash
    assert project.page_ids() == ["a", "b"]
    assert project.load_page("a") == make_page("a")
    # the same id with other words would orphan the label file's word indices: refused
    with pytest.raises(ProjectError, match="different page"):
        project.add_page(make_page("a", ("Other", "words")))
    assert project.load_page("a") == make_page("a")


def test_bad_page_files(project):
    project.add_page(make_page("a"))
    project.page_path("b").write_text("{oops")
    project.page_path("c").write_text(json.dumps(make_page("not-c").to_dict()))
    with pytest.raises(PageError, match=r"pages/b\.json: not JSON"):
        project.load_page("b")
    with pytest.raises(PageError, match=r"pages/c\.json: 'id' is 'not-c'"):
        project.load_page("c")
    assert project.load_page("a").id == "a"  # the rest keeps working
    # an unreadable saved page may be replaced by a good one (nothing usable is lost)
    assert project.add_page(make_page("b")) == "added"
    assert project.load_page("b") == make_page("b")


def test_labels_round_trip_and_defaults(project):
    project.add_page(make_page("a"))
    empty = project.load_labels("a")
    assert empty.page == "a" and empty.answers is None and empty.state == "unreviewed" and empty.fixes == {}
    assert project.label_files() == []
    lf = LabelFile("a", {"total": "12.50", "date": None}, "llm",
                   {"total": {"status": "exact", "words": [1], "reason": "found"},
                    "date": {"status": "null", "words": [], "reason": "no value"}},
                   {"state": "accepted", "fixes": {"date": []}, "history": [{"op": "accept"}]},
                   {"future": True})
    project.save_labels("a", lf)
    back = project.load_labels("a")
    assert back == lf
    assert json.loads(project.label_path("a").read_text())["future"] is True
    assert project.label_files() == [project.label_path("a")]
    with pytest.raises(LabelError, match="not 'b'"):
        project.save_labels("b", lf)


@pytest.mark.parametrize("content, message", [
    ("{", "not JSON"),
    ('{"page": "other"}', "belongs to page 'a'"),
    ('{"answers": {}}', "missing 'page'"),
    ('{"page": "a", "answers": {"total": 12.5}}', "text or null"),
    ('{"page": "a", "grounding": {"total": {"status": "maybe"}}}', "status 'maybe'"),
    ('{"page": "a", "grounding": {"total": {"status": "exact", "words": [-1]}}}', "word indices"),
    ('{"page": "a", "review": {"state": "done"}}', "review state 'done'"),
    ('{"page": "a", "review": {"fixes": {"total": [1, 1]}}}', "lists a word twice"),
    ('{"page": "a", "review": {"fixes": {"total": "1"}}}', "word indices"),
])
def test_bad_label_files_name_the_file(project, content, message):
    project.add_page(make_page("a"))
    project.label_path("a").write_text(content)
    with pytest.raises(LabelError) as e:
        project.load_labels("a")
    assert "labels/a.json" in str(e.value) and message in str(e.value)


def test_a_failed_save_keeps_the_previous_file(project, monkeypatch):
    project.add_page(make_page("a"))
    project.save_labels("a", LabelFile("a", {"total": "12.50"}, "llm"))
    before = project.label_path("a").read_bytes()

    def power_cut(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", power_cut)
    with pytest.raises(OSError):
        project.save_labels("a", LabelFile("a", {"total": "99"}, "llm"))
    monkeypatch.undo()
    assert project.label_path("a").read_bytes() == before
    assert [p.name for p in project.labels_dir.iterdir()] == ["a.json"]  # no temp file left
