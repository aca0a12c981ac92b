"""docextract-v0: the forward pass (inference = training forward) and its backward.

One window of a page in (WindowInputs), every output out. Parameters are in the runtime
layout (to_runtime). `forward(..., keep=True)` keeps every activation the backward needs, by
name (Activations, with the block type's Activations per block); its outputs are the same bytes
as with keep=False. The blocks are the config's block type (blocks/, ModelConfig.block): each
block module holds the block whole (tensors, reference and compiled forward, backward); here
the model iterates over cfg.layers of them.
The order of operations is docs/model.md's, one line of code per line of the spec.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from . import layers as L
from .blocks import block_type
from .config import ModelConfig
from .kernels import fused
from .kernels.compiled import pack_t
from .kernels.registry import Ops, binary32, late, register
from .kernels.runtime import parallel_allowed
from .layers import CharConvSaved, LayerNormSaved

F32 = np.float32


@dataclass
class Activations:
    """What the backward needs from the forward (forward(..., keep=True))."""
    tap_ids: np.ndarray  # (P, 3) character ids of the convolution taps
    w_rt: np.ndarray  # char_conv.weight in the runtime layout
    conv: CharConvSaved
    pooled: np.ndarray  # (n, C)
    feats: np.ndarray  # (n, 16) word features
    emb_ln: LayerNormSaved
    pf: np.ndarray  # (n*n, 8) pair features
    ph: np.ndarray  # (n*n, Hp) relu(pair1)
    blocks: list = field(default_factory=list)  # the block type's Activations, first block first
    final: LayerNormSaved | None = None
    f: np.ndarray | None = None  # final_ln output
    mean: np.ndarray | None = None  # colsum(f) / n
    rq: np.ndarray | None = None
    rk: np.ndarray | None = None

    def __getitem__(self, name: str):
        """cache["conv"] reads like cache.conv (older readers of the activations)."""
        return getattr(self, name)


@dataclass
class Outputs:
    tag_logits: np.ndarray  # (n, 1 + 2K)
    role_logits: np.ndarray  # (n, R)
    doc_logits: np.ndarray  # (T,)
    item_scores: np.ndarray  # (n, n): word i points at word j
    kv_scores: np.ndarray  # (n, n)
    cache: Activations | None = None  # keep=True


def to_runtime(params) -> "OrderedDict[str, np.ndarray]":
    """Container tensors -> runtime tensors: char_conv.weight becomes (C, taps*Dc) ordered
    (tap, channel). The engine (forward, backward, optimizer) works in the runtime layout;
    only writing a model maps back (to_container)."""
    rt = OrderedDict(params)
    rt["char_conv.weight"] = L.conv_weight_to_runtime(params["char_conv.weight"])
    return rt


def to_container(params_rt) -> "OrderedDict[str, np.ndarray]":
    out = OrderedDict(params_rt)
    w = params_rt["char_conv.weight"]
    out["char_conv.weight"] = L.conv_weight_to_container(w, w.shape[1] // 3)
    return out


def _scale(dtype, size) -> np.floating:
    """sqrt(size) rounded to the working precision (attention: d/heads; pointers: r)."""
    t = np.dtype(dtype).type
    return np.sqrt(t(size))


# ----------------------------------------------------------------------------------------
# The forward's sections: each a registry entry (kernels/registry.py): its reference here, its
# compiled twin in kernels/fused.py (one compiled call), and the rule saying when the twin runs.
# The blocks (section 4) are their block type's module (blocks/).
# ----------------------------------------------------------------------------------------
def _charconv_ref(ops: Ops, char_ids, char_len, emb, w_rt, b, n, keep, allowed):
    """1. characters -> pooled channels: (tap_ids, owners, pooled, CharConvSaved or None)."""
    tap_ids, owners = L.char_windows(char_ids, char_len)
    pooled, saved = L.charconv_forward(ops, emb, w_rt, b, tap_ids, owners, n, keep)
    return tap_ids, owners, pooled, saved


def _charconv_compiled(char_ids, char_len, emb, w_rt, b, n, keep, allowed):
    tap_ids, owners, pooled, saved = fused.charconv_words_forward(char_ids, char_len, emb, w_rt, b, keep, allowed)
    return tap_ids, owners, pooled, (CharConvSaved(*saved) if keep else None)


charconv_section = register("charconv_section", _charconv_ref, _charconv_compiled,
                            lambda char_ids, char_len, emb, w_rt, b, n, keep, allowed: binary32(emb, w_rt))


def _embed_ref(ops: Ops, pooled, p, b, feats, eps, keep, allowed):
    """2. e = char_proj(pooled) + pos_x0 + pos_y0 + pos_x1 + pos_y1 + feat_proj(features), left
    to right, then emb_ln: (x, LayerNormSaved)."""
    e = L.linear_forward(ops, pooled, p["char_proj.weight"], p["char_proj.bias"])
    e = e + p["pos_x0"][b[:, 0]]
    e = e + p["pos_y0"][b[:, 1]]
    e = e + p["pos_x1"][b[:, 2]]
    e = e + p["pos_y1"][b[:, 3]]
    e = e + L.linear_forward(ops, feats, p["feat_proj.weight"], p["feat_proj.bias"])
    return L.layernorm_forward(ops, e, p["emb_ln.weight"], p["emb_ln.bias"], eps)


def _embed_compiled(pooled, p, b, feats, eps, keep, allowed):
    x, xh, inv = fused.embed_forward(pooled, p, b, feats, eps, allowed)
    return x, (LayerNormSaved(xh, inv) if keep else None)


embed_section = register("embed_section", _embed_ref, _embed_compiled,
                         lambda pooled, p, b, feats, eps, keep, allowed: binary32(pooled, p["char_proj.weight"]))


def _pair_bias_ref(ops: Ops, pf, w1, b1, w2, b2, allowed, keep):
    """3. pair bias over the n^2 pairs in row-major (i, j) order, once per window: (ph, pbias_t)
    (ph, the hidden layer the backward reads, may be None when not keep).
    pbias (n*n, L*heads) goes on as pbias_t: one copy with each (layer, head)'s bias map
    contiguous, rather than a strided column per head."""
    ph = L.linear_relu_forward(ops, pf, w1, b1)
    pbias = L.linear_forward(ops, ph, w2, b2)
    pbias_t = pack_t(pbias) if ops.compiled(pbias) else np.ascontiguousarray(pbias.T)
    return ph, pbias_t


pair_bias_section = register("pair_bias_section", _pair_bias_ref, late(fused, "pair_bias_forward"),
                             lambda pf, w1, b1, w2, b2, allowed, keep: (binary32(pf) and pf.shape[1] == 8
                                                                        and w2.shape[1] == 32))


def _pair_bias_backward_ref(ops: Ops, dpbias_t, ph, pf, w2):
    """3. backward: (pair2.weight, pair2.bias, pair1.weight, pair1.bias) gradients; dpbias_t
    (L*heads, n*n) is the pair-bias gradient with a row a head (the pairs' gradients are its columns)."""
    dph, dw2, db2 = L.linear_relu_backward(ops, np.ascontiguousarray(dpbias_t.T), ph, w2)
    return dw2, db2, ops.mm_tn(dph, pf), ops.colsum(dph)


pair_bias_backward_section = register(
    "pair_bias_backward_section", _pair_bias_backward_ref, late(fused, "pair_bias_backward"),
    lambda dpbias_t, ph, pf, w2: binary32(dpbias_t, ph, pf, w2) and dpbias_t.shape[0] == 16 and pf.shape[1] == 8)


def _position_tables_ref(ops: Ops, de, buckets, rows):
    """2. backward: the position tables' gradients (rows added in word order), one per column of buckets."""
    return [L.table_backward(de, buckets[:, k], rows) for k in range(buckets.shape[1])]


position_tables_section = register("position_tables_section", _position_tables_ref,
                                   late(fused, "position_tables_backward"), lambda de, buckets, rows: binary32(de))


def _heads_ref(ops: Ops, x, p, eps, r, rscale, keep, allowed):
    """5. the output heads: (tag, role, doc, items, kvs, (final_ln, f, mean, rq, rk) or None)."""
    n = x.shape[0]
    f, fin = L.layernorm_forward(ops, x, p["final_ln.weight"], p["final_ln.bias"], eps)
    tag = L.linear_forward(ops, f, p["tag_head.weight"], p["tag_head.bias"])
    role = L.linear_forward(ops, f, p["role_head.weight"], p["role_head.bias"])
    mean = ops.colsum(f) / x.dtype.type(n)
    doc = L.linear_forward(ops, mean[None, :], p["doc_head.weight"], p["doc_head.bias"])[0]
    rq = L.linear_forward(ops, f, p["rel_q.weight"], p["rel_q.bias"])
    rk = L.linear_forward(ops, f, p["rel_k.weight"], p["rel_k.bias"])
    qi, ki = np.ascontiguousarray(rq[:, :r]), np.ascontiguousarray(rk[:, :r])
    qv, kv = np.ascontiguousarray(rq[:, r:]), np.ascontiguousarray(rk[:, r:])
    items = L.pointer_forward(ops, qi, ki, rscale)
    kvs = L.pointer_forward(ops, qv, kv, rscale)
    return tag, role, doc, items, kvs, ((fin, f, mean, rq, rk) if keep else None)


def _heads_compiled(x, p, eps, r, rscale, keep, allowed):
    if not keep:
        tag, role, doc, items, kvs = fused.heads_forward(x, p, eps, r, rscale, False, allowed)
        return tag, role, doc, items, kvs, None
    f, fxh, finv, tag, role, mean, doc, rq, rk, items, kvs = fused.heads_forward(x, p, eps, r, rscale, True, allowed)
    return tag, role, doc, items, kvs, (LayerNormSaved(fxh, finv), f, mean, rq, rk)


heads_section = register("heads_section", _heads_ref, _heads_compiled,
                         lambda x, p, eps, r, rscale, keep, allowed: binary32(x, p["tag_head.weight"]))


def forward(cfg: ModelConfig, params, inp, ops: Ops, keep: bool = False) -> Outputs:
    p = params
    dt = p["char_emb"].dtype
    n = inp.n
    cache = None
    # the compiled sections: whether they may use the threads, asked once (runtime.parallel_pays)
    allowed = parallel_allowed() if ops.compiled(p["char_emb"]) else None

    # 1. characters -> pooled channels
    w_rt = p["char_conv.weight"]
    tap_ids, owners, pooled, conv_saved = charconv_section(
        ops, inp.char_ids, inp.char_len, p["char_emb"], w_rt, p["char_conv.bias"], n, keep, allowed)

    # 2. the embedding sum and its layer norm
    feats = np.asarray(inp.word_feats, dt)  # no copy when it is already dt (read only below)
    x, emb_ln_saved = embed_section(ops, pooled, p, inp.buckets, feats, cfg.ln_eps, keep, allowed)

    # 3. pair bias over the n^2 pairs
    pf = np.asarray(inp.pair_feats, dt)
    ph, pbias_t = pair_bias_section(ops, pf, p["pair1.weight"], p["pair1.bias"], p["pair2.weight"],
                                    p["pair2.bias"], allowed, keep)
    if keep:
        cache = Activations(tap_ids=tap_ids, w_rt=w_rt, conv=conv_saved, pooled=pooled, feats=feats,
                            emb_ln=emb_ln_saved, pf=pf, ph=ph)

    # 4. blocks: block l reads the pair bias rows l*heads .. l*heads + heads - 1
    block = block_type(cfg.block)
    for l in range(cfg.layers):
        x, acts = block.forward(ops, cfg, p, f"blocks.{l}.", x, pbias_t, l * cfg.heads, keep, allowed)
        if keep:
            cache.blocks.append(acts)

    # 5. heads
    r = cfg.rel_dim
    rscale = _scale(dt, r)
    tag, role, doc, items, kvs, kept = heads_section(ops, x, p, cfg.ln_eps, r, rscale, keep, allowed)
    if keep:
        cache.final, cache.f, cache.mean, cache.rq, cache.rk = kept
    return Outputs(tag, role, doc, items, kvs, cache)


@dataclass
class OutputGrads:
    """Gradients of the loss with respect to the outputs; None = that output is not used."""
    tag: np.ndarray | None = None
    role: np.ndarray | None = None
    doc: np.ndarray | None = None
    items: np.ndarray | None = None
    kv: np.ndarray | None = None


def _heads_backward_ref(ops: Ops, cfg, p, c: Activations, go: "OutputGrads", need_dx):
    """5. backward: ((dx, final_ln.weight, final_ln.bias) or None, {head tensor: gradient}); the
    gradients to f added in the order tag, role, doc, rel_q, rel_k (the first as it is). None
    when no output has a gradient or need_dx is false (no backbone tensor is wanted)."""
    dt = p["char_emb"].dtype
    n = c.f.shape[0]
    f = c.f
    grads = {}
    df = None

    def add(a, b):
        return b if a is None else a + b

    def head(name, dy, x):
        dx, dw, db = L.linear_backward(ops, dy, x, p[name + ".weight"])
        grads[name + ".weight"], grads[name + ".bias"] = dw, db
        return dx

    if go.tag is not None:
        df = add(df, head("tag_head", go.tag, f))
    if go.role is not None:
        df = add(df, head("role_head", go.role, f))
    if go.doc is not None:
        dmean = head("doc_head", go.doc[None, :], c.mean[None, :])[0]
        df = add(df, np.broadcast_to(dmean / dt.type(n), f.shape))
    if go.items is not None or go.kv is not None:
        r = cfg.rel_dim
        rscale = _scale(dt, r)
        rq, rk = c.rq, c.rk
        drq = np.zeros_like(rq)
        drk = np.zeros_like(rk)
        for gsc, cols in ((go.items, slice(0, r)), (go.kv, slice(r, 2 * r))):
            if gsc is None:
                continue
            dq, dk = L.pointer_backward(ops, gsc, np.ascontiguousarray(rq[:, cols]),
                                        np.ascontiguousarray(rk[:, cols]), rscale)
            drq[:, cols] = dq
            drk[:, cols] = dk
        df = add(df, head("rel_q", drq, f))
        df = add(df, head("rel_k", drk, f))
    if df is None or not need_dx:
        return None, grads
    return L.layernorm_backward(ops, df, c.final, p["final_ln.weight"]), grads


def _heads_backward_compiled(cfg, p, c: Activations, go: "OutputGrads", need_dx):
    used = [g is not None for g in (go.tag, go.role, go.doc, go.items, go.kv)]
    r = cfg.rel_dim
    return fused.heads_backward(c.f, c.mean, c.rq, c.rk, c.final, p, go, r, _scale(F32, r),
                                bool(need_dx and any(used)))


heads_backward_section = register(
    "heads_backward_section", _heads_backward_ref, _heads_backward_compiled,
    lambda cfg, p, c, go, need_dx: (binary32(c.f, c.rq, c.rk, p["tag_head.weight"]) and all(
        g.dtype == F32 for g in (go.tag, go.role, go.doc, go.items, go.kv) if g is not None)))


def _embed_backward_ref(ops: Ops, cfg, p, c: Activations, buckets, dx):
    """2. and 1. backward from dx at the first block's input: {tensor: gradient} of emb_ln,
    feat_proj, the position tables, char_proj, char_emb and char_conv."""
    grads = {}
    de, grads["emb_ln.weight"], grads["emb_ln.bias"] = L.layernorm_backward(ops, dx, c.emb_ln, p["emb_ln.weight"])
    grads["feat_proj.weight"] = ops.mm_tn(de, c.feats)
    grads["feat_proj.bias"] = ops.colsum(de)
    for name, g in zip(("pos_x0", "pos_y0", "pos_x1", "pos_y1"),
                       position_tables_section(ops, de, buckets[:, :4], cfg.pos_buckets)):
        grads[name] = g
    dpooled, grads["char_proj.weight"], grads["char_proj.bias"] = L.linear_backward(ops, de, c.pooled, p["char_proj.weight"])
    grads["char_emb"], grads["char_conv.weight"], grads["char_conv.bias"] = L.charconv_backward(
        ops, dpooled, c.conv, c.w_rt, c.tap_ids, cfg.vocab)
    return grads


def _embed_backward_compiled(cfg, p, c: Activations, buckets, dx):
    return fused.embed_backward(dx, c.emb_ln, c.feats, buckets, cfg.pos_buckets, c.pooled, p, c.conv, c.w_rt,
                                c.tap_ids, cfg.vocab)


embed_backward_section = register(
    "embed_backward_section", _embed_backward_ref, _embed_backward_compiled,
    lambda cfg, p, c, buckets, dx: binary32(dx, c.emb_ln.xhat, c.feats, c.pooled, c.conv.u, c.conv.h, c.w_rt,
                                            p["char_proj.weight"], p["emb_ln.weight"]))


def backward(cfg: ModelConfig, params, inp, out: Outputs, go: OutputGrads, ops: Ops,
             wanted: set | None = None) -> "OrderedDict[str, np.ndarray]":
    """Parameter gradients (runtime layout, like the parameters) for the
    tensors in `wanted` (None: every tensor the used outputs reach). Backward stops as soon as
    no wanted tensor lies further down."""
    p = params
    c = out.cache
    if c is None:
        raise ValueError("backward needs a forward run with keep=True")
    dt = p["char_emb"].dtype
    n = inp.n
    grads: dict = {}
    want = (lambda name: True) if wanted is None else (lambda name: name in wanted)

    # 5. heads -> df, added in the order tag, role, doc, rel_q, rel_k; then final_ln
    need_dx = any(want(name) for name in _backbone(tuple(p)))
    final, heads = heads_backward_section(ops, cfg, p, c, go, need_dx)
    grads.update(heads)
    if final is None:
        return _ordered(p, grads)
    dx, grads["final_ln.weight"], grads["final_ln.bias"] = final

    # 4. blocks, last first
    block = block_type(cfg.block)
    # the pair-bias gradient with a row a head of each block (each head's n*n gradients written
    # whole by its block's backward, as the forward reads its bias from pbias_t: not cleared first,
    # 11 MB at 400 words)
    dpbias_t = np.empty((cfg.layers * cfg.heads, n * n), dt)
    for l in range(cfg.layers - 1, -1, -1):
        dx = block.backward(ops, cfg, p, f"blocks.{l}.", c.blocks[l], dx, dpbias_t, l * cfg.heads, grads)

    # 3. pair MLP: weight gradients are dots over the pairs in row-major order; features get none
    (grads["pair2.weight"], grads["pair2.bias"], grads["pair1.weight"],
     grads["pair1.bias"]) = pair_bias_backward_section(ops, dpbias_t, c.ph, c.pf, p["pair2.weight"])

    # 2. embedding sum and its layer norm; 1. characters
    grads.update(embed_backward_section(ops, cfg, p, c, inp.buckets, dx))
    return _ordered(p, grads)


@functools.lru_cache(maxsize=64)
def _backbone(names: tuple) -> tuple:
    """The tensors below the heads, of a model's tensor names (worked out once per model shape)."""
    return tuple(name for name in names if not name.startswith(("tag_head", "role_head", "doc_head", "rel_q", "rel_k")))


def _ordered(params, grads):
    return OrderedDict((name, grads[name]) for name in params if name in grads)
