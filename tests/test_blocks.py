"""The block types (dxstudio/engine/blocks/): ModelConfig.block names one, the block module
declares its tensors, and model files without the key keep their bytes."""
from __future__ import annotations

import dataclasses

import pytest

from dxstudio.engine.blocks import block_names, block_type
from dxstudio.engine.config import SIZES, ModelConfig
from dxstudio.engine.kernels.registry import REGISTRY
from dxstudio.engine.params import param_spec


def test_the_transformer_is_the_default_block_and_its_files_keep_their_bytes():
    cfg = SIZES["tiny"]
    assert cfg.block == "transformer" and "transformer" in block_names()
    assert "block" not in cfg.to_dict()  # the config JSON (so the model file) is as before the key
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    other = dataclasses.replace(cfg, block="transformer")
    assert other.to_json() == cfg.to_json()


def test_an_unknown_block_type_is_refused_naming_the_choices():
    cfg = dataclasses.replace(SIZES["tiny"], block="mamba")
    with pytest.raises(ValueError, match=r"block must be one of \['transformer'\], not mamba"):
        cfg.validate()
    d = SIZES["tiny"].to_dict()
    d["block"] = "mamba"
    with pytest.raises(ValueError, match="block must be one of"):
        ModelConfig.from_dict(d)
    with pytest.raises(ValueError, match="unknown block type 'mamba'"):
        block_type("mamba")


def test_the_block_module_declares_the_tensors_and_registers_its_forward():
    cfg = SIZES["tiny"]
    block = block_type(cfg.block)
    names = [name for name, _, _ in block.tensors(cfg)]
    spec = {name: (shape, kind) for name, shape, kind in param_spec(cfg)}
    for layer in range(cfg.layers):
        for name, shape, kind in block.tensors(cfg):
            assert spec[f"blocks.{layer}.{name}"] == (shape, kind)
    assert len(block.Weights._fields) == len(names)  # the compiled forward takes them all, by name
    assert REGISTRY["transformer_block"] is block.forward
