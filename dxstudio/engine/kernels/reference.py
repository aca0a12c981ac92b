"""The reference arithmetic: plain NumPy elementwise operations, each separately rounded, in the
order docs/numerics.md pins (the 16 lanes of dot16 are an axis of 16). Short and easy to check
against the spec; the compiled kernels (compiled.py) give the same bytes and tests hold them so.

    dot16_ref, mm_ref, mm_nt_ref, mm_tn_ref, rowdot_ref   the 16-lane dot products
    exp32_ref, tanh32_ref                                 binary32 exp and tanh
    exp64_ref, log64_ref                                  binary64 exp and log (the losses)
"""
from __future__ import annotations

import numpy as np

from .constants import (EXP32_C, EXP32_LN2_HI, EXP32_LN2_LO, EXP32_LOG2E, EXP32_MAX, EXP32_MIN, EXP64_C,
                        EXP64_LN2_HI, EXP64_LN2_LO, EXP64_LOG2E, EXP64_MAX, EXP64_MIN, F32, F64, LANES,
                        LOG64_C, LOG64_SQRT_HALF, TANH32_BIG, TANH32_C, TANH32_SMALL)


def _fold_lanes_ref(acc: np.ndarray, axis: int) -> np.ndarray:
    """Fold the 16 lanes in halves: l<8, l<4, l<2, then a[0] + a[1]."""
    a = np.moveaxis(acc, axis, 0)
    a = a[:8] + a[8:]
    a = a[:4] + a[4:]
    a = a[:2] + a[2:]
    return a[0] + a[1]



def dot16_ref(x: np.ndarray, y: np.ndarray) -> F32:
    """dot16 of two vectors."""
    return mm_ref(np.asarray(x, F32)[None, :], np.asarray(y, F32)[:, None])[0, 0]


# ---- mm: C[i, j] = dot16(a[i, :], b[:, j]) --------------------------------------------
def mm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C[i, j] = dot16(a[i, :], b[:, j]) for a (M, K), b (K, N), binary32."""
    # binary32 in the engine; binary64 only for the finite-difference check of the backward
    dt = F64 if (np.asarray(a).dtype == F64 or np.asarray(b).dtype == F64) else F32
    a = np.asarray(a, dt)
    b = np.asarray(b, dt)
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"mm: inner sizes differ ({a.shape} x {b.shape})")
    acc = np.zeros((m, LANES, n), dt)
    for k0 in range(0, k, LANES):
        k1 = min(k0 + LANES, k)
        # lane l takes k0 + l: one product rounded, then one sum rounded
        acc[:, : k1 - k0, :] += a[:, k0:k1, None] * b[None, k0:k1, :]
    return _fold_lanes_ref(acc, 1)



def mm_tn_ref(at: np.ndarray, b: np.ndarray) -> np.ndarray:
    """at^T b: C[i, j] = dot16(at[:, i], b[:, j])."""
    return mm_ref(np.asarray(at).T, b)


def mm_nt_ref(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """C[i, j] = dot16(a[i, :], bt[j, :]): mm(a, bt.T)."""
    return mm_ref(a, np.asarray(bt).T)


def rowdot_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """out[i] = dot16(a[i, :], b[i, :]) (the same dtype as a; binary64 only in checks)."""
    a, b = np.asarray(a), np.asarray(b)
    m, k = a.shape
    acc = np.zeros((m, LANES), a.dtype)
    for k0 in range(0, k, LANES):
        k1 = min(k0 + LANES, k)
        acc[:, : k1 - k0] += a[:, k0:k1] * b[:, k0:k1]
    return _fold_lanes_ref(acc, 1)


def _ldexp32(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """p * 2^n in two exact-power steps (each power is a normal binary32), rounded once at the end."""
    n1 = np.floor_divide(n, 2)
    n2 = n - n1
    s1 = np.ldexp(1.0, n1).astype(F32)
    s2 = np.ldexp(1.0, n2).astype(F32)
    return (p * s1) * s2


def exp32_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        xc = np.clip(x, EXP32_MIN, EXP32_MAX)
        n = np.floor(xc * EXP32_LOG2E + F32(0.5))
        r = (xc - n * EXP32_LN2_HI) - n * EXP32_LN2_LO
        c = EXP32_C
        p = c[7]
        for k in range(6, -1, -1):
            p = p * r + c[k]
        out = _ldexp32(p.astype(F32), n.astype(np.int64))
        out = np.where(x > EXP32_MAX, F32(np.inf), out)
        out = np.where(x < EXP32_MIN, F32(0.0), out)
        out = np.where(np.isnan(x), x, out)
    return out.astype(F32)


def tanh32_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F32)
    ax = np.abs(x)
    c = TANH32_C
    x2 = x * x
    q = c[8]
    for k in range(7, 0, -1):
        q = q * x2 + c[k]
    small = x + x * (x2 * q)
    e = exp32_ref(F32(2.0) * np.minimum(ax, TANH32_BIG))
    mid = F32(1.0) - F32(2.0) / (e + F32(1.0))
    mid = np.where(x < 0, -mid, mid)
    out = np.where(ax < TANH32_SMALL, small, mid)
    out = np.where(ax >= TANH32_BIG, np.where(x < 0, F32(-1.0), F32(1.0)), out)
    out = np.where(np.isnan(x), x, out)
    return out.astype(F32)


def exp64_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F64)
    with np.errstate(invalid="ignore", over="ignore"):
        xc = np.clip(x, EXP64_MIN, EXP64_MAX)
        n = np.floor(xc * EXP64_LOG2E + 0.5)
        r = (xc - n * EXP64_LN2_HI) - n * EXP64_LN2_LO
        c = EXP64_C
        p = np.full_like(r, c[13])
        for k in range(12, -1, -1):
            p = p * r + c[k]
        ni = n.astype(np.int64)
        n1 = np.floor_divide(ni, 2)
        out = (p * np.ldexp(1.0, n1)) * np.ldexp(1.0, ni - n1)
        out = np.where(x > EXP64_MAX, np.inf, out)
        out = np.where(x < EXP64_MIN, 0.0, out)
        out = np.where(np.isnan(x), x, out)
    return out


def log64_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F64)
    with np.errstate(invalid="ignore", divide="ignore"):
        m, e = np.frexp(x)
        low = m < LOG64_SQRT_HALF
        m = np.where(low, m * 2.0, m)
        e = np.where(low, e - 1, e).astype(F64)
        f = m - 1.0
        s = f / (2.0 + f)
        s2 = s * s
        c = LOG64_C
        q = np.full_like(s, c[10])
        for k in range(9, -1, -1):
            q = q * s2 + c[k]
        t = 2.0 * s
        out = e * EXP64_LN2_HI + (t + (t * (s2 * q) + e * EXP64_LN2_LO))
        out = np.where(x == 0, -np.inf, out)
        out = np.where(x < 0, np.nan, out)
        out = np.where(np.isposinf(x), np.inf, out)
        out = np.where(np.isnan(x), x, out)
    return out
