"""Both kernel paths give the same bytes: every layer forward and backward (layers.py), the
whole model forward and backward, and the compiled kernels built for other instruction sets
(tests/cpu_subprocess_check.py in a subprocess)."""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dxstudio.engine.kernels import compiled as kc, fused, isa, runtime as rt
from dxstudio.engine import layers as L
from dxstudio.engine.config import SIZES
from dxstudio.engine.layers import Ops
from dxstudio.engine.model import OutputGrads, backward, forward, to_container, to_runtime
from dxstudio.engine.params import new_params
from tests.conftest import host_isa_is_haswells, load_script
from synthetic import fake_window

F32 = np.float32
TESTS = Path(__file__).resolve().parent
PATHS = (Ops("reference"), Ops("fast"))


def assert_same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == F32, f"{what}: dtypes {got.dtype}, {want.dtype}"
    assert got.shape == want.shape, f"{what}: shapes {got.shape}, {want.shape}"
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


def assert_paths_agree(run, what):
    """run(ops) -> tuple of arrays; the two kernel paths must give the same bits."""
    ref, fast = (run(ops) for ops in PATHS)
    assert len(ref) == len(fast)
    for k, (r, f) in enumerate(zip(ref, fast)):
        assert_same_bits(f, r, f"{what}, output {k}")
    return ref


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


SHAPES = [(1, 5, 3), (7, 16, 17), (33, 17, 40), (12, 40, 1), (5, 1, 9)]  # (rows, in, out)


# ----------------------------------------------------------------------------------------
# Every layer, forward and backward
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d_in,d_out", SHAPES)
def test_linear(n, d_in, d_out):
    rng = np.random.default_rng(n + d_in)
    x, w, b, dy = randn(rng, n, d_in), randn(rng, d_out, d_in), randn(rng, d_out), randn(rng, n, d_out)
    assert_paths_agree(lambda ops: (L.linear_forward(ops, x, w, b), *L.linear_backward(ops, dy, x, w)), "linear")


@pytest.mark.parametrize("n,d", [(1, 5), (7, 16), (9, 17), (30, 128), (3, 1)])
def test_layernorm(n, d):
    rng = np.random.default_rng(n * d)
    x = randn(rng, n, d, scale=3.0) + F32(2.0)
    w, b, dy = randn(rng, d), randn(rng, d), randn(rng, n, d)

    def run(ops):
        y, saved = L.layernorm_forward(ops, x, w, b, 1e-5)
        return (y, *saved, *L.layernorm_backward(ops, dy, saved, w))

    assert_paths_agree(run, "layernorm")


@pytest.mark.parametrize("n,d", [(1, 3), (8, 64), (17, 33)])
def test_gelu_and_relu(n, d):
    rng = np.random.default_rng(d)
    x = randn(rng, n, d, scale=3.0)
    dy = randn(rng, n, d)

    def run(ops):
        y, t = L.gelu_forward(ops, x)
        r = L.relu_forward(ops, x)
        return y, t, L.gelu_backward(ops, dy, x, t), r, L.relu_backward(ops, dy, r)

    assert_paths_agree(run, "gelu, relu")


@pytest.mark.parametrize("n,m", [(1, 1), (5, 17), (12, 40)])
def test_softmax(n, m):
    rng = np.random.default_rng(m)
    s = randn(rng, n, m, scale=4.0)
    s[0, 0] = F32(-200.0)  # an exponent far below the row's maximum underflows to 0
    dp = randn(rng, n, m)

    def run(ops):
        p = L.softmax_forward(ops, s)
        return p, L.softmax_backward(ops, dp, p)

    p = assert_paths_agree(run, "softmax")[0]
    assert np.all(np.abs(L.Ops("fast").rowsum(p) - 1) < 1e-5)


@pytest.mark.parametrize("n,dh", [(1, 8), (7, 16), (20, 32), (9, 5)])
def test_attention(n, dh):
    rng = np.random.default_rng(n + dh)
    q, k, v = randn(rng, n, dh), randn(rng, n, dh), randn(rng, n, dh)
    bias, da = randn(rng, n, n), randn(rng, n, dh)
    scale = np.sqrt(F32(dh))

    def run(ops):
        a, p = L.attention_forward(ops, q, k, v, bias, scale)
        return (a, p, *L.attention_backward(ops, da, q, k, v, p, scale))

    assert_paths_agree(run, "attention")


