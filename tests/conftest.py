"""Shared fixtures: small projects built from the real receipts in ../shared/data."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
SROIE = SHARED / "sroie-train"


def sroie_subset(dst: Path, stems) -> Path:
    """A SROIE-shaped folder holding only the given receipts (box/, key/, image_sizes.csv)."""
    (dst / "box").mkdir(parents=True)
    (dst / "key").mkdir()
    for s in stems:
        shutil.copy(SROIE / "box" / f"{s}.csv", dst / "box")
        shutil.copy(SROIE / "key" / f"{s}.json", dst / "key")
    if (SROIE / "image_sizes.csv").exists():
        shutil.copy(SROIE / "image_sizes.csv", dst)
    return dst


@pytest.fixture(scope="session")
def receipts_project_template(tmp_path_factory):
    """A project of 16 SROIE receipts with their key values as the labelling model's answers."""
    if not SROIE.exists():
        pytest.skip(f"{SROIE} is not here")
    from dxstudio.importers import import_pages
    from dxstudio.project import Project

    base = tmp_path_factory.mktemp("receipts")
    src = sroie_subset(base / "src", [f"{i:03d}" for i in range(16)])
    project = Project.create(base / "project", "receipts")
    import_pages("sroie", src, project)
    project.settings.update({"size": "tiny", "epochs": 2, "batch": 4, "warmup": 2, "lr": 0.01,
                             "backbone_scale": 0.5, "heldout_fraction": 0.25, "checkpoint_every": 3})
    project.save()
    return base / "project"


@pytest.fixture
def receipts_project(receipts_project_template, tmp_path):
    """A fresh copy per test, so a test may change labels freely."""
    dst = tmp_path / "project"
    shutil.copytree(receipts_project_template, dst)
    return dst
