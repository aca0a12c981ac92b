"""The Train tab's "Starts from" line when the shipped base is missing, or cannot be the start."""


def test_the_train_tab_says_a_missing_shipped_base_stops_the_run(receipts_project, tmp_path, monkeypatch):
    from dxstudio.project import Project
    from dxstudio.ui import train_tab

    project = Project.open(receipts_project)
    monkeypatch.setattr(train_tab, "BASE_MODEL", tmp_path / "gone.safetensors")
    text = train_tab.starting_model_text(project, {"start": "base", "size": "base"})
    assert "missing" in text and "will not start" in text
    assert "new base model" in train_tab.starting_model_text(project, {"start": "new", "size": "base"})


def test_the_train_tab_says_why_a_smaller_model_starts_new_where_start_from_says_base(receipts_project):
    from dxstudio.project import Project
    from dxstudio.ui import train_tab

    project = Project.open(receipts_project)
    text = train_tab.starting_model_text(project, {"start": "base", "size": "tiny"})
    assert "a new tiny model" in text and "only with New model size base" in text
    assert "only with" not in train_tab.starting_model_text(project, {"start": "new", "size": "tiny"})