@pytest.mark.parametrize("n,m,ldx,xoff,threads", [(1, 16, 32, 0, 1), (3, 5, 32, 0, 1), (23, 150, 96, 32, 1),
                                                  (130, 16, 64, 32, 2), (4, 33, 40, 8, 2)])
def test_rows32_is_the_reference_product(n, m, ldx, xoff, threads):
    """numerics.ROWS32 (16 outputs in a register's lanes, for k = 32): the reference's x W^T + b
    on every shape it meets (rows past a multiple of 4, outputs past a multiple of 16, x read as
    32 columns of a wider array) and on special values (-0, subnormals, infinities, NaN)."""

    rng = np.random.default_rng(n * 1000 + m)
    wide = randn(rng, n, ldx, scale=2.0)
    w, b = randn(rng, m, 32), randn(rng, m)
    flat = wide.reshape(-1)
    special = np.array([-0.0, 0.0, 1e-40, -1e-42, np.inf, -np.inf, 3e38, np.nan, 1.0], F32)
    flat[xoff::7][:len(special)] = special[:len(flat[xoff::7])]
    w.reshape(-1)[5::9][:3] = [-0.0, 1e-41, -2e38]
    # an output whose every product is -0, with a bias of -0: the spec's lanes start from +0, so
    # its dot16 is +0 and the output +0 (a kernel that skipped that would give -0)
    wide[0, xoff:xoff + 32] = -0.0
    w[0] = np.abs(w[0])
    b[0] = -0.0
    x = np.ascontiguousarray(wide[:, xoff:xoff + 32])
    m16 = (m + 15) // 16 * 16
    wt = np.zeros((32, m16), F32)
    wt[:, :m] = w.T
    bp = np.zeros(m16, F32)
    bp[:m] = b
    y = np.full((n, m), 7.0, F32)
    old = rt.numba.get_num_threads()
    rt.set_threads(threads)
    try:
        kc.ROWS32[0 if threads > 1 else 1](flat, xoff, ldx, n, wt, bp, y.reshape(-1), m, m)
    finally:
        rt.set_threads(old)
    with np.errstate(all="ignore"):
        want = L.linear_forward(PATHS[0], x, w, b)
    assert_same_bits(y, want, f"rows32 {n} x 32 -> {m}")
    assert y.view(np.uint32)[0, 0] == 0, "-0 products, -0 bias: +0"


@pytest.mark.parametrize("n,r", [(1, 8), (11, 32), (6, 3)])
def test_pointer(n, r):
    rng = np.random.default_rng(n * r)
    q, k, ds = randn(rng, n, r), randn(rng, n, r), randn(rng, n, n)
    scale = np.sqrt(F32(r))
    assert_paths_agree(lambda ops: (L.pointer_forward(ops, q, k, scale), *L.pointer_backward(ops, ds, q, k, scale)),
                       "pointer")


@pytest.mark.parametrize("n", [1, 6, 25])
def test_charconv_and_tables(n):
    rng = np.random.default_rng(n)
    vocab, dc, channels, max_chars = 30, 8, 16, 24
    char_len = rng.integers(0, max_chars + 1, n).astype(np.int32)
    char_len[0] = max(char_len[0], 1)
    if n > 2:
        char_len[1] = 0  # an empty word pools to zeros
    char_ids = np.zeros((n, max_chars), np.int32)
    for i in range(n):
        char_ids[i, : char_len[i]] = rng.integers(1, vocab, char_len[i])
    emb = randn(rng, vocab, dc)
    w_rt = randn(rng, channels, 3 * dc)
    b = randn(rng, channels, scale=0.1)
    dpooled = randn(rng, n, channels)
    tap_ids, owners = L.char_windows(char_ids, char_len)
    buckets = rng.integers(0, 10, n)

    def run(ops):
        pooled, saved = L.charconv_forward(ops, emb, w_rt, b, tap_ids, owners, n)
        demb, dw, db = L.charconv_backward(ops, dpooled, saved, w_rt, tap_ids, vocab)
        return pooled, saved[0], saved[1], demb, dw, db, L.table_backward(dpooled, buckets, 10)

    pooled, u, _, demb = assert_paths_agree(run, "char conv")[:4]
    assert np.all(demb[0] == 0), "the padding row gets no gradient"
    if n > 2:
        assert np.all(pooled[1] == 0)
    # the runtime row of a position is [emb(p-1), emb(p), emb(p+1)], zero outside the word
    first = emb[char_ids[0, 0]]
    assert np.array_equal(u[0, :dc], np.zeros(dc, F32)) and np.array_equal(u[0, dc:2 * dc], first)


