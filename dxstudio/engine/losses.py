"""Cross-entropy in binary64 with the library's exp and log (PyTorch: reduction='mean',
ignore_index for negative targets, weight).

    loss = sum_i w[t_i] * nll_i / sum_i w[t_i]   over words i with t_i >= 0
    nll_i = (m_i + log(sum_j exp(z_ij - m_i))) - z_i,t_i,   m_i = max_j z_ij

Sums are plain binary64 additions in index order (classes ascending for a row, words ascending
for the loss). The logit gradient scale * w[t_i] / sum w * (softmax_i - onehot_i) is computed in
binary64 and rounded once to binary32. No counted word: loss 0, gradient 0.
"""
from __future__ import annotations

import numpy as np

from .kernels import fused
from .kernels.registry import Ops, register

F64 = np.float64


def _seqsum_rows(e: np.ndarray) -> np.ndarray:
    """Row sums, classes added left to right."""
    s = np.zeros(e.shape[0], F64)
    for j in range(e.shape[1]):
        s = s + e[:, j]
    return s


def _seqsum(v: np.ndarray) -> float:
    s = 0.0
    for x in v.tolist():
        s = s + x
    return s


def cross_entropy(logits, targets, weight=None, scale: float = 1.0, kernels: str = "fast"):
    """(loss as float, gradient w.r.t. the logits as binary32 (n, C)) for logits (n, C),
    integer targets (n,) with negatives ignored, optional class weights (C,). On the fast path
    one compiled call (fused._cross_entropy_body, the registry entry "cross_entropy"): the same
    operations in the same order, the same bytes."""
    z = np.asarray(logits)
    t = np.asarray(targets, np.int64)
    n, c = z.shape
    if t.shape != (n,):
        raise ValueError(f"targets have shape {t.shape}, expected ({n},)")
    if t.size and t.max() >= c:  # np.any(t >= c), one reduction
        bad = int(t[t >= c][0])
        raise ValueError(f"target {bad} is out of range for {c} classes")
    return CROSS_ENTROPY(Ops(kernels), z, t, weight, float(scale))


def _check_weight(w, c):
    if w.shape != (c,):
        raise ValueError(f"class weights have shape {w.shape}, expected ({c},)")


def _cross_entropy_compiled(z, t, weight, scale):
    c = z.shape[1]
    grad = np.zeros(z.shape, np.float32)
    if not (t >= 0).any():  # no counted word: loss 0, zero gradients, the weights not read (as the reference)
        return 0.0, grad
    w = np.ones(c, F64) if weight is None else np.ascontiguousarray(weight, F64)
    _check_weight(w, c)
    loss, _ = fused._cross_entropy_body(np.ascontiguousarray(z, F64), np.ascontiguousarray(t), w, scale, grad)
    return float(loss), grad


def _cross_entropy_ref(ops, z, t, weight, scale):
    """The definition in NumPy (the module docstring's formulas)."""
    c = z.shape[1]
    grad = np.zeros(z.shape, np.float32)
    rows = np.nonzero(t >= 0)[0]
    if len(rows) == 0:
        return 0.0, grad
    zr = z[rows].astype(F64)
    tr = t[rows]
    w = np.ones(c, F64) if weight is None else np.asarray(weight, F64)
    _check_weight(w, c)
    m = np.max(zr, axis=1)
    e = ops.exp64(zr - m[:, None])
    s = _seqsum_rows(e)
    lse = m + ops.log64(s)
    nll = lse - zr[np.arange(len(rows)), tr]
    wt = w[tr]
    wsum = _seqsum(wt)
    loss = _seqsum(wt * nll) / wsum
    prob = e / s[:, None]
    prob[np.arange(len(rows)), tr] -= 1.0
    coef = (scale * wt) / wsum
    grad[rows] = (coef[:, None] * prob).astype(np.float32)
    return float(loss), grad


# the compiled call on the fast path for any logits (binary32 or binary64: both are taken to
# binary64 first, as the reference does)
CROSS_ENTROPY = register("cross_entropy", _cross_entropy_ref, _cross_entropy_compiled, lambda z, t, weight, scale: True)
