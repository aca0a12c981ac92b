"""The small page's fixed costs cut without changing a byte (issue 26, the 50-word page):
exp32_vec's last x.size % 16 elements as one padded chunk of exp32_lanes, the AdamW call's
gradient addresses through ctypes, the blocks' weights kept from call to call."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.kernels import compiled as kc, fused, reference

F32 = np.float32


def _values(rng, m):
    """m binary32 values with the exp's edges and specials among them, the rest spread wide."""
    edges = np.array([88.72, -103.9, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -87.3, 0.5], F32)
    x = (rng.standard_normal(m) * 30).astype(F32)
    k = min(m, edges.size)
    x[rng.permutation(m)[:k]] = edges[:k]
    return x


def _same(a, b):
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("m", [1, 2, 7, 15, 16, 17, 31, 33, 55, 440, 3025])
def test_exp32_vec_tail_is_the_reference_and_the_strided_loops(m):
    """Every length's last m % 16 elements (the padded chunk) give the reference's bits (NaN as
    it came in), the same as the loops a strided array still takes, in place or not."""
    rng = np.random.default_rng(m)
    x = _values(rng, m)
    out = np.empty_like(x)
    kc.exp32_vec(x, out)
    want = reference.exp32_ref(x)
    nan = np.isnan(x)
    assert _same(out[~nan], want[~nan])
    assert np.isnan(out[nan]).all()
    wide = np.zeros(2 * m, F32)
    wide[::2] = x
    strided = np.empty(2 * m, F32)
    kc.exp32_vec(wide[::2], strided[::2])  # the loops (stride 8 bytes)
    assert _same(out, strided[::2])
    inplace = x.copy()
    kc.exp32_vec(inplace, inplace)
    assert _same(out, inplace)


@pytest.mark.parametrize("m", [3, 16, 19, 55, 3025])
def test_tanh32_vec_tail_is_the_reference(m):
    rng = np.random.default_rng(100 + m)
    x = (rng.standard_normal(m) * 4).astype(F32)
    out = np.empty_like(x)
    kc.tanh32_vec(x, out)
    assert _same(out, reference.tanh32_ref(x))


def test_gradient_addresses_are_the_arrays_data_addresses():
    """fused._addresses: ctypes' view of each buffer, or a.ctypes.data where it cannot take one."""
    arrays = [np.zeros((4, 3), F32), np.ones(5, F32), np.zeros(0, F32)[:0]]
    ro = np.arange(6, dtype=F32)
    ro.flags.writeable = False
    for group in (arrays[:2], arrays, arrays[:2] + [ro]):
        assert fused._addresses(group) == [a.ctypes.data for a in group]


def test_block_weights_are_kept_while_the_params_hold_the_same_arrays():
    """Weights.of gives the kept tuple for the very same arrays, a new one when any is replaced,
    and binary32 contiguous copies (never kept) for arrays that are not."""
    from dxstudio.engine.blocks import transformer as TB

    rng = np.random.default_rng(0)
    names = TB._TENSOR_NAMES
    p = {"blocks.7." + k: rng.standard_normal((4, 4)).astype(F32) for k in names}
    w1 = TB.Weights.of(p, "blocks.7.")
    assert all(a is p["blocks.7." + k] for a, k in zip(w1, names))
    assert TB.Weights.of(p, "blocks.7.") is w1
    p2 = dict(p)
    p2["blocks.7.fc2.bias"] = p["blocks.7.fc2.bias"].copy()
    w2 = TB.Weights.of(p2, "blocks.7.")
    assert w2 is not w1 and w2.fc2b is p2["blocks.7.fc2.bias"] and w2.fc1w is p["blocks.7.fc1.weight"]
    p3 = dict(p2)
    p3["blocks.7.qkv.weight"] = p2["blocks.7.qkv.weight"].astype(np.float64)
    w3 = TB.Weights.of(p3, "blocks.7.")
    assert w3.qkvw.dtype == F32 and np.array_equal(w3.qkvw, p2["blocks.7.qkv.weight"])
    assert TB.Weights.of(p3, "blocks.7.") is not w3  # a converted copy is made anew each time
    assert TB.Weights.of(p2, "blocks.7.") is w2


@pytest.mark.parametrize("seed", range(6))
def test_compiled_cross_entropy_is_the_reference_bit_for_bit(seed):
    """losses.cross_entropy's one compiled call (the fast path) against the NumPy definition:
    binary32 and binary64 logits, ignored words, class weights, scales, wide logits, one row."""
    from dxstudio.engine import losses
    from dxstudio.engine.kernels.registry import Ops

    rng = np.random.default_rng(seed)
    n, c = [(55, 9), (1, 4), (150, 9), (7, 3), (3, 40), (12, 9)][seed]
    for dtype in (F32, np.float64):
        z = (rng.standard_normal((n, c)) * [1, 10, 300, 3, 40, 0.01][seed]).astype(dtype)
        t = rng.integers(-1, c, n)
        for weight in (None, rng.uniform(0.5, 3.0, c)):
            for scale in (1.0, 0.37, 1.0 / 3):
                fast = losses.cross_entropy(z, t, weight, scale=scale, kernels="fast")
                ref = losses._cross_entropy_ref(Ops("reference"), z, t, weight, scale)
                ref_fast_maps = losses._cross_entropy_ref(Ops("fast"), z, t, weight, scale)
                assert np.float64(fast[0]).view(np.uint64) == np.float64(ref[0]).view(np.uint64)
                assert fast[1].dtype == F32 and _same(fast[1], ref[1]) and _same(fast[1], ref_fast_maps[1])
    none = losses.cross_entropy(np.zeros((4, 3), F32), np.full(4, -1), np.ones(5), kernels="fast")
    assert none[0] == 0.0 and not none[1].any()  # no word counted: no check of the weights, as before
    none2d = losses.cross_entropy(np.zeros((4, 3), F32), np.full(4, -1), np.ones((3, 1)), kernels="fast")
    assert none2d[0] == 0.0 and not none2d[1].any()  # the weights not read at all, whatever their shape
    with pytest.raises(ValueError, match="class weights"):
        losses.cross_entropy(np.zeros((4, 3), F32), np.zeros(4, np.int64), np.ones(5), kernels="fast")
    with pytest.raises(ValueError, match="out of range"):
        losses.cross_entropy(np.zeros((4, 3), F32), np.array([0, 3, 1, -1]), kernels="fast")