# ----------------------------------------------------------------------------------------
# The fused compiled layers (fused.py): special values, the parallel builds, the dispatch
# ----------------------------------------------------------------------------------------
SPECIAL32 = np.array([-0.0, 0.0, -1.0, 1.0, 1e-45, -1e-45, 1e-40, -3e-39, np.inf, -np.inf, 1e30, -1e30,
                      8.9, -8.9, 0.49, -0.49, 20.0, -20.0, 3.4e38, -3.4e38], F32)


def test_gelu_and_relu_special_values():
    x = np.tile(SPECIAL32, (3, 1))
    dy = np.tile(SPECIAL32[::-1], (3, 1))

    def run(ops):
        with np.errstate(all="ignore"):
            y, t = L.gelu_forward(ops, x)
            r = L.relu_forward(ops, x)
            return y, t, L.gelu_backward(ops, dy, x, t), r, L.relu_backward(ops, dy, r)

    ref = assert_paths_agree(run, "gelu, relu special values")
    r = ref[3]
    assert np.all(r.view(np.uint32)[x <= 0] == 0), "ReLU gives +0 (not -0) for every non-positive input"
    assert np.all(ref[4].view(np.uint32)[~(r > 0)] == 0), "ReLU backward gives +0 where the output is 0"


def test_softmax_and_layernorm_edge_rows():
    s = np.array([[0.0, -np.inf, 1.0, -200.0], [-0.0, 0.0, -0.0, 0.0], [88.0, -88.0, 3.4e38, 1.0],
                  [-3.4e38, -3.4e38, -3.4e38, -3.4e38]], F32)
    dp = np.array([[1.0, -1.0, 0.5, 2.0]] * 4, F32)
    bias = np.full_like(s, F32(-0.0))
    x = np.array([[2.0] * 17, [-0.0] * 17, [1e-40 * k for k in range(17)], [1e20 * (k - 8) for k in range(17)]],
                 F32)
    w, b = np.linspace(-1, 1, 17).astype(F32), np.full(17, F32(-0.0))
    dy = np.tile(np.linspace(-2, 3, 17).astype(F32), (4, 1))
    scale = np.sqrt(F32(24))

    def run(ops):
        with np.errstate(all="ignore"):
            p = L.softmax_forward(ops, s)
            a, pa = L.attention_forward(ops, np.eye(4, dtype=F32), s.T.copy(), dp.T.copy(), bias, scale)
            y, saved = L.layernorm_forward(ops, x, w, b, 1e-5)
            return (p, L.softmax_backward(ops, dp, p), pa, *L.attention_backward(ops, a, np.eye(4, dtype=F32),
                    s.T.copy(), dp.T.copy(), pa, scale), y, *saved, *L.layernorm_backward(ops, dy, saved, w))

    ref = assert_paths_agree(run, "softmax and layer norm edge rows")
    assert ref[0][0, 1] == 0 and ref[0][1, 0] == F32(0.25)
    assert np.all(ref[8][:2] == 0), "a constant row normalises to 0"


BIG = 520  # n*n and n*d above PARALLEL_MIN_WORK: the parallel builds run


@pytest.mark.parametrize("threads", [1, 2, "serial"])
def test_fused_layers_parallel_builds(threads):
    assert BIG * BIG >= rt.PARALLEL_MIN_WORK
    rng = np.random.default_rng(5)
    x, dy = randn(rng, BIG, 512, scale=2.0), randn(rng, BIG, 512)
    w, b = randn(rng, 512), randn(rng, 512)
    raw, bias, dp = randn(rng, BIG, BIG, scale=5.0), randn(rng, BIG, BIG), randn(rng, BIG, BIG)
    scale = np.sqrt(F32(32))

    def run(ops):
        y, saved = L.layernorm_forward(ops, x, w, b, 1e-5)
        g, t = L.gelu_forward(ops, x)
        r = L.relu_forward(ops, x)
        if ops.kernels == "fast":
            p = fused.scaled_softmax_forward(raw, bias, scale)
            ds, dsc = fused.scaled_softmax_backward(dp, p, scale)
        else:
            p = L.softmax_forward(ops, raw / scale + bias)
            ds = L.softmax_backward(ops, dp, p)
            dsc = ds / scale
        return (y, *saved, *L.layernorm_backward(ops, dy, saved, w), g, t, L.gelu_backward(ops, dy, x, t), r,
                L.relu_backward(ops, dy, r), p, ds, dsc, ops.exp(-np.abs(x)),
                ops.tanh(x))

    old = rt.numba.get_num_threads()
    try:
        if threads == "serial":
            with rt.serial_kernels():
                assert_paths_agree(run, "fused layers, serial builds")
        else:
            rt.set_threads(threads)
            assert_paths_agree(run, f"fused layers, {threads} threads")
    finally:
        rt.set_threads(old)


