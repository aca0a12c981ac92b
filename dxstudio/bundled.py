"""The files that ship with dxstudio: the sample project and base models.

    resources_dir() -> Path   the bundled files: an installed wheel's dxstudio/resources/,
                              else a source checkout's resources/ (editable installs too)
    sample_dir() -> Path      the sample project (read it; the app works on a copy)
    models_dir() -> Path      base models, resources/models/*.safetensors (may not exist)

The repository keeps them in resources/ beside the package; setup.py copies resources/sample/
and resources/models/*.safetensors (with their notes, *.md and *.txt) into the built wheel as
dxstudio/resources/. Nothing here imports Qt or the engine.
"""
from __future__ import annotations

from pathlib import Path

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
