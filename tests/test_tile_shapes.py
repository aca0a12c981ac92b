"""mm_nt's tile shape is chosen per instruction set (dxstudio/engine/kernels/isa.py) and changes no bit: AVX-512's 4 x 4 tile, AVX2's 4 x 2 in passes of 8 lanes, SSE2's 2 x 1 and the others give
the bytes of the reference product, on this machine, for the same inputs; and the whole engine
built with another shape than the host's (in a subprocess, compiled afresh) gives the host's
digests (tests/cpu_subprocess_check.py)."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from dxstudio.engine.kernels import compiled as kc
from dxstudio.engine.kernels import intrinsics
from dxstudio.engine.kernels import isa
from dxstudio.engine.kernels import reference as ref
from tests.conftest import load_script

F32 = np.float32
TESTS = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------------------
# The choice: one place, from the target's features
# ----------------------------------------------------------------------------------------
def test_register_kind_follows_the_features():
    off512 = "+avx,+avx2,+fma,-avx512f,-avx512bw"
    assert isa.register_kind("znver3", off512, "x86_64") == "ymm"
    assert isa.register_kind("skylake-avx512", "+avx,+avx2,+avx512f,+avx512bw", "x86_64") == "zmm"
    assert isa.register_kind("generic", "", "x86_64") == "xmm"
    assert isa.register_kind("nehalem", "+sse2,+sse4.2,-avx,-avx2", "x86_64") == "xmm"
    assert isa.register_kind("apple-m1", "+neon", "arm64") == "neon"
    assert isa.register_kind("neoverse-n1", "", "aarch64") == "neon"


@pytest.mark.parametrize("kind,registers,lanes", [("zmm", 32, 16), ("ymm", 16, 8), ("xmm", 16, 4),
                                                   ("neon", 32, 4)])
def test_each_shape_keeps_its_accumulators_in_half_the_register_file(kind, registers, lanes):
    mr, nr = isa.TILE_SHAPES[kind]
    assert (mr * nr) & (mr * nr - 1) == 0, "the fold pairs accumulators: a power of two of them"
    assert kc._NT_ROWS % mr == 0
    assert mr * nr * (isa.TILE_LANES[kind] // lanes) <= registers // 2  # an accumulator: a pass's lanes


def test_each_register_kind_has_its_default_tile():
    assert isa.default_tile("zmm") == "4x4"  # AVX-512: 16 accumulators in 16 of 32 zmm, no column blocks
    assert isa.default_tile("ymm") == f"4x2:8@{isa.TILE_PANEL['ymm']}"  # AVX2: 8 outputs of one ymm, 8 of 16
    assert isa.default_tile("xmm") == "2x1"  # SSE2: 2 x 4 xmm, 8 of 16
    assert isa.tile_name(4, 2, 8, 0) == "4x2:8" and isa.tile_name(2, 2, 16, 600) == "2x2@600"


def test_the_host_shape_is_the_one_its_registers_ask_for():
    if os.environ.get("DXSTUDIO_TILE"):
        pytest.skip("DXSTUDIO_TILE forces the shape")
    kind = isa.register_kind(*isa.target_cpu())
    assert (isa._MR, isa._NR) == isa.TILE_SHAPES[kind]
    assert isa.TILE_CHOICE == kind
    assert isa.TILE == isa.default_tile(kind)
    assert f"tile {isa.TILE}" in isa.describe_target()


def test_a_bad_forced_shape_is_refused(monkeypatch):
    for bad in ("3x3", "big", "8x1"):
        monkeypatch.setenv("DXSTUDIO_TILE", bad)
        with pytest.raises(ValueError, match="DXSTUDIO_TILE"):
            isa._tile_shape()
    monkeypatch.setenv("DXSTUDIO_TILE", "4x2")
    assert isa._tile_shape() == ("DXSTUDIO_TILE", 4, 2)


# ----------------------------------------------------------------------------------------
# Every shape, lanes per pass and column block, one process: mm_nt's body compiled with each
# gives the same bytes
# ----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _mm_nt_built(mr, nr, lanes, panel):
    """mm_nt's serial body with another tile of mr x nr outputs, its k loop in passes of `lanes`
    (isa.TILE_LANES) and column blocks of `panel` floats of bt (isa.TILE_PANEL, 0 = none): Numba
    freezes module globals when it compiles, so a copy of the function over a copy of the
    globals. Each is a compile of one to two seconds of CPU: one per variant for the module."""
    g = dict(kc.__dict__)
    g.update(_MR=mr, _NR=nr, _tile_mr_nr=intrinsics._make_tile(mr, nr, lanes), _PANEL=panel)
    body = types.FunctionType(kc._mm_nt_body.__code__, g, f"mm_nt_tile_{mr}x{nr}_{lanes}_{panel}")
    return njit(nogil=True, fastmath=False, error_model="numpy")(body)


def _operands():
    """Rows and columns that are and are not multiples of every tile side, k below, at and past
    16 (and long enough for several column blocks); denormals, overflow to infinity, signed
    zeros; a bias."""
    rng = np.random.default_rng(26)
    cases = []
    for m, k, n in ((37, 45, 29), (8, 16, 8), (5, 3, 70), (1, 200, 33), (17, 33, 40), (64, 48, 7), (6, 32, 5)):
        cases.append((rng.standard_normal((m, k)).astype(F32), rng.standard_normal((n, k)).astype(F32),
                      rng.standard_normal(n).astype(F32)))
    a = rng.standard_normal((9, 21)).astype(F32) * F32(1e-39)
    cases.append((a, rng.standard_normal((18, 21)).astype(F32), np.zeros(18, F32)))
    a = rng.standard_normal((9, 21)).astype(F32) * F32(1e30)
    cases.append((a, rng.standard_normal((18, 21)).astype(F32) * F32(1e10), rng.standard_normal(18).astype(F32)))
    z = np.zeros((6, 19), F32)
    z[::2] = F32(-0.0)
    cases.append((z, -np.ones((20, 19), F32), np.full(20, -0.0, F32)))
    rng = np.random.default_rng(261)
    cases += [(rng.standard_normal((m, k)).astype(F32), rng.standard_normal((n, k)).astype(F32),
               rng.standard_normal(n).astype(F32))
              for m, k, n in ((35, 128, 75), (18, 416, 33), (16, 16, 130), (3, 150, 9))]
    return cases


SHAPES = [(4, 4), (4, 2), (2, 2), (2, 1)]  # AVX-512; AVX2; NEON; SSE2
LANES = [16, 8, 4]
PANELS = [0, 64, 600, isa.TILE_PANEL["ymm"]]  # none (AVX-512's order), one tile's columns, a few tiles, AVX2's
# The default suite: every shape, every lane count and every column block at least once, the
# AVX-512 and AVX2 defaults among them (5 compiles, about 2 s of CPU each); -m heavy: every
# shape with every lane count and column block
VARIANTS = [((4, 4), 16, 0), ((4, 2), 8, isa.TILE_PANEL["ymm"]), ((2, 2), 16, 64), ((2, 1), 4, 600),
            ((2, 4), 8, 0)]


def _check_variants(variants):
    kernels = {(s, lanes, panel): _mm_nt_built(*s, lanes, panel) for s, lanes, panel in variants}
    for a, bt, bias in _operands():
        m, n = a.shape[0], bt.shape[0]
        with np.errstate(all="ignore"):  # the overflowing case: inf - inf in the fold is NaN
            want = (ref.mm_nt_ref(a, bt) + bias).astype(F32)  # dot16, then + bias: one rounding each
        host = kc.mm_nt_fast(a, bt, bias) if not (a.shape[1] == 32 and n >= 16) else None
        for ((mr, nr), lanes, panel), kernel in kernels.items():
            biasp = np.zeros((n + nr - 1) // nr * nr, F32)
            biasp[:n] = bias
            out = np.full((m, n), np.nan, F32)  # every output written: none left from before
            kernel(a, bt, biasp, out)
            assert out.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), (mr, nr, lanes, panel, a.shape)
            if host is not None:
                assert out.tobytes() == host.tobytes(), (mr, nr, lanes, panel, a.shape)


def test_every_tile_shape_lane_count_and_column_block_gives_the_bytes_of_the_reference():
    assert {s for s, _, _ in VARIANTS} >= set(SHAPES) and {lanes for _, lanes, _ in VARIANTS} == set(LANES)
    assert {p for _, _, p in VARIANTS} == set(PANELS)
    for kind in ("zmm", "ymm"):  # the two defaults measured on their machines
        assert (isa.TILE_SHAPES[kind], isa.TILE_LANES[kind], isa.TILE_PANEL[kind]) in VARIANTS
    _check_variants(VARIANTS)


@pytest.mark.heavy  # 60 compiles: every tile with every lane count and column block
def test_every_tile_with_every_lane_count_and_column_block_gives_the_bytes_of_the_reference():
    _check_variants([(s, lanes, p) for s in SHAPES + [(2, 4)] for lanes in LANES for p in PANELS])


def test_the_column_block_is_read_from_the_forced_tile(monkeypatch):
    monkeypatch.setenv("DXSTUDIO_TILE", "2x2@600")
    assert isa._tile_shape() == ("DXSTUDIO_TILE", 2, 2) and isa._tile_panel("DXSTUDIO_TILE") == 600
    assert isa._tile_lanes("DXSTUDIO_TILE") == 16
    monkeypatch.setenv("DXSTUDIO_TILE", "4x2:8@0")
    assert isa._tile_shape() == ("DXSTUDIO_TILE", 4, 2) and isa._tile_lanes("DXSTUDIO_TILE") == 8
    assert isa._tile_panel("DXSTUDIO_TILE") == 0
    monkeypatch.setenv("DXSTUDIO_TILE", "2x2")  # a forced shape alone: no blocks (HEAD's order)
    assert isa._tile_panel("DXSTUDIO_TILE") == 0
    for bad in ("2x2@x", "2x2@-1", "2x2@99999999"):
        monkeypatch.setenv("DXSTUDIO_TILE", bad)
        with pytest.raises(ValueError, match="DXSTUDIO_TILE"):
            isa._tile_panel("DXSTUDIO_TILE")
    monkeypatch.delenv("DXSTUDIO_TILE")
    assert isa._tile_panel("ymm") == isa.TILE_PANEL["ymm"] > 0
    assert isa._tile_panel("zmm") == 0, "AVX-512 keeps its measured order"


# ----------------------------------------------------------------------------------------
# The whole engine with the other shape, compiled afresh in a subprocess
# ----------------------------------------------------------------------------------------
@pytest.mark.heavy  # compiles the engine afresh (a minute of CPU); the fast test above covers mm_nt
def test_the_engine_built_with_the_other_shape_gives_the_host_bytes(tmp_path):
    """On AVX2 (2 x 2 here) the AVX-512 shape, 4 x 4, on ymm registers; on AVX-512 the AVX2
    shape on zmm. The products, a forward and a training step of the tiny model."""
    parts = ("mm", "forward", "train_step")
    host = load_script(TESTS / "cpu_subprocess_check.py").digests(parts)
    other = "2x2" if (isa._MR, isa._NR) == (4, 4) else "4x4"
    env = dict(os.environ, DXSTUDIO_TILE=other, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               DXSTUDIO_NUMBA_CACHE="0")
    proc = subprocess.run([sys.executable, "-c", "import sys, json; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
                           "from dxstudio.engine.kernels import isa\n"
                           "from cpu_subprocess_check import digests\n"
                           "print(json.dumps({'tile': isa.TILE, 'digests': digests(sys.argv[3:])}))",
                           str(TESTS.parent), str(TESTS), *parts],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["tile"] == other
    differ = [p for p in parts if result["digests"][p] != host[p]]
    assert not differ, f"the {other} tile gives other bytes for {differ}"


# ----------------------------------------------------------------------------------------
# Lanes per pass (isa.TILE_LANES, DXSTUDIO_TILE=MxN:L): the k loop over 8 or 4 lanes of every
# chunk at a time, then the parts joined and folded: the same bytes as one pass of 16 (checked
# with the shapes above)
# ----------------------------------------------------------------------------------------
def test_lanes_per_pass_are_read_from_the_forced_tile(monkeypatch):
    monkeypatch.setenv("DXSTUDIO_TILE", "4x2:8")
    assert isa._tile_shape() == ("DXSTUDIO_TILE", 4, 2) and isa._tile_lanes("DXSTUDIO_TILE") == 8
    monkeypatch.setenv("DXSTUDIO_TILE", "2x2")
    assert isa._tile_lanes("DXSTUDIO_TILE") == 16
    for bad in ("4x2:3", "4x2:x"):
        monkeypatch.setenv("DXSTUDIO_TILE", bad)
        with pytest.raises(ValueError, match="DXSTUDIO_TILE"):
            isa._tile_lanes("DXSTUDIO_TILE")
    monkeypatch.delenv("DXSTUDIO_TILE")
    assert isa._tile_lanes("ymm") == isa.TILE_LANES["ymm"]


# ----------------------------------------------------------------------------------------
# The 16 x 16 transposes in sub-blocks per instruction set (isa.TRANSPOSE_BLOCK: AVX-512 16,
# AVX2 8, SSE2 4): moves only, the same bytes for every sub-block, and the target's choice runs
# ----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _t16_with(w):
    t = intrinsics._make_t16(w)

    @njit
    def run(x, xoff, ldx, out, ooff, ldo):
        t(x, xoff, ldx, out, ooff, ldo)

    return run


def test_every_transpose_block_moves_the_same_bytes():
    rng = np.random.default_rng(7)
    x = rng.standard_normal(40 * 37).astype(F32)
    x[::7] = F32(-0.0)
    x[3], x[5], x[11] = F32(np.nan), F32(1e-42), F32(np.inf)  # NaN, a denormal, inf: moved as they are
    want = np.full(50 * 41, 7, F32)  # 7 around the block: nothing written outside it
    for r in range(16):
        for c in range(16):
            want[5 + c * 41 + r] = x[3 + r * 37 + c]
    for w in (16, 8, 4):
        out = np.full(50 * 41, 7, F32)
        _t16_with(w)(x, 3, 37, out, 5, 41)
        assert out.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), w
    assert isa._TBLOCK == isa.TRANSPOSE_BLOCK[isa.register_kind(*isa.target_cpu())]
    assert f"transposes in {isa._TBLOCK} x {isa._TBLOCK} blocks" in isa.describe_target()
    a = rng.standard_normal((45, 77)).astype(F32)  # pack_t with the target's block, whole and partial blocks
    assert np.array_equal(kc.pack_t(a)[:, :45], a.T)