def test_fast_path_dispatches_to_the_fused_kernels(monkeypatch):
    used = set()
    for name in ("layernorm_forward", "layernorm_backward", "softmax_forward", "softmax_backward",
                 "scaled_softmax_forward", "scaled_softmax_backward", "gelu_forward", "gelu_backward",
                 "relu_forward", "relu_backward"):
        real = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda *a, _real=real, _name=name: used.add(_name) or _real(*a))
    rng = np.random.default_rng(1)
    x, w, dy = randn(rng, 6, 8), randn(rng, 8), randn(rng, 6, 8)
    bias, scale = randn(rng, 6, 6), np.sqrt(F32(8))
    for ops in (Ops("reference"), Ops("fast")):
        y, saved = L.layernorm_forward(ops, x, w, w, 1e-5)
        L.layernorm_backward(ops, dy, saved, w)
        p = L.softmax_forward(ops, x)
        L.softmax_backward(ops, dy, p)
        a, pa = L.attention_forward(ops, x, x, x, bias, scale)
        L.attention_backward(ops, dy, x, x, x, pa, scale)
        g, t = L.gelu_forward(ops, x)
        L.gelu_backward(ops, dy, x, t)
        r = L.relu_forward(ops, x)
        L.relu_backward(ops, dy, r)
        if ops.kernels == "reference":
            assert not used, "the reference path runs no fused kernel"
    assert len(used) == 10, f"not dispatched: {sorted(used)}"
    x64 = x.astype(np.float64)
    assert not Ops("fast").compiled(x64) and Ops("fast").compiled(x) and not Ops("reference").compiled(x)
    L.layernorm_forward(Ops("fast"), x64, w.astype(np.float64), w.astype(np.float64), 1e-5)  # binary64: NumPy


def test_conv_runtime_layout_is_tap_then_channel():
    rng = np.random.default_rng(3)
    w = randn(rng, 5, 4, 3)  # container: (out, channel, tap)
    rt = L.conv_weight_to_runtime(w)
    for o, c, t in [(0, 0, 0), (4, 3, 2), (2, 1, 2), (3, 2, 0)]:
        assert rt[o, t * 4 + c] == w[o, c, t]
    assert np.array_equal(L.conv_weight_to_container(rt, 4), w)


# ----------------------------------------------------------------------------------------
# The whole model
# ----------------------------------------------------------------------------------------
CFG = SIZES["tiny"]
OUTPUT_NAMES = ("tag_logits", "role_logits", "doc_logits", "item_scores", "kv_scores")




@pytest.fixture(scope="module")
def tiny_params():
    return to_runtime(new_params(CFG, 7))


def check_forward(cfg, params, n, seed):
    inp = fake_window(cfg, n, seed)
    outs = [forward(cfg, params, inp, ops) for ops in PATHS]
    for name in OUTPUT_NAMES:
        assert_same_bits(getattr(outs[1], name), getattr(outs[0], name), f"{name} at {n} words")
    assert outs[0].item_scores.shape == (n, n) and outs[0].tag_logits.shape == (n, cfg.n_tags)
    assert all(np.all(np.isfinite(getattr(outs[0], name))) for name in OUTPUT_NAMES)


@pytest.mark.parametrize("n", [1, 7, 100])
def test_whole_forward(tiny_params, n):
    check_forward(CFG, tiny_params, n, seed=n)


@pytest.mark.heavy
def test_whole_forward_512_words(tiny_params):
    check_forward(CFG, tiny_params, 512, seed=512)


@pytest.fixture(scope="module")
def base_params():
    return to_runtime(new_params(SIZES["base"], 11))


@pytest.mark.parametrize("n", [1, 5, 23, 45])
def test_whole_forward_at_base_size(base_params, n):
    """The base size takes the fast path's fixed-shape kernels (one compiled call per block, the
    pair MLP's 8 -> 32 -> 16 kernels with constant trip counts): the same bits as the reference."""
    check_forward(SIZES["base"], base_params, n, seed=100 + n)


