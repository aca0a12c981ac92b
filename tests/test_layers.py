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
    assert "2 kept, 0 broken" in proc.stdout


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


@pytest.mark.parametrize("module, line", [
    ("dxstudio/tuning/settings.py", "import PySide6.QtCore  # noqa"),
    ("dxstudio/engine/losses.py", "import dxstudio.tuning.schedule  # noqa"),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line):
    shutil.copytree(REPO / "dxstudio", tmp_path / "dxstudio", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0 and "1 kept, 1 broken" in proc.stdout, proc.stdout[-3000:]
