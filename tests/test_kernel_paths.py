"""Both kernel paths give the same bytes: every layer forward and backward (layers.py), the
whole model forward and backward, and the compiled kernels built for other instruction sets
(tests/cpu_subprocess_check.py in a subprocess)."""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dxstudio.engine import layers as L
from dxstudio.engine.config import SIZES
from dxstudio.engine.layers import Ops
from dxstudio.engine.model import OutputGrads, backward, forward, to_container, to_runtime
from dxstudio.engine.params import new_params

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
        r = L.relu_forward(x)
        return y, t, L.gelu_backward(dy, x, t), r, L.relu_backward(dy, r)

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


def fake_window(cfg, n, seed):
    """Synthetic inputs with the fields of WindowInputs."""
    rng = np.random.default_rng(seed)
    char_len = rng.integers(0, cfg.max_chars + 1, n).astype(np.int32)
    char_ids = np.zeros((n, cfg.max_chars), np.int32)
    for i in range(n):
        char_ids[i, : char_len[i]] = rng.integers(1, cfg.vocab, char_len[i])
    return SimpleNamespace(
        n=n, char_ids=char_ids, char_len=char_len,
        buckets=rng.integers(0, cfg.pos_buckets, (n, 4)).astype(np.int32),
        word_feats=rng.random((n, cfg.word_features)).astype(F32),
        pair_feats=rng.standard_normal((n * n, cfg.pair_features)).astype(F32))


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


def test_forward_keep_gives_the_same_outputs(tiny_params):
    inp = fake_window(CFG, 9, 4)
    plain = forward(CFG, tiny_params, inp, Ops("fast"))
    kept = forward(CFG, tiny_params, inp, Ops("fast"), keep=True)
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
HASWELL_FEATURES = "+avx,+avx2,+fma,+bmi,+bmi2,+f16c,+popcnt,+sse4.2,+cx16,+movbe,+lzcnt"


def load_check_module():
    spec = importlib.util.spec_from_file_location("cpu_subprocess_check", TESTS / "cpu_subprocess_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def host_digests():
    """The digests of the build this process uses (normally the host's cached build)."""
    return load_check_module().digests()


def run_check(tmp_path, cpu_name, features=None, parts=()):
    env = dict(os.environ)
    env.pop("NUMBA_CPU_FEATURES", None)
    env.pop("NUMBA_CPU_NAME", None)
    if cpu_name:
        env["NUMBA_CPU_NAME"] = cpu_name
    if features:
        env["NUMBA_CPU_FEATURES"] = features
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
    env["DXSTUDIO_NUMBA_CACHE"] = "0"  # compile afresh: never reuse the host's cached build
    proc = subprocess.run([sys.executable, str(TESTS / "cpu_subprocess_check.py"), *parts],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"cpu_subprocess_check.py failed for {cpu_name}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.skipif(not X86, reason="the instruction sets named here are x86's")
@pytest.mark.parametrize("cpu_name,features,registers,has_fma", [
    ("generic", None, {"xmm"}, False),  # baseline x86-64: SSE2 only
    ("haswell", HASWELL_FEATURES, {"xmm", "ymm"}, True),  # AVX2, and FMA available to LLVM
])
def test_other_instruction_sets_give_the_host_bytes(tmp_path, host_digests, cpu_name, features, registers,
                                                    has_fma):
    result = run_check(tmp_path, cpu_name, features)
    assert result["cpu_name"] == cpu_name
    assert result["assembly_chars"] > 0, "the subprocess compiled its kernels (no cached build)"
    assert set(result["vector_registers"]) == registers, "the kernels were built for that instruction set"
    # the count sees an FMA where contraction is allowed, and the engine's kernels have none
    assert (result["fma_when_contraction_allowed"] > 0) == has_fma
    assert result["fma_instructions"] == 0, "LLVM contracted a multiply-add into an FMA"
    differ = [p for p in host_digests if result["digests"][p] != host_digests[p]]
    assert not differ, f"{cpu_name} build gives other bytes for {differ}"


@pytest.mark.skipif(not X86, reason="x86 only")
def test_fresh_host_build_has_no_fma_and_gives_the_cached_bytes(tmp_path, host_digests):
    """The host's own instruction set (AVX-512 here), compiled afresh so its assembly is visible."""
    result = run_check(tmp_path, None)
    assert result["assembly_chars"] > 0
    if result["fma_when_contraction_allowed"] == 0:
        pytest.skip("this CPU has no FMA instructions")
    assert result["fma_instructions"] == 0, "LLVM contracted a multiply-add into an FMA"
    assert result["digests"] == host_digests