def test_whole_backward_at_base_size(base_params):
    cfg, n = SIZES["base"], 19
    inp = fake_window(cfg, n, 77)
    rng = np.random.default_rng(77)
    go = OutputGrads(tag=randn(rng, n, cfg.n_tags), role=randn(rng, n, len(cfg.roles)),
                     doc=randn(rng, len(cfg.doc_types)), items=randn(rng, n, n), kv=randn(rng, n, n))
    grads = [backward(cfg, base_params, inp, forward(cfg, base_params, inp, ops, keep=True), go, ops)
             for ops in PATHS]
    for name in grads[0]:
        assert_same_bits(grads[1][name], grads[0][name], f"gradient of {name}")


@pytest.mark.parametrize("size", ["tiny", "base"])
def test_forward_keep_gives_the_same_outputs(tiny_params, base_params, size):
    """keep=False (extract) runs the compiled sections' lean builds, which hand back only what
    the outputs need: the same bytes as keep=True."""
    cfg, params = (CFG, tiny_params) if size == "tiny" else (SIZES["base"], base_params)
    inp = fake_window(cfg, 9, 4)
    plain = forward(cfg, params, inp, Ops("fast"))
    kept = forward(cfg, params, inp, Ops("fast"), keep=True)
    assert plain.cache is None and kept.cache is not None
    for name in OUTPUT_NAMES:
        assert_same_bits(getattr(kept, name), getattr(plain, name), name)


@pytest.mark.parametrize("n", [1, 7])
def test_whole_backward(tiny_params, n):
    inp = fake_window(CFG, n, 40 + n)
    rng = np.random.default_rng(n)
    go = OutputGrads(tag=randn(rng, n, CFG.n_tags), role=randn(rng, n, len(CFG.roles)),
                     doc=randn(rng, len(CFG.doc_types)), items=randn(rng, n, n), kv=randn(rng, n, n))
    grads = []
    for ops in PATHS:
        out = forward(CFG, tiny_params, inp, ops, keep=True)
        grads.append(backward(CFG, tiny_params, inp, out, go, ops))
    assert list(grads[0]) == list(tiny_params), "a gradient for every tensor, in the fixed order"
    for name in grads[0]:
        assert_same_bits(grads[1][name], grads[0][name], f"gradient of {name}")
        assert grads[0][name].shape == tiny_params[name].shape
    # back to the container layout for a model file, and the padding row of char_emb untouched
    assert to_container(grads[0])["char_conv.weight"].shape == (CFG.char_channels, CFG.char_dim, 3)
    assert np.all(grads[0]["char_emb"][0] == 0)


# ----------------------------------------------------------------------------------------
# Other instruction sets: the fast kernels compiled for another CPU in a subprocess
# ----------------------------------------------------------------------------------------
def load_check_module():
    return load_script(TESTS / "cpu_subprocess_check.py")


@pytest.fixture(scope="module")
def host_digests():
    """The digests of the build this process uses (normally the host's cached build)."""
    return load_check_module().digests()


X86 = platform.machine().lower() in ("x86_64", "amd64")


HOST_IS_HASWELLS = X86 and host_isa_is_haswells()


# the register kind and mm_nt tile each named build runs (issue 26, item 1): chosen from the
# build's target (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES), not from the host it runs on
BUILD_KINDS = {"generic": "xmm", "haswell": "ymm"}


def check_other_build(result, host_digests, cpu_name, registers, has_fma):
    assert result["cpu_name"] == cpu_name
    kind = BUILD_KINDS[cpu_name]
    want = isa.TILE if os.environ.get("DXSTUDIO_TILE") else isa.default_tile(kind)  # forced: in both processes
    assert (result["register_kind"], result["tile"]) == (kind, want), "the build chose its tile from its own target"
    assert result["assembly_chars"] > 0, "the subprocess compiled its kernels (no cached build)"
    # a target with FMA: every kernel's assembly read for the count (generic's, without: a sample)
    assert result["assembly_of"] == ("every kernel" if has_fma else "sample"), result["assembly_of"]
    assert set(result["vector_registers"]) == registers, "the kernels were built for that instruction set"
    # the count sees an FMA where contraction is allowed, and the engine's kernels have none
    assert (result["fma_when_contraction_allowed"] > 0) == has_fma
    assert result["fma_instructions"] == 0, "LLVM contracted a multiply-add into an FMA"
    differ = [p for p in host_digests if result["digests"][p] != host_digests[p]]
    assert not differ, f"{cpu_name} build gives other bytes for {differ}"
    if result["threads"] == 1:  # serial sections only (conftest.CPU_BUILD_THREADS): no parallel build compiled
        assert result["parallel_builds_compiled"] == [], result["parallel_builds_compiled"]


