"""The backward's compiled sections (issue 26, item 2) give exactly the reference's bytes: one
transformer block's backward in one compiled call (blocks/transformer._block_backward_body)
against the reference layers (blocks/transformer._backward_ref on Ops("reference")), on hostile
inputs: word counts that are not multiples of 16 (the transposed operands' padding with +0)
nor of the tile, one word, denormals, signed zeros and large values in the output gradient and
in the activations' scale."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.blocks import transformer as TB
from dxstudio.engine.config import SIZES
from dxstudio.engine.kernels.registry import REGISTRY, Ops
from dxstudio.engine.model import to_runtime
from dxstudio.engine.params import new_params

F32 = np.float32
REF, FAST = Ops("reference"), Ops("fast")


def assert_same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape)
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


@pytest.fixture(scope="module")
def models():
    return {size: (SIZES[size], to_runtime(new_params(SIZES[size], 5))) for size in ("tiny", "base")}


def _dx(rng, n, d, kind):
    dx = rng.standard_normal((n, d)).astype(F32)
    if kind == "denormal":  # gradients far below the normal range: every product is denormal or +-0
        dx *= F32(1e-39)
    elif kind == "signed_zeros":
        dx[::2] = F32(-0.0)
        dx[1::3, ::2] = F32(0.0)
    elif kind == "large":
        dx *= F32(1e18)
    return dx


def _run(cfg, p, n, kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cfg.d_model)).astype(F32)
    if kind == "denormal":
        x[0] = F32(3e-41)  # a row of denormals: its layer norm divides by sqrt(var + eps)
    lh = cfg.layers * cfg.heads
    pbias_t = np.zeros((lh, (n * n + 15) // 16 * 16), F32)
    pbias_t[:, :n * n] = rng.standard_normal((lh, n * n)).astype(F32)
    q, row0 = f"blocks.{cfg.layers - 1}.", (cfg.layers - 1) * cfg.heads
    dx = _dx(rng, n, cfg.d_model, kind)
    out = {}
    for ops in (REF, FAST):
        _, acts = TB.forward(ops, cfg, p, q, x, pbias_t, row0, True, False)
        dpbias = np.zeros((n * n, lh), F32)
        grads = {}
        assert TB.backward.uses_compiled(ops, cfg, p, q, acts, dx, dpbias, row0, grads) == ops.fast
        with np.errstate(all="ignore"):
            dxin = TB.backward(ops, cfg, p, q, acts, dx.copy(), dpbias, row0, grads)
        out[ops.kernels] = dxin, dpbias, grads
    (rdx, rdp, rg), (fdx, fdp, fg) = out["reference"], out["fast"]
    assert_same_bits(fdx, rdx, f"dx, n={n}, {kind}")
    assert_same_bits(fdp, rdp, f"pair-bias gradient, n={n}, {kind}")
    assert sorted(fg) == sorted(rg) == sorted(q + name for name, _, _ in TB.tensors(cfg))
    for name in rg:
        assert_same_bits(fg[name], rg[name], f"{name}, n={n}, {kind}")
    assert not np.all(rdx == 0) or kind in ("denormal",)


@pytest.mark.parametrize("n,kind", [(1, "plain"), (7, "signed_zeros"), (17, "plain"), (19, "denormal"),
                                    (33, "large")])
def test_compiled_block_backward_gives_the_reference_bytes(models, n, kind):
    for cfg, p in models.values():
        _run(cfg, p, n, kind, seed=n)


def test_the_block_backward_is_a_registry_entry():
    assert REGISTRY["transformer_block_backward"] is TB.backward
    assert TB.backward.reference is TB._backward_ref


# ----------------------------------------------------------------------------------------
# The pair MLP's backward (model.backward's step 3) in one pass over the pairs
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("npair,kind", [(1, "plain"), (49, "signed_zeros"), (257, "denormal"), (37 * 37, "large"),
                                        (600, "plain")])
def test_compiled_pair_backward_gives_the_reference_bytes(npair, kind):
    """Pair counts below, at and past a block of 256 and a chunk of 16 (the +0 padding of the
    last block), a hidden layer with ReLU zeros, hostile output gradients."""
    from dxstudio.engine import model as M

    rng = np.random.default_rng(npair)
    dpbias = _dx(rng, npair, 16, kind)
    ph = np.maximum(rng.standard_normal((npair, 32)), 0).astype(F32)
    ph[::3, ::5] = 0
    pf = rng.standard_normal((npair, 8)).astype(F32)
    if kind == "denormal":
        pf[1::2] *= F32(1e-38)
    w2 = rng.standard_normal((16, 32)).astype(F32)
    sec = M.pair_bias_backward_section
    assert sec.uses_compiled(FAST, dpbias, ph, pf, w2) and not sec.uses_compiled(REF, dpbias, ph, pf, w2)
    with np.errstate(all="ignore"):
        want = sec(REF, dpbias, ph, pf, w2)
        got = sec(FAST, dpbias, ph, pf, w2)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same_bits(g, w, f"pair gradient {k}, {npair} pairs, {kind}")


@pytest.mark.parametrize("n", [1, 19, 300])
def test_compiled_position_tables_give_the_reference_bytes(n):
    """The four position tables' gradients (rows added in word order: np.add.at's sequence), with
    repeated buckets, bucket 0, the last bucket, denormals and signed zeros among the gradients."""
    from dxstudio.engine import model as M

    rng = np.random.default_rng(n)
    de = _dx(rng, n, 128, "signed_zeros")
    de[::5] *= F32(1e-39)
    buckets = rng.integers(0, 128, (n, 4)).astype(np.int64)
    buckets[::3, 1] = 0
    buckets[1::4, 2] = 127
    sec = M.position_tables_section
    assert sec.uses_compiled(FAST, de, buckets, 128)
    want, got = sec(REF, de, buckets, 128), sec(FAST, de, buckets, 128)
    assert len(got) == len(want) == 4
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same_bits(g, w, f"position table {k}, {n} words")
    with pytest.raises(IndexError, match="position bucket"):
        sec(FAST, de, np.full((n, 4), 128, np.int64), 128)
