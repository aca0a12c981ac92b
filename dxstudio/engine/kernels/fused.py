"""The fast path's compiled layer kernels: layer norm, softmax (with the attention scale and bias),
GELU and ReLU, forward and backward, each one fused Numba kernel.

Each kernel computes exactly the operations of the NumPy reference in layers.py, in the same
order, each one separately rounded binary32 (docs/numerics.md, section 3): the row sums are the
16-lane dot16 (lane k & 15, then the fold in halves), exp/tanh are compiled.py's kernels.
Conventions are the package's (runtime.py, compiled.py): fastmath off (no fused multiply-add, no reassociation), every
constant a binary32: constants.py's typed constants or np.float32(...) built inside the kernel (a
float32 times a Python float literal would be binary64 in Numba), one thread per output row (or element) in the parallel
build, a serial build under another name for `serial_kernels()` and small inputs.

The wrappers take binary32 arrays only; layers.py calls them on the fast path.
"""
from __future__ import annotations

import operator
from ctypes import addressof as _addressof, c_char as _c_char

import numpy as np

from . import compiled as kc
from .compiled import fold16
from .constants import GELU32_C0, GELU32_C1, GELU32_C3
from .intrinsics import _MR, _NR, _rows8_relu_x1, _rows8_relu_x4, _t16, f32_ptr, tile_acc
from .runtime import _build, _jit, njit, pick, prange, section_par

from numba import carray  # noqa: E402  (after runtime: the environment before Numba starts)

F32 = np.float32

