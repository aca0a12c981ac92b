"""The command line's shared helpers and the small fixes: one error line and nothing left behind."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from dxstudio.cli import main as cli_main
from dxstudio.cli.common import EXIT_CODES
from dxstudio.progress import ProgressBar

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = REPO / "resources" / "sample"


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_exit_codes_are_documented_in_every_help(capsys):
    for argv in ([], ["tune"], ["import"], ["extract"], ["new-model"], ["eval"], ["label"], ["screenshot"]):
        with pytest.raises(SystemExit) as e:
            cli_main(argv + ["--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "exit codes: 0 done; 1" in " ".join(out.split()), argv
    assert "130 interrupted" in EXIT_CODES


@pytest.mark.parametrize("seed", ["-1", str(2**64), "2.5"])
def test_new_model_refuses_a_seed_that_would_wrap(seed, tmp_path, capsys):
    out = tmp_path / "m.safetensors"
    with pytest.raises(SystemExit) as e:
        cli_main(["new-model", "--seed", seed, "--size", "tiny", str(out)])
    assert e.value.code == 2 and "--seed: must be an integer in [0, 2^64)" in capsys.readouterr().err
    assert not out.exists()


def test_new_model_takes_the_largest_seed(tmp_path, capsys):
    out = tmp_path / "m.safetensors"
    assert cli_main(["new-model", "--seed", str(2**64 - 1), "--size", "tiny", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["seed"] == 2**64 - 1 and out.exists()


@pytest.mark.parametrize("fields", ["", ",", " , "])
def test_empty_fields_are_an_error_not_the_default_schema(fields, tmp_path, capsys):
    out = tmp_path / "m.safetensors"
    assert cli_main(["new-model", "--fields", fields, "--size", "tiny", str(out)]) == 2
    assert "names no field" in one_error_line(capsys.readouterr().err)
    assert not out.exists()
    assert cli_main(["new-model", "--fields", "a,,b", "--size", "tiny", str(out)]) == 2
    assert "empty name" in one_error_line(capsys.readouterr().err)


def test_a_failed_import_leaves_no_project_behind(tmp_path, capsys):
    target = tmp_path / "P"
    assert cli_main(["import", "json", str(tmp_path / "nonexistent"), str(target)]) == 2
    assert "no such file or folder" in one_error_line(capsys.readouterr().err)
    assert not target.exists()
    # a source that exists but holds nothing importable: the new project goes again
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("[]")
    assert cli_main(["import", "json", str(bad), str(target)]) == 2
    assert not target.exists()
    # into a folder that was there before: only what the import made goes
    keep = tmp_path / "K"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert cli_main(["import", "json", str(bad), str(keep)]) == 2
    assert sorted(p.name for p in keep.iterdir()) == ["notes.txt"]
    capsys.readouterr()
    # a good import still makes the project, its summary is one JSON line
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(FIXTURES / "pages" / "invoice-1.json", good)
    assert cli_main(["import", "json", str(good), str(target)]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and json.loads(out)["added"] == 1


def test_progress_writes_no_escape_codes_when_stderr_is_not_a_terminal():
    log = io.StringIO()
    with ProgressBar(3, "tune", stream=log) as bar:  # default: quiet on a log
        for i in range(3):
            bar.update()
    assert log.getvalue() == ""
    forced = io.StringIO()
    with ProgressBar(3, "tune", stream=forced, enabled=True) as bar:
        for i in range(3):
            bar.update()
    text = forced.getvalue()
    assert "3/3" in text and "\x1b" not in text and "\r" not in text and text.endswith("\n")

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    with ProgressBar(2, "tune", stream=tty) as bar:
        bar.update(2)
    assert "\r" in tty.getvalue() and "\x1b[K" in tty.getvalue()


def test_screenshot_of_a_page_that_is_not_there_is_an_error(tmp_path, capsys):
    pytest.importorskip("PySide6")
    out = tmp_path / "s.png"
    assert cli_main(["screenshot", str(SAMPLE), str(out), "--page", "nonexistent"]) == 2
    assert "nonexistent.json: no such page" in one_error_line(capsys.readouterr().err)
    assert not out.exists()
