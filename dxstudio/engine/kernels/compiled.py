"""The compiled bodies of the arithmetic: Numba kernels built with fastmath off (no contraction
into fused multiply-add, no reassociation), one thread per output row (or element), each as a
(parallel, serial) pair (runtime._build) chosen by runtime.pick. The same bytes as reference.py.

    mm_fast, mm_nt_fast, mm_tn_fast, rowdot_fast, rows32_product, pack_t   the products
    fold8, fold16, rows32_block, transpose32(_into)   pieces the layer kernels (fused.py) call
    exp32_vec, tanh32_vec (and exp32_fast, tanh32_fast)   the branch-free binary32 exp and tanh
    exp64_scalar, log64_scalar (and exp64_fast, log64_fast)   the losses' binary64 kernels
"""
from __future__ import annotations

import math

import numpy as np

from .constants import (EXP32_C, EXP32_LN2_HI, EXP32_LN2_LO, EXP32_LOG2E, EXP32_MAX, EXP32_MIN, EXP64_C,
                        EXP64_LN2_HI, EXP64_LN2_LO, EXP64_LOG2E, EXP64_MAX, EXP64_MIN, F32, F64,
                        LOG64_C, LOG64_SQRT_HALF, TANH32_BIG, TANH32_C, TANH32_SMALL)
from .intrinsics import (_MR, _NR, _PANEL, _ROWS32, _rows32_x1, _rows32_x4, _t16, _tile_mr_nr, exp32_lanes,  # noqa: F401
                         gelu_lanes, lanes_dot, lanes_dot_acc, lanes_max, lanes_sum, lanes_sum_acc,
                         softmax_row_div, softmax_row_exp_sum, softmax_row_max_plain, softmax_row_max_scaled,
                         tanh32_lanes)
from .runtime import _build, _jit, njit, pick, prange

@njit(inline="always", **_jit)  # inlined: in a loop over outputs each lane stays a scalar LLVM vectorises
def fold8(a0, a1, a2, a3, a4, a5, a6, a7):
    """fold16's last three steps, on its 8 lanes after the first: l < 4, l < 2, then a[0] + a[1]."""
    a0 = a0 + a4
    a1 = a1 + a5
    a2 = a2 + a6
    a3 = a3 + a7
    a0 = a0 + a2
    a1 = a1 + a3
    return a0 + a1


@njit(**_jit)
def fold16(acc):
    """The 16 lanes folded in halves: l < 8, l < 4, l < 2, then a[0] + a[1]."""
    return fold8(acc[0] + acc[8], acc[1] + acc[9], acc[2] + acc[10], acc[3] + acc[11],
                 acc[4] + acc[12], acc[5] + acc[13], acc[6] + acc[14], acc[7] + acc[15])



_COLS = 512  # output columns per pass: the 16 accumulator rows (16 x 512 binary32 = 32 KB) stay in L1


