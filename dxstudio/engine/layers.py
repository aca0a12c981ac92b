"""The layers of docextract-v0, each forward next to its backward.

Every long sum goes through `Ops.mm` / `Ops.rowdot` (16-lane dot products, docs/numerics.md);
every other operation is one separately rounded NumPy elementwise operation, written in the
order docs/model.md pins. A forward returns its output and the values its backward needs;
a backward takes the output gradient and returns the input gradient and the parameter gradients.

The NumPy code below is the reference path and the readable spec. Each layer that has a
compiled twin (kernels/fused.py: layer norm, softmax with the attention scale and bias, GELU,
ReLU, the pair MLP's layers, forward and backward) is an entry of the kernels registry
(kernels/registry.py): `name = register("name", _name_ref, compiled, applies)`, where `applies`
is the rule saying when the twin runs on the fast path (binary32 arrays, and shapes such as 8
inputs); `name(ops, ...)` chooses. The twin does the same operations in the same order, and
tests hold the two paths bit-identical. The products, row dots and exp/tanh go through `ops`
(kernels.registry.Ops). Binary64 arrays (the finite-difference check) take the reference code
and NumPy's exp/tanh: there we check calculus, not bytes.

What a backward needs from its forward travels in a named tuple (LayerNormSaved,
CharConvSaved), never in a string-keyed dict.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .kernels import fused
from .kernels.constants import GELU_C0, GELU_C1, GELU_C3
from .kernels.registry import Ops, binary32, late, register  # noqa: F401  (Ops: the layers' dispatcher)

F32 = np.float32
F64 = np.float64


class LayerNormSaved(NamedTuple):
    xhat: np.ndarray  # (n, d) the normalized rows
    inv: np.ndarray  # (n,) 1 / sqrt(var + eps)


class CharConvSaved(NamedTuple):
    u: np.ndarray  # (P, 3*Dc) the taps' embeddings of every real position
    h: np.ndarray  # (P, C) relu(u W^T + b)
    arg: np.ndarray  # (n, C) the position (index into P) each word pooled per channel; -1: none


# ----------------------------------------------------------------------------------------
# Linear: y = x W^T + b, W stored (out, in)
# ----------------------------------------------------------------------------------------
def _linear_forward_ref(ops: Ops, x, w, b):
    return ops.mm_nt(x, w, b)  # x W^T + b (the fast path adds b in the product's epilogue)


# narrow outputs over 32 inputs (the pair MLP's second layer): 16 outputs in a register's lanes
linear_forward = register("linear_forward", _linear_forward_ref, late(fused, "linear32_forward"),
                          lambda x, w, b: binary32(x, w, b) and x.shape[1] == 32 and w.shape[0] <= 16)


def linear_backward(ops: Ops, dy, x, w):
    """dx[i, c] = sum_o dy[i, o] w[o, c]; dw[o, c] = sum_i dy[i, o] x[i, c] (rows ascending); db = column sums."""
    dx = ops.mm(dy, w)
    dw = ops.mm_tn(dy, x)  # dy^T x
    db = ops.colsum(dy)
    return dx, dw, db


# ----------------------------------------------------------------------------------------
# Layer normalization, per row: mean = dot16(x, 1)/d, xc = x - mean, var = dot16(xc, xc)/d,
# inv = 1/sqrt(var + eps), xhat = xc * inv, y = xhat * w + b
# ----------------------------------------------------------------------------------------
def _layernorm_forward_ref(ops: Ops, x, w, b, eps):
    t = x.dtype.type
    d = t(x.shape[1])
    mean = ops.rowsum(x) / d
    xc = x - mean[:, None]
    var = ops.rowdot(xc, xc) / d
    inv = t(1.0) / np.sqrt(var + t(eps))
    xhat = xc * inv[:, None]
    return xhat * w + b, LayerNormSaved(xhat, inv)


def _layernorm_forward_compiled(x, w, b, eps):
    y, xhat, inv = fused.layernorm_forward(x, w, b, eps)
    return y, LayerNormSaved(xhat, inv)


layernorm_forward = register("layernorm_forward", _layernorm_forward_ref, _layernorm_forward_compiled,
                             lambda x, w, b, eps: binary32(x))


def _layernorm_backward_ref(ops: Ops, dy, saved: LayerNormSaved, w):
    """g = dy*w; dx = inv * ((g - mean(g)) - xhat * mean(g*xhat)); dw, db column sums of dy*xhat, dy."""
    xhat, inv = saved
    d = xhat.dtype.type(xhat.shape[1])
    g = dy * w
    mg = ops.rowsum(g) / d
    mgx = ops.rowdot(g, xhat) / d
    dx = inv[:, None] * ((g - mg[:, None]) - xhat * mgx[:, None])
    dw = ops.colsum(dy * xhat)
    db = ops.colsum(dy)
    return dx, dw, db


layernorm_backward = register("layernorm_backward", _layernorm_backward_ref, late(fused, "layernorm_backward"),
                              lambda dy, saved, w: binary32(dy, saved.xhat))


# ----------------------------------------------------------------------------------------
# GELU (tanh form): u = c0 * (x + c1 * ((x*x)*x)), t = tanh(u), y = (0.5*x) * (1 + t)
# ----------------------------------------------------------------------------------------
def _gelu_forward_ref(ops: Ops, x):
    c = x.dtype.type
    u = c(GELU_C0) * (x + c(GELU_C1) * ((x * x) * x))
    t = ops.tanh(u)
    return (c(0.5) * x) * (c(1.0) + t), t


def _gelu_backward_ref(ops: Ops, dy, x, t):
    """dx = dy * (0.5 (1 + t) + ((0.5 x)(1 - t*t)) c0 (1 + 3c1 x*x)): the function as computed."""
    c = x.dtype.type
    a = c(0.5) * (c(1.0) + t)
    b = (((c(0.5) * x) * (c(1.0) - t * t)) * c(GELU_C0)) * (c(1.0) + c(GELU_C3) * (x * x))
    return dy * (a + b)


gelu_forward = register("gelu_forward", _gelu_forward_ref, late(fused, "gelu_forward"))
gelu_backward = register("gelu_backward", _gelu_backward_ref, late(fused, "gelu_backward"))


# ----------------------------------------------------------------------------------------
# ReLU (gradient 0 where the output is 0, as PyTorch)
# ----------------------------------------------------------------------------------------
def _relu_forward_ref(ops: Ops, x):
    # np.where, not np.maximum: maximum(-0, +0) may return either zero depending on the build
    return np.where(x > 0, x, x.dtype.type(0.0))


def _relu_backward_ref(ops: Ops, dy, y):
    return np.where(y > 0, dy, dy.dtype.type(0.0))


relu_forward = register("relu_forward", _relu_forward_ref, late(fused, "relu_forward"))
relu_backward = register("relu_backward", _relu_backward_ref, late(fused, "relu_backward"))

_FAST = Ops("fast")


def _linear_relu_backward_ref(ops: Ops, dy, x, w):
    """linear_backward where x is a ReLU's output: (dx through the ReLU, dw, db)."""
    dx, dw, db = linear_backward(ops, dy, x, w)
    return relu_backward(ops, dx, x), dw, db


