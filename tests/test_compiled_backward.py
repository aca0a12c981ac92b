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
        dpbias = np.zeros((lh, n * n), F32)  # a row a head
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
                                    (33, "large"), (16, "signed_zeros"), (45, "denormal")])
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
    dpbias = np.ascontiguousarray(_dx(rng, npair, 16, kind).T)  # (16, pairs): a row an output
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


# ---- the heads with the final layer norm, the embedding with the characters, AdamW ----------
# (issue 26, item 2: the rest of the backward and the optimizer, each one compiled call)
def _activations(cfg, p, n, seed):
    from dxstudio.engine.model import forward
    from synthetic import fake_window

    inp = fake_window(cfg, n, seed)
    return inp, forward(cfg, p, inp, FAST, keep=True)


def _grads(rng, out, which, kind):
    from dxstudio.engine.model import OutputGrads

    go = OutputGrads()
    for name, arr in (("tag", out.tag_logits), ("role", out.role_logits), ("doc", out.doc_logits),
                      ("items", out.item_scores), ("kv", out.kv_scores)):
        if name in which:
            g = _dx(rng, arr.size, 1, kind).reshape(arr.shape)
            setattr(go, name, g)
    return go


@pytest.mark.parametrize("n,which,kind", [
    (1, ("tag",), "plain"), (7, ("tag", "role"), "signed_zeros"), (17, ("doc",), "plain"),
    (19, ("tag", "role", "doc", "items", "kv"), "denormal"), (33, ("items",), "large"),
    (40, ("tag", "kv"), "plain")])
def test_compiled_heads_backward_gives_the_reference_bytes(models, n, which, kind):
    from dxstudio.engine import model as M

    for cfg, p in models.values():
        _, out = _activations(cfg, p, n, seed=n)
        go = _grads(np.random.default_rng(n), out, which, kind)
        for need_dx in (True, False):
            res = {}
            for ops in (REF, FAST):
                assert M.heads_backward_section.uses_compiled(ops, cfg, p, out.cache, go, need_dx) == ops.fast
                with np.errstate(all="ignore"):
                    res[ops.kernels] = M.heads_backward_section(ops, cfg, p, out.cache, go, need_dx)
            (rfin, rh), (ffin, fh) = res["reference"], res["fast"]
            assert sorted(fh) == sorted(rh) and rh
            for name in rh:
                assert_same_bits(fh[name], rh[name], f"{name}, n={n}, {which}, {kind}")
            assert (rfin is None) == (ffin is None) == (not need_dx)
            if need_dx:
                for what, a, b in zip(("dx", "final_ln.weight", "final_ln.bias"), ffin, rfin):
                    assert_same_bits(a, b, f"{what}, n={n}, {which}, {kind}")
                assert kind == "denormal" or np.any(rfin[0] != 0)


@pytest.mark.parametrize("n,kind", [(1, "plain"), (7, "signed_zeros"), (19, "denormal"), (33, "large"),
                                    (150, "plain")])
def test_compiled_embedding_backward_gives_the_reference_bytes(models, n, kind):
    from dxstudio.engine import model as M

    for size, (cfg, p) in models.items():
        if size == "base" and n == 150:
            continue  # the tiny model covers 150 words (thousands of character positions)
        inp, out = _activations(cfg, p, n, seed=3 * n)
        dx = _dx(np.random.default_rng(n + 1), n, cfg.d_model, kind)
        res = {}
        for ops in (REF, FAST):
            assert M.embed_backward_section.uses_compiled(ops, cfg, p, out.cache, inp.buckets, dx) == ops.fast
            with np.errstate(all="ignore"):
                res[ops.kernels] = M.embed_backward_section(ops, cfg, p, out.cache, inp.buckets, dx)
        r, f = res["reference"], res["fast"]
        assert sorted(f) == sorted(r)
        assert {"char_emb", "char_conv.weight", "char_proj.weight", "pos_y1", "emb_ln.bias"} <= set(r)
        for name in r:
            assert_same_bits(f[name], r[name], f"{name}, n={n}, {kind}")
        assert kind == "denormal" or np.any(r["char_emb"] != 0)


