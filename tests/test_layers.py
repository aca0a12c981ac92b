"""The layering of pyproject.toml's import-linter contracts holds, covers every module, and
would catch a break (checked on a copy with one forbidden import added)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from pathlib import Path

import pytest

pytest.importorskip("importlinter")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_contracts_are_kept():
    proc = lint(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{len(contracts())} kept, 0 broken" in proc.stdout


def test_the_qt_contract_names_every_module_outside_the_app():
    qt = next(c for c in contracts() if "Qt" in c["name"])
    covered = qt["source_modules"]
    exempt = {"dxstudio", "dxstudio.cli", "dxstudio.cli.main", "dxstudio.cli.__main__"}  # the entry point
    missing = []
    for path in (REPO / "dxstudio").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name in exempt or name == "dxstudio.ui" or name.startswith("dxstudio.ui."):
            continue
        if not any(name == m or name.startswith(m + ".") for m in covered):
            missing.append(name)
    assert not missing, f"add these to the Qt contract's source_modules in pyproject.toml: {missing}"


def test_the_layers_name_every_package():
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.replace("|", ":").split(":")}
    packages = {f"dxstudio.{p.stem if p.is_file() else p.name}" for p in (REPO / "dxstudio").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert packages - named == set(), f"add these to the layers contract in pyproject.toml: {packages - named}"


@pytest.mark.parametrize("module, line, broken", [
    ("dxstudio/tuning/settings.py", "import PySide6.QtCore  # noqa", ["Qt"]),
    ("dxstudio/engine/losses.py", "import dxstudio.tuning.schedule  # noqa", ["engine", "layers"]),
    ("dxstudio/project.py", "import dxstudio.labelling  # noqa", ["layers"]),  # a lower layer importing a higher
    ("dxstudio/scale/cluster.py", "import dxstudio.cli.common  # noqa", ["layers"]),  # as it did before console.py
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line, broken):
    shutil.copytree(REPO / "dxstudio", tmp_path / "dxstudio", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    proc = lint(tmp_path)
    n = len(contracts())
    assert proc.returncode != 0 and f"{n - len(broken)} kept, {len(broken)} broken" in proc.stdout, proc.stdout[-3000:]
    for word in broken:
        assert any(word in c["name"] and f"{c['name']} BROKEN" in proc.stdout for c in contracts()), (word, proc.stdout[-3000:])