def _linear16_relu_backward(dy, x, w):
    """With 16 outputs the product and the ReLU's mask are one fused kernel."""
    return fused.linear16_relu_backward(dy, w, x), _FAST.mm_tn(dy, x), _FAST.colsum(dy)


linear_relu_backward = register("linear_relu_backward", _linear_relu_backward_ref, _linear16_relu_backward,
                                lambda dy, x, w: binary32(dy, x, w) and dy.shape[1] == 16)


def _linear_relu_forward_ref(ops: Ops, x, w, b):
    """relu(x W^T + b) (the pair MLP's first layer, over the n^2 pairs)."""
    return relu_forward(ops, linear_forward(ops, x, w, b))


# with 8 inputs one fused kernel does the product, the bias and the ReLU in one pass
linear_relu_forward = register("linear_relu_forward", _linear_relu_forward_ref, late(fused, "linear8_relu_forward"),
                               lambda x, w, b: binary32(x, w, b) and x.shape[1] == 8)


# ----------------------------------------------------------------------------------------
# Softmax over rows of s = raw / scale + bias: m = max, e = exp(s - m), z = dot16(e, 1), p = e / z
# ----------------------------------------------------------------------------------------
def _softmax_forward_ref(ops: Ops, s):
    m = np.max(s, axis=1, keepdims=True)  # a max is exact in any order
    e = ops.exp(s - m)
    return e / ops.rowsum(e)[:, None]


