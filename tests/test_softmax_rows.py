"""The softmax row in three passes (issue 26, the forward on AVX-512): fused._softmax_fwd_body's
intrinsics softmax_s_max (s = raw / scale + bias and the lanes' maxima in one pass),
softmax_exp_sum (exp32(s - top) in place and dot16(., 1)'s lanes in one pass) and lanes_div, with
the last m % 16 elements of a row after each. Bit for bit the reference's rows (layers.py's NumPy
definition) at every width around the chunks, with -0, denormals, infinities and NaN in the rows,
scaled and not, in the parallel and the serial build."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine import layers as L
from dxstudio.engine.kernels import compiled as kc, fused, reference
from dxstudio.engine.kernels.registry import Ops

F32 = np.float32
REF = Ops("reference")
WIDTHS = [1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 50, 55, 64, 100, 255, 256, 411]


def _same(got, want, what):
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, what
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


def _rows(rng, n, m, hostile):
    raw = (rng.standard_normal((n, m)) * 4).astype(F32)
    bias = (rng.standard_normal((n, m)) * 2).astype(F32)
    if hostile:
        specials = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-45, np.inf, -np.inf, np.nan, 150.0, -150.0], F32)
        flat = raw.reshape(-1)
        k = min(flat.size // 3, 40)
        flat[rng.permutation(flat.size)[:k]] = rng.choice(specials, k)
        bias.reshape(-1)[rng.permutation(flat.size)[:k // 2]] = F32(-0.0)
        raw[0] = F32(-0.0)  # a row of -0 (a maximum of zero: the scalar scan picks its sign)
        bias[0] = F32(-0.0)
        if n > 1:
            raw[1] = F32(-np.inf)  # every s -inf: s - top is NaN everywhere
        if n > 2:
            raw[2] = F32(1e-42)  # denormal scores
            bias[2] = F32(0.0)
        if n > 3:
            raw[3, -1] = F32(60.0)  # one large score in the row's last element (the tail, when m % 16)
    return raw, bias


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("hostile", [False, True])
def test_three_pass_softmax_is_the_reference(m, hostile):
    rng = np.random.default_rng(1000 * m + hostile)
    n = 11
    raw, bias = _rows(rng, n, m, hostile)
    scale = F32(np.sqrt(F32(32.0)))
    with np.errstate(all="ignore"):
        want_scaled = L._scaled_softmax_forward_ref(REF, raw, bias, scale)
        want_plain = L._softmax_forward_ref(REF, raw)
    for build in fused._SOFTMAX_FWD:  # parallel, serial
        p = np.empty_like(raw)
        build(raw, bias, scale, True, p)
        _same(p, want_scaled, f"scaled, width {m}, {build}")
        p = np.empty_like(raw)
        build(raw, raw, F32(1.0), False, p)
        _same(p, want_plain, f"plain, width {m}, {build}")
    _same(fused.scaled_softmax_forward(raw, bias, scale), want_scaled, f"scaled_softmax_forward, width {m}")
    _same(fused.softmax_forward(raw), want_plain, f"softmax_forward, width {m}")


def test_rows_inside_a_larger_array():
    """The intrinsics take flat offsets: rows of a view (the attention's blocks of query rows and
    its pair bias rows) give the rows of the whole."""
    rng = np.random.default_rng(7)
    raw, bias = _rows(rng, 40, 75, True)
    scale = F32(3.0)
    with np.errstate(all="ignore"):
        want = L._scaled_softmax_forward_ref(REF, raw, bias, scale)
    p = np.zeros_like(raw)
    fused._SOFTMAX_FWD[1](raw[9:23], bias[9:23], scale, True, p[9:23])
    _same(p[9:23], want[9:23], "rows 9-22")
    assert not p[:9].any() and not p[23:].any()


@pytest.mark.parametrize("m", [1, 15, 16, 21, 48, 53])
def test_the_row_intrinsics_alone(m):
    """softmax_row_max_*: s written, the maximum (NaN when a NaN is among them); softmax_row_exp_sum:
    exp32 of s - top in place and dot16(., 1); softmax_row_div: each element divided. Nothing
    outside the row is read into it or written (the masked last chunk)."""
    from numba import njit

    @njit
    def run(raw, bias, scale, p, top, z, scaled):
        if scaled:
            t = kc.softmax_row_max_scaled(raw, 16, bias, 16, scale, p, 16, m)
        else:
            t = kc.softmax_row_max_plain(raw, 16, bias, 16, scale, p, 16, m)
        q = p.copy()
        zz = kc.softmax_row_exp_sum(q, 16, top, m)
        r = q.copy()
        kc.softmax_row_div(r, 16, z, m)
        return t, q, zz, r

    rng = np.random.default_rng(m)
    size = 16 + m + 16
    raw = (rng.standard_normal(size) * 3).astype(F32)
    raw[:16] = F32(1e30)  # larger than every s: they must not reach the maximum
    raw[16 + m:] = F32(np.nan)  # NaN around the row: it must not reach the flag
    bias = rng.standard_normal(size).astype(F32)
    scale, top, z = F32(1.7), F32(2.5), F32(3.3)
    for scaled in (True, False):
        p = np.full(size, F32(7.0))
        t, q, zz, r = run(raw, bias, scale, p, top, z, scaled)
        s = raw[16:16 + m] / scale + bias[16:16 + m] if scaled else raw[16:16 + m]
        _same(p[16:16 + m], s, "s")
        assert (p[:16] == 7).all() and (p[16 + m:] == 7).all()  # nothing outside the row
        assert t == s.max()
        e = kc.exp32_fast(s - top)
        _same(q[16:16 + m], e, "exp32(s - top)")
        assert (q[:16] == 7).all() and (q[16 + m:] == 7).all()
        _same(np.array([zz], F32), np.array([reference.dot16_ref(e, np.ones(m, F32))], F32), "the sum")
        _same(r[16:16 + m], e / z, "the division")
        assert (r[:16] == 7).all() and (r[16 + m:] == 7).all()
    raw[16 + m // 2] = F32(np.nan)
    t, *_ = run(raw, bias, scale, np.zeros(size, F32), top, z, True)
    assert t != t  # a NaN in the row: NaN, the caller scans
