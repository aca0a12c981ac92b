"""The transformer block of docextract-v0, whole: its tensors, its reference forward, its compiled
forward and its backward, here and nowhere else (docs/model.md, "4. blocks").

    x = x + proj(attention(ln1(x)))          attention per head: softmax(q k^T / sqrt(dh) + pair bias) v
    x = x + fc2(gelu(fc1(ln2(x))))

What model.py asks of a block type (blocks/__init__.py lists them; ModelConfig.block names one):

    NAME                                   the config's name of this block type
    tensors(cfg) -> [(suffix, shape, kind)]  the block's trainable tensors, in the seed's order
    Weights                                the tensors by name, as the compiled forward takes them
    Activations                            what the backward needs from the forward, by name
    forward(ops, cfg, p, prefix, x, pbias_t, row0, keep, allowed) -> (x, Activations or None)
    backward(ops, cfg, p, prefix, acts, dx, dpbias_t, row0, grads) -> dx   (a registry entry too;
                                           dpbias_t (L*heads, n*n): the pair-bias gradient, a row a head)

`forward` is a registry entry (kernels/registry.py): the reference (`_forward_ref`, the layers
of layers.py in NumPy) or, on the fast path with binary32 arrays, the compiled forward
(`_forward_compiled`: one Numba call for the whole block, the same kernels in the same order, so
the same bytes). row0 is the block's first row of the pair bias (one row per head).
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .. import layers as L
from ..kernels import compiled as kc
from ..kernels.fused import (_GELU_BWD, _LAYERNORM_BWD, _SOFTMAX_BWD, _gelu_fwd_par, _gelu_fwd_ser, _layernorm_nt,
                             _linear_bwd, _linear_nt, _mm_nt_ser, _softmax_fwd_ser)
from ..kernels.intrinsics import _NR, _t16
from ..kernels.registry import Ops, binary32, register
from ..kernels.runtime import _build, _jit, njit, prange, section_par
from ..layers import LayerNormSaved

NAME = "transformer"
F32 = np.float32


# ----------------------------------------------------------------------------------------
# The tensors
# ----------------------------------------------------------------------------------------
def tensors(cfg) -> list[tuple[str, tuple, str]]:
    """(name within the block, container shape, kind) in the seed's fixed order."""
    d = cfg.d_model
    return [
        ("ln1.weight", (d,), "ln_weight"), ("ln1.bias", (d,), "ln_bias"),
        ("qkv.weight", (3 * d, d), "weight"), ("qkv.bias", (3 * d,), "bias"),
        ("proj.weight", (d, d), "weight"), ("proj.bias", (d,), "bias"),
        ("ln2.weight", (d,), "ln_weight"), ("ln2.bias", (d,), "ln_bias"),
        ("fc1.weight", (cfg.ffn, d), "weight"), ("fc1.bias", (cfg.ffn,), "bias"),
        ("fc2.weight", (d, cfg.ffn), "weight"), ("fc2.bias", (d,), "bias"),
    ]


class Weights(NamedTuple):
    """The block's tensors (runtime layout, binary32, contiguous) for the compiled forward."""
    ln1w: np.ndarray
    ln1b: np.ndarray
    qkvw: np.ndarray
    qkvb: np.ndarray
    projw: np.ndarray
    projb: np.ndarray
    ln2w: np.ndarray
    ln2b: np.ndarray
    fc1w: np.ndarray
    fc1b: np.ndarray
    fc2w: np.ndarray
    fc2b: np.ndarray

    @classmethod
    def of(cls, p, prefix: str) -> "Weights":
        """The block's tensors of p, each binary32 and C-contiguous (a copy where it is not). The
        last Weights made for `prefix` is kept and given again while p holds the very same arrays
        (identity: a kept array is the one ascontiguousarray would give, since it is binary32 and
        contiguous), so a step does not convert 12 arrays in each block's forward and backward."""
        arrays = [p[key] for key in _weight_keys(prefix)]
        kept = _KEPT_WEIGHTS.get(prefix)
        if kept is not None and all(map(operator.is_, kept, arrays)):
            return kept
        w = cls(*(np.ascontiguousarray(a, F32) for a in arrays))
        if all(map(operator.is_, w, arrays)):  # only arrays taken as they are (copies are made anew)
            _KEPT_WEIGHTS[prefix] = w
        return w