def _softmax_backward_ref(ops: Ops, dp, p):
    """ds = p * (dp - dot16(p, dp))."""
    return p * (dp - ops.rowdot(p, dp)[:, None])


softmax_forward = register("softmax_forward", _softmax_forward_ref, late(fused, "softmax_forward"))
softmax_backward = register("softmax_backward", _softmax_backward_ref, late(fused, "softmax_backward"))


def _scaled_softmax_forward_ref(ops: Ops, raw, bias, scale):
    """p = softmax(raw / scale + bias)."""
    return softmax_forward(ops, raw / scale + bias)


def _scaled_softmax_backward_ref(ops: Ops, dp, p, scale):
    """(ds, ds / scale)."""
    ds = softmax_backward(ops, dp, p)
    return ds, ds / scale


scaled_softmax_forward = register("scaled_softmax_forward", _scaled_softmax_forward_ref,
                                  late(fused, "scaled_softmax_forward"), lambda raw, bias, scale: binary32(raw, bias))
scaled_softmax_backward = register("scaled_softmax_backward", _scaled_softmax_backward_ref,
                                   late(fused, "scaled_softmax_backward"), lambda dp, p, scale: binary32(dp, p))


# ----------------------------------------------------------------------------------------
# One attention head: raw = q k^T, s = raw / scale + bias, p = softmax(s), a = p v
# ----------------------------------------------------------------------------------------
def attention_forward(ops: Ops, q, k, v, bias, scale):
    raw = ops.mm_nt(q, k)
    p = scaled_softmax_forward(ops, raw, bias, scale)
    return ops.mm(p, v), p


def attention_backward(ops: Ops, da, q, k, v, p, scale):
    """dP = dA V^T, dV = P^T dA, ds (softmax), dbias = ds, dS = ds/scale, dQ = dS K, dK = dS^T Q."""
    dp = ops.mm_nt(da, v)
    dv = ops.mm_tn(p, da)  # p^T da
    ds, dsc = scaled_softmax_backward(ops, dp, p, scale)
    dq = ops.mm(dsc, k)
    dk = ops.mm_tn(dsc, q)  # dsc^T q
    return dq, dk, dv, ds


# ----------------------------------------------------------------------------------------
# Pointer scores: score = (q k^T) / scale, a word may point at itself
# ----------------------------------------------------------------------------------------
def pointer_forward(ops: Ops, q, k, scale):
    return ops.mm_nt(q, k) / scale


def pointer_backward(ops: Ops, dscore, q, k, scale):
    dsc = dscore / scale
    return ops.mm(dsc, k), ops.mm_tn(dsc, q)


# ----------------------------------------------------------------------------------------
# Character convolution and max pooling over a word's real positions
# ----------------------------------------------------------------------------------------
def char_windows(char_ids, char_len):
    """For every real position (word order, then position), the ids of taps t = 0, 1, 2 at
    p + t - 1 (0 = outside the word). Returns (ids (P, 3), owner word (P,))."""
    n, _ = char_ids.shape
    owners = np.repeat(np.arange(n), char_len)
    pos = np.concatenate([np.arange(l) for l in char_len]) if n else np.zeros(0, np.int64)
    pos = pos.astype(np.int64)
    ids = np.zeros((len(owners), 3), np.int64)
    for t in range(3):
        p = pos + t - 1
        ok = (p >= 0) & (p < char_len[owners])
        ids[ok, t] = char_ids[owners[ok], p[ok]]
    return ids, owners


