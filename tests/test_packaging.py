"""The package as a user installs it: the wheel carries the sample project and any base model
(setup.py), dxstudio.bundled finds them in a checkout and in an installed wheel, the licence and
py.typed are there, and `dxstudio --version` answers. .ci/run also installs the built wheel into
a fresh venv and tunes the bundled sample with it."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dxstudio import __version__, bundled
from dxstudio.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]


def test_bundled_resources_are_found():
    package = Path(bundled.__file__).resolve().parent
    # the checkout's resources/, or (tests run against an installed wheel) the package's copy
    root = REPO / "resources" if package == REPO / "dxstudio" else package / "resources"
    assert bundled.resources_dir() == root
    assert bundled.sample_dir() == root / "sample" and bundled.models_dir() == root / "models"
    assert (bundled.sample_dir() / "dxproject.json").read_bytes() == \
        (REPO / "resources" / "sample" / "dxproject.json").read_bytes()


def test_version_is_printed_and_is_the_packages(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"dxstudio {__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_licence_and_py_typed_exist():
    assert (REPO / "dxstudio" / "py.typed").is_file()
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert 'license = "Apache-2.0"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_wheel_carries_the_sample_and_base_models_and_finds_them(tmp_path):
    # a copy of the source with a (fake) base model and a used sample (a run, a cache) in it
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info", "runs", ".cache")
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "dxstudio", src / "dxstudio", ignore=skip)
    shutil.copytree(REPO / "resources" / "sample", src / "resources" / "sample", ignore=skip)
    models = src / "resources" / "models"
    models.mkdir()
    (models / "base-v0.safetensors").write_bytes(b"not really a model")
    (models / "CREDITS.md").write_text("where the base model comes from\n")
    (models / "scratch.npz").write_bytes(b"not carried")
    (src / "resources" / "sample" / "runs" / "r1").mkdir(parents=True)
    (src / "resources" / "sample" / "runs" / "r1" / "model.safetensors").write_bytes(b"a user's run")

    out = tmp_path / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(out), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("dxstudio-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        z.extractall(tmp_path / "site")
    sample = {n for n in names if n.startswith("dxstudio/resources/sample/")}
    committed = {"dxstudio/resources/sample/" + p.relative_to(REPO / "resources" / "sample").as_posix()
                 for p in (REPO / "resources" / "sample").rglob("*") if p.is_file()
                 and not {"runs", ".cache", "__pycache__"} & set(p.relative_to(REPO / "resources" / "sample").parts)}
    assert sample == committed and len(sample) > 400
    assert {"dxstudio/resources/models/base-v0.safetensors", "dxstudio/resources/models/CREDITS.md"} <= names
    assert "dxstudio/resources/models/scratch.npz" not in names
    assert "dxstudio/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = next(z for z in names if z.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in (tmp_path / "site" / meta).read_text()

    # installed (the wheel unpacked, no checkout around it): the locator finds the copies
    probe = ("import json, dxstudio.bundled as b; "
             "print(json.dumps([str(b.sample_dir()), str(b.models_dir()), b.__file__]))")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sample_dir, models_dir, module = json.loads(done.stdout)
    site = tmp_path / "site" / "dxstudio"
    assert Path(module).parent == site
    assert Path(sample_dir) == site / "resources" / "sample" and (Path(sample_dir) / "dxproject.json").is_file()
    assert Path(models_dir) == site / "resources" / "models"
