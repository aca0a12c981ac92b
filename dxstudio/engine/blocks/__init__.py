"""The block types of the model: one module each, holding the block whole (its tensors, its
reference forward, its compiled forward, its backward). ModelConfig.block names the type a model
uses; model.py and params.py ask `block_type(cfg.block)` and iterate over the cfg.layers blocks.

    block_names() -> list[str]      the block types there are (the modules of this folder),
                                    without importing them (config validation stays light)
    block_type(name) -> module      the block type's module (NAME, tensors, Weights,
                                    Activations, forward, backward: blocks/transformer.py)

A new block type is a new module here (docs/model.md, "Adding a second attention variant").
"""
from __future__ import annotations

import functools
import importlib
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=None)
def _names() -> tuple:
    return tuple(sorted(name[:-3] for name in os.listdir(_HERE) if name.endswith(".py") and not name.startswith("_")))


def block_names() -> list[str]:
    return list(_names())


@functools.lru_cache(maxsize=None)
def block_type(name: str):
    if name not in _names():
        raise ValueError(f"unknown block type {name!r}; choose one of {block_names()}")
    return importlib.import_module(f"{__name__}.{name}")