def charconv_forward(ops: Ops, emb, w_rt, b, tap_ids, owners, n_words, keep: bool = True):
    """u = concat over taps of emb[id] (zero for id 0 outside the word), h = relu(u W_rt^T + b),
    pooled = max over the word's positions (ties: the first); a word with no position gives zeros.
    w_rt is the runtime layout (C, taps*Dc), ordered (tap, channel). keep=False (inference):
    the arg-max positions, needed only by the backward, are not computed (saved is None)."""
    dc = emb.shape[1]
    u = emb[tap_ids].reshape(len(tap_ids), 3 * dc)
    u[(tap_ids == 0).repeat(dc, axis=1)] = 0  # padding id: zero vector, not the table row
    h = relu_forward(ops, linear_forward(ops, u, w_rt, b))
    c = w_rt.shape[0]
    pooled = np.zeros((n_words, c), emb.dtype)
    arg = np.full((n_words, c), -1, np.int64)
    words = np.unique(owners)  # the words with a position; their positions are consecutive
    if len(words):
        starts = np.searchsorted(owners, words)
        top = np.maximum.reduceat(h, starts, axis=0)  # a max is exact in any order (h has no NaN)
        if not keep:
            pooled[words] = top
            return pooled, None
        where = np.arange(len(owners))[:, None]
        first = np.where(h == top[np.searchsorted(words, owners)], where, len(owners))
        arg[words] = np.minimum.reduceat(first, starts, axis=0)  # the first position holding it
        pooled[words] = top
    return pooled, CharConvSaved(u, h, arg)


def charconv_backward(ops: Ops, dpooled, saved: CharConvSaved, w_rt, tap_ids, vocab):
    """Gradient to the arg-max positions, through the ReLU, into W_rt (positions ascending),
    b, and the character table (rows added in word order, position, tap; row 0 gets none)."""
    u, h, arg = saved
    dh = np.zeros_like(h)
    words, chans = np.nonzero(arg >= 0)
    dh[arg[words, chans], chans] = dpooled[words, chans]
    dh = relu_backward(ops, dh, h)
    du, dw, db = linear_backward(ops, dh, u, w_rt)
    dc = u.shape[1] // 3
    demb = np.zeros((vocab, dc), dh.dtype)
    rows = tap_ids.reshape(-1)
    grads = du.reshape(-1, dc)
    add_rows_skip0(ops, demb, rows, grads)
    return demb, dw, db


def _add_rows_skip0_ref(ops: Ops, table, rows, grads):
    keep = rows != 0
    np.add.at(table, rows[keep], grads[keep])  # unbuffered, in index order: plain sequential additions


# table[rows[i]] += grads[i] for rows[i] != 0: the same additions in the same order, compiled
add_rows_skip0 = register("add_rows_skip0", _add_rows_skip0_ref, late(fused, "add_rows_skip0"),
                          lambda table, rows, grads: binary32(grads))


def conv_weight_to_runtime(w):
    """(out, channel, tap) -> (out, tap*Dc + channel)."""
    return np.ascontiguousarray(w.transpose(0, 2, 1).reshape(w.shape[0], -1))


def conv_weight_to_container(w_rt, dc):
    """(out, tap*Dc + channel) -> (out, channel, tap)."""
    return np.ascontiguousarray(w_rt.reshape(w_rt.shape[0], 3, dc).transpose(0, 2, 1))


# ----------------------------------------------------------------------------------------
# Table lookups (position tables): rows added in word order with plain additions
# ----------------------------------------------------------------------------------------
def table_backward(dy, ids, rows):
    g = np.zeros((rows, dy.shape[1]), dy.dtype)
    np.add.at(g, ids, dy)
    return g
