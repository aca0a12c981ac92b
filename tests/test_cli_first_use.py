"""What a new user meets first (issue 24): `dxstudio sample`, `tune` with no project or on the
installed sample, an unknown command, an empty import, a checkpoint given to extract, a failed
extract, and setting a schema (`dxstudio schema`, `import --schema`)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from dxstudio.cli.main import main as cli_entry

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "resources" / "sample"


def run(capsys, *argv):
    code = cli_entry(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_sample_copies_the_bundled_sample_and_prints_its_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "sample")
    target = tmp_path / "dxstudio-sample"
    assert code == 0 and json.loads(out) == {"sample": str(target), "copied": True}
    assert f"dxstudio tune {target}" in err
    shipped = sorted(p.name for p in (SAMPLE / "pages").glob("*.json"))
    assert sorted(p.name for p in (target / "pages").glob("*.json")) == shipped and shipped
    assert (target / "dxproject.json").read_bytes() == (SAMPLE / "dxproject.json").read_bytes()
    assert (target / "runs").is_dir() and not list((target / "runs").iterdir())
    assert not list(tmp_path.glob(".*copying"))
    # again: the copy is there, left as it is
    code, out, _ = run(capsys, "sample", str(target))
    assert code == 0 and json.loads(out)["copied"] is False


def test_sample_refuses_a_folder_with_other_files(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    code, out, err = run(capsys, "sample", str(tmp_path / "mine"))
    assert code == 2 and out == "" and "exists and is not empty" in err
    assert files(tmp_path / "mine") == ["notes.txt"]


def test_tune_without_a_project_says_so_and_names_sample(capsys):
    code, out, err = run(capsys, "tune")
    assert code == 2 and out == ""
    assert "no project given" in err and "dxstudio sample" in err


def test_tune_refuses_a_project_inside_the_installed_package(tmp_path, capsys, monkeypatch):
    """An installed wheel's sample lies in site-packages/dxstudio/resources/sample: a run
    without --out would be written there."""
    from dxstudio import bundled

    package = tmp_path / "site-packages" / "dxstudio"
    installed = package / "resources" / "sample"
    bundled.copy_sample(installed)
    monkeypatch.setattr(bundled, "PACKAGE", package.resolve())
    before = files(installed)
    code, out, err = run(capsys, "tune", str(installed), "--epochs", "1")
    assert code == 2 and out == ""
    assert "inside the installed dxstudio package" in err and "dxstudio sample" in err
    assert files(installed) == before  # nothing made: no runs/<time>


def test_unknown_command_suggests_the_nearest(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "tnue", "PROJECT")
    assert code == 2 and out == ""
    assert "unknown command 'tnue'" in err and "dxstudio tune" in err
    code, _, err = run(capsys, "xyzzy")
    assert code == 2 and "unknown command 'xyzzy'" in err and "did you mean" not in err


def test_import_of_an_empty_folder_exits_2_and_makes_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, "import", "json", str(tmp_path / "empty"), str(tmp_path / "P"))
    assert code == 2 and out == ""
    assert "no json pages found" in err and str(tmp_path / "empty") in err
    assert not (tmp_path / "P").exists()


def test_import_with_a_schema_file_and_the_schema_command(tmp_path, capsys):
    from dxstudio.project import Project

    pages = tmp_path / "pages"
    pages.mkdir()
    for page in sorted((SAMPLE / "pages").glob("*.json"))[:2]:
        (pages / page.name).write_bytes(page.read_bytes())
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps([{"name": "total", "description": "the amount paid"}, "date"]))
    code, _, err = run(capsys, "import", "json", str(pages), str(tmp_path / "P"), "--schema", str(schema))
    assert code == 0, err
    p = Project.open(tmp_path / "P")
    assert [(f.name, f.description) for f in p.schema] == [("total", "the amount paid"), ("date", "")]

    code, out, err = run(capsys, "schema", str(tmp_path / "P"), "--field", "vendor:who sold it",
                         "--field", "date:the day of the sale")
    assert code == 0, err
    p = Project.open(tmp_path / "P")
    assert [(f.name, f.description) for f in p.schema] == [
        ("total", "the amount paid"), ("date", "the day of the sale"), ("vendor", "who sold it")]
    assert [f["name"] for f in json.loads(out)["schema"]] == ["total", "date", "vendor"]

    code, _, _ = run(capsys, "schema", str(tmp_path / "P"), "--field", "total", "--replace")
    assert code == 0 and Project.open(tmp_path / "P").field_names == ["total"]

    before = (tmp_path / "P" / "dxproject.json").read_bytes()
    code, out, err = run(capsys, "schema", str(tmp_path / "P"), "--field", "9lives")
    assert code == 2 and out == "" and "9lives" in err
    assert (tmp_path / "P" / "dxproject.json").read_bytes() == before

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "import", "json", str(pages), str(tmp_path / "Q"), "--schema", str(bad))
    assert code == 2 and str(bad) in err and not (tmp_path / "Q").exists()


def with_checkpoint_key(model: Path, out: Path) -> None:
    """A copy of a model file whose __metadata__ also has the key a run's checkpoint carries."""
    data = model.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"]["checkpoint"] = "{}"
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    body = data[8 + n:]
    out.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def test_extract_of_a_checkpoint_says_what_it_is_and_where_the_model_is(tmp_path, capsys):
    code, _, err = run(capsys, "new-model", str(tmp_path / "m.safetensors"), "--size", "tiny")
    assert code == 0, err
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with_checkpoint_key(tmp_path / "m.safetensors", run_dir / "checkpoint.safetensors")
    page = next((SAMPLE / "pages").glob("*.json"))
    code, out, err = run(capsys, "extract", str(run_dir / "checkpoint.safetensors"), str(page))
    assert code == 2 and out == ""
    assert "fine-tuning checkpoint" in err and str(run_dir / "model.safetensors") in err and "--resume" in err
    assert "unknown keys" not in err


