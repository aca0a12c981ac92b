"""The trainable tensors of docextract-v0: names, container shapes, fixed order, and a new model from a seed.

Parameters live in an ordered dict name -> float32 ndarray in the container's shapes
(char_conv.weight is (out, channel, tap)); the runtime layouts are made by the model.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from .config import ModelConfig
from .kernels.rng import SplitMix64

# kinds: "weight" (a matrix, fan_in = product of the trailing dims), "table", "bias", "ln_weight", "ln_bias"


def param_spec(cfg: ModelConfig) -> list[tuple[str, tuple, str]]:
    """(name, shape, kind) in the seed's fixed order."""
    d, c, dc = cfg.d_model, cfg.char_channels, cfg.char_dim
    spec = [
        ("char_emb", (cfg.vocab, dc), "table"),
        ("char_conv.weight", (c, dc, cfg.char_taps), "weight"),
        ("char_conv.bias", (c,), "bias"),
        ("char_proj.weight", (d, c), "weight"),
        ("char_proj.bias", (d,), "bias"),
    ]
    for name in ("pos_x0", "pos_y0", "pos_x1", "pos_y1"):
        spec.append((name, (cfg.pos_buckets, d), "table"))
    spec += [
        ("feat_proj.weight", (d, cfg.word_features), "weight"),
        ("feat_proj.bias", (d,), "bias"),
        ("emb_ln.weight", (d,), "ln_weight"),
        ("emb_ln.bias", (d,), "ln_bias"),
    ]
    for layer in range(cfg.layers):
        p = f"blocks.{layer}."
        spec += [
            (p + "ln1.weight", (d,), "ln_weight"), (p + "ln1.bias", (d,), "ln_bias"),
            (p + "qkv.weight", (3 * d, d), "weight"), (p + "qkv.bias", (3 * d,), "bias"),
            (p + "proj.weight", (d, d), "weight"), (p + "proj.bias", (d,), "bias"),
            (p + "ln2.weight", (d,), "ln_weight"), (p + "ln2.bias", (d,), "ln_bias"),
            (p + "fc1.weight", (cfg.ffn, d), "weight"), (p + "fc1.bias", (cfg.ffn,), "bias"),
            (p + "fc2.weight", (d, cfg.ffn), "weight"), (p + "fc2.bias", (d,), "bias"),
        ]
    spec += [
        ("pair1.weight", (cfg.pair_hidden, cfg.pair_features), "weight"),
        ("pair1.bias", (cfg.pair_hidden,), "bias"),
        ("pair2.weight", (cfg.layers * cfg.heads, cfg.pair_hidden), "weight"),
        ("pair2.bias", (cfg.layers * cfg.heads,), "bias"),
        ("final_ln.weight", (d,), "ln_weight"), ("final_ln.bias", (d,), "ln_bias"),
        ("tag_head.weight", (cfg.n_tags, d), "weight"), ("tag_head.bias", (cfg.n_tags,), "bias"),
        ("role_head.weight", (len(cfg.roles), d), "weight"), ("role_head.bias", (len(cfg.roles),), "bias"),
        ("doc_head.weight", (len(cfg.doc_types), d), "weight"), ("doc_head.bias", (len(cfg.doc_types),), "bias"),
        ("rel_q.weight", (2 * cfg.rel_dim, d), "weight"), ("rel_q.bias", (2 * cfg.rel_dim,), "bias"),
        ("rel_k.weight", (2 * cfg.rel_dim, d), "weight"), ("rel_k.bias", (2 * cfg.rel_dim,), "bias"),
    ]
    return spec


def decays(kind: str) -> bool:
    """Weight decay applies to weight matrices and tables, not to biases or layer-norm parameters."""
    return kind in ("weight", "table")


def draw_tensor(rng: SplitMix64, shape: tuple, kind: str) -> np.ndarray:
    """Weights uniform in (-1/sqrt(fan_in), 1/sqrt(fan_in)), tables in (-0.1, 0.1), biases 0,
    layer-norm weights 1. Only weights and tables consume draws, in row-major order."""
    count = int(np.prod(shape))
    if kind == "weight":
        fan_in = int(np.prod(shape[1:]))
        bound = 1.0 / math.sqrt(fan_in)
        return rng.uniform(count, -bound, bound).reshape(shape)
    if kind == "table":
        return rng.uniform(count, -0.1, 0.1).reshape(shape)
    if kind == "ln_weight":
        return np.ones(shape, np.float32)
    return np.zeros(shape, np.float32)


def new_params(cfg: ModelConfig, seed: int) -> "OrderedDict[str, np.ndarray]":
    """A new model: SplitMix64(seed) draws every tensor in the fixed order."""
    cfg.validate()
    rng = SplitMix64(seed)
    return OrderedDict((name, draw_tensor(rng, shape, kind)) for name, shape, kind in param_spec(cfg))


def new_tag_head(cfg: ModelConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fresh tag head (1 + 2K rows) drawn the same way from the run's seed (custom schema)."""
    rng = SplitMix64(seed)
    w = draw_tensor(rng, (cfg.n_tags, cfg.d_model), "weight")
    return w, np.zeros((cfg.n_tags,), np.float32)
