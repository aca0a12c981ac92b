"""The shipped base model: its hash, what it holds, and (heavy) the documented command
reproducing it byte for byte (docs/base-model.md)."""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from dxstudio.corpus.generic import GENERIC_FIELDS
from dxstudio.engine.container import load_model
from dxstudio.tuning import run as run_mod

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
SHIPPED = REPO / "resources" / "models" / "docextract-v0-base.safetensors"
SHA256 = "cbcba0cf6bcae3d22fa1c4ee2561918c6e54f1026e264033b2ac32c2dcee1b1a"
SOURCES = ["cord-v1-train", "naf", "docbank-samples", "invoice2data-samples"]


def test_the_shipped_base_has_the_documented_hash_and_is_a_base():
    assert run_mod.BASE_MODEL == SHIPPED
    assert hashlib.sha256(SHIPPED.read_bytes()).hexdigest() == SHA256
    m = load_model(SHIPPED)
    assert m.cfg.fields == GENERIC_FIELDS and m.cfg.d_model == 128
    assert m.summary["base"] is True and m.summary["steps"] == 1200
    card = (REPO / "docs" / "base-model.md").read_text(encoding="utf-8")
    assert SHA256 in card


@pytest.mark.heavy
@pytest.mark.shared_data(*SOURCES)
def test_the_documented_command_reproduces_the_shipped_base(tmp_path):
    """About 13 minutes at degree 2 on a busy 2-core machine."""
    from dxstudio.cli import main as cli_main

    if importlib.util.find_spec("faker") is None:
        pytest.skip("faker is not installed (pip install dxstudio[pretrain])")
    import faker

    if faker.VERSION != "40.63.0":
        pytest.skip(f"faker {faker.VERSION}: the generated documents need faker 40.63.0")
    out = tmp_path / "run"
    args = ["pretrain", *(str(SHARED / s) for s in SOURCES), "synthetic:4000", "--steps", "1200",
            "--warmup", "100", "--degree", "2", "--out", str(out)]
    assert cli_main(args) == 0
    assert hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest() == SHA256
