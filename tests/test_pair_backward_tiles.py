"""The pair MLP's compiled backward with its weight gradients in register tiles (intrinsics.tile_acc)
and its operands read in place or transposed 16 x 16 in registers (issue 26): the reference's bytes
at pair counts around the block of 256 pairs and the 16-pair transposes (a block that ends one pair
before, at and after the end of the pair features, where the features' transposes read the next
pair), and tile_acc itself against lanes_dot_acc, the one-output version it tiles."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine import model as M
from dxstudio.engine.kernels import compiled as kc
from dxstudio.engine.kernels.intrinsics import _MR, _NR, tile_acc
from dxstudio.engine.kernels.registry import Ops
from dxstudio.engine.kernels.runtime import njit

F32 = np.float32
REF, FAST = Ops("reference"), Ops("fast")


def _same(got, want, what):
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, what
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


@pytest.mark.parametrize("npair", [15, 16, 17, 255, 256, 272, 273, 511, 512, 513, 16 * 16 + 16 * 2 + 1, 2000])
def test_pair_backward_gives_the_reference_bytes_around_the_blocks(npair):
    rng = np.random.default_rng(1000 + npair)
    dpbias = rng.standard_normal((16, npair)).astype(F32)
    dpbias[:, ::5] = F32(-0.0)  # signed zeros: products of -0 in the hidden layer's lanes
    dpbias[3, 1::7] *= F32(1e-39)  # and denormals
    ph = np.maximum(rng.standard_normal((npair, 32)), 0).astype(F32)
    ph[::4, ::3] = 0
    pf = rng.standard_normal((npair, 8)).astype(F32)
    pf[-1] = F32(3e38)  # the last pair's features: read by the scalar path, never past the end
    w2 = rng.standard_normal((16, 32)).astype(F32)
    w2[::3, ::2] = F32(-0.0)
    sec = M.pair_bias_backward_section
    assert sec.uses_compiled(FAST, dpbias, ph, pf, w2)
    with np.errstate(all="ignore"):
        want = sec(REF, dpbias, ph, pf, w2)
        got = sec(FAST, dpbias, ph, pf, w2)
    for k, (g, w) in enumerate(zip(got, want)):
        _same(g, w, f"pair gradient {k}, {npair} pairs")
    assert np.any(got[2] != 0)  # pair1's weight gradient is not all zeros: the lanes ran


@njit
def _both(a, b, nch, acc_tile, acc_one, ldo):
    tile_acc(a, 0, 16 * nch, b, 0, 16 * nch, nch, acc_tile, 0, ldo)
    for r in range(_MR):
        for c in range(_NR):
            kc.lanes_dot_acc(a, r * 16 * nch, b, c * 16 * nch, nch, acc_one, r * ldo + 16 * c)


@pytest.mark.parametrize("nch", [0, 1, 3, 16])
def test_tile_acc_is_lanes_dot_acc_for_each_output(nch):
    """Each of the tile's outputs continues its 16 stored lanes exactly as lanes_dot_acc does
    (the same products and sums in the same order), with hostile values in the lanes."""
    rng = np.random.default_rng(nch)
    a = rng.standard_normal(_MR * 16 * max(nch, 1)).astype(F32)
    b = rng.standard_normal(_NR * 16 * max(nch, 1)).astype(F32)
    a[::7] = F32(-0.0)
    b[1::5] = F32(1e-41)
    a[2::11] = F32(np.inf)
    ldo = 16 * _NR + 16  # a row stride wider than the tile (the accumulators of a wider output)
    start = rng.standard_normal(_MR * ldo).astype(F32)
    start[::3] = F32(-0.0)
    acc_tile, acc_one = start.copy(), start.copy()
    with np.errstate(all="ignore"):
        _both(a, b, nch, acc_tile, acc_one, ldo)
    _same(acc_tile, acc_one, f"tile_acc vs lanes_dot_acc, {nch} chunks")
    if nch:
        assert not np.array_equal(acc_tile.view(np.uint32), start.view(np.uint32))
    for r in range(_MR):  # the lanes between the tile's rows are left as they were
        gap = slice(r * ldo + 16 * _NR, (r + 1) * ldo)
        _same(acc_tile[gap], start[gap], "untouched lanes")