def test_a_failed_extract_prints_no_values_line(tmp_path, capsys):
    code, _, err = run(capsys, "new-model", str(tmp_path / "m.safetensors"), "--size", "tiny")
    assert code == 0, err
    bad = tmp_path / "bad.json"
    bad.write_text("{not a page")
    code, out, err = run(capsys, "extract", str(tmp_path / "m.safetensors"), str(bad))
    assert code == 2 and out == ""
    assert str(bad) in err and "answered locally" not in err


def test_readme_lists_every_command_and_every_document():
    """The README's command list names every command (route among them) and its documents list
    every page of docs/ (scale.md among them), so a newcomer finds each."""
    import re

    from dxstudio.cli.main import COMMANDS

    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text()
    listed = set(re.findall(r"^    dxstudio ([a-z][a-z-]*)", readme, re.M))
    assert {name for name, *_ in COMMANDS} <= listed, sorted({name for name, *_ in COMMANDS} - listed)
    pages = {f"docs/{p.name}" for p in (repo / "docs").glob("*.md")}
    assert pages and {p for p in pages if p not in readme} == set()
    # the builds for other CPUs run in the default suite: the README does not call them heavy
    heavy = re.search(r"The heavy checks \(([^)]*)\)", readme)
    assert heavy and "other CPU" not in heavy.group(1)


def test_tune_help_says_the_sample_overrides_its_defaults(capsys):
    """`tune --help` shows dxstudio's own defaults; it says a project's settings come before them
    and names each setting the bundled sample sets."""
    with pytest.raises(SystemExit) as exit_:
        cli_entry(["tune", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "The defaults shown are dxstudio's own" in text and "the bundled sample sets" in text
    sets = text.split("the bundled sample sets", 1)[1].split(")", 1)[0]
    settings = json.loads((SAMPLE / "dxproject.json").read_text())["settings"]
    assert settings and [k for k in settings if k not in sets] == []