_TENSOR_NAMES = ("ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                 "ln2.weight", "ln2.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")

# the last Weights.of per block prefix (it holds that block's arrays while no other params replace them)
_KEPT_WEIGHTS: dict = {}


@functools.lru_cache(maxsize=256)
def _weight_keys(prefix: str) -> tuple:
    return tuple(prefix + name for name in _TENSOR_NAMES)


@dataclass
class Activations:
    """What the block's backward needs from its forward."""
    ln1: LayerNormSaved
    h: np.ndarray  # ln1(x)
    qkv: np.ndarray  # (n, 3d)
    probs: list  # per head: the attention probabilities (n, n)
    a: np.ndarray  # the heads' outputs side by side (n, d)
    ln2: LayerNormSaved
    h2: np.ndarray  # ln2(x)
    f1: np.ndarray  # fc1 output
    g: np.ndarray  # gelu(f1)
    t: np.ndarray  # tanh32 of GELU's argument
    probs3: np.ndarray | None = None  # the compiled forward's probs as one (heads, n, n) array


def _scale(dtype, heads_dim) -> np.floating:
    """sqrt(d / heads) rounded to the working precision."""
    return np.sqrt(np.dtype(dtype).type(heads_dim))


# ----------------------------------------------------------------------------------------
# The reference forward: the layers in NumPy, in docs/model.md's order
# ----------------------------------------------------------------------------------------
def _forward_ref(ops: Ops, cfg, p, q, x, pbias_t, row0, keep, allowed):
    n, d = x.shape
    dt = x.dtype
    heads, dh = cfg.heads, cfg.head_dim
    scale = _scale(dt, dh)
    h, ln1 = L.layernorm_forward(ops, x, p[q + "ln1.weight"], p[q + "ln1.bias"], cfg.ln_eps)
    qkv = L.linear_forward(ops, h, p[q + "qkv.weight"], p[q + "qkv.bias"])
    a = np.empty((n, d), dt)
    probs = []
    for hd in range(heads):
        cols = slice(hd * dh, (hd + 1) * dh)
        qh = np.ascontiguousarray(qkv[:, cols])
        kh = np.ascontiguousarray(qkv[:, d + hd * dh: d + (hd + 1) * dh])
        vh = np.ascontiguousarray(qkv[:, 2 * d + hd * dh: 2 * d + (hd + 1) * dh])
        bias = pbias_t[row0 + hd, :n * n].reshape(n, n)
        a[:, cols], prob = L.attention_forward(ops, qh, kh, vh, bias, scale)
        probs.append(prob)
    x = x + L.linear_forward(ops, a, p[q + "proj.weight"], p[q + "proj.bias"])
    h2, ln2 = L.layernorm_forward(ops, x, p[q + "ln2.weight"], p[q + "ln2.bias"], cfg.ln_eps)
    f1 = L.linear_forward(ops, h2, p[q + "fc1.weight"], p[q + "fc1.bias"])
    g, t = L.gelu_forward(ops, f1)
    x = x + L.linear_forward(ops, g, p[q + "fc2.weight"], p[q + "fc2.bias"])
    if not keep:
        return x, None
    return x, Activations(ln1=ln1, h=h, qkv=qkv, probs=probs, a=a, ln2=ln2, h2=h2, f1=f1, g=g, t=t)


# ----------------------------------------------------------------------------------------
# The compiled forward: the whole block in one call
# ----------------------------------------------------------------------------------------
# The same kernels as the layer-by-layer path (mm_nt's tiles, layer norm, the scaled softmax,
# GELU), called from compiled code: the bytes are the same, and the ~30 Python calls a block
# makes (dispatch, shape checks, the per-head copies) become one. `par` picks the kernels'
# parallel builds (rows over the threads) or the serial ones, as runtime.pick() would.
_ATT_ROWS = 32  # query rows per block of a head's forward: the block's scores and probabilities stay in L2
_ATT_ROWS_FROM = 256  # words from which a head's rows go in blocks (below, the whole head is one block)


def _attention_heads_body(qkv, pbias_t, row0, heads, scale, probs, a):
    """Each head of one block: v copied out of qkv transposed and k^T (the words padded with +0
    to whole chunks), then blocks of _ATT_ROWS query rows: raw = q k^T, p = softmax(raw / scale
    + bias) into probs[hd]'s rows, p v into a's columns of the head. Every row is the whole
    head's row (the same kernels on the same row: rows32 and the softmax row by row, every p v
    output a whole dot16 over the keys), so the same bytes as the head done whole; the raw
    scores are never written whole (a block's stay in L2 for the softmax, its probabilities for
    p v). The serial kernels inside: one thread per head. probs (heads, n, n) keeps every row;
    probs (heads, R, n) with R < n (the lean forward) is scratch, each block's rows at its top
    (a block's probabilities stay in L2 for p v and are never written out to memory)."""
    n = qkv.shape[0]
    d = a.shape[1]
    dh = d // heads
    n16 = (n + 15) // 16 * 16
    qkvf = qkv.reshape(n * 3 * d)
    R = _ATT_ROWS if n >= _ATT_ROWS_FROM else max(n, 1)
    # every head's scratch, allocated once per call (v^T and k^T padded with +0 to whole chunks)
    vts = np.zeros((heads, dh, n16), np.float32)
    kts = np.empty((heads, 32 if dh == 32 else 0, n16), np.float32)
    khs = np.empty((heads, 0 if dh == 32 else n, dh), np.float32)
    raws = np.empty((heads, R, n), np.float32)
    ohs = np.empty((heads, R, dh), np.float32)
    tbs = np.empty((heads, 64), np.float32)
    zeros = np.zeros(max(n16, (dh + _NR - 1) // _NR * _NR), np.float32)  # no bias: +0 changes no bit
    for hd in prange(heads):
        vt = vts[hd]
        oh = ohs[hd]
        c0 = hd * dh
        if dh == 32:  # q read in place, k^T with the keys in the lanes (compiled.rows32_block)
            kc.transpose32_into(qkvf, 2 * d + c0, 3 * d, n, vt)  # v^T: 16 x 16 blocks in registers
            kc.transpose32_into(qkvf, d + c0, 3 * d, n, kts[hd])
        else:
            for i in range(n):
                for c in range(dh):
                    vt[c, i] = qkv[i, 2 * d + c0 + c]
            kh = khs[hd]
            for i in range(n):
                for c in range(dh):
                    kh[i, c] = qkv[i, d + c0 + c]
        p = probs[hd]
        bias = pbias_t[row0 + hd, :n * n].reshape((n, n))
        for i0 in range(0, n, R):
            nr = min(R, n - i0)
            raw = raws[hd, :nr]
            if dh == 32:
                kc.rows32_block(qkvf, c0 + i0 * 3 * d, 3 * d, np.int64(0), nr, kts[hd], zeros[:n16],
                                raw.reshape(nr * n), n, n, tbs[hd])
            else:
                qh = np.empty((nr, dh), np.float32)
                for i in range(nr):
                    for c in range(dh):
                        qh[i, c] = qkv[i0 + i, c0 + c]
                _mm_nt_ser(qh, khs[hd], np.zeros((n + _NR - 1) // _NR * _NR, np.float32), raw)
            pr = p[i0:i0 + nr] if p.shape[0] == n else p[:nr]
            _softmax_fwd_ser(raw, bias[i0:i0 + nr], scale, True, pr)
            ohr = oh[:nr]
            _mm_nt_ser(pr, vt, zeros[:(dh + _NR - 1) // _NR * _NR], ohr)
            for i in range(nr):
                for c in range(dh):
                    a[i0 + i, c0 + c] = ohr[i, c]


_attention_heads_par, _attention_heads_ser = _build(_attention_heads_body, "_attention_heads")


@njit(**_jit)
def _add_into(x, y):
    """y = x + y elementwise (x's element first, as x + y)."""
    xf = x.reshape(x.size)
    yf = y.reshape(y.size)
    for i in range(xf.size):
        yf[i] = xf[i] + yf[i]


@njit(**_jit)
def _block_forward_parts(x, w, pbias_t, row0, heads, scale, eps, par, keep):
    """w: Weights. (x out, h, xhat1, inv1, qkv, probs, a, h2, xhat2, inv2, f1, g, t); probs is
    (heads, n, n) when keep, else each head's scratch for a block of query rows."""
    n, d = x.shape
    h, xhat1, inv1 = _layernorm_nt(x, w.ln1w, w.ln1b, eps, par)
    qkv = _linear_nt(h, w.qkvw, w.qkvb, par)
    # attention: raw = q k^T, p = softmax(raw / scale + bias), a = p v; the heads side by side
    # over the threads when par (a page alone still uses the cores; each head is computed whole
    # by one thread, so the bytes are the same)
    a = np.empty((n, d), np.float32)
    rows = n if keep or n < _ATT_ROWS_FROM else _ATT_ROWS
    probs = np.empty((heads, rows, n), np.float32)
    if par is not None and par:
        _attention_heads_par(qkv, pbias_t, row0, heads, scale, probs, a)
    else:
        _attention_heads_ser(qkv, pbias_t, row0, heads, scale, probs, a)
    x1 = _linear_nt(a, w.projw, w.projb, par)
    _add_into(x, x1)  # x1 = x + x1: the residual, without another array
    h2, xhat2, inv2 = _layernorm_nt(x1, w.ln2w, w.ln2b, eps, par)
    f1 = _linear_nt(h2, w.fc1w, w.fc1b, par)
    g = np.empty(f1.shape, np.float32)
    t = np.empty(f1.shape, np.float32)
    if par is not None and par:
        _gelu_fwd_par(f1.reshape(-1), g.reshape(-1), t.reshape(-1))
    else:
        _gelu_fwd_ser(f1.reshape(-1), g.reshape(-1), t.reshape(-1))
    x2 = _linear_nt(g, w.fc2w, w.fc2b, par)
    _add_into(x1, x2)
    return x2, h, xhat1, inv1, qkv, probs, a, h2, xhat2, inv2, f1, g, t


@njit(**_jit)
def _block_forward_body(x, w, pbias_t, row0, heads, scale, eps, par):
    """w: Weights. (x out, h, xhat1, inv1, qkv, probs, a, h2, xhat2, inv2, f1, g, t)."""
    return _block_forward_parts(x, w, pbias_t, row0, heads, scale, eps, par, True)


@njit(**_jit)
def _block_forward_lean(x, w, pbias_t, row0, heads, scale, eps, par):
    """x out alone: the other arrays are freed here instead of going back to Python (each array
    handed to Python costs a quarter of a microsecond); from _ATT_ROWS_FROM words the
    probabilities only in a block of rows a head (scratch: 2.6 MB a block fewer written at 411 words)."""
    return _block_forward_parts(x, w, pbias_t, row0, heads, scale, eps, par, False)[0]


def block_forward(x, p, prefix: str, pbias_t, row0: int, heads: int, scale, eps, keep: bool = True,
                  allowed: bool | None = None):
    """Block `prefix`'s forward in one compiled call: (x out, h, ln1 (xhat, inv), qkv, probs
    (heads, n, n), a, h2, ln2 (xhat, inv), f1, g, t), or x out alone when not keep.
    allowed: runtime.parallel_allowed(), when the caller has it."""
    x = np.ascontiguousarray(x, F32)
    n, d = x.shape
    par = section_par(n, n * d * 3 * d, allowed)
    body = _block_forward_body if keep else _block_forward_lean
    return body(x, Weights.of(p, prefix), pbias_t, row0, heads, F32(scale), F32(eps), par)


def _forward_compiled(cfg, p, q, x, pbias_t, row0, keep, allowed):
    scale = _scale(F32, cfg.head_dim)
    if not keep:
        return block_forward(x, p, q, pbias_t, row0, cfg.heads, scale, cfg.ln_eps, False, allowed), None
    x, h, xh1, inv1, qkv, probs3, a, h2, xh2, inv2, f1, g, t = block_forward(
        x, p, q, pbias_t, row0, cfg.heads, scale, cfg.ln_eps, True, allowed)
    return x, Activations(ln1=LayerNormSaved(xh1, inv1), h=h, qkv=qkv, probs=list(probs3), a=a,
                          ln2=LayerNormSaved(xh2, inv2), h2=h2, f1=f1, g=g, t=t, probs3=probs3)


forward = register(NAME + "_block", _forward_ref, _forward_compiled,
                   lambda cfg, p, q, x, pbias_t, row0, keep, allowed: binary32(x, pbias_t, p[q + "qkv.weight"]))


# ----------------------------------------------------------------------------------------
# The backward: the reference (the layers of layers.py, each through its registry entry) and
# the compiled backward (one Numba call for the whole block, the same operations in the same
# order: every product a dot16, so mm_nt on operands transposed and padded with +0 gives the
# reference's bytes, docs/numerics.md section 2)
# ----------------------------------------------------------------------------------------
_GRAD_NAMES = ("fc2.weight", "fc2.bias", "fc1.weight", "fc1.bias", "ln2.weight", "ln2.bias",
               "proj.weight", "proj.bias", "qkv.weight", "qkv.bias", "ln1.weight", "ln1.bias")


def _backward_ref(ops: Ops, cfg, p, q, bc: Activations, dx, dpbias_t, row0, grads):
    """The block's parameter gradients into grads, its pair-bias gradients into dpbias_t's rows
    row0 .. row0 + heads - 1 (dpbias_t (L*heads, n*n): one row a head, the pairs in row-major
    order); returns dx at the block's input."""
    d, heads, dh = cfg.d_model, cfg.heads, cfg.head_dim
    scale = _scale(dx.dtype, dh)
    # x = x + fc2(gelu(fc1(ln2(x))))
    dg, grads[q + "fc2.weight"], grads[q + "fc2.bias"] = L.linear_backward(ops, dx, bc.g, p[q + "fc2.weight"])
    df1 = L.gelu_backward(ops, dg, bc.f1, bc.t)
    dh2, grads[q + "fc1.weight"], grads[q + "fc1.bias"] = L.linear_backward(ops, df1, bc.h2, p[q + "fc1.weight"])
    dln2, grads[q + "ln2.weight"], grads[q + "ln2.bias"] = L.layernorm_backward(ops, dh2, bc.ln2, p[q + "ln2.weight"])
    dx = dx + dln2
    # x = x + proj(attention(ln1(x)))
    da, grads[q + "proj.weight"], grads[q + "proj.bias"] = L.linear_backward(ops, dx, bc.a, p[q + "proj.weight"])
    qkv = bc.qkv
    dqkv = np.empty_like(qkv)
    for hd in range(heads):
        cols = slice(hd * dh, (hd + 1) * dh)
        kcols = slice(d + hd * dh, d + (hd + 1) * dh)
        vcols = slice(2 * d + hd * dh, 2 * d + (hd + 1) * dh)
        dq, dk, dv, ds = L.attention_backward(
            ops, np.ascontiguousarray(da[:, cols]), np.ascontiguousarray(qkv[:, cols]),
            np.ascontiguousarray(qkv[:, kcols]), np.ascontiguousarray(qkv[:, vcols]), bc.probs[hd], scale)
        dqkv[:, cols], dqkv[:, kcols], dqkv[:, vcols] = dq, dk, dv
        dpbias_t[row0 + hd] = ds.reshape(-1)
    dh1, grads[q + "qkv.weight"], grads[q + "qkv.bias"] = L.linear_backward(ops, dqkv, bc.h, p[q + "qkv.weight"])
    dln1, grads[q + "ln1.weight"], grads[q + "ln1.bias"] = L.layernorm_backward(ops, dh1, bc.ln1, p[q + "ln1.weight"])
    return dx + dln1


_ln_bwd_par, _ln_bwd_ser = _LAYERNORM_BWD
_gelu_bwd_par, _gelu_bwd_ser = _GELU_BWD
_softmax_bwd_par, _softmax_bwd_ser = _SOFTMAX_BWD


@njit(**_jit)
def _strips_tn(x, bt, zb, out, xtb, otb):
    """out = x^T bt^T as mm_nt(pack_t(x), bt) gives it (out[j, c] = dot16 over i of x[i, j] bt[c, i],
    every output one whole dot over the rows, +0 past n), without x^T written whole: x (n, m) is
    taken 16 columns at a time, transposed into xtb (16, n16) (16 x 16 blocks in registers, +0
    past row n), and that strip's 16 outputs rows made by mm_nt; the last strip's rows past m go
    to otb (16, bt rows) and only those that exist are copied. The same tile call on the same
    operand rows as on the whole transposed array: the same bytes. A strip stays in L1 (26 KB at
    411 words) where x^T did not stay in L2 (issue 26: the attention's dv = p^T da, dk = dsc^T q)."""
    n, m = x.shape
    n16 = xtb.shape[1]
    nw = n // 16 * 16
    xf = x.reshape(n * m)
    xtf = xtb.reshape(16 * n16)
    z = np.float32(0.0)
    for r in range(16):
        for i in range(n, n16):
            xtb[r, i] = z
    for j0 in range(0, m, 16):
        jw = min(16, m - j0)
        if jw == 16:
            for i0 in range(0, nw, 16):
                _t16(xf, i0 * m + j0, m, xtf, i0, n16)
            for i in range(nw, n):
                for r in range(16):
                    xtb[r, i] = x[i, j0 + r]
            _mm_nt_ser(xtb, bt, zb, out[j0:j0 + 16])
        else:
            for r in range(16):
                for i in range(n):
                    xtb[r, i] = x[i, j0 + r] if r < jw else z
            _mm_nt_ser(xtb, bt, zb, otb)
            for r in range(jw):
                for c in range(out.shape[1]):
                    out[j0 + r, c] = otb[r, c]


def _attention_bwd_body(da, qkv, probs, heads, scale, dqkv, dpbias_t, row0):
    """layers.attention_backward for every head, each head by one thread (serial kernels); each
    head's pair-bias gradient ds written straight into its row row0 + hd of dpbias_t (L*heads, n*n)."""
    n = qkv.shape[0]
    d = da.shape[1]
    dh = d // heads
    n16 = (n + 15) // 16 * 16
    zb = np.zeros(max(n16, dh) + _NR, np.float32)
    daf = da.reshape(n * d)
    qkvf = qkv.reshape(n * 3 * d)
    # each head's scratch once per call; the transposed operands' padding past n is set to +0
    # by the head that owns it (the arrays are not cleared whole)
    r32 = dh == 32  # dp = da v^T on rows32 (k = 32: the outputs in the lanes), else the tile
    dah = np.empty((heads, 0 if r32 else n, dh), np.float32)
    vh = np.empty((heads, 0 if r32 else n, dh), np.float32)
    vts = np.empty((heads, 32 if r32 else 0, n16), np.float32)
    tbs = np.empty((heads, 64), np.float32)
    daht = np.empty((heads, dh, n16), np.float32)
    qht = np.empty((heads, dh, n16), np.float32)
    kht = np.empty((heads, dh, n16), np.float32)
    xtbs = np.empty((heads, 16, n16), np.float32)  # p's and dsc's strips transposed (_strips_tn)
    otbs = np.empty((heads, 16, dh), np.float32)
    dp = np.empty((heads, n, n), np.float32)
    dsc = np.empty((heads, n, n), np.float32)
    outs = np.empty((heads, 3, n, dh), np.float32)  # dq, dk, dv
    z = np.float32(0.0)
    for hd in prange(heads):
        c0 = hd * dh
        da_ht = daht[hd]
        q_ht = qht[hd]
        k_ht = kht[hd]
        for i in range(n):
            for c in range(dh):
                da_ht[c, i] = da[i, c0 + c]
                q_ht[c, i] = qkv[i, c0 + c]
                k_ht[c, i] = qkv[i, d + c0 + c]
        for c in range(dh):
            for i in range(n, n16):
                da_ht[c, i] = z
                q_ht[c, i] = z
                k_ht[c, i] = z
        p = probs[hd]
        if r32:  # dp = da v^T: da read in place, v^T with the keys in the lanes (+0 past n)
            vt = vts[hd]
            kc.transpose32_into(qkvf, 2 * d + c0, 3 * d, n, vt)
            kc.rows32_block(daf, c0, d, np.int64(0), n, vt, zb[:n16], dp[hd].reshape(n * n), n, n, tbs[hd])
        else:
            da_h = dah[hd]
            v_h = vh[hd]
            for i in range(n):
                for c in range(dh):
                    da_h[i, c] = da[i, c0 + c]
                    v_h[i, c] = qkv[i, 2 * d + c0 + c]
            _mm_nt_ser(da_h, v_h, zb, dp[hd])  # dp = da v^T
        dq = outs[hd, 0]
        dk = outs[hd, 1]
        dv = outs[hd, 2]
        _strips_tn(p, da_ht, zb, dv, xtbs[hd], otbs[hd])  # dv = p^T da, p^T a strip at a time
        ds = dpbias_t[row0 + hd, :n * n].reshape((n, n))  # the pair-bias gradient, in place
        _softmax_bwd_ser(dp[hd], p, scale, True, ds, dsc[hd])
        _mm_nt_ser(dsc[hd], k_ht, zb, dq)  # dq = dsc k
        _strips_tn(dsc[hd], q_ht, zb, dk, xtbs[hd], otbs[hd])  # dk = dsc^T q
        for i in range(n):
            for c in range(dh):
                dqkv[i, c0 + c] = dq[i, c]
                dqkv[i, d + c0 + c] = dk[i, c]
                dqkv[i, 2 * d + c0 + c] = dv[i, c]


_ATT_BWD = _build(_attention_bwd_body, "_attention_bwd")
_attention_bwd_par, _attention_bwd_ser = _ATT_BWD


@njit(**_jit)
def _block_backward_body(dx, w, g, f1, t, h2, xhat2, inv2, a, qkv, probs, h, xhat1, inv1,
                         dpbias_t, row0, heads, scale, par):
    n, d = dx.shape
    ffn = w.fc1w.shape[0]
    zb = np.zeros(max(ffn, 3 * d, n) + _NR, np.float32)
    # x = x + fc2(gelu(fc1(ln2(x))))
    dg = np.empty((n, ffn), np.float32)
    dfc2w = np.empty((d, ffn), np.float32)
    dfc2b = np.empty(d, np.float32)
    _linear_bwd(dx, g, w.fc2w, zb, dg, dfc2w, dfc2b, par)
    df1 = np.empty((n, ffn), np.float32)
    if par is not None and par:
        _gelu_bwd_par(dg.reshape(n * ffn), f1.reshape(n * ffn), t.reshape(n * ffn), df1.reshape(n * ffn))
    else:
        _gelu_bwd_ser(dg.reshape(n * ffn), f1.reshape(n * ffn), t.reshape(n * ffn), df1.reshape(n * ffn))
    dh2 = np.empty((n, d), np.float32)
    dfc1w = np.empty((ffn, d), np.float32)
    dfc1b = np.empty(ffn, np.float32)
    _linear_bwd(df1, h2, w.fc1w, zb, dh2, dfc1w, dfc1b, par)
    dln2 = np.empty((n, d), np.float32)
    dln2w = np.empty(d, np.float32)
    dln2b = np.empty(d, np.float32)
    if par is not None and par:
        _ln_bwd_par(dh2, xhat2, inv2, w.ln2w, dln2, dln2w, dln2b)
    else:
        _ln_bwd_ser(dh2, xhat2, inv2, w.ln2w, dln2, dln2w, dln2b)
    dx1 = np.empty((n, d), np.float32)
    for i in range(n):
        for c in range(d):
            dx1[i, c] = dx[i, c] + dln2[i, c]
    # x = x + proj(attention(ln1(x)))
    da = np.empty((n, d), np.float32)
    dprojw = np.empty((d, d), np.float32)
    dprojb = np.empty(d, np.float32)
    _linear_bwd(dx1, a, w.projw, zb, da, dprojw, dprojb, par)
    dqkv = np.empty((n, 3 * d), np.float32)
    if par is not None and par:
        _attention_bwd_par(da, qkv, probs, heads, scale, dqkv, dpbias_t, row0)
    else:
        _attention_bwd_ser(da, qkv, probs, heads, scale, dqkv, dpbias_t, row0)
    dh1 = np.empty((n, d), np.float32)
    dqkvw = np.empty((3 * d, d), np.float32)
    dqkvb = np.empty(3 * d, np.float32)
    _linear_bwd(dqkv, h, w.qkvw, zb, dh1, dqkvw, dqkvb, par)
    dln1 = np.empty((n, d), np.float32)
    dln1w = np.empty(d, np.float32)
    dln1b = np.empty(d, np.float32)
    if par is not None and par:
        _ln_bwd_par(dh1, xhat1, inv1, w.ln1w, dln1, dln1w, dln1b)
    else:
        _ln_bwd_ser(dh1, xhat1, inv1, w.ln1w, dln1, dln1w, dln1b)
    for i in range(n):
        for c in range(d):
            dln1[i, c] = dx1[i, c] + dln1[i, c]
    return (dln1, dfc2w, dfc2b, dfc1w, dfc1b, dln2w, dln2b, dprojw, dprojb, dqkvw, dqkvb, dln1w, dln1b)


def _backward_compiled(cfg, p, q, bc: Activations, dx, dpbias_t, row0, grads):
    """The block's backward in one compiled call (_block_backward_body): the reference's bytes."""
    dx = np.ascontiguousarray(dx, F32)
    n, d = dx.shape
    c = np.ascontiguousarray
    probs = bc.probs3 if bc.probs3 is not None else np.stack(bc.probs)
    par = section_par(n, n * d * 3 * d)
    out = _block_backward_body(dx, Weights.of(p, q), c(bc.g, F32), c(bc.f1, F32), c(bc.t, F32), c(bc.h2, F32),
                               c(bc.ln2.xhat, F32), c(bc.ln2.inv, F32), c(bc.a, F32), c(bc.qkv, F32), c(probs, F32),
                               c(bc.h, F32), c(bc.ln1.xhat, F32), c(bc.ln1.inv, F32), dpbias_t, row0, cfg.heads,
                               F32(_scale(F32, cfg.head_dim)), par)
    for name, g in zip(_GRAD_NAMES, out[1:]):
        grads[q + name] = g
    return out[0]


backward = register(NAME + "_block_backward", _backward_ref, _backward_compiled,
                    lambda cfg, p, q, bc, dx, dpbias_t, row0, grads: (
                        binary32(dx, bc.qkv, dpbias_t, p[q + "qkv.weight"]) and dpbias_t.flags.c_contiguous))