# ----------------------------------------------------------------------------------------
# Layer norm
# ----------------------------------------------------------------------------------------
def _layernorm_fwd_body(x, w, b, eps, y, xhat, inv):
    n, d = x.shape
    df = np.float32(d)
    d16 = d // 16 * 16  # whole chunks of 16 in a register (kc.lanes_*), then the last columns
    nblk = (n + 7) // 8
    accs = np.empty((nblk, 16), np.float32)  # each task's lanes: one allocation per call
    for blk in prange(nblk):
        acc = accs[blk]
        for i in range(blk * 8, min(n, blk * 8 + 8)):
            kc.lanes_sum(x, i * d, d16 // 16, acc, 0)
            for k in range(d16, d):
                acc[k & 15] += x[i, k]  # dot16(x, 1): x * 1 is x
            mean = fold16(acc) / df
            for k in range(d):
                xhat[i, k] = x[i, k] - mean  # xc for now
            kc.lanes_dot(xhat, i * d, xhat, i * d, d16 // 16, acc, 0)
            for k in range(d16, d):
                c = xhat[i, k]
                acc[k & 15] += c * c
            var = fold16(acc) / df
            r = np.float32(1.0) / np.sqrt(var + eps)
            inv[i] = r
            for k in range(d):
                h = xhat[i, k] * r
                xhat[i, k] = h
                y[i, k] = h * w[k] + b[k]


def _layernorm_bwd_body(dy, xhat, inv, w, dx, dw, db):
    n, d = dy.shape
    df = np.float32(d)
    d16 = d // 16 * 16
    nblk = (n + 7) // 8
    accs = np.empty((nblk, 2, 16), np.float32)  # each task's lanes and row: one allocation per call
    gs = np.empty((nblk, d), np.float32)
    for blk in prange(nblk):
        acc_g = accs[blk, 0]
        acc_gx = accs[blk, 1]
        g = gs[blk]
        for i in range(blk * 8, min(n, blk * 8 + 8)):
            for k in range(d):
                g[k] = dy[i, k] * w[k]
            kc.lanes_sum(g, 0, d16 // 16, acc_g, 0)
            kc.lanes_dot(g, 0, xhat, i * d, d16 // 16, acc_gx, 0)
            for k in range(d16, d):
                acc_g[k & 15] += g[k]
                acc_gx[k & 15] += g[k] * xhat[i, k]
            mg = fold16(acc_g) / df
            mgx = fold16(acc_gx) / df
            r = inv[i]
            for k in range(d):
                dx[i, k] = r * ((g[k] - mg) - xhat[i, k] * mgx)
    # column sums over the rows ascending (colsum = dot16 with ones), serial: little work
    acc_w = np.zeros((16, d), np.float32)
    acc_b = np.zeros((16, d), np.float32)
    for i in range(n):
        lane = i & 15
        for k in range(d):
            acc_w[lane, k] += dy[i, k] * xhat[i, k]
            acc_b[lane, k] += dy[i, k]
    for k in range(d):
        dw[k] = fold16(acc_w[:, k])
        db[k] = fold16(acc_b[:, k])


_LAYERNORM_FWD = _build(_layernorm_fwd_body, "_layernorm_fwd")
_LAYERNORM_BWD = _build(_layernorm_bwd_body, "_layernorm_bwd")


def layernorm_forward(x, w, b, eps):
    """(y, xhat, inv) as layers.layernorm_forward."""
    x = np.ascontiguousarray(x, F32)
    n, d = x.shape
    y, xhat, inv = np.empty_like(x), np.empty_like(x), np.empty(n, F32)
    pick(_LAYERNORM_FWD, n, n * d)(x, np.ascontiguousarray(w, F32), np.ascontiguousarray(b, F32), F32(eps),
                                    y, xhat, inv)
    return y, xhat, inv


def layernorm_backward(dy, saved, w):
    """(dx, dw, db) as layers.layernorm_backward."""
    xhat, inv = saved
    dy = np.ascontiguousarray(dy, F32)
    n, d = dy.shape
    dx, dw, db = np.empty_like(dy), np.empty(d, F32), np.empty(d, F32)
    pick(_LAYERNORM_BWD, n, n * d)(dy, np.ascontiguousarray(xhat, F32), np.ascontiguousarray(inv, F32),
                                    np.ascontiguousarray(w, F32), dx, dw, db)
    return dx, dw, db


# ----------------------------------------------------------------------------------------
# Softmax over rows of s (s = raw / scale + bias when scaled), and its backward
# ----------------------------------------------------------------------------------------
_SOFTMAX_ROWS = 8  # rows per task


def _softmax_fwd_body(raw, bias, scale, scaled, p):
    """Each row in three passes, each one intrinsic (compiled.softmax_row_*: whole chunks of 16
    in a register, the last m % 16 under a lane mask): s = raw / scale + bias and its maximum;
    exp32(s - top) in place and its dot16 with ones (lane j & 15, j ascending, the spec's fold);
    each element divided by that sum. The reference's operations on every element and its sum's
    order, so its bytes. A row with a NaN or a maximum of zero takes the scalar scan, as before."""
    n, m = raw.shape
    nblk = (n + _SOFTMAX_ROWS - 1) // _SOFTMAX_ROWS
    for blk in prange(nblk):
        for i in range(blk * _SOFTMAX_ROWS, min(n, blk * _SOFTMAX_ROWS + _SOFTMAX_ROWS)):
            if scaled:
                top = kc.softmax_row_max_scaled(raw, i * m, bias, i * m, scale, p, i * m, m)
            else:
                top = kc.softmax_row_max_plain(raw, i * m, raw, i * m, scale, p, i * m, m)
            if top != top or top == np.float32(0.0):
                row = p[i]
                top = row[0]
                for j in range(1, m):
                    v = row[j]
                    if v > top or v != v:  # a NaN anywhere makes the maximum NaN, as np.max
                        top = v
            z = kc.softmax_row_exp_sum(p, i * m, top, m)
            kc.softmax_row_div(p, i * m, z, m)


def _softmax_bwd_body(dp, p, scale, scaled, ds, dsc):
    n, m = p.shape
    m16 = m // 16 * 16
    nblk = (n + _SOFTMAX_ROWS - 1) // _SOFTMAX_ROWS
    accs = np.empty((nblk, 16), np.float32)
    for blk in prange(nblk):
        acc = accs[blk]
        for i in range(blk * _SOFTMAX_ROWS, min(n, blk * _SOFTMAX_ROWS + _SOFTMAX_ROWS)):
            kc.lanes_dot(p, i * m, dp, i * m, m16 // 16, acc, 0)  # whole chunks in a register
            for j in range(m16, m):
                acc[j & 15] += p[i, j] * dp[i, j]
            r = fold16(acc)
            for j in range(m):
                v = p[i, j] * (dp[i, j] - r)
                ds[i, j] = v
                if scaled:
                    dsc[i, j] = v / scale


_SOFTMAX_FWD = _build(_softmax_fwd_body, "_softmax_fwd")
_SOFTMAX_BWD = _build(_softmax_bwd_body, "_softmax_bwd")


def _check_rows(m):
    if m == 0:
        raise ValueError("softmax over rows of width 0")


def softmax_forward(s):
    s = np.ascontiguousarray(s, F32)
    p = np.empty_like(s)
    n, m = s.shape
    _check_rows(m)
    pick(_SOFTMAX_FWD, n, n * m)(s, s, F32(1.0), False, p)
    return p


def scaled_softmax_forward(raw, bias, scale):
    """softmax(raw / scale + bias): divided by the scale (not times 1/scale), then the bias added."""
    raw = np.ascontiguousarray(raw, F32)
    p = np.empty_like(raw)
    n, m = raw.shape
    _check_rows(m)
    pick(_SOFTMAX_FWD, n, n * m)(raw, np.ascontiguousarray(bias, F32), F32(scale), True, p)
    return p


def softmax_backward(dp, p):
    """ds = p * (dp - dot16(p, dp))."""
    p = np.ascontiguousarray(p, F32)
    ds = np.empty_like(p)
    n, m = p.shape
    pick(_SOFTMAX_BWD, n, n * m)(np.ascontiguousarray(dp, F32), p, F32(1.0), False, ds, ds)
    return ds


def scaled_softmax_backward(dp, p, scale):
    """(ds, ds / scale)."""
    p = np.ascontiguousarray(p, F32)
    ds, dsc = np.empty_like(p), np.empty_like(p)
    n, m = p.shape
    pick(_SOFTMAX_BWD, n, n * m)(np.ascontiguousarray(dp, F32), p, F32(scale), True, ds, dsc)
    return ds, dsc


# ----------------------------------------------------------------------------------------
# GELU (tanh form) and ReLU, elementwise over the flattened arrays
# ----------------------------------------------------------------------------------------
def _gelu_fwd_body(x, y, t):
    """x, y, t flat and contiguous. Whole chunks of 16 in registers (compiled.gelu_lanes: the
    operations below, in IR); the last x.size % 16 as written here."""
    c0 = GELU32_C0
    c1 = GELU32_C1
    half = np.float32(0.5)
    one = np.float32(1.0)
    whole = x.size // 16 * 16
    for blk in prange((whole + 4095) // 4096):
        lo = blk * 4096
        hi = min(whole, lo + 4096)
        kc.gelu_lanes(x, lo, y, t, lo, (hi - lo) // 16)
    if whole < x.size:
        for i in range(whole, x.size):
            v = x[i]
            y[i] = c0 * (v + c1 * ((v * v) * v))  # u for now, in y: then tanh32 into t
        kc.tanh32_vec(y[whole:], t[whole:])
        for i in range(whole, x.size):
            v = x[i]
            y[i] = (half * v) * (one + t[i])


def _gelu_bwd_body(dy, x, t, dx):
    c0 = GELU32_C0
    c3 = GELU32_C3  # 3*c1: the product in binary64, then rounded (as the reference)
    half = np.float32(0.5)
    one = np.float32(1.0)
    for i in prange(x.size):
        v = x[i]
        th = t[i]
        a = half * (one + th)
        b = (((half * v) * (one - th * th)) * c0) * (one + c3 * (v * v))
        dx[i] = dy[i] * (a + b)


def _relu_fwd_body(x, y):
    zero = np.float32(0.0)
    for i in prange(x.size):
        v = x[i]
        y[i] = v if v > zero else zero  # +0 for every non-positive input (and NaN, as np.where)


def _relu_bwd_body(dy, y, dx):
    zero = np.float32(0.0)
    for i in prange(y.size):
        dx[i] = dy[i] if y[i] > zero else zero


_GELU_FWD = _build(_gelu_fwd_body, "_gelu_fwd")
_GELU_BWD = _build(_gelu_bwd_body, "_gelu_bwd")
_RELU_FWD = _build(_relu_fwd_body, "_relu_fwd")
_RELU_BWD = _build(_relu_bwd_body, "_relu_bwd")


def _flat(a):
    return np.ascontiguousarray(a, F32).reshape(-1)


def gelu_forward(x):
    """(y, t) as layers.gelu_forward."""
    x = np.asarray(x, F32)
    y, t = np.empty(x.shape, F32), np.empty(x.shape, F32)
    pick(_GELU_FWD, x.size, x.size)(_flat(x), y.reshape(-1), t.reshape(-1))
    return y, t


def gelu_backward(dy, x, t):
    x = np.asarray(x, F32)
    dx = np.empty(x.shape, F32)
    pick(_GELU_BWD, x.size, x.size)(_flat(dy), _flat(x), _flat(t), dx.reshape(-1))
    return dx


def relu_forward(x):
    x = np.asarray(x, F32)
    y = np.empty(x.shape, F32)
    pick(_RELU_FWD, x.size, x.size)(_flat(x), y.reshape(-1))
    return y


def relu_backward(dy, y):
    y = np.asarray(y, F32)
    dx = np.empty(y.shape, F32)
    pick(_RELU_BWD, y.size, y.size)(_flat(dy), _flat(y), dx.reshape(-1))
    return dx


# ----------------------------------------------------------------------------------------
# The pair MLP's first layer, relu(x W^T + b) over 8 inputs, product, bias and ReLU in one pass
# ----------------------------------------------------------------------------------------
@njit(inline="always", **_jit)  # numba-level inlining: the loop vectorises as if written in place
def _linear8_relu_row(x, p, wt, b, y, q, h):
    """y[q, j] = relu(dot16(x[p, :], W[j, :]) + b[j]) with 8 terms: lane l < 8 takes its one
    product (+0 + x*w), lanes 8..15 stay +0, then the fold in halves, the bias, the ReLU. The
    same operations as layers.linear_forward then relu_forward; the loop runs over the outputs
    j (wt = W^T, contiguous in j), so it vectorises with every lane in a register. h =
    wt.shape[1], a literal 32 at the call for the base model (a constant trip count)."""
    z = np.float32(0.0)
    x0, x1, x2, x3 = x[p, 0], x[p, 1], x[p, 2], x[p, 3]
    x4, x5, x6, x7 = x[p, 4], x[p, 5], x[p, 6], x[p, 7]
    for j in range(h):
        # lane l: (+0 + x*w), then the fold's + lane l + 8 (+0); written x*w + 0, which is the
        # same bits (both give +0 for -0 and x*w for everything else): one add instead of two
        v = kc.fold8(x0 * wt[0, j] + z, x1 * wt[1, j] + z, x2 * wt[2, j] + z, x3 * wt[3, j] + z,
                     x4 * wt[4, j] + z, x5 * wt[5, j] + z, x6 * wt[6, j] + z, x7 * wt[7, j] + z) + b[j]
        y[q, j] = v if v > z else z


def _linear8_relu_body(x, wt, b, y):
    if wt.shape[1] == 32:
        for p in prange(x.shape[0]):
            _linear8_relu_row(x, p, wt, b, y, p, 32)
    else:
        for p in prange(x.shape[0]):
            _linear8_relu_row(x, p, wt, b, y, p, wt.shape[1])


_LINEAR8_RELU = _build(_linear8_relu_body, "_linear8_relu")
_linear8_relu_par, _linear8_relu_ser = _LINEAR8_RELU


def linear8_relu_forward(x, w, b):
    """relu(x W^T + b) for x (n, 8), W (h, 8), as layers.linear_relu_forward."""
    x = np.ascontiguousarray(x, F32)
    y = np.empty((x.shape[0], w.shape[0]), F32)
    pick(_LINEAR8_RELU, x.shape[0], x.shape[0] * 8 * w.shape[0])(
        x, np.ascontiguousarray(np.asarray(w, F32).T), np.ascontiguousarray(b, F32), y)
    return y


def _linear16_relu_bwd_body(d, wt, h, y):
    """y[p, j] = dot16(d[p, :], W[:, j]) where h[p, j] > 0, else +0, with 16 terms (one per lane,
    +0 + product), the fold in halves: layers.linear_backward's dx then relu_backward (the pair
    MLP's backward into its hidden layer, base model). wt = W (16, m), contiguous in j."""
    n = d.shape[0]
    m = wt.shape[1]
    z = np.float32(0.0)
    for p in prange(n):
        for j in range(m):
            a0 = z + d[p, 0] * wt[0, j]
            a1 = z + d[p, 1] * wt[1, j]
            a2 = z + d[p, 2] * wt[2, j]
            a3 = z + d[p, 3] * wt[3, j]
            a4 = z + d[p, 4] * wt[4, j]
            a5 = z + d[p, 5] * wt[5, j]
            a6 = z + d[p, 6] * wt[6, j]
            a7 = z + d[p, 7] * wt[7, j]
            a8 = z + d[p, 8] * wt[8, j]
            a9 = z + d[p, 9] * wt[9, j]
            a10 = z + d[p, 10] * wt[10, j]
            a11 = z + d[p, 11] * wt[11, j]
            a12 = z + d[p, 12] * wt[12, j]
            a13 = z + d[p, 13] * wt[13, j]
            a14 = z + d[p, 14] * wt[14, j]
            a15 = z + d[p, 15] * wt[15, j]
            v = kc.fold8(a0 + a8, a1 + a9, a2 + a10, a3 + a11, a4 + a12, a5 + a13, a6 + a14, a7 + a15)
            y[p, j] = v if h[p, j] > z else z


_LINEAR32 = kc.ROWS32  # (x, xoff, ldx, n, wt, b, y, ldy, m): compiled.rows32_block over the rows
_LINEAR16_RELU_BWD = _build(_linear16_relu_bwd_body, "_linear16_relu_bwd")


def linear32_forward(x, w, b):
    """x W^T + b for x (n, 32), W (m, 32), as layers.linear_forward: 16 outputs in a register's
    lanes (compiled.rows32_block; the pair MLP's second layer over the n^2 pairs)."""
    return kc.rows32_product(x, w, b)


_PAIR_FWD_BLOCK = 128  # pairs per block of the fused pair MLP: their hidden rows (16 KB) and biases (8 KB) stay in L1
_PAIR_FWD_TASKS = 64  # tasks of the parallel build (each a run of whole blocks, its scratch once); the serial one runs 1


@njit(**_jit)
def _rows8_relu_block(pff, q0, nq, w1tf, b1, y, yoff):
    """y[yoff + r*32 + j] = relu(dot16(pf[q0 + r, :], W1[j, :]) + b1[j]) for r < nq, j < 32
    (intrinsics.rows8_relu: four pairs at a time, 32 outputs in two registers; the same bytes as
    _linear8_relu_row). pff: pf flat (8 features a pair), w1tf: W1^T flat (8, 32)."""
    r = 0
    while r + 4 <= nq:
        _rows8_relu_x4(pff, (q0 + r) * 8, 8, w1tf, 32, b1, y, yoff + r * 32, 32)
        r += 4
    while r < nq:
        _rows8_relu_x1(pff, (q0 + r) * 8, 8, w1tf, 32, b1, y, yoff + r * 32, 32)
        r += 1


def _pair_blocks_body(pf, w1t, b1, w2t, b2p, ph, keep, pbias_t, tasks):
    """The base model's pair MLP (8 -> 32 -> 16) a block of _PAIR_FWD_BLOCK pairs at a time:
    the block's hidden rows relu(pf W1^T + b1) (_rows8_relu_block, into ph's rows when keep, else
    into a scratch block that stays in L1), their 16 biases each (rows32_block, into a scratch
    block), and those transposed 16 x 16 in registers (_t16) straight into pbias_t's columns. The
    same kernels on the same rows as linear8_relu, rows32 and pack_t over the whole arrays, so the
    same bytes; neither pbias (n^2, 16) nor, for the lean forward, ph (n^2, 32) is written whole.
    tasks: at most this many runs of blocks, each with its scratch."""
    npair = pf.shape[0]
    ldo = pbias_t.shape[1]
    pbf = pbias_t.reshape(pbias_t.size)
    phf = ph.reshape(ph.size)
    pff = pf.reshape(pf.size)
    w1tf = w1t.reshape(w1t.size)
    nblk = (npair + _PAIR_FWD_BLOCK - 1) // _PAIR_FWD_BLOCK
    ntask = min(nblk, tasks)
    per = (nblk + ntask - 1) // max(ntask, 1)
    for t in prange(ntask):
        hb = np.empty((0 if keep else _PAIR_FWD_BLOCK, 32), np.float32)
        hbf = hb.reshape(hb.size)
        pb = np.empty(_PAIR_FWD_BLOCK * 16, np.float32)
        tb = np.empty(64, np.float32)
        for blk in range(t * per, min(nblk, (t + 1) * per)):
            q0 = blk * _PAIR_FWD_BLOCK
            nq = min(npair - q0, _PAIR_FWD_BLOCK)
            if keep:
                _rows8_relu_block(pff, q0, nq, w1tf, b1, phf, q0 * 32)
                kc.rows32_block(phf, q0 * 32, 32, np.int64(0), nq, w2t, b2p, pb, 16, 16, tb)
            else:
                _rows8_relu_block(pff, q0, nq, w1tf, b1, hbf, np.int64(0))
                kc.rows32_block(hbf, np.int64(0), 32, np.int64(0), nq, w2t, b2p, pb, 16, 16, tb)
            nw = nq // 16 * 16
            for r0 in range(0, nw, 16):
                _t16(pb, r0 * 16, 16, pbf, q0 + r0, ldo)
            for r in range(nw, nq):
                for o in range(16):
                    pbias_t[o, q0 + r] = pb[r * 16 + o]


_pair_blocks_par, _pair_blocks_ser = _build(_pair_blocks_body, "_pair_blocks")


@njit(**_jit)
def _pair_bias_body(pf, w1, b1, w2, b2, keep, par):
    """The pair MLP in one call: ph = relu(pf W1^T + b1) (linear8_relu), pbias = ph W2^T + b2
    (rows32), then pbias^T padded with +0 to whole chunks (compiled.pack_t). With 16 biases a
    pair (the base model), by blocks of pairs (_pair_blocks_body: pbias never written whole, ph
    only when keep); ph is returned empty when not keep."""
    npair = pf.shape[0]
    hidden = w1.shape[0]
    m = w2.shape[0]
    m16 = (m + 15) // 16 * 16
    w1t = np.empty((8, hidden), np.float32)
    for j in range(hidden):
        for k in range(8):
            w1t[k, j] = w1[j, k]
    at0 = np.int64(0)  # not a literal 0: a literal argument compiles the callee once more
    w2t = np.empty((32, m16), np.float32)
    kc.transpose32_into(w2.reshape(w2.size), at0, w2.shape[1], m, w2t)
    b2p = np.zeros(m16, np.float32)
    for j in range(m):
        b2p[j] = b2[j]
    pbias_t = np.empty((m, (npair + 15) // 16 * 16), np.float32)
    for o in range(m):  # only the padding past the last pair cleared: the kernels write the rest
        for q in range(npair, pbias_t.shape[1]):
            pbias_t[o, q] = np.float32(0.0)
    if m == 16 and hidden == 32:
        ph = np.empty((npair if keep else 0, hidden), np.float32)
        if par is not None and par:
            _pair_blocks_par(pf, w1t, b1, w2t, b2p, ph, keep, pbias_t, _PAIR_FWD_TASKS)
        else:
            _pair_blocks_ser(pf, w1t, b1, w2t, b2p, ph, keep, pbias_t, 1)
        return ph, pbias_t
    ph = np.empty((npair, hidden), np.float32)
    pbias = np.empty((npair, m), np.float32)
    if par is not None and par:
        _linear8_relu_par(pf, w1t, b1, ph)
        _rows32_par(ph.reshape(npair * hidden), at0, hidden, npair, w2t, b2p, pbias.reshape(npair * m), m, m)
        _pack_t_par(pbias, pbias_t)
    else:
        _linear8_relu_ser(pf, w1t, b1, ph)
        _rows32_ser(ph.reshape(npair * hidden), at0, hidden, npair, w2t, b2p, pbias.reshape(npair * m), m, m)
        _pack_t_ser(pbias, pbias_t)
    return ph, pbias_t


def pair_bias_forward(pf, w1, b1, w2, b2, allowed: bool | None = None, keep: bool = True):
    """(ph, pbias_t): model.forward's step 3 for the base model's pair MLP (8 -> 32 -> L*heads)
    in one compiled call; pbias_t as compiled.pack_t(pbias); ph None when not keep (the lean
    forward: with 16 biases a pair it is never written)."""
    pf = np.ascontiguousarray(pf, F32)
    npair = pf.shape[0]
    par = section_par(npair, npair * 8 * w1.shape[0], allowed)
    ph, pbias_t = _pair_bias_body(pf, np.ascontiguousarray(w1, F32), np.ascontiguousarray(b1, F32),
                                  np.ascontiguousarray(w2, F32), np.ascontiguousarray(b2, F32), bool(keep), par)
    return (ph if keep else None), pbias_t


def linear16_relu_backward(dy, w, h):
    """relu_backward(dy W, h) for dy (n, 16), W (16, m), h (n, m) the ReLU's output."""
    dy = np.ascontiguousarray(dy, F32)
    y = np.empty((dy.shape[0], w.shape[1]), F32)
    pick(_LINEAR16_RELU_BWD, dy.shape[0], dy.shape[0] * 16 * w.shape[1])(
        dy, np.ascontiguousarray(w, F32), np.ascontiguousarray(h, F32), y)
    return y


# ----------------------------------------------------------------------------------------
# The pair MLP's backward (model.backward's step 3) in one pass over the pairs
# ----------------------------------------------------------------------------------------
_PAIR_BLOCK = 256  # pairs per block: the transposed block (88 rows of 256 floats) stays in L1


@njit(**_jit)
def _pair_mlp_backward_body(dy_t, ph, pf, w2):
    """model.backward's step 3 (layers.linear_relu_backward into the hidden layer, then
    mm_tn(dph, pf) and the column sums) in one pass over the pairs, K-blocked: the pairs in blocks of
    _PAIR_BLOCK, each block transposed (a pair per lane, +0 past the last pair), the hidden
    layer's gradient computed with the pairs along the vector, and every gradient's 16 lanes
    continued over the block's chunks in registers (tile_acc, a tile of _MR x _NR outputs at a
    time; lanes_dot_acc for the outputs past the last whole tile): lane l of each output
    takes the pairs p = 16c + l ascending, as dot16 over the pairs. dy_t (16, P): the output
    gradient with a row an output (the pairs along each row)."""
    m = dy_t.shape[0]
    npair = dy_t.shape[1]
    hid = ph.shape[1]
    nf = pf.shape[1]
    B = _PAIR_BLOCK
    z = np.float32(0.0)
    acc2 = np.zeros((m, hid, 16), np.float32)
    accb2 = np.zeros((m, 16), np.float32)
    acc1 = np.zeros((hid, nf, 16), np.float32)
    accb1 = np.zeros((hid, 16), np.float32)
    a2f = acc2.reshape(m * hid * 16)
    b2f = accb2.reshape(m * 16)
    a1f = acc1.reshape(hid * nf * 16)
    b1f = accb1.reshape(hid * 16)
    dyt = np.zeros((m, B), np.float32)
    pht = np.zeros((hid, B), np.float32)
    pft = np.zeros((16 if nf == 8 else nf, B), np.float32)  # rows past nf: the transposes' scratch
    dpht = np.zeros((hid, B), np.float32)
    dytf = dyt.reshape(m * B)
    phtf = pht.reshape(hid * B)
    pftf = pft.reshape(pft.shape[0] * B)
    pff = pf.reshape(npair * nf)
    dyf = dy_t.reshape(m * npair)
    dphtf = dpht.reshape(hid * B)
    phf = ph.reshape(npair * hid)
    for p0 in range(0, npair, B):
        cnt = min(B, npair - p0)
        nch = (cnt + 15) // 16
        full = cnt == B
        if not full:  # the last block: copied, +0 past its pairs (the others are read in place)
            dyt[:, :] = z
            pht[:, :] = z
            pft[:, :] = z
            for o in range(m):
                dyr = dy_t[o, p0:p0 + cnt]
                dto = dyt[o]
                for q in range(cnt):
                    dto[q] = dyr[q]
        src = dy_t if full else dyt  # the block's output gradient: rows of ld floats from s0
        srcf = dyf if full else dytf
        s0 = p0 if full else 0
        ld = npair if full else B
        # ph's block transposed: 16 pairs x 16 hidden units at a time in registers, the rest one by one
        q16 = cnt // 16 * 16 if hid % 16 == 0 else 0
        for q0 in range(0, q16, 16):
            for c0 in range(0, hid, 16):
                _t16(phf, (p0 + q0) * hid + c0, hid, phtf, c0 * B + q0, B)
        for q in range(q16, cnt):
            phr = ph[p0 + q]
            for c in range(hid):
                pht[c, q] = phr[c]
        # pf's block transposed: row r of a 16 x 16 block read at pair q0 + r is that pair's 8
        # features and the next pair's, so the block's first 8 columns are pf^T (the other 8
        # land in pft's scratch rows); the last pairs of pf one by one (no read past its end)
        q8 = 0
        if nf == 8:
            q8 = min(cnt, npair - p0 - 1) // 16 * 16
            for q0 in range(0, q8, 16):
                _t16(pff, (p0 + q0) * 8, 8, pftf, q0, B)
        for q in range(q8, cnt):
            pfr = pf[p0 + q]
            for f in range(nf):
                pft[f, q] = pfr[f]
        w = nch * 16
        for c in range(hid):
            dr = dpht[c]
            hr = pht[c]
            w0, w1, w2_, w3 = w2[0, c], w2[1, c], w2[2, c], w2[3, c]
            w4, w5, w6, w7 = w2[4, c], w2[5, c], w2[6, c], w2[7, c]
            w8, w9, w10, w11 = w2[8, c], w2[9, c], w2[10, c], w2[11, c]
            w12, w13, w14, w15 = w2[12, c], w2[13, c], w2[14, c], w2[15, c]
            e = s0 + w
            d0, d1, d2, d3 = src[0, s0:e], src[1, s0:e], src[2, s0:e], src[3, s0:e]
            d4, d5, d6, d7 = src[4, s0:e], src[5, s0:e], src[6, s0:e], src[7, s0:e]
            d8, d9, d10, d11 = src[8, s0:e], src[9, s0:e], src[10, s0:e], src[11, s0:e]
            d12, d13, d14, d15 = src[12, s0:e], src[13, s0:e], src[14, s0:e], src[15, s0:e]
            for q in range(w):
                # lane l of dot16 over the 16 outputs is (+0 + d_l w_l); the products folded as
                # they are, then +0 added once, give the same bits (as rows32: a fold of the
                # products differs from the spec's only by -0 for +0, which the +0 puts right)
                a0 = d0[q] * w0 + d8[q] * w8
                a1 = d1[q] * w1 + d9[q] * w9
                a2 = d2[q] * w2_ + d10[q] * w10
                a3 = d3[q] * w3 + d11[q] * w11
                a4 = d4[q] * w4 + d12[q] * w12
                a5 = d5[q] * w5 + d13[q] * w13
                a6 = d6[q] * w6 + d14[q] * w14
                a7 = d7[q] * w7 + d15[q] * w15
                v = kc.fold8(a0, a1, a2, a3, a4, a5, a6, a7) + z
                dr[q] = v if hr[q] > z else z
        # the weight gradients' lanes continued over the block: tiles of _MR x _NR outputs in
        # registers (tile_acc), the outputs past the last whole tile one by one (lanes_dot_acc)
        mt = m // _MR * _MR
        ht = hid // _NR * _NR
        for o in range(m):
            kc.lanes_sum_acc(srcf, o * ld + s0, nch, b2f, o * 16)
        for o0 in range(0, mt, _MR):
            for c0 in range(0, ht, _NR):
                tile_acc(srcf, o0 * ld + s0, ld, phtf, c0 * B, B, nch, a2f, (o0 * hid + c0) * 16, hid * 16)
        for o in range(m):
            for c in range(ht if o < mt else 0, hid):
                kc.lanes_dot_acc(srcf, o * ld + s0, phtf, c * B, nch, a2f, (o * hid + c) * 16)
        ct = hid // _MR * _MR
        ft = nf // _NR * _NR
        for c in range(hid):
            kc.lanes_sum_acc(dphtf, c * B, nch, b1f, c * 16)
        for c0 in range(0, ct, _MR):
            for f0 in range(0, ft, _NR):
                tile_acc(dphtf, c0 * B, B, pftf, f0 * B, B, nch, a1f, (c0 * nf + f0) * 16, nf * 16)
        for c in range(hid):
            for f in range(ft if c < ct else 0, nf):
                kc.lanes_dot_acc(dphtf, c * B, pftf, f * B, nch, a1f, (c * nf + f) * 16)
    dw2 = np.empty((m, hid), np.float32)
    db2 = np.empty(m, np.float32)
    dw1 = np.empty((hid, nf), np.float32)
    db1 = np.empty(hid, np.float32)
    for o in range(m):
        db2[o] = fold16(accb2[o])
        for c in range(hid):
            dw2[o, c] = fold16(acc2[o, c])
    for c in range(hid):
        db1[c] = fold16(accb1[c])
        for f in range(nf):
            dw1[c, f] = fold16(acc1[c, f])
    return dw2, db2, dw1, db1


def pair_bias_backward(dpbias_t, ph, pf, w2):
    """(pair2.weight, pair2.bias, pair1.weight, pair1.bias) gradients for dpbias_t (16, P) (a row
    an output), ph (P, H) = relu(pair1), pf (P, 8), W2 (16, H): one compiled pass (serial; the
    pairs' weight gradients are sums over the pairs, which one thread adds in order)."""
    return _pair_mlp_backward_body(np.ascontiguousarray(dpbias_t, F32), np.ascontiguousarray(ph, F32),
                                   np.ascontiguousarray(pf, F32), np.ascontiguousarray(w2, F32))


# ----------------------------------------------------------------------------------------
# AdamW, one pass over a tensor (training.adamw_update's NumPy operations, in their order)
# ----------------------------------------------------------------------------------------
def _adamw_body(p, g, m, v, decay, wdf, b1, omb1, b2, omb2, sbc2, eps, lrb):
    for i in prange(p.size):
        w = p[i]
        if decay:
            w = w * wdf
        mi = b1 * m[i] + omb1 * g[i]
        gi = g[i]
        vi = b2 * v[i] + omb2 * (gi * gi)
        m[i] = mi
        v[i] = vi
        denom = np.sqrt(vi) / sbc2 + eps
        p[i] = w - lrb * (mi / denom)


_ADAMW = _build(_adamw_body, "_adamw")
_adamw_ser = _ADAMW[1]


def adamw_tensor(p, g, m, v, decay, wdf, b1, omb1, b2, omb2, sbc2, eps, lrb) -> None:
    """In place on p, m, v (binary32, C-contiguous): p = p*wdf when decay; m = b1*m + omb1*g;
    v = b2*v + omb2*(g*g); p = p - lrb*(m / (sqrt(v)/sbc2 + eps)), every scalar binary32."""
    pick(_ADAMW, p.size, p.size)(p.reshape(-1), np.ascontiguousarray(g, F32).reshape(-1), m.reshape(-1),
                                 v.reshape(-1), bool(decay), F32(wdf), b1, omb1, b2, omb2, sbc2, eps, F32(lrb))


_ADAMW_CHUNK = 8192  # elements per task of the one call over every tensor


def _adamw_all_body(addr, sizes, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps):
    """_adamw_body over every tensor t: its p, g, m, v at addr[t, 0..3] (sizes[t] binary32
    elements each), its decay flag and scalars wdf[t], lrb[t]. Elementwise: any split of the
    elements over the threads gives the same bytes."""
    nt = sizes.shape[0]
    nchunk = 0
    for t in range(nt):
        nchunk += (sizes[t] + _ADAMW_CHUNK - 1) // _ADAMW_CHUNK
    ct = np.empty(nchunk, np.int64)
    c0 = np.empty(nchunk, np.int64)
    q = 0
    for t in range(nt):
        for lo in range(0, sizes[t], _ADAMW_CHUNK):
            ct[q] = t
            c0[q] = lo
            q += 1
    for q in prange(nchunk):
        t = ct[q]
        lo = c0[q]
        cnt = min(sizes[t] - lo, _ADAMW_CHUNK)
        off = 4 * lo  # bytes: binary32 elements
        # the chunk's views, C-contiguous from index 0 (the per-tensor kernel's own signature: its
        # vectorised loop, the same operations)
        _adamw_ser(carray(f32_ptr(addr[t, 0] + off), cnt), carray(f32_ptr(addr[t, 1] + off), cnt),
                   carray(f32_ptr(addr[t, 2] + off), cnt), carray(f32_ptr(addr[t, 3] + off), cnt),
                   decay[t], wdf[t], b1, omb1, b2, omb2, sbc2, eps, lrb[t])


_ADAMW_ALL = _build(_adamw_all_body, "_adamw_all")


def _check_f32(a, what):
    if a.dtype != F32 or not a.flags.c_contiguous:
        raise ValueError(f"adamw_all: {what}: binary32 C-contiguous arrays only")


class AdamWTable:
    """The tensors one AdamW call updates in place (ps, ms, vs: binary32, C-contiguous, checked),
    held with their data addresses and sizes: built once and kept while the same arrays train
    (`holds` asks), so a step takes only its gradients' addresses."""

    __slots__ = ("ps", "ms", "vs", "addr", "sizes", "size_list")

    def __init__(self, ps, ms, vs):
        self.ps, self.ms, self.vs = tuple(ps), tuple(ms), tuple(vs)
        nt = len(self.ps)
        if not len(self.ms) == len(self.vs) == nt:
            raise ValueError("adamw_all: one p, m and v per tensor")
        self.addr = np.zeros((nt, 4), np.int64)
        self.sizes = np.empty(nt, np.int64)
        for t, (p, m, v) in enumerate(zip(self.ps, self.ms, self.vs)):
            for col, a in ((0, p), (2, m), (3, v)):
                _check_f32(a, f"tensor {t}")
                self.addr[t, col] = a.ctypes.data
            if not p.size == m.size == v.size:
                raise ValueError(f"adamw_all: tensor {t}: p, m, v of different sizes")
            self.sizes[t] = p.size
        self.size_list = self.sizes.tolist()

    def holds(self, ps, ms, vs) -> bool:
        """The very arrays (identity) this table was built on, in order."""
        return (len(ps) == len(self.ps) == len(ms) == len(vs) and all(map(operator.is_, ps, self.ps))
                and all(map(operator.is_, ms, self.ms)) and all(map(operator.is_, vs, self.vs)))


def _addresses(arrays) -> list:
    """Each array's data address (arrays C-contiguous): through a ctypes view of its buffer, a
    quarter of the cost of `a.ctypes.data`; an array whose buffer that view cannot take (read
    only, empty) is asked `a.ctypes.data`."""
    try:
        return [_addressof(_c_char.from_buffer(a)) for a in arrays]
    except (TypeError, ValueError):
        return [a.ctypes.data for a in arrays]


def adamw_all(table: AdamWTable, gs, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps) -> None:
    """adamw_tensor over every tensor t of the table in one compiled call: gs[t] its gradient
    (binary32, C-contiguous, its size; checked), decay[t], wdf[t], lrb[t] its flag and scalars."""
    nt = len(table.ps)
    if not (len(gs) == nt == len(decay) == len(wdf) == len(lrb)):
        raise ValueError("adamw_all: one gradient, decay, wdf and lrb per tensor")
    addr = table.addr
    sizes = table.sizes
    for t, (g, size) in enumerate(zip(gs, table.size_list)):
        if g.dtype != F32 or not g.flags.c_contiguous or g.size != size:
            _check_f32(g, f"gradient {t}")
            raise ValueError(f"adamw_all: gradient {t} has {g.size} elements, its tensor {size}")
    addr[:, 1] = _addresses(gs)
    total = int(sizes.sum())
    try:
        pick(_ADAMW_ALL, total // _ADAMW_CHUNK + 1, total)(
            addr, sizes, np.asarray(decay, np.bool_), np.asarray(wdf, F32), np.asarray(lrb, F32),
            F32(b1), F32(omb1), F32(b2), F32(omb2), F32(sbc2), F32(eps))
    finally:
        addr[:, 1] = 0  # no stale gradient address kept


# ----------------------------------------------------------------------------------------
# Rows added into a table in index order (np.add.at's unbuffered, sequential additions)
# ----------------------------------------------------------------------------------------
@njit(**_jit)
def _add_rows(table, ids, vals):
    for i in range(ids.size):
        r = ids[i]
        if r != 0:  # row 0 (padding) gets none
            for c in range(vals.shape[1]):
                table[r, c] += vals[i, c]


@njit(**_jit)
def _position_tables_body(de, buckets, rows):
    """The embedding's four position tables' gradients: table k's row buckets[i, k] += de[i] for
    i ascending (layers.table_backward's np.add.at: sequential additions in index order), the
    four tables in one pass over the words."""
    n, d = de.shape
    nt = buckets.shape[1]
    g = np.zeros((nt, rows, d), np.float32)
    for i in range(n):
        src = de[i]
        for k in range(nt):
            dst = g[k, buckets[i, k]]
            for c in range(d):
                dst[c] += src[c]
    return g


def position_tables_backward(de, buckets, rows):
    """[gradient of table k for k < buckets.shape[1]] as layers.table_backward(de, buckets[:, k], rows)."""
    b = np.ascontiguousarray(buckets, np.int64)
    if b.size and (b.min() < 0 or b.max() >= rows):
        raise IndexError(f"a position bucket outside 0 .. {rows - 1}")
    return list(_position_tables_body(np.ascontiguousarray(de, F32), b, int(rows)))


def add_rows_skip0(table, ids, vals) -> None:
    """table[ids[i]] += vals[i] for i ascending, ids 0 skipped: np.add.at(table, ids[keep],
    vals[keep]) with the same additions in the same order (binary32)."""
    _add_rows(table, np.ascontiguousarray(ids, np.int64).reshape(-1), np.ascontiguousarray(vals, F32))


# ----------------------------------------------------------------------------------------
# Pieces of the compiled forward sections (here and the blocks' in blocks/), called from
# compiled code: the same kernels as the layer-by-layer path, so the same bytes. `par` picks the
# kernels' parallel builds (rows over the threads) or the serial ones, as pick() would.
# ----------------------------------------------------------------------------------------
_mm_nt_par, _mm_nt_ser = kc._MM_NT
_rows32_par, _rows32_ser = kc.ROWS32
_pack_t_par, _pack_t_ser = kc._PACK_T
_ln_fwd_par, _ln_fwd_ser = _LAYERNORM_FWD
_softmax_fwd_par, _softmax_fwd_ser = _SOFTMAX_FWD
_gelu_fwd_par, _gelu_fwd_ser = _GELU_FWD


@njit(**_jit)
def _padded_bias(b, m):
    """b (m,) with +0 past m up to whole tiles (mm_nt reads the bias a tile's width at a time)."""
    out = np.zeros((m + _NR - 1) // _NR * _NR, np.float32)
    for j in range(b.shape[0]):
        out[j] = b[j]
    return out


@njit(**_jit)
def _linear_nt(x, w, b, par):
    """x W^T + b on mm_nt (the bias in the tile's epilogue), as ops.mm_nt(x, w, b)."""
    y = np.empty((x.shape[0], w.shape[0]), np.float32)
    bp = b if w.shape[0] % _NR == 0 else _padded_bias(b, w.shape[0])  # whole tiles: b as it is
    if par is not None and par:
        _mm_nt_par(x, w, bp, y)
    else:
        _mm_nt_ser(x, w, bp, y)
    return y


@njit(**_jit)
def _layernorm_nt(x, w, b, eps, par):
    """(y, xhat, inv) = layer norm of x's rows, as layernorm_forward, from compiled code."""
    n, d = x.shape
    y = np.empty((n, d), np.float32)
    xhat = np.empty((n, d), np.float32)
    inv = np.empty(n, np.float32)
    if par is not None and par:
        _ln_fwd_par(x, w, b, eps, y, xhat, inv)
    else:
        _ln_fwd_ser(x, w, b, eps, y, xhat, inv)
    return y, xhat, inv


@njit(**_jit)
def _nt(a, bt, zb, out, par):
    """out = a bt^T (mm_nt, no bias: zb is +0, which changes no bit)."""
    if par is not None and par:
        _mm_nt_par(a, bt, zb, out)
    else:
        _mm_nt_ser(a, bt, zb, out)


@njit(**_jit)
def _packed(x, par):
    """x (K, N) -> (N, K16): x^T, k padded with +0 (compiled.pack_t)."""
    k, n = x.shape
    k16 = (k + 15) // 16 * 16
    out = np.empty((n, k16), np.float32)  # pack_t writes the first k columns: only the padding is cleared
    for j in range(n):
        for kk in range(k, k16):
            out[j, kk] = np.float32(0.0)
    if par is not None and par:
        _pack_t_par(x, out)
    else:
        _pack_t_ser(x, out)
    return out


@njit(**_jit)
def _rowsums(xt, out):
    """out[j] = dot16(xt[j, :], 1): xt's rows whole chunks of 16 (padded with +0), i.e. the
    column sums (ops.colsum) of the array xt is the transpose of, rows ascending."""
    m, k16 = xt.shape
    acc = np.empty(16, np.float32)
    for j in range(m):
        kc.lanes_sum(xt, j * k16, k16 // 16, acc, 0)
        out[j] = fold16(acc)


@njit(**_jit)
def _linear_bwd(dy, x, w, zb, dx, dw, db, par):
    """layers.linear_backward: dx = dy w (mm), dw = dy^T x (mm_tn), db = colsum(dy)."""
    dyt = _packed(dy, par)  # (out, n16)
    _nt(dy, _packed(w, par), zb, dx, par)  # w (out, in) -> (in, out16)
    _nt(dyt, _packed(x, par), zb, dw, par)
    _rowsums(dyt, db)


# ----------------------------------------------------------------------------------------
# Character convolution and max pooling in one call (layers.char_windows + charconv_forward)
# ----------------------------------------------------------------------------------------
@njit(**_jit)
def _charconv_words_body(char_ids, char_len, emb, w_rt, b, par):
    n = char_ids.shape[0]
    dc = emb.shape[1]
    c = w_rt.shape[0]
    total = 0
    for wd in range(n):
        total += char_len[wd]
    tap_ids = np.zeros((total, 3), np.int64)
    owners = np.empty(total, np.int64)
    u = np.zeros((total, 3 * dc), np.float32)  # id 0 (outside the word, padding): the zero vector
    pos = 0
    for wd in range(n):
        ln = char_len[wd]
        for q in range(ln):
            owners[pos] = wd
            for t in range(3):
                pp = q + t - 1
                if pp >= 0 and pp < ln:
                    cid = char_ids[wd, pp]
                    tap_ids[pos, t] = cid
                    if cid != 0:
                        for k in range(dc):
                            u[pos, t * dc + k] = emb[cid, k]
            pos += 1
    hpre = _linear_nt(u, w_rt, b, par)
    h = hpre  # in place
    zero = np.float32(0.0)
    for r in range(total):
        for j in range(c):
            v = h[r, j]
            h[r, j] = v if v > zero else zero  # relu_forward: +0 for every non-positive (and NaN)
    # max over each word's positions (exact in any order); the first position holding it
    pooled = np.zeros((n, c), np.float32)
    arg = np.full((n, c), -1, np.int64)
    start = 0
    for wd in range(n):
        ln = char_len[wd]
        if ln > 0:
            best = pooled[wd]
            at = arg[wd]
            for j in range(c):
                best[j] = h[start, j]
                at[j] = start
            for r in range(start + 1, start + ln):  # positions ascending, channels in a vector
                for j in range(c):
                    v = h[r, j]
                    at[j] = r if v > best[j] else at[j]
                    best[j] = v if v > best[j] else best[j]
        start += ln
    return tap_ids, owners, pooled, u, h, arg


def charconv_words_forward(char_ids, char_len, emb, w_rt, b, keep: bool, allowed: bool | None = None):
    """(tap_ids, owners, pooled, (u, h, arg)) as layers.char_windows then layers.charconv_forward,
    in one compiled call; (None, None, pooled, None) when not keep."""
    char_len = np.ascontiguousarray(char_len, np.int64)
    rows = int(char_len.sum())
    par = section_par(rows, rows * w_rt.shape[1] * w_rt.shape[0], allowed)
    tap_ids, owners, pooled, u, h, arg = _charconv_words_body(
        np.ascontiguousarray(char_ids, np.int64), char_len, np.ascontiguousarray(emb, F32),
        np.ascontiguousarray(w_rt, F32), np.ascontiguousarray(b, F32), par)
    if not keep:  # (no lean build here: 1 µs a forward against 1.4 s more of the first compile)
        return None, None, pooled, None
    return tap_ids, owners, pooled, (u, h, arg)


# ----------------------------------------------------------------------------------------
# The embedding sum and the output heads in one call each (model.forward's steps 2 and 5)
# ----------------------------------------------------------------------------------------
_mm_ser = kc._MM[1]


@njit(**_jit)
def _embed_forward_body(pooled, cpw, cpb, pos_x0, pos_y0, pos_x1, pos_y1, buckets, feats, fpw, fpb,
                        lnw, lnb, eps, par):
    e = _linear_nt(pooled, cpw, cpb, par)
    n, d = e.shape
    for i in range(n):  # the additions left to right, each rounded: e + pos_x0 + pos_y0 + ...
        b0, b1, b2, b3 = buckets[i, 0], buckets[i, 1], buckets[i, 2], buckets[i, 3]
        for c in range(d):
            v = e[i, c] + pos_x0[b0, c]
            v = v + pos_y0[b1, c]
            v = v + pos_x1[b2, c]
            e[i, c] = v + pos_y1[b3, c]
    e = e + _linear_nt(feats, fpw, fpb, par)
    return _layernorm_nt(e, lnw, lnb, eps, par)


_EMBED_TENSORS = ("char_proj.weight", "char_proj.bias", "pos_x0", "pos_y0", "pos_x1", "pos_y1")


def embed_forward(pooled, p, buckets, feats, eps, allowed: bool | None = None):
    """(x, emb_ln (xhat, inv)): model.forward's step 2 in one compiled call (no lean build for
    extract: half a microsecond a forward against 2 s more of the first compile)."""
    n = pooled.shape[0]
    par = section_par(n, n * pooled.shape[1] * p["char_proj.weight"].shape[0], allowed)
    w = [np.ascontiguousarray(p[k], F32) for k in _EMBED_TENSORS]
    return _embed_forward_body(
        np.ascontiguousarray(pooled, F32), *w, np.ascontiguousarray(buckets, np.int64),
        np.ascontiguousarray(feats, F32), np.ascontiguousarray(p["feat_proj.weight"], F32),
        np.ascontiguousarray(p["feat_proj.bias"], F32), np.ascontiguousarray(p["emb_ln.weight"], F32),
        np.ascontiguousarray(p["emb_ln.bias"], F32), F32(eps), par)


@njit(**_jit)
def _pointer_scores(rq, rk, c0, r, scale, par):
    """(q k^T) / scale for q and k the columns c0 .. c0 + r - 1 of rel_q's and rel_k's outputs."""
    n = rq.shape[0]
    if r == 32:  # q read in place, k^T with the keys in the lanes (compiled.rows32_block)
        n16 = (n + 15) // 16 * 16
        s = np.empty((n, n), np.float32)
        kt = kc.transpose32(rk.reshape(rk.size), c0, rk.shape[1], n)
        args = (rq.reshape(rq.size), c0, rq.shape[1], n, kt, np.zeros(n16, np.float32), s.reshape(n * n), n, n)
        if par is not None and par:
            _rows32_par(*args)
        else:
            _rows32_ser(*args)
    else:
        q = np.ascontiguousarray(rq[:, c0:c0 + r])
        k = np.ascontiguousarray(rk[:, c0:c0 + r])
        s = _linear_nt(q, k, np.zeros(n, np.float32), par)  # no bias: +0 changes no bit
    for i in range(n):
        for j in range(n):
            s[i, j] = s[i, j] / scale
    return s


@njit(**_jit)
def _heads_forward_body(x, lnw, lnb, eps, tagw, tagb, rolew, roleb, docw, docb, rqw, rqb, rkw, rkb,
                        r, rscale, par):
    n, d = x.shape
    f, xhat, inv = _layernorm_nt(x, lnw, lnb, eps, par)
    tag = _linear_nt(f, tagw, tagb, par)
    role = _linear_nt(f, rolew, roleb, par)
    colsum = np.empty((1, d), np.float32)
    _mm_ser(np.ones((1, n), np.float32), f, colsum)  # ops.colsum: dot16 with ones, rows ascending
    mean = np.empty((1, d), np.float32)
    nf = np.float32(n)
    for c in range(d):
        mean[0, c] = colsum[0, c] / nf
    doc = _linear_nt(mean, docw, docb, par)
    rq = _linear_nt(f, rqw, rqb, par)
    rk = _linear_nt(f, rkw, rkb, par)
    items = _pointer_scores(rq, rk, np.int64(0), r, rscale, par)  # not a literal 0 (another compile)
    kvs = _pointer_scores(rq, rk, r, r, rscale, par)
    return f, xhat, inv, tag, role, mean[0], doc[0], rq, rk, items, kvs


_HEAD_TENSORS = ("final_ln.weight", "final_ln.bias", "tag_head.weight", "tag_head.bias", "role_head.weight",
                 "role_head.bias", "doc_head.weight", "doc_head.bias", "rel_q.weight", "rel_q.bias",
                 "rel_k.weight", "rel_k.bias")


@njit(**_jit)
def _heads_forward_lean(x, lnw, lnb, eps, tagw, tagb, rolew, roleb, docw, docb, rqw, rqb, rkw, rkb,
                        r, rscale, par):
    out = _heads_forward_body(x, lnw, lnb, eps, tagw, tagb, rolew, roleb, docw, docb, rqw, rqb, rkw, rkb,
                              r, rscale, par)
    return out[3], out[4], out[6], out[9], out[10]  # the outputs alone: tag, role, doc, items, kv


def heads_forward(x, p, eps, r: int, rscale, keep: bool = True, allowed: bool | None = None):
    """(f, final_ln (xhat, inv), tag, role, mean, doc, rq, rk, items, kv): model.forward's step 5
    in one compiled call; (tag, role, doc, items, kv) when not keep."""
    x = np.ascontiguousarray(x, F32)
    n, d = x.shape
    par = section_par(n, n * d * d, allowed)
    w = [np.ascontiguousarray(p[k], F32) for k in _HEAD_TENSORS]
    body = _heads_forward_body if keep else _heads_forward_lean
    return body(x, w[0], w[1], F32(eps), *w[2:], r, F32(rscale), par)


# ----------------------------------------------------------------------------------------
# The backward's first and last sections in one call each: the output heads with the final
# layer norm (model.backward's step 5), and the embedding with the characters (steps 2 and 1).
# The same operations as the layer-by-layer path in the same order: every product a dot16
# (mm_nt on operands transposed and padded with +0, as the blocks' backward), the column sums
# lanes_sum of the transposed rows, the tables' rows added in index order.
# ----------------------------------------------------------------------------------------
_ln_bwd_par, _ln_bwd_ser = _LAYERNORM_BWD


@njit(**_jit)
def _ln_bwd(dy, xhat, inv, w, par):
    """(dx, dw, db) = layers.layernorm_backward, from compiled code."""
    n, d = dy.shape
    dx = np.empty((n, d), np.float32)
    dw = np.empty(d, np.float32)
    db = np.empty(d, np.float32)
    if par is not None and par:
        _ln_bwd_par(dy, xhat, inv, w, dx, dw, db)
    else:
        _ln_bwd_ser(dy, xhat, inv, w, dx, dw, db)
    return dx, dw, db


@njit(**_jit)
def _head_bwd(dy, x, w, zb, need_dx, par):
    """layers.linear_backward(dy, x, w) -> (dx or an empty array, dw, db)."""
    n, o = dy.shape
    i = w.shape[1]
    dx = np.empty((n if need_dx else 0, i), np.float32)
    dw = np.empty((o, i), np.float32)
    db = np.empty(o, np.float32)
    dyt = _packed(dy, par)
    if need_dx:
        _nt(dy, _packed(w, par), zb, dx, par)
    _nt(dyt, _packed(x, par), zb, dw, par)
    _rowsums(dyt, db)
    return dx, dw, db


@njit(**_jit)
def _add_term(df, started, t):
    """df = t (the first term, as it is) or df + t (one rounding each)."""
    n, d = t.shape
    if not started:
        for i in range(n):
            for c in range(d):
                df[i, c] = t[i, c]
    else:
        for i in range(n):
            for c in range(d):
                df[i, c] = df[i, c] + t[i, c]


@njit(**_jit)
def _heads_backward_body(f, mean, rq, rk, xhat, inv, lnw, tagw, rolew, docw, rqw, rkw,
                         gtag, grole, gdoc, gitems, gkv, use, r, rscale, need_dx, par):
    """use[k]: output k (tag, role, doc, items, kv) has a gradient. Returns df's final_ln
    backward (dx, dlnw, dlnb; empty when not need_dx) and the heads' (dw, db) in that order."""
    n, d = f.shape
    zb = np.zeros(max(n, d, tagw.shape[0], rolew.shape[0], docw.shape[0], rqw.shape[0]) + 2 * _NR, np.float32)
    df = np.empty((n, d), np.float32)
    started = False
    e2 = np.empty((0, 0), np.float32)
    e1 = np.empty(0, np.float32)
    tw, tb, ow, ob, dw_, db_, qw, qb, kw, kb = e2, e1, e2, e1, e2, e1, e2, e1, e2, e1
    if use[0]:
        dx, tw, tb = _head_bwd(gtag, f, tagw, zb, need_dx, par)
        if need_dx:
            _add_term(df, started, dx)
        started = True
    if use[1]:
        dx, ow, ob = _head_bwd(grole, f, rolew, zb, need_dx, par)
        if need_dx:
            _add_term(df, started, dx)
        started = True
    if use[2]:
        dm, dw_, db_ = _head_bwd(gdoc.reshape(1, gdoc.shape[0]), mean.reshape(1, d), docw, zb, need_dx, par)
        if need_dx:
            nf = np.float32(n)
            t = np.empty((1, d), np.float32)
            for c in range(d):
                t[0, c] = dm[0, c] / nf
            for i in range(n):  # the broadcast row, one rounding per addition as the arrays'
                for c in range(d):
                    df[i, c] = df[i, c] + t[0, c] if started else t[0, c]
        started = True
    if use[3] or use[4]:
        drq = np.zeros(rq.shape, np.float32)
        drk = np.zeros(rk.shape, np.float32)
        for which in range(2):
            if not use[3 + which]:
                continue
            gsc = gitems if which == 0 else gkv
            c0 = which * r
            dsc = np.empty((n, n), np.float32)
            for i in range(n):
                for j in range(n):
                    dsc[i, j] = gsc[i, j] / rscale
            q = np.ascontiguousarray(rq[:, c0:c0 + r])
            k = np.ascontiguousarray(rk[:, c0:c0 + r])
            dq = np.empty((n, r), np.float32)
            dk = np.empty((n, r), np.float32)
            _nt(dsc, _packed(k, par), zb, dq, par)  # dq = dsc k
            _nt(_packed(dsc, par), _packed(q, par), zb, dk, par)  # dk = dsc^T q
            for i in range(n):
                for c in range(r):
                    drq[i, c0 + c] = dq[i, c]
                    drk[i, c0 + c] = dk[i, c]
        dx, qw, qb = _head_bwd(drq, f, rqw, zb, need_dx, par)
        if need_dx:
            _add_term(df, started, dx)
        started = True
        dx, kw, kb = _head_bwd(drk, f, rkw, zb, need_dx, par)
        if need_dx:
            _add_term(df, started, dx)
    if need_dx:
        dxo, lw, lb = _ln_bwd(df, xhat, inv, lnw, par)
    else:
        dxo, lw, lb = e2, e1, e1
    return dxo, lw, lb, tw, tb, ow, ob, dw_, db_, qw, qb, kw, kb


def heads_backward(f, mean, rq, rk, final_saved, p, go, r: int, rscale, need_dx: bool):
    """model.backward's step 5 in one compiled call: ((dx, final_ln.weight, final_ln.bias) or
    None, {head tensor: gradient}) for the outputs go (model.OutputGrads) has gradients of."""
    c = np.ascontiguousarray
    n, d = f.shape
    grads = [go.tag, go.role, go.doc, go.items, go.kv]
    use = np.array([g is not None for g in grads])
    e2 = np.zeros((0, 0), F32)
    gs = [e2 if g is None else c(g, F32) for g in grads]
    gs[2] = np.zeros(0, F32) if go.doc is None else c(go.doc, F32).reshape(-1)
    par = section_par(n, n * d * d)
    out = _heads_backward_body(
        c(f, F32), c(mean, F32).reshape(-1), c(rq, F32), c(rk, F32), c(final_saved.xhat, F32),
        c(final_saved.inv, F32), c(p["final_ln.weight"], F32), c(p["tag_head.weight"], F32),
        c(p["role_head.weight"], F32), c(p["doc_head.weight"], F32), c(p["rel_q.weight"], F32),
        c(p["rel_k.weight"], F32), *gs, use, np.int64(r), F32(rscale), bool(need_dx), par)
    heads = {}
    for k, names in enumerate((("tag_head",), ("role_head",), ("doc_head",))):
        if use[k]:
            heads[names[0] + ".weight"], heads[names[0] + ".bias"] = out[3 + 2 * k], out[4 + 2 * k]
    if use[3] or use[4]:
        heads["rel_q.weight"], heads["rel_q.bias"] = out[9], out[10]
        heads["rel_k.weight"], heads["rel_k.bias"] = out[11], out[12]
    return ((out[0], out[1], out[2]) if need_dx else None), heads


@njit(**_jit)
def _embed_backward_body(dx, xhat, inv, lnw, feats, buckets, rows, pooled, cpw, u, h, arg, w_rt, tap_ids,
                         vocab, par):
    """model.backward from dx at the blocks' input down: emb_ln, feat_proj, the four position
    tables, char_proj, the character convolution (arg-max positions, ReLU, W_rt, b) and the
    character table (rows added in position, tap order; row 0 none)."""
    n, d = dx.shape
    P, C = h.shape
    kin = u.shape[1]
    dc = kin // 3
    zb = np.zeros(max(d, C, kin, feats.shape[1], n) + 2 * _NR, np.float32)
    de, lnwg, lnbg = _ln_bwd(dx, xhat, inv, lnw, par)
    det = _packed(de, par)  # (d, n16): de^T
    fpw = np.empty((d, feats.shape[1]), np.float32)
    _nt(det, _packed(feats, par), zb, fpw, par)  # mm_tn(de, feats)
    fpb = np.empty(d, np.float32)
    _rowsums(det, fpb)
    pos = _position_tables_body(de, buckets, rows)
    dpooled = np.empty((n, C), np.float32)
    _nt(de, _packed(cpw, par), zb, dpooled, par)  # mm(de, char_proj.weight)
    cpwg = np.empty((d, C), np.float32)
    _nt(det, _packed(pooled, par), zb, cpwg, par)  # mm_tn(de, pooled)
    cpbg = np.empty(d, np.float32)
    _rowsums(det, cpbg)
    # the pooled gradient to each word's arg-max position, through the ReLU
    z = np.float32(0.0)
    dh = np.zeros((P, C), np.float32)
    for wd in range(n):
        for ch in range(C):
            a = arg[wd, ch]
            if a >= 0 and h[a, ch] > z:
                dh[a, ch] = dpooled[wd, ch]
    du = np.empty((P, kin), np.float32)
    dwc = np.empty((C, kin), np.float32)
    dbc = np.empty(C, np.float32)
    _linear_bwd(dh, u, w_rt, zb, du, dwc, dbc, par)
    demb = np.zeros((vocab, dc), np.float32)
    _add_rows(demb, tap_ids.reshape(tap_ids.size), du.reshape(P * 3, dc))
    return lnwg, lnbg, fpw, fpb, pos, dpooled, cpwg, cpbg, demb, dwc, dbc


def embed_backward(dx, emb_saved, feats, buckets, rows: int, pooled, p, conv_saved, w_rt, tap_ids, vocab: int):
    """{tensor: gradient} of emb_ln, feat_proj, pos_x0 .. pos_y1, char_proj, char_emb and
    char_conv for dx at the blocks' input, in one compiled call."""
    c = np.ascontiguousarray
    b = c(buckets[:, :4], np.int64)
    if b.size and (b.min() < 0 or b.max() >= rows):
        raise IndexError(f"a position bucket outside 0 .. {rows - 1}")
    ids = c(tap_ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise IndexError(f"a character id outside 0 .. {vocab - 1}")
    u, h, arg = conv_saved
    P = h.shape[0]
    par = section_par(P, P * u.shape[1] * h.shape[1])
    (lnwg, lnbg, fpw, fpb, pos, _dpooled, cpwg, cpbg, demb, dwc, dbc) = _embed_backward_body(
        c(dx, F32), c(emb_saved.xhat, F32), c(emb_saved.inv, F32), c(p["emb_ln.weight"], F32), c(feats, F32),
        b, np.int64(rows), c(pooled, F32), c(p["char_proj.weight"], F32), c(u, F32), c(h, F32), c(arg, np.int64),
        c(w_rt, F32), ids, np.int64(vocab), par)
    g = {"emb_ln.weight": lnwg, "emb_ln.bias": lnbg, "feat_proj.weight": fpw, "feat_proj.bias": fpb}
    for k, name in enumerate(("pos_x0", "pos_y0", "pos_x1", "pos_y1")):
        g[name] = pos[k]
    g.update({"char_proj.weight": cpwg, "char_proj.bias": cpbg, "char_emb": demb, "char_conv.weight": dwc,
              "char_conv.bias": dbc})
    return g


# ----------------------------------------------------------------------------------------
# Cross-entropy in binary64 (losses.cross_entropy), one call: the reference's operations
# element by element, its sums left to right in the same order
# ----------------------------------------------------------------------------------------
@njit(**_jit)
def _cross_entropy_body(z, t, w, scale, grad):
    """z (n, C) binary64, t (n,) int64 (negative: ignored), w (C,) binary64; grad (n, C) binary32
    of zeros, written for the counted rows. Returns (loss, counted rows). Per counted row i:
    m = max_j z (a NaN anywhere makes it NaN, as np.max), e_j = exp64(z_j - m), s = ((0 + e_0)
    + e_1) + ..., lse = m + log64(s), nll = lse - z_t; the weights' sum and the weighted nll's
    sum over the counted rows in order from 0.0; prob = e / s, prob_t -= 1, and the gradient
    ((scale * w_t) / wsum) * prob rounded once to binary32."""
    n, c = z.shape
    rows = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        if t[i] >= 0:
            rows[k] = i
            k += 1
    if k == 0:
        return 0.0, 0
    e = np.empty((k, c), np.float64)
    s = np.empty(k, np.float64)
    nll = np.empty(k, np.float64)
    for r in range(k):
        zi = z[rows[r]]
        m = zi[0]
        for j in range(1, c):
            v = zi[j]
            if v > m or v != v:
                m = v
        acc = 0.0
        for j in range(c):
            ej = kc.exp64_scalar(zi[j] - m)
            e[r, j] = ej
            acc = acc + ej
        s[r] = acc
        nll[r] = (m + kc.log64_scalar(acc)) - zi[t[rows[r]]]
    wsum = 0.0
    for r in range(k):
        wsum = wsum + w[t[rows[r]]]
    tot = 0.0
    for r in range(k):
        tot = tot + w[t[rows[r]]] * nll[r]
    for r in range(k):
        i = rows[r]
        ti = t[i]
        coef = (scale * w[ti]) / wsum
        for j in range(c):
            p = e[r, j] / s[r]
            if j == ti:
                p = p - 1.0
            grad[i, j] = np.float32(coef * p)
    return tot / wsum, k