# The builds start in the background when collection ends (tests/conftest.py, `cpu_build`).
@pytest.mark.skipif(not X86, reason="the instruction sets named here are x86's")
@pytest.mark.parametrize("cpu_name,registers,has_fma", [
    pytest.param("generic", {"xmm"}, False, marks=pytest.mark.cpu_build("generic")),  # x86-64: SSE2 only
    pytest.param("haswell", {"xmm", "ymm"}, True, marks=pytest.mark.cpu_build("haswell")),  # AVX2 + FMA
])
def test_other_instruction_sets_give_the_host_bytes(cpu_build, host_digests, cpu_name, registers, has_fma):
    check_other_build(cpu_build, host_digests, cpu_name, registers, has_fma)


@pytest.mark.heavy
@pytest.mark.skipif(not X86, reason="x86 only")
@pytest.mark.cpu_build("haswell")
def test_haswell_build_even_where_the_host_build_covers_it(cpu_build, host_digests):
    check_other_build(cpu_build, host_digests, "haswell", {"xmm", "ymm"}, True)


def test_the_host_build_compiled_in_this_run_has_no_fma(request, host_digests):
    """Where this run compiled the host's kernels itself (a fresh clone, CI; tests/conftest.py
    prepare_engine), their assembly: no FMA though LLVM could emit one on an FMA CPU, and the
    host's vector registers. It stands for the host's build compiled afresh and, on a CPU whose
    vector instructions are the haswell build's, for that build (not compiled a second time):
    the digests of the build this process runs are the host's, and the generic build's must
    equal them. A run that loaded the kernels from Numba's cache checks the facts a run with the
    same sources, tools and CPU stored (tests/conftest.py host_build_here)."""
    from llvmlite import binding as ll

    facts = request.config.__dict__.get("_host_build_here")
    if not facts:
        pytest.skip("this run loaded the engine's kernels from Numba's cache (none compiled in this process) and no "
                    "run with the same sources stored their facts: the haswell build or the host's, compiled afresh "
                    "in a subprocess, checks them")
    features = ll.get_host_cpu_features()
    assert facts["assembly_chars"] > 0 and facts["kernels_without_assembly"] == 0
    assert facts["fma_instructions"] == 0, "LLVM contracted a multiply-add into an FMA"
    assert (facts["fma_when_contraction_allowed"] > 0) == (X86 and bool(features.get("fma")))
    if X86:  # SSE registers always; AVX's wider ones where the CPU has them, and only there
        wide = {"ymm", "zmm"} & set(facts["vector_registers"])
        assert "xmm" in facts["vector_registers"] and bool(wide) == bool(features.get("avx2")), facts
    assert set(host_digests) == set(load_check_module().PARTS)


def check_fresh_host_build(result, host_digests):
    """The host's own instruction set (AVX-512 on such a CPU), compiled afresh so its assembly
    is visible, gives the bytes of the cached build."""
    assert result["assembly_chars"] > 0
    if result["fma_when_contraction_allowed"] == 0:
        pytest.skip("this CPU has no FMA instructions")
    assert result["fma_instructions"] == 0, "LLVM contracted a multiply-add into an FMA"
    assert result["digests"] == host_digests


@pytest.mark.skipif(not X86, reason="x86 only")
@pytest.mark.skipif(HOST_IS_HASWELLS, reason="this CPU's vector instructions are the haswell build's (AVX2, FMA, "
                    "no AVX-512), which test_other_instruction_sets_give_the_host_bytes[haswell] checks (or, "
                    "where this run compiled the host's kernels, test_the_host_build_compiled_in_this_run_has_no_fma); "
                    "-m heavy builds the host's too")
@pytest.mark.cpu_build("host")
def test_fresh_host_build_has_no_fma_and_gives_the_cached_bytes(cpu_build, host_digests):
    check_fresh_host_build(cpu_build, host_digests)


@pytest.mark.heavy
@pytest.mark.skipif(not X86, reason="x86 only")
@pytest.mark.cpu_build("host")
def test_fresh_host_build_even_where_the_haswell_build_covers_it(cpu_build, host_digests):
    check_fresh_host_build(cpu_build, host_digests)


