"""The files that ship with dxstudio: the sample project and base models.

    resources_dir() -> Path   the bundled files: an installed wheel's dxstudio/resources/,
                              else a source checkout's resources/ (editable installs too)
    sample_dir() -> Path      the sample project (read it; the app works on a copy)
    models_dir() -> Path      base models, resources/models/*.safetensors (may not exist)
    copy_sample(target) -> Path   a writable copy of the sample (`dxstudio sample [DIR]`)
    inside_package(path) -> bool  whether path lies inside the installed package (read-only)

The repository keeps them in resources/ beside the package; setup.py copies resources/sample/
and resources/models/*.safetensors (with their notes, *.md and *.txt) into the built wheel as
dxstudio/resources/. Nothing here imports Qt or the engine.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from dxstudio.project import ProjectLayout

PACKAGE = Path(__file__).resolve().parent


def resources_dir() -> Path:
    installed = PACKAGE / "resources"  # only a built wheel has it
    if installed.is_dir():
        return installed
    return PACKAGE.parent / "resources"  # the source checkout


def sample_dir() -> Path:
    return resources_dir() / "sample"


def models_dir() -> Path:
    return resources_dir() / "models"


def inside_package(path) -> bool:
    """Whether path is inside the dxstudio package folder: an installed wheel's sample (and a
    checkout's dxstudio/), which a command must not write into."""
    try:
        Path(path).resolve().relative_to(PACKAGE)
    except ValueError:
        return False
    return True


class SampleCopyError(Exception):
    """The sample could not be copied to the folder asked for; str() names it and why."""


def copy_sample(target, source: Path | None = None) -> tuple[Path, bool]:
    """Copy the bundled sample project to target (a new or empty folder) and return (its path,
    whether it was copied now). A target that already holds a dxstudio project is returned as it
    is (False), any other non-empty folder is refused. The copy appears whole or not at all
    (written beside the target, then renamed); runs/ and .cache/ are not copied."""
    source = Path(source) if source is not None else sample_dir()
    target = Path(target).absolute()
    if not (source / "dxproject.json").is_file():
        raise SampleCopyError(f"{source}: the bundled sample project is missing")
    if ProjectLayout(target).project_file.is_file():
        return target, False
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise SampleCopyError(f"{target}: exists and is not empty; give a new folder")
    if inside_package(target):
        raise SampleCopyError(f"{target}: inside the installed dxstudio package; give a folder of your own")
    partial = target.parent / f".{target.name}.copying"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if partial.exists():
            shutil.rmtree(partial)
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns(*ProjectLayout.NOT_COPIED, "__pycache__"))
        ProjectLayout(partial).runs_dir.mkdir(exist_ok=True)
        if target.exists():  # an empty folder
            target.rmdir()
        partial.rename(target)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise SampleCopyError(f"{target}: cannot copy the sample there ({e.strerror or e})") from None
    return target, True
