"""The pair MLP's compiled forward by blocks of pairs (fused._pair_blocks_body, issue 26): the first
layer four pairs at a time in registers (intrinsics.rows8_relu: the raw products folded, +0 once),
rows32 on the block's hidden rows, the biases transposed 16 x 16 into pbias_t, ph written only when
kept: the reference's bytes (ph and pbias_t) at pair counts around the block, the 16-pair
transposes and the four-pair steps, with signed zeros, denormals, infinities and NaN in the
features and weights, kept and lean, serial and parallel builds."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine import model as M
from dxstudio.engine.kernels import fused
from dxstudio.engine.kernels.registry import Ops

F32 = np.float32
REF, FAST = Ops("reference"), Ops("fast")
BLOCK = fused._PAIR_FWD_BLOCK


def _same(got, want, what):
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, what
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


def _same_t(got, want, what):
    """pbias_t: the reference's (16, npair), the compiled one's padded with +0 to whole chunks."""
    assert got.shape == (16, (want.shape[1] + 15) // 16 * 16), what
    _same(np.ascontiguousarray(got[:, :want.shape[1]]), want, what)
    assert np.all(got[:, want.shape[1]:].view(np.uint32) == 0), f"{what}: the padding is not +0"


def _inputs(npair, special):
    rng = np.random.default_rng(2000 + npair)
    pf = (rng.standard_normal((npair, 8)) * 2).astype(F32)
    w1 = rng.standard_normal((32, 8)).astype(F32)
    b1 = (rng.standard_normal(32) * 0.5).astype(F32)
    w2 = (rng.standard_normal((16, 32)) * 0.3).astype(F32)
    b2 = (rng.standard_normal(16) * 0.1).astype(F32)
    if special:
        pf[::3, ::2] = F32(-0.0)  # products of -0: the spec's lanes are +0
        pf[1::5, 3] = F32(1e-40)
        pf[2::11, 5] = F32(np.inf)
        pf[4::13, 1] = F32(np.nan)
        pf[5::17] = F32(-0.0)  # a whole pair of -0 features: every first-layer dot is the +0 fold
        w1[::4, ::3] = F32(-0.0)
        w1[2, 6] = F32(3e38)
        b1[::5] = F32(-0.0)  # -0 biases: -0 + -0 would be -0 where the spec's +0 + -0 is +0
        w2[::3, ::2] = F32(-0.0)
        b2[::4] = F32(-0.0)
    return pf, w1, b1, w2, b2


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("npair", [1, 3, 4, 5, 15, 16, 17, 31, BLOCK - 1, BLOCK, BLOCK + 1, BLOCK + 19,
                                   3 * BLOCK + 7, 64 * BLOCK + 5, 90 * BLOCK + 33])
def test_pair_forward_blocks_give_the_reference_bytes(npair, special):
    pf, w1, b1, w2, b2 = _inputs(npair, special)
    sec = M.pair_bias_section
    assert sec.uses_compiled(FAST, pf, w1, b1, w2, b2, False, True)
    with np.errstate(all="ignore"):
        ph_want, pbt_want = sec(REF, pf, w1, b1, w2, b2, False, True)
        for keep in (True, False):
            ph, pbt = sec(FAST, pf, w1, b1, w2, b2, False, keep)
            _same_t(pbt, pbt_want, f"pbias_t, {npair} pairs, keep={keep}")
            if keep:
                _same(ph, ph_want, f"ph, {npair} pairs")
            else:
                assert ph is None
            for par in (False, True):  # both builds of the blocks, called as the section calls them
                ph2, pbt2 = fused._pair_bias_body(pf, w1, b1, w2, b2, keep, par)
                _same_t(pbt2, pbt_want, f"pbias_t, {npair} pairs, keep={keep}, par={par}")
                if keep:
                    _same(ph2, ph_want, f"ph, {npair} pairs, par={par}")
    assert np.count_nonzero(ph_want) > 0 and np.count_nonzero(pbt_want) > 0


def test_rows8_relu_writes_plus_zero_for_negative_zero_and_nan():
    """The first layer's ReLU: an output of -0 (the fold of -0 products with a -0 bias in the
    raw order) and NaN both give +0, as relu_forward."""
    pf = np.zeros((4, 8), F32)
    pf[0] = F32(-0.0)
    pf[1, 0] = F32(np.nan)
    pf[2, :] = F32(-1.0)
    w1 = np.ones((32, 8), F32)
    b1 = np.full(32, F32(-0.0))
    w2 = np.ones((16, 32), F32)
    b2 = np.zeros(16, F32)
    ph, _ = fused._pair_bias_body(pf, w1, b1, w2, b2, True, False)
    assert np.all(ph.view(np.uint32) == 0)