# ----------------------------------------------------------------------------------------
# docs/numerics.md is enough to reproduce the bytes: the forward pass written again from the
# document alone (its hex constants, its orders of operations), sharing no code with the engine
# ----------------------------------------------------------------------------------------
def hex32(h):
    return np.array([h], np.uint32).view(F32)[0]


def doc_dot16(a, b):
    """out[i, j] = dot16(a[i, :], b[j, :]). Zero padding to a multiple of 16 adds +0 to lanes
    that are never -0 (they start at +0), so it changes nothing."""
    k = a.shape[1]
    pad = (-k) % 16
    a = np.pad(a, ((0, 0), (0, pad)))
    b = np.pad(b, ((0, 0), (0, pad)))
    acc = np.zeros((a.shape[0], b.shape[0], 16), F32)
    for c in range(0, k + pad, 16):
        acc = acc + a[:, None, c:c + 16] * b[None, :, c:c + 16]
    for half in (8, 4, 2, 1):
        acc = acc[..., :half] + acc[..., half:2 * half]
    return acc[..., 0]


def doc_exp32(x):
    c = [hex32(h) for h in (0x3F800000, 0x3F800000, 0x3F000000, 0x3E2AAAAB, 0x3D2AAAAB, 0x3C088889,
                            0x3AB60B61, 0x39500D01)]
    hi, lo = hex32(0x42B17217), hex32(0xC2CFF1B4)
    xc = np.clip(x, lo, hi)
    n = np.floor(xc * hex32(0x3FB8AA3B) + F32(0.5))
    r = (xc - n * hex32(0x3F317200)) - n * hex32(0x35BFBE8E)
    p = np.full_like(r, c[7])
    for k in range(6, -1, -1):
        p = p * r + c[k]
    n1 = np.floor(n / F32(2))
    out = (p * np.ldexp(F32(1), n1.astype(np.int32))) * np.ldexp(F32(1), (n - n1).astype(np.int32))
    return np.where(x > hi, F32(np.inf), np.where(x < lo, F32(0), out)).astype(F32)


def doc_tanh32(x):
    c = [None] + [hex32(h) for h in (0xBEAAAAAB, 0x3E088889, 0xBD5D0DD1, 0x3CB327A4, 0xBC11371B, 0x3B6B69E8,
                                     0xBABED1B2, 0x3A1AAC12)]
    ax = np.abs(x)
    x2 = x * x
    q = np.full_like(x, c[8])
    for k in range(7, 0, -1):
        q = q * x2 + c[k]
    small = x + x * (x2 * q)
    t = F32(1) - F32(2) / (doc_exp32(F32(2) * np.minimum(ax, F32(9))) + F32(1))
    mid = np.where(x < 0, -t, t)
    out = np.where(ax < F32(0.5), small, mid)
    return np.where(ax >= F32(9), np.where(x < 0, F32(-1), F32(1)), out).astype(F32)


def doc_linear(x, w, b):
    return doc_dot16(x, w) + b


def doc_layernorm(x, w, b):
    d = F32(x.shape[1])
    mean = doc_dot16(x, np.ones((1, x.shape[1]), F32))[:, 0] / d
    xc = x - mean[:, None]
    var = np.array([doc_dot16(row[None], row[None])[0, 0] for row in xc], F32) / d
    inv = F32(1) / np.sqrt(var + hex32(0x3727C5AC))
    return (xc * inv[:, None]) * w + b


def doc_softmax(s):
    e = doc_exp32(s - s.max(axis=1, keepdims=True))
    return e / doc_dot16(e, np.ones((1, e.shape[1]), F32))