def _mm_body(a, b, out):
    m, k = a.shape
    n = b.shape[1]
    rows = 1 if m < 256 else 16  # rows per task: one accumulator block serves them all
    width = min(n, _COLS)
    for blk in prange((m + rows - 1) // rows):
        acc = np.empty((16, width), np.float32)
        for i in range(blk * rows, min(m, blk * rows + rows)):
            arow = a[i]
            for j0 in range(0, n, width):
                w = min(width, n - j0)
                for lane in range(16):
                    for j in range(w):
                        acc[lane, j] = np.float32(0.0)
                for kk in range(k):
                    aik = arow[kk]
                    row = acc[kk & 15]
                    brow = b[kk, j0:j0 + w]
                    for j in range(w):  # row views: the compiler sees one contiguous vector loop
                        row[j] += aik * brow[j]
                orow = out[i, j0:j0 + w]
                for j in range(w):
                    a0 = acc[0, j] + acc[8, j]
                    a1 = acc[1, j] + acc[9, j]
                    a2 = acc[2, j] + acc[10, j]
                    a3 = acc[3, j] + acc[11, j]
                    a4 = acc[4, j] + acc[12, j]
                    a5 = acc[5, j] + acc[13, j]
                    a6 = acc[6, j] + acc[14, j]
                    a7 = acc[7, j] + acc[15, j]
                    a0 = a0 + a4
                    a1 = a1 + a5
                    a2 = a2 + a6
                    a3 = a3 + a7
                    a0 = a0 + a2
                    a1 = a1 + a3
                    orow[j] = a0 + a1


_MM = _build(_mm_body, "_mm")


def _mm_tn_body(at, b, out):
    """out = at^T b, at (K, M), b (K, N): k outermost, so both operands stream through once
    (the weight gradients, K = the rows of a window or its n^2 pairs). Each output's 16 lanes
    take the same terms in the same order as mm(at.T, b)."""
    k, m = at.shape
    n = b.shape[1]
    rows = max(1, min(m, 1024 // max(n, 1)))  # outputs per task: rows * n * 16 binary32 <= 64 KB
    for blk in prange((m + rows - 1) // rows):
        i0 = blk * rows
        r = min(rows, m - i0)
        acc = np.zeros((16, r, n), np.float32)
        for kk in range(k):
            lane = kk & 15
            for i in range(r):
                aik = at[kk, i0 + i]
                for j in range(n):
                    acc[lane, i, j] += aik * b[kk, j]
        for i in range(r):
            for j in range(n):
                a0 = acc[0, i, j] + acc[8, i, j]
                a1 = acc[1, i, j] + acc[9, i, j]
                a2 = acc[2, i, j] + acc[10, i, j]
                a3 = acc[3, i, j] + acc[11, i, j]
                a4 = acc[4, i, j] + acc[12, i, j]
                a5 = acc[5, i, j] + acc[13, i, j]
                a6 = acc[6, i, j] + acc[14, i, j]
                a7 = acc[7, i, j] + acc[15, i, j]
                a0 = a0 + a4
                a1 = a1 + a5
                a2 = a2 + a6
                a3 = a3 + a7
                a0 = a0 + a2
                a1 = a1 + a3
                out[i0 + i, j] = a0 + a1


_MM_TN = _build(_mm_tn_body, "_mm_tn")


def mm_fast(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, F32)
    b = np.asarray(b, F32)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"mm: inner sizes differ ({a.shape} x {b.shape})")
    m, k = a.shape
    n = b.shape[1]
    if _nt_pays(m, k, n):  # b transposed once, then the register-blocked tiles
        return mm_nt_fast(a, pack_t(b))
    out = np.empty((m, n), F32)
    pick(_MM, m, m * k * n)(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
    return out



def mm_tn_fast(at: np.ndarray, b: np.ndarray) -> np.ndarray:
    at = np.ascontiguousarray(at, F32)
    b = np.ascontiguousarray(b, F32)
    if at.shape[0] != b.shape[0]:
        raise ValueError(f"mm_tn: inner sizes differ ({at.shape}^T x {b.shape})")
    k, m = at.shape
    n = b.shape[1]
    if k <= _NT_MAX_K_TN and _nt_pays(m, k, n):  # both transposed (k padded to 16), then mm_nt
        return mm_nt_fast(pack_t(at), pack_t(b))
    out = np.empty((at.shape[1], b.shape[1]), F32)
    pick(_MM_TN, at.shape[1], at.size * b.shape[1])(at, b, out)
    return out




@njit(**_jit)
def rows32_block(x, xoff, ldx, i0, i1, wt, b, y, ldy, m, tb):
    """y[i*ldy + c] = dot16(x[xoff + i*ldx + (0..31)], W[c, :]) + b[c] for i0 <= i < i1, c < m:
    x and y flat (x's rows may be 32 columns of a wider array, read in place), wt = W^T padded
    with +0 to (32, m16) columns, b (m16,) padded with +0, m16 = m rounded up to 16; tb: 64
    floats of scratch for the last columns when m is not a multiple of 16."""
    m16 = wt.shape[1]
    wf = wt.reshape(m16 * 32)
    whole = m // 16 * 16
    i = i0
    while i < i1:
        nr = _ROWS32 if i1 - i >= _ROWS32 else 1
        for c0 in range(0, whole, 16):
            if nr == _ROWS32:
                _rows32_x4(x, xoff + i * ldx, ldx, wf, c0, m16, b, c0, y, i * ldy + c0, ldy)
            else:
                _rows32_x1(x, xoff + i * ldx, ldx, wf, c0, m16, b, c0, y, i * ldy + c0, ldy)
        if whole < m:  # the last columns into tb, then the ones that exist
            if nr == _ROWS32:
                _rows32_x4(x, xoff + i * ldx, ldx, wf, whole, m16, b, whole, tb, 0, 16)
            else:
                _rows32_x1(x, xoff + i * ldx, ldx, wf, whole, m16, b, whole, tb, 0, 16)
            for r in range(nr):
                for c in range(m - whole):
                    y[(i + r) * ldy + whole + c] = tb[r * 16 + c]
        i += nr


_ROWS32_TASK = 64  # rows of x per task of the parallel build


def _rows32_body(x, xoff, ldx, n, wt, b, y, ldy, m):
    nblk = (n + _ROWS32_TASK - 1) // _ROWS32_TASK
    tbs = np.empty((nblk, _ROWS32 * 16), np.float32)
    for blk in prange(nblk):
        tb = tbs[blk]
        rows32_block(x, xoff, ldx, blk * _ROWS32_TASK, min(n, blk * _ROWS32_TASK + _ROWS32_TASK), wt, b, y, ldy, m, tb)


ROWS32 = _build(_rows32_body, "_rows32")  # (parallel, serial): rows32_block over all n rows


@njit(**_jit)
def transpose32_into(x, xoff, ldx, n, wt):
    """wt (32, n16) = W^T for rows32_block from n rows of 32 at x[xoff + i*ldx + k] (flat), +0 past n.
    Whole blocks of 16 rows as two 16 x 16 transposes in registers (_t16: moves only), the rest
    element by element (a third of the scalar loop's time at 55-411 rows)."""
    ldo = wt.shape[1]
    n16 = n // 16 * 16
    for i0 in range(0, n16, 16):
        _t16(x, xoff + i0 * ldx, ldx, wt, i0, ldo)
        _t16(x, xoff + i0 * ldx + 16, ldx, wt, 16 * ldo + i0, ldo)
    for i in range(n16, n):
        for k in range(32):
            wt[k, i] = x[xoff + i * ldx + k]
    for k in range(32):
        for i in range(n, wt.shape[1]):
            wt[k, i] = np.float32(0.0)


@njit(**_jit)
def transpose32(x, xoff, ldx, n):
    """transpose32_into a new (32, n16) array."""
    wt = np.empty((32, (n + 15) // 16 * 16), np.float32)
    transpose32_into(x, xoff, ldx, n, wt)
    return wt


_NT_ROWS = 16  # rows of a per task (a multiple of _MR)


def _mm_nt_body(a, bt, bias, out):
    m, k = a.shape
    n = bt.shape[0]
    nch = (k + 15) // 16
    k16 = nch * 16
    nfull = n // _NR * _NR
    if bt.shape[1] == k16:  # bt as it is (k a multiple of 16, or padded by pack_t); only a
        # last partial tile of its rows is packed
        bp = bt
        bfull = nfull
    else:  # every row of bt padded with zeros to k16
        bp = np.zeros(((n + _NR - 1) // _NR * _NR, k16), np.float32)
        for j in range(n):
            for kk in range(k):
                bp[j, kk] = bt[j, kk]
        bfull = bp.shape[0]
    btail = np.zeros((_NR, k16), np.float32)
    for j in range(bfull, n):
        for kk in range(k):
            btail[j - bfull, kk] = bt[j, kk]
    outf = out.reshape(m * n)  # flat views made once: a view per tile costs reference counts
    ntile = n // _NR * _NR  # columns in whole tiles
    nblk = (m + _NT_ROWS - 1) // _NT_ROWS
    # each task's scratch, allocated once per call: a panel of rows padded with +0 to k16 (with
    # k a multiple of 16 only the last rows take one: a single panel, for the last task alone)
    # and a tile's outputs
    own = 1 if k16 != k else 0  # a panel per task, or the one panel
    if _PANEL:  # column blocks of about _PANEL floats of bp (isa.TILE_PANEL): a task's rows that
        # are not read in place padded into its panel once, then for each block of columns every
        # row group of the task takes the block's tiles (the block stays in L1 across them). The
        # same tile call for every output as below (each output a whole dot16): the same bytes.
        cols = max(_NR, _PANEL // k16 // _NR * _NR)  # rows of bp per block
        aps = np.zeros((nblk if own else 1, _NT_ROWS, k16), np.float32)
        tbs = np.empty((nblk, _MR * _NR), np.float32)
        for blk in prange(nblk):
            ap = aps[np.int64(blk) * own]
            tb = tbs[blk]
            t0 = blk * _NT_ROWS
            t1 = min(m, t0 + _NT_ROWS)
            for i0 in range(t0, t1, _MR):  # the rows not read in place: padded with +0 into the panel
                mr = min(_MR, m - i0)
                if mr != _MR or k16 != k:
                    for r in range(_MR):
                        prow = ap[i0 - t0 + r]
                        if r < mr:
                            arow = a[i0 + r]
                            for kk in range(k):
                                prow[kk] = arow[kk]
                        else:
                            for kk in range(k):
                                prow[kk] = np.float32(0.0)
            for jb in range(0, ntile, cols):
                je = min(ntile, jb + cols)
                for i0 in range(t0, t1, _MR):
                    mr = min(_MR, m - i0)
                    po = (i0 - t0) * k16
                    for j0 in range(jb, je, _NR):
                        if mr == _MR and k16 == k:
                            _tile_mr_nr(a, i0 * k, k, bp, j0 * k16, k16, nch, outf, i0 * n + j0, n, bias, j0)
                        elif mr == _MR:
                            _tile_mr_nr(ap, po, k16, bp, j0 * k16, k16, nch, outf, i0 * n + j0, n, bias, j0)
                        else:  # the last rows: into tb, then the rows that exist
                            _tile_mr_nr(ap, po, k16, bp, j0 * k16, k16, nch, tb, 0, _NR, bias, j0)
                            for r in range(mr):
                                for c in range(_NR):
                                    out[i0 + r, j0 + c] = tb[r * _NR + c]
            if ntile < n:  # the last columns: from bp when it was padded, else from btail
                for i0 in range(t0, t1, _MR):
                    mr = min(_MR, m - i0)
                    po = (i0 - t0) * k16
                    direct = mr == _MR and k16 == k
                    if bfull > ntile:
                        if direct:
                            _tile_mr_nr(a, i0 * k, k, bp, ntile * k16, k16, nch, tb, 0, _NR, bias, ntile)
                        else:
                            _tile_mr_nr(ap, po, k16, bp, ntile * k16, k16, nch, tb, 0, _NR, bias, ntile)
                    else:
                        if direct:
                            _tile_mr_nr(a, i0 * k, k, btail, 0, k16, nch, tb, 0, _NR, bias, ntile)
                        else:
                            _tile_mr_nr(ap, po, k16, btail, 0, k16, nch, tb, 0, _NR, bias, ntile)
                    for r in range(mr):
                        for c in range(n - ntile):
                            out[i0 + r, ntile + c] = tb[r * _NR + c]
    else:  # every column for one row group, then the next (AVX-512's order)
        aps = np.zeros((nblk if own else 1, _MR, k16), np.float32)
        tbs = np.empty((nblk, _MR * _NR), np.float32)
        for blk in prange(nblk):
            ap = aps[np.int64(blk) * own]
            tb = tbs[blk]
            for i0 in range(blk * _NT_ROWS, min(m, blk * _NT_ROWS + _NT_ROWS), _MR):
                mr = min(_MR, m - i0)
                direct = mr == _MR and k16 == k
                if not direct:  # the panel's rows, zero past k (ap's padding columns stay +0)
                    for r in range(mr):
                        arow = a[i0 + r]
                        prow = ap[r]
                        for kk in range(k):
                            prow[kk] = arow[kk]
                    for r in range(mr, _MR):
                        prow = ap[r]
                        for kk in range(k):
                            prow[kk] = np.float32(0.0)
                for j0 in range(0, ntile, _NR):  # whole tiles (their columns are rows of bp)
                    if direct:
                        _tile_mr_nr(a, i0 * k, k, bp, j0 * k16, k16, nch, outf, i0 * n + j0, n, bias, j0)
                    elif mr == _MR:
                        _tile_mr_nr(ap, 0, k16, bp, j0 * k16, k16, nch, outf, i0 * n + j0, n, bias, j0)
                    else:  # the last rows: into tb, then the rows that exist
                        _tile_mr_nr(ap, 0, k16, bp, j0 * k16, k16, nch, tb, 0, _NR, bias, j0)
                        for r in range(mr):
                            for c in range(_NR):
                                out[i0 + r, j0 + c] = tb[r * _NR + c]
                if ntile < n:  # the last columns: from bp when it was padded, else from btail
                    if bfull > ntile:
                        if direct:
                            _tile_mr_nr(a, i0 * k, k, bp, ntile * k16, k16, nch, tb, 0, _NR, bias, ntile)
                        else:
                            _tile_mr_nr(ap, 0, k16, bp, ntile * k16, k16, nch, tb, 0, _NR, bias, ntile)
                    else:
                        if direct:
                            _tile_mr_nr(a, i0 * k, k, btail, 0, k16, nch, tb, 0, _NR, bias, ntile)
                        else:
                            _tile_mr_nr(ap, 0, k16, btail, 0, k16, nch, tb, 0, _NR, bias, ntile)
                    for r in range(mr):
                        for c in range(n - ntile):
                            out[i0 + r, ntile + c] = tb[r * _NR + c]


_MM_NT = _build(_mm_nt_body, "_mm_nt")


# When the register-blocked product (mm_nt) runs for mm and mm_tn: at least two tiles of the
# AVX-512 shape (4 x 4) each way, whatever the shape that runs (the same routing on every CPU),
# so narrower products keep the older kernels; mm_tn over a long k (the n^2 pairs'
# weight gradients, k = 160000 for 16 x 32 outputs) keeps its k-outermost kernel, which
# streams its operands once instead of transposing them. Either way the bytes are the same.
_NT_MAX_K_TN = 4096


def _nt_pays(m: int, k: int, n: int) -> bool:
    return m >= 8 and n >= 8 and k >= 8



def _pack_t_body(x, out):
    """out[j, kk] = x[kk, j] for kk < x.shape[0]; the columns past it are left as they are
    (zeros: the padding of k to a multiple of 16). Blocks of 16 x 16 for the caches."""
    k, n = x.shape
    kp = out.shape[1]
    for jb in prange((n + 15) // 16):
        j0 = jb * 16
        j1 = min(n, j0 + 16)
        for k0 in range(0, k, 16):
            k1 = min(k, k0 + 16)
            if k1 - k0 == 16 and j1 - j0 == 16:  # a whole block: in registers
                _t16(x, k0 * n + j0, n, out, j0 * kp + k0, kp)
            else:
                for kk in range(k0, k1):
                    for j in range(j0, j1):
                        out[j, kk] = x[kk, j]


_PACK_T = _build(_pack_t_body, "_pack_t")


def pack_t(x: np.ndarray) -> np.ndarray:
    """x (K, N) -> (N, K16): x transposed, k padded with +0 to a multiple of 16, so mm_nt
    takes it as it is (the padding adds +0 to lanes, which changes no accumulator)."""
    x = np.ascontiguousarray(x, F32)
    k, n = x.shape
    k16 = (k + 15) // 16 * 16
    out = np.zeros((n, k16), F32) if k16 != k else np.empty((n, k16), F32)
    pick(_PACK_T, n, x.size)(x, out)
    return out



def mm_nt_fast(a: np.ndarray, bt: np.ndarray, bias=None) -> np.ndarray:
    """a bt^T, plus bias (N,) added to every row in the tile's epilogue when given."""
    a = np.ascontiguousarray(a, F32)
    bt = np.ascontiguousarray(bt, F32)
    if a.shape[1] != bt.shape[1] and bt.shape[1] != (a.shape[1] + 15) // 16 * 16:  # or padded by pack_t
        raise ValueError(f"mm_nt: inner sizes differ ({a.shape} x {bt.shape}^T)")
    m, k = a.shape
    n = bt.shape[0]
    if k == 32 and bt.shape[1] == 32 and n >= 16:  # 32 terms: the outputs in the lanes
        return rows32_product(a, bt, bias)
    out = np.empty((m, n), F32)
    biasp = np.zeros((n + _NR - 1) // _NR * _NR, F32)  # whole tiles read whole bias vectors
    if bias is not None:
        biasp[:n] = bias
    pick(_MM_NT, (m + _NT_ROWS - 1) // _NT_ROWS, m * k * n)(a, bt, biasp, out)
    return out


def rows32_product(a: np.ndarray, bt: np.ndarray, bias=None) -> np.ndarray:
    """a bt^T (+ bias) for a (M, 32) and bt (N, 32) on ROWS32 (16 outputs in a register's lanes):
    mm_nt_fast's bytes, any N."""
    a = np.ascontiguousarray(a, F32)
    bt = np.ascontiguousarray(bt, F32)
    m = a.shape[0]
    n = bt.shape[0]
    out = np.empty((m, n), F32)
    biasp = np.zeros((n + 15) // 16 * 16, F32)  # whole registers read whole bias vectors
    if bias is not None:
        biasp[:n] = bias
    pick(ROWS32, m, m * 32 * n)(a.reshape(-1), 0, 32, m, transpose32(bt.reshape(-1), 0, 32, n), biasp,
                                out.reshape(-1), n, n)
    return out



def _rowdot_body(a, b, out):
    m, k = a.shape
    k16 = k // 16 * 16
    nblk = (m + 15) // 16
    accs = np.empty((nblk, 16), np.float32)
    for blk in prange(nblk):
        acc = accs[blk]
        for i in range(blk * 16, min(m, blk * 16 + 16)):
            lanes_dot(a, i * k, b, i * k, k16 // 16, acc, 0)  # whole chunks in a register
            for kk in range(k16, k):
                acc[kk & 15] += a[i, kk] * b[i, kk]
            out[i] = fold16(acc)


_ROWDOT = _build(_rowdot_body, "_rowdot")


def rowdot_fast(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, F32)
    b = np.ascontiguousarray(b, F32)
    out = np.empty(a.shape[0], F32)
    pick(_ROWDOT, a.shape[0], a.size)(a, b, out)
    return out



def _mapper(kernels, dtype):
    """The elementwise map of a scalar kernel, given as (parallel, serial) builds; each element
    is computed alone, so the split over threads cannot change a byte."""

    def run(x):
        x = np.asarray(x, dtype)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        pick(kernels, flat.size, flat.size)(flat, out)
        return out.reshape(x.shape)

    return run



_VEC_CHUNK = 256  # elements per pass of the branch-free kernels (their scratch stays in L1)


@njit(**_jit)
def _exp32_tail(x, out, lo, hi):
    """out[lo:hi] = exp32(x[lo:hi]) for hi - lo < 16 (contiguous), as one chunk of exp32_lanes
    padded with +0: the loops of exp32_vec below cost about 0.25 us for a few elements (their
    scratch arrays), a quarter of a 55-word softmax's exp."""
    buf = np.zeros(16, np.float32)
    for j in range(hi - lo):
        buf[j] = x[lo + j]
    exp32_lanes(buf, 0, buf, 0, 1)
    for j in range(hi - lo):
        out[lo + j] = buf[j]


@njit(**_jit)
def exp32_vec(x, out):
    """out[i] = exp32(x[i]) (reference.exp32_ref) for 1-D binary32 arrays (out may be x), the same bytes, written
    without branches so the loops vectorize: every element takes the in-range formula on its value
    clamped to [EXP32_MIN, EXP32_MAX] (a NaN as 0), 2^n1 and 2^n2 are built from their exponent
    bits (both normal: n1, n2 in [-75, 64]), and the special cases are selected at the end.
    Contiguous arrays take exp32_lanes (the same operations in IR, a register per 16) for their
    whole chunks of 16, and their last x.size % 16 elements as one more chunk padded with +0 (each
    lane computed alone: the padding's lanes are dropped); other strides take the loops below."""
    m = x.size
    if x.strides[0] == 4 and out.strides[0] == 4:
        whole = m // 16 * 16
        if whole:
            exp32_lanes(x, 0, out, 0, m // 16)
        if whole < m:
            _exp32_tail(x, out, whole, m)
        return
    pbuf = np.empty(_VEC_CHUNK, np.float32)
    xbuf = np.empty(_VEC_CHUNK, np.float32)  # the inputs again: out may be x, and a loop that
    # reads x and writes out then runs scalar (LLVM's overlap check fails when they are one array)
    bits1 = np.empty(_VEC_CHUNK, np.int32)  # 2^n1 and 2^n2 in two arrays: unit-stride loops
    bits2 = np.empty(_VEC_CHUNK, np.int32)  # (interleaved, LLVM made gathers and scatters)
    scale1 = bits1.view(np.float32)
    scale2 = bits2.view(np.float32)
    for c0 in range(0, m, _VEC_CHUNK):
        c1 = min(m, c0 + _VEC_CHUNK)
        xs = x[c0:c1]  # chunk views: indices from 0, so no negative-index wraparound (which
        os = out[c0:c1]  # made LLVM gather and scatter)
        for j in range(c1 - c0):
            v = xs[j]
            xbuf[j] = v
            xc = v if v == v else np.float32(0.0)
            xc = EXP32_MAX if xc > EXP32_MAX else xc
            xc = EXP32_MIN if xc < EXP32_MIN else xc
            n = np.floor(xc * EXP32_LOG2E + np.float32(0.5))
            r = (xc - n * EXP32_LN2_HI) - n * EXP32_LN2_LO
            c = EXP32_C
            p = c[7]
            p = p * r + c[6]
            p = p * r + c[5]
            p = p * r + c[4]
            p = p * r + c[3]
            p = p * r + c[2]
            p = p * r + c[1]
            p = p * r + c[0]
            pbuf[j] = p
            ni = np.int32(n)
            n1 = ni >> 1  # floor(n / 2), as ni // 2
            bits1[j] = (n1 + np.int32(127)) << 23
            bits2[j] = (ni - n1 + np.int32(127)) << 23
        for j in range(c1 - c0):
            v = xbuf[j]
            e = (pbuf[j] * scale1[j]) * scale2[j]
            e = np.float32(np.inf) if v > EXP32_MAX else e
            e = np.float32(0.0) if v < EXP32_MIN else e
            os[j] = v if v != v else e


@njit(**_jit)
def tanh32_vec(x, out):
    """out[i] = tanh32(x[i]) (reference.tanh32_ref) for 1-D binary32 arrays (out may be x), the same bytes,
    branch-free: both formulas for every element (the exp on 2*min(|x|, 9)), then selected.
    Contiguous arrays take tanh32_lanes (the same operations in IR) for their whole chunks of 16."""
    m = x.size
    if m >= 16 and x.strides[0] == 4 and out.strides[0] == 4:
        whole = m // 16 * 16
        tanh32_lanes(x, 0, out, 0, m // 16)
        if whole == m:
            return
        x = x[whole:]
        out = out[whole:]
        m = x.size
    e = np.empty(m, np.float32)
    for j in range(m):
        e[j] = np.float32(2.0) * min(abs(x[j]), TANH32_BIG)
    exp32_vec(e, e)
    c = TANH32_C
    for j in range(m):
        v = x[j]
        ax = abs(v)
        x2 = v * v
        q = c[8]
        q = q * x2 + c[7]
        q = q * x2 + c[6]
        q = q * x2 + c[5]
        q = q * x2 + c[4]
        q = q * x2 + c[3]
        q = q * x2 + c[2]
        q = q * x2 + c[1]
        small = v + v * (x2 * q)
        mid = np.float32(1.0) - np.float32(2.0) / (e[j] + np.float32(1.0))
        mid = -mid if v < 0 else mid
        t = small if ax < TANH32_SMALL else mid
        one = np.float32(-1.0) if v < 0 else np.float32(1.0)
        t = one if ax >= TANH32_BIG else t
        out[j] = v if v != v else t


_MAP_BLOCK = 4096  # elements per thread's share of an elementwise map


def _map_exp32_body(x, out):
    for blk in prange((x.size + _MAP_BLOCK - 1) // _MAP_BLOCK):
        lo = blk * _MAP_BLOCK
        hi = min(x.size, lo + _MAP_BLOCK)
        exp32_vec(x[lo:hi], out[lo:hi])


_MAP_EXP32 = _build(_map_exp32_body, "_map_exp32")
exp32_fast = _mapper(_MAP_EXP32, F32)



def _map_tanh32_body(x, out):
    for blk in prange((x.size + _MAP_BLOCK - 1) // _MAP_BLOCK):
        lo = blk * _MAP_BLOCK
        hi = min(x.size, lo + _MAP_BLOCK)
        tanh32_vec(x[lo:hi], out[lo:hi])


_MAP_TANH32 = _build(_map_tanh32_body, "_map_tanh32")
tanh32_fast = _mapper(_MAP_TANH32, F32)



@njit(**_jit)
def exp64_scalar(x):
    if x != x:
        return x
    if x > EXP64_MAX:
        return np.inf
    if x < EXP64_MIN:
        return 0.0
    n = math.floor(x * EXP64_LOG2E + 0.5)
    r = (x - n * EXP64_LN2_HI) - n * EXP64_LN2_LO
    c = EXP64_C
    p = c[13]
    for k in range(12, -1, -1):
        p = p * r + c[k]
    ni = np.int64(n)
    n1 = ni // 2
    return (p * math.ldexp(1.0, n1)) * math.ldexp(1.0, ni - n1)


@njit(**_jit)
def _map_exp64(x, out):
    for i in range(x.size):
        out[i] = exp64_scalar(x[i])


exp64_fast = _mapper((_map_exp64, _map_exp64), F64)  # binary64 maps serve the losses: small



@njit(**_jit)
def log64_scalar(x):
    if x != x:
        return x
    if x < 0.0:
        return np.nan
    if x == 0.0:
        return -np.inf
    if x == np.inf:
        return np.inf
    m, e = math.frexp(x)
    if m < LOG64_SQRT_HALF:
        m = m * 2.0
        e = e - 1
    ef = float(e)
    f = m - 1.0
    s = f / (2.0 + f)
    s2 = s * s
    c = LOG64_C
    q = c[10]
    for k in range(9, -1, -1):
        q = q * s2 + c[k]
    t = 2.0 * s
    return ef * EXP64_LN2_HI + (t + (t * (s2 * q) + ef * EXP64_LN2_LO))


@njit(**_jit)
def _map_log64(x, out):
    for i in range(x.size):
        out[i] = log64_scalar(x[i])


log64_fast = _mapper((_map_log64, _map_log64), F64)
