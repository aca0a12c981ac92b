"""`dxstudio screenshot`: the real window, offscreen, to a PNG of the asked size."""
from __future__ import annotations

import struct

import pytest

from dxstudio.cli import main
from tests.conftest import sample_project


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


@pytest.mark.parametrize("screen", ["review", "schema", "training", "results", "runs", "extract", "queue"])
def test_screenshot_writes_a_png_of_the_asked_size(receipts_project, tmp_path, screen, capsys):
    out = tmp_path / f"{screen}.png"
    rc = main(["screenshot", str(receipts_project), str(out), "--screen", screen, "--steps", "8", "--size", "1280x800"])
    assert rc == 0, capsys.readouterr().err
    assert png_size(out) == (1280, 800)
    assert out.stat().st_size > 10_000  # a drawn window, not a blank image
    # the project itself gets no run folder from a screenshot (training happens on a copy)
    assert not any((receipts_project / "runs").iterdir())
    assert not (receipts_project / ".cache" / "app-state.json").exists()  # nor the app's state


def test_screenshot_refuses_bad_arguments_with_a_message(receipts_project, tmp_path, capsys):
    assert main(["screenshot", str(receipts_project), str(tmp_path / "a.png"), "--size", "big"]) == 2
    assert "--size" in capsys.readouterr().err
    assert main(["screenshot", str(receipts_project), str(tmp_path / "a.png"), "--size", "400x300"]) == 2
    assert "cannot be that small" in capsys.readouterr().err
    assert main(["screenshot", str(tmp_path / "nowhere"), str(tmp_path / "b.png")]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()


def test_project_settings_trains_with_the_projects_own_settings(receipts_project, tmp_path, monkeypatch):
    """--project-settings: the run the project's settings make (not the short tiny run), and
    the results screen shows it with the page views fitted (no scroll bars)."""
    from dxstudio.project import Project
    from dxstudio.ui import screenshot

    seen = {}
    save_png = screenshot._save_png

    def look_then_save(window, out):
        results = window.results_panel
        seen["settings"] = results.report["run"]["settings"]
        seen["steps"] = results.report["run"]["steps"]
        seen["form"] = window.training_panel.settings_values()
        seen["scroll bars"] = [v.horizontalScrollBar().isVisible() or v.verticalScrollBar().isVisible()
                               for v in (results.labels_view, results.answers_view)]
        save_png(window, out)

    monkeypatch.setattr(screenshot, "_save_png", look_then_save)
    own = Project.open(receipts_project).settings
    screenshot.render(receipts_project, tmp_path / "own.png", "results", steps=50, project_settings=True)
    for key in ("size", "epochs", "batch", "lr", "backbone_scale", "warmup"):
        assert seen["settings"][key] == own[key] == seen["form"][key], key
    assert png_size(tmp_path / "own.png") == (1400, 880)
    assert seen["scroll bars"] == [False, False]

    screenshot.render(receipts_project, tmp_path / "short.png", "results", steps=50)  # the default: short run
    assert seen["settings"]["backbone_scale"] == screenshot.SHORT_RUN["backbone_scale"] != own["backbone_scale"]
    assert seen["settings"]["epochs"] != own["epochs"]
    assert not any((receipts_project / "runs").iterdir())


def test_the_runs_screen_compares_two_runs_on_the_sample(tmp_path, monkeypatch):
    """On a few pages of the bundled sample (no ../shared): two runs, both listed and compared."""
    import json

    from dxstudio.ui import screenshot

    root = sample_project(tmp_path / "p", 8, {"batch": 2, "auto_folds": 0, "heldout_fraction": 0.25})
    fields = len(json.loads((root / "dxproject.json").read_text())["schema"])
    seen = {}
    save_png = screenshot._save_png

    def look_then_save(window, out):
        runs = window.runs_panel
        seen["runs"] = [r.status for r in runs.runs]
        seen["compare_rows"] = runs.compare_table.rowCount()
        seen["title"] = runs.compare_title.text()
        save_png(window, out)

    monkeypatch.setattr(screenshot, "_save_png", look_then_save)
    screenshot.render(root, tmp_path / "runs.png", "runs", steps=4, size=(1280, 800))
    assert seen["runs"] == ["finished", "finished"]
    assert seen["compare_rows"] >= fields and "lr 0.01 → 0.005" in seen["title"]
    assert (tmp_path / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (root / "runs").exists() or not any((root / "runs").iterdir())