def test_compiled_embedding_backward_refuses_a_bad_character_id(models):
    from dxstudio.engine import model as M

    cfg, p = models["tiny"]
    inp, out = _activations(cfg, p, 5, seed=1)
    c = out.cache
    bad = c.tap_ids.copy()
    bad[0, 1] = cfg.vocab
    c2 = M.Activations(**{**c.__dict__, "tap_ids": bad})
    with pytest.raises(IndexError, match="character id"):
        M.embed_backward_section(FAST, cfg, p, c2, inp.buckets, np.ones((5, cfg.d_model), F32))


def _adam_case(rng, kind, shapes):
    ps = [rng.standard_normal(s).astype(F32) for s in shapes]
    gs = [_dx(rng, int(np.prod(s)), 1, kind).reshape(s) for s in shapes]
    ms = [rng.standard_normal(s).astype(F32) * F32(1e-3) for s in shapes]
    vs = [np.abs(rng.standard_normal(s)).astype(F32) * F32(1e-6) for s in shapes]
    if kind == "signed_zeros":
        vs[0][...] = F32(0.0)  # sqrt(+0) / sbc2 + eps: the eps alone
        ps[0][::2] = F32(-0.0)
    return ps, gs, ms, vs


@pytest.mark.parametrize("kind", ["plain", "signed_zeros", "denormal", "large"])
def test_adamw_in_one_call_gives_the_per_tensor_bytes(kind):
    from dxstudio.engine import training as T

    rng = np.random.default_rng(len(kind))
    shapes = [(3,), (17, 5), (8192,), (8193,), (1,), (40, 300)]  # chunks of 8192 elements: at, past
    ps, gs, ms, vs = _adam_case(rng, kind, shapes)
    decay = [True, False, True, False, True, True]
    wdf = [F32(1 - 1e-5), F32(1.0), F32(0.99), F32(1.0), F32(1 - 3e-4), F32(0.5)]
    lrb = [F32(1e-3), F32(2e-4), F32(5e-3), F32(1e-3), F32(0.1), F32(1e-6)]
    scal = (F32(0.9), F32(0.1), F32(0.999), F32(0.001), F32(0.0316), F32(1e-8))

    class State:  # adamw_update's tables are kept per state (weakly)
        pass

    state = State()
    want = [[a.copy() for a in group] for group in (ps, ms, vs)]
    with np.errstate(all="ignore"):
        for step in range(2):  # the second step reuses the state's table of addresses
            assert T.ADAMW.uses_compiled(FAST, state, ps, gs, ms, vs, decay, wdf, lrb, *scal)
            T.ADAMW(FAST, state, ps, gs, ms, vs, decay, wdf, lrb, *scal)
            T.ADAMW(REF, state, *want[0:1], gs, *want[1:], decay, wdf, lrb, *scal)
            for group, wgroup, what in zip((ps, ms, vs), want, ("p", "m", "v")):
                for t, (a, b) in enumerate(zip(group, wgroup)):
                    assert_same_bits(a, b, f"{what} of tensor {t}, step {step}, {kind}")
    assert id(state) in T._ADAMW_TABLES
    del state
    import gc

    gc.collect()
    assert not any(e[0]() is None for e in T._ADAMW_TABLES.values())  # a freed state's table goes


def test_adamw_in_one_call_refuses_what_it_cannot_take():
    from dxstudio.engine import training as T
    from dxstudio.engine.kernels import fused

    rng = np.random.default_rng(0)
    ps, gs, ms, vs = _adam_case(rng, "plain", [(4, 6), (5,)])

    class State:
        pass

    args = ([True, False], [F32(0.9), F32(1)], [F32(1e-3)] * 2) + (F32(0.9), F32(0.1), F32(0.999), F32(0.001),
                                                                     F32(1.0), F32(1e-8))
    strided = [gs[0].T, gs[1]]  # a transposed gradient: the per-tensor NumPy loop takes it
    assert not T.ADAMW.uses_compiled(FAST, State(), ps, strided, ms, vs, *args)
    table = fused.AdamWTable(ps, ms, vs)
    with pytest.raises(ValueError, match="gradient 1 has 4 elements"):
        fused.adamw_all(table, [gs[0], gs[1][:4]], *args)
    with pytest.raises(ValueError, match="binary32"):
        fused.AdamWTable([ps[0].astype(np.float64), ps[1]], ms, vs)