def doc_forward(cfg, p, inp):
    n, dc = inp.n, cfg.char_dim
    relu = lambda v: np.maximum(v, F32(0))  # noqa: E731
    # characters: rows (tap, channel); W_rt[o, t*Dc + c] = W[o, c, t]
    w_rt = p["char_conv.weight"].transpose(0, 2, 1).reshape(cfg.char_channels, 3 * dc)
    pooled = np.zeros((n, cfg.char_channels), F32)
    for w in range(n):
        length = inp.char_len[w]
        if length == 0:
            continue
        rows = np.zeros((length, 3 * dc), F32)
        for pos in range(length):
            for t in range(3):
                q = pos + t - 1
                if 0 <= q < length:
                    rows[pos, t * dc:(t + 1) * dc] = p["char_emb"][inp.char_ids[w, q]]
        h = relu(doc_linear(rows, w_rt, p["char_conv.bias"]))
        pooled[w] = h[np.argmax(h, axis=0), np.arange(cfg.char_channels)]
    e = doc_linear(pooled, p["char_proj.weight"], p["char_proj.bias"])
    for k, table in enumerate(("pos_x0", "pos_y0", "pos_x1", "pos_y1")):
        e = e + p[table][inp.buckets[:, k]]
    e = e + doc_linear(inp.word_feats, p["feat_proj.weight"], p["feat_proj.bias"])
    x = doc_layernorm(e, p["emb_ln.weight"], p["emb_ln.bias"])
    pbias = doc_linear(relu(doc_linear(inp.pair_feats, p["pair1.weight"], p["pair1.bias"])),
                       p["pair2.weight"], p["pair2.bias"])
    d, heads = cfg.d_model, cfg.heads
    dh = d // heads
    scale = np.sqrt(F32(dh))
    c0, c1 = F32(0.7978845608028654), F32(0.044715)
    for l in range(cfg.layers):
        q = f"blocks.{l}."
        qkv = doc_linear(doc_layernorm(x, p[q + "ln1.weight"], p[q + "ln1.bias"]), p[q + "qkv.weight"], p[q + "qkv.bias"])
        a = np.zeros((n, d), F32)
        for hd in range(heads):
            qh, kh, vh = (qkv[:, part * d + hd * dh: part * d + (hd + 1) * dh] for part in range(3))
            s = doc_dot16(qh, kh) / scale + pbias[:, l * heads + hd].reshape(n, n)
            a[:, hd * dh:(hd + 1) * dh] = doc_dot16(doc_softmax(s), vh.T)
        x = x + doc_linear(a, p[q + "proj.weight"], p[q + "proj.bias"])
        f1 = doc_linear(doc_layernorm(x, p[q + "ln2.weight"], p[q + "ln2.bias"]), p[q + "fc1.weight"], p[q + "fc1.bias"])
        g = (F32(0.5) * f1) * (F32(1) + doc_tanh32(c0 * (f1 + c1 * ((f1 * f1) * f1))))
        x = x + doc_linear(g, p[q + "fc2.weight"], p[q + "fc2.bias"])
    f = doc_layernorm(x, p["final_ln.weight"], p["final_ln.bias"])
    mean = doc_dot16(np.ones((1, n), F32), f.T)[0] / F32(n)
    rq = doc_linear(f, p["rel_q.weight"], p["rel_q.bias"])
    rk = doc_linear(f, p["rel_k.weight"], p["rel_k.bias"])
    r = cfg.rel_dim
    rscale = np.sqrt(F32(r))
    return {"tag_logits": doc_linear(f, p["tag_head.weight"], p["tag_head.bias"]),
            "role_logits": doc_linear(f, p["role_head.weight"], p["role_head.bias"]),
            "doc_logits": doc_linear(mean[None], p["doc_head.weight"], p["doc_head.bias"])[0],
            "item_scores": doc_dot16(rq[:, :r], rk[:, :r]) / rscale,
            "kv_scores": doc_dot16(rq[:, r:], rk[:, r:]) / rscale}


# the tiny model, and one whose attention and pointer scales are not powers of two
ODD_CFG = dataclasses.replace(CFG, d_model=24, heads=2, ffn=40, rel_dim=6)


@pytest.mark.parametrize("cfg,n", [(CFG, 1), (CFG, 7), (CFG, 30), (ODD_CFG, 9)])
def test_forward_reproduced_from_the_document(cfg, n):
    container = new_params(cfg, 7)
    rng = np.random.default_rng(n)
    for name, value in container.items():  # layer norms and biases away from 1 and 0
        if not name.endswith("weight") or "ln" in name:
            container[name] = value + randn(rng, *value.shape, scale=0.2)
    inp = fake_window(cfg, n, 70 + n)
    want = doc_forward(cfg, container, inp)  # container layout: the document's mapping is used
    got = forward(cfg, to_runtime(container), inp, Ops("fast"))
    for name in OUTPUT_NAMES:
        assert_same_bits(getattr(got, name), want[name], f"{name} from docs/numerics.md at {n} words")


def test_exp_and_tanh_reproduced_from_the_document():

    x = np.linspace(-110, 95, 200001, dtype=np.float64).astype(F32)
    with np.errstate(all="ignore"):
        assert_same_bits(kc.exp32_fast(x), doc_exp32(x), "exp32 from the document's constants")
        x = x / F32(8)
        assert_same_bits(kc.tanh32_fast(x), doc_tanh32(x), "tanh32 from the document's constants")
