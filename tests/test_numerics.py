"""The exact numerics (dxstudio/engine/kernels/, docs/numerics.md).

* dot16 products: the reference (NumPy) and fast (Numba) paths give the same bits, and both
  match an independent scalar implementation of the rule written here;
* no fused multiply-add: a case where fusing changes the result;
* the thread count does not change the bytes;
* exp32, tanh32, exp64, log64: measured error against a high-precision reference within the
  bounds written in docs/numerics.md, both paths bit-identical, and the special values.
"""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.kernels import compiled as kc, constants as kconst, reference
from dxstudio.engine.kernels import registry as kreg, rng as krng, runtime as rt

F32 = np.float32
F64 = np.float64
LD = np.longdouble

# Bounds in ulps (docs/numerics.md, "Measured errors"): measured on the sweeps below, set a
# little above the measurement.
EXP32_MAX_ULP = 1.25  # measured 1.19 on the sweep, 1.22 exhaustively
TANH32_MAX_ULP = 2.25  # measured 1.92 on the sweep, 2.10 exhaustively
EXP64_MAX_ULP = 1.25  # measured 1.15
LOG64_MAX_ULP = 2.0  # measured 1.60 log-spaced, 1.94 on [0.5, 2]

EXTENDED_LONGDOUBLE = np.finfo(LD).nmant >= 63  # x87 80-bit: 11 more bits than binary64


def bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == F32 else np.uint64)


def assert_same_bits(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    diff = np.nonzero(bits(got).reshape(-1) != bits(want).reshape(-1))[0]
    assert diff.size == 0, f"{what}: {diff.size} elements differ, first at {diff[0]}: " \
                           f"{got.reshape(-1)[diff[0]]!r} vs {want.reshape(-1)[diff[0]]!r}"


# ----------------------------------------------------------------------------------------
# An independent dot16, one binary32 scalar operation at a time
# ----------------------------------------------------------------------------------------
def dot16_python(x, y) -> F32:
    """Lane l takes k = l, l+16, ... (product rounded, then sum rounded); fold in halves."""
    acc = [F32(0.0)] * 16
    with np.errstate(all="ignore"):
        for k in range(len(x)):
            product = F32(x[k]) * F32(y[k])
            acc[k % 16] = F32(acc[k % 16] + product)
        for half in (8, 4, 2):
            acc = [F32(acc[lane] + acc[lane + half]) for lane in range(half)]
        return F32(acc[0] + acc[1])


def mm_python(a, b) -> np.ndarray:
    out = np.empty((a.shape[0], b.shape[1]), F32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = dot16_python(a[i, :], b[:, j])
    return out


def both_mm(a, b):
    with np.errstate(all="ignore"):
        return reference.mm_ref(a, b), kc.mm_fast(a, b)


def both_rowdot(a, b):
    with np.errstate(all="ignore"):
        return reference.rowdot_ref(a, b), kc.rowdot_fast(a, b)


RNG_SEED = 1234


def random_shapes(count, seed=RNG_SEED):
    rng = np.random.default_rng(seed)
    shapes = [(1, 1, 1), (1, 15, 1), (3, 16, 5), (2, 17, 3), (1, 100, 40), (40, 100, 1),
              (7, 1, 9), (5, 31, 33), (4, 48, 4), (6, 255, 7)]
    for _ in range(count):
        shapes.append(tuple(int(v) for v in (rng.integers(1, 40), rng.integers(1, 90), rng.integers(1, 40))))
    return shapes


@pytest.mark.parametrize("m,k,n", random_shapes(20))
def test_mm_and_rowdot_paths_agree_on_random_shapes(m, k, n):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    ref, fast = both_mm(a, b)
    assert_same_bits(fast, ref, f"mm {m}x{k}x{n}")
    c = rng.standard_normal((m, k)).astype(F32)
    ref, fast = both_rowdot(a, c)
    assert_same_bits(fast, ref, f"rowdot {m}x{k}")


@pytest.mark.parametrize("m,k,n", [(3, 1, 4), (2, 7, 3), (3, 16, 2), (2, 17, 2), (4, 40, 3), (1, 65, 5)])
def test_paths_match_independent_scalar_dot16(m, k, n):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    want = mm_python(a, b)
    ref, fast = both_mm(a, b)
    assert_same_bits(ref, want, "mm_ref vs scalar dot16")
    assert_same_bits(fast, want, "mm_fast vs scalar dot16")
    c = rng.standard_normal((m, k)).astype(F32)
    want_rows = np.array([dot16_python(a[i], c[i]) for i in range(m)], F32)
    ref, fast = both_rowdot(a, c)
    assert_same_bits(ref, want_rows, "rowdot_ref vs scalar dot16")
    assert_same_bits(fast, want_rows, "rowdot_fast vs scalar dot16")
    assert_same_bits(reference.dot16_ref(a[0], c[0]), want_rows[0], "dot16_ref")


def test_summation_order_is_the_lane_rule_not_left_to_right():
    # 2^24 + 1 + 1 ...: left to right loses every 1; dot16 puts the big term in lane 0 and
    # sums the ones in other lanes first, so the order is visible in the result.
    x = np.ones(32, F32)
    x[0] = F32(2.0 ** 24)
    y = np.ones(32, F32)
    left_to_right = F32(0.0)
    for v in x:
        left_to_right = F32(left_to_right + v)
    want = dot16_python(x, y)
    assert want != left_to_right  # the check below can tell the two orders apart
    ref, fast = both_mm(x[None, :], y[:, None])
    assert ref[0, 0] == want and fast[0, 0] == want
    ref, fast = both_rowdot(x[None, :], y[None, :])
    assert ref[0] == want and fast[0] == want


def test_512_row_shapes():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((512, 128)).astype(F32)
    b = rng.standard_normal((128, 96)).astype(F32)
    ref, fast = both_mm(a, b)
    assert_same_bits(fast, ref, "mm 512x128x96")
    ref, fast = both_mm(np.ascontiguousarray(a[:, :40].T), a[:, :33])  # K = 512
    assert_same_bits(fast, ref, "mm 40x512x33")
    ref, fast = both_rowdot(a, a[::-1].copy())
    assert_same_bits(fast, ref, "rowdot 512x128")


def test_512_cube():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((512, 512)).astype(F32)
    b = rng.standard_normal((512, 512)).astype(F32)
    ref, fast = both_mm(a, b)
    assert_same_bits(fast, ref, "mm 512^3")


def test_denormal_large_and_signed_zero_inputs():
    rng = np.random.default_rng(8)
    cases = {
        "denormal inputs": (rng.standard_normal((6, 37)) * 1e-39, rng.standard_normal((37, 5))),
        "products underflow": (rng.standard_normal((6, 21)) * 1e-22, rng.standard_normal((21, 5)) * 1e-22),
        "overflow to inf": (np.abs(rng.standard_normal((6, 19))) * 1e30, np.abs(rng.standard_normal((19, 5))) * 1e10),
        "inf - inf": (rng.standard_normal((6, 19)) * 1e30, rng.standard_normal((19, 5)) * 1e10),
        "huge sums": (np.full((3, 40), 3e37), np.full((40, 4), 9.0)),
    }
    for what, (a, b) in cases.items():
        a, b = a.astype(F32), b.astype(F32)
        ref, fast = both_mm(a, b)
        assert_same_bits(fast, ref, what)
        assert_same_bits(ref, mm_python(a, b), what + " (scalar)")
        r1, r2 = both_rowdot(a, a[:, ::-1].copy())
        assert_same_bits(r2, r1, what + " rowdot")
    # the cases reach what they name
    a, b = cases["denormal inputs"]
    assert np.any((np.abs(a.astype(F32)) < np.finfo(F32).smallest_normal) & (a != 0))
    ref, _ = both_mm(*(v.astype(F32) for v in cases["products underflow"]))
    assert np.all(np.abs(ref) < np.finfo(F32).smallest_normal) and np.any(ref != 0), "denormals kept"
    ref, _ = both_mm(*(v.astype(F32) for v in cases["huge sums"]))
    assert np.all(np.isposinf(ref))
    ref, _ = both_mm(*(v.astype(F32) for v in cases["overflow to inf"]))
    assert np.all(np.isposinf(ref))
    ref, _ = both_mm(*(v.astype(F32) for v in cases["inf - inf"]))
    assert np.all(np.isnan(ref))  # every row meets +inf and -inf: the NaN bits matched above

    # zeros: every lane starts at +0, so a dot of negative zeros is +0
    neg = np.full((4, 19), F32(-0.0))
    ones = np.ones((19, 3), F32)
    ref, fast = both_mm(neg, ones)
    assert_same_bits(fast, ref, "negative zeros")
    assert np.all(bits(ref) == 0), "+0 expected"
    ref, fast = both_rowdot(neg, neg)
    assert np.all(bits(ref) == 0) and np.all(bits(fast) == 0)


def test_input_layout_does_not_matter_and_shapes_are_checked():
    rng = np.random.default_rng(9)
    a = np.asfortranarray(rng.standard_normal((9, 23)).astype(F32))
    b = rng.standard_normal((30, 23)).astype(F32).T  # a transposed view
    ref, fast = both_mm(a, b)
    assert_same_bits(fast, ref, "non-contiguous inputs")
    with pytest.raises(ValueError, match="inner sizes differ"):
        kc.mm_fast(a, a)
    with pytest.raises(ValueError, match="inner sizes differ"):
        reference.mm_ref(a, a)


# ----------------------------------------------------------------------------------------
# No fused multiply-add
# ----------------------------------------------------------------------------------------
ONE_PLUS = F32(1.0 + 2.0 ** -12)  # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 exactly: a tie in binary32
CANCEL = F32(-(1.0 + 2.0 ** -11))


def test_fma_case_distinguishes_fused_from_unfused():
    product = ONE_PLUS * ONE_PLUS  # rounded: the tie goes to even, 1 + 2^-11
    unfused = F32(CANCEL + product)
    exact = F64(ONE_PLUS) * F64(ONE_PLUS)  # exact: 24-bit x 24-bit fits in 53 bits
    fused = F32(F64(CANCEL) + exact)  # one rounding of the exact a*b + c
    assert unfused == 0.0 and fused == F32(2.0 ** -24)


def test_mm_and_rowdot_do_not_fuse_multiply_add():
    # lane 0 takes k = 0 then k = 16: acc = CANCEL*1, then acc + ONE_PLUS*ONE_PLUS. Many columns
    # and rows so that the vectorised inner loops are the ones exercised.
    k, rows, cols = 17, 5, 70
    a = np.zeros((rows, k), F32)
    a[:, 0] = CANCEL
    a[:, 16] = ONE_PLUS
    b = np.zeros((k, cols), F32)
    b[0, :] = 1.0
    b[16, :] = ONE_PLUS
    unfused, fused = F32(0.0), F32(2.0 ** -24)
    for kernels in rt.KERNELS:
        ops = kreg.Ops(kernels)
        out = ops.mm(a, b)
        assert np.all(out == unfused) and not np.any(out == fused), kernels
        out = ops.rowdot(a, np.ascontiguousarray(b[:, :rows].T))
        assert np.all(out == unfused) and not np.any(out == fused), kernels
    with rt.serial_kernels():
        assert np.all(kc.mm_fast(a, b) == unfused)
        assert np.all(kc.rowdot_fast(a, np.ascontiguousarray(b[:, :rows].T)) == unfused)


# ----------------------------------------------------------------------------------------
# Threads
# ----------------------------------------------------------------------------------------
def test_thread_count_does_not_change_the_bytes():
    import numba

    rng = np.random.default_rng(10)
    a = rng.standard_normal((301, 77)).astype(F32)
    b = rng.standard_normal((77, 130)).astype(F32)
    c = rng.standard_normal((301, 77)).astype(F32)
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            rt.set_threads(threads)
            assert numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)
            results.append((kc.mm_fast(a, b), kc.rowdot_fast(a, c)))
    finally:
        numba.set_num_threads(before)
    with rt.serial_kernels():
        results.append((kc.mm_fast(a, b), kc.rowdot_fast(a, c)))
    for mm_out, rowdot_out in results[1:]:
        assert_same_bits(mm_out, results[0][0], "mm across thread counts")
        assert_same_bits(rowdot_out, results[0][1], "rowdot across thread counts")
    assert_same_bits(results[0][0], reference.mm_ref(a, b), "mm threads vs reference")


def test_section_par_is_serial_only_where_the_kernels_have_one_thread(monkeypatch):
    """None (the sections built without their parallel kernels) only in a process whose kernels
    can never have a second thread; elsewhere parallel_pays' answer, True or False."""
    import numba

    assert rt.section_par(1, 10 ** 9) is False
    assert rt.section_par(100, rt.PARALLEL_MIN_WORK - 1) is False
    with rt.serial_kernels():
        assert rt.section_par(100, rt.PARALLEL_MIN_WORK) is False
    assert rt.section_par(100, rt.PARALLEL_MIN_WORK, allowed=True) is True
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    assert rt.section_par(100, rt.PARALLEL_MIN_WORK, allowed=True) is rt.SERIAL_ONLY is None


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="one Numba thread: no parallel builds run")
def test_the_compiled_sections_parallel_builds_give_the_serial_bytes():
    """A forward pass and a training step of the base size at 40 words (every section large
    enough for its parallel builds: the pair MLP's n * n * 8 * 32 pays from 32) on two threads, then within
    serial_kernels(): the same logits, loss and gradients. (A section called with None, in a
    process with one thread, is built without its parallel kernels: the cross-CPU builds,
    test_kernel_paths.)"""
    import numba

    from dxstudio.engine import readiness
    from dxstudio.engine.config import SIZES
    from dxstudio.engine.model import forward, to_runtime
    from dxstudio.engine.params import new_params
    from dxstudio.engine.training import Example, Targets, TrainSettings, TrainState, train_step

    cfg, n = SIZES["base"], 40
    params = new_params(cfg, 3)
    window = readiness.random_window(cfg, n, 4)
    rng = np.random.default_rng(5)
    targets = Targets(tags=rng.integers(-1, cfg.n_tags, n), roles=rng.integers(0, len(cfg.roles), n), doc=2,
                      items=rng.integers(-1, n, n), kv=rng.integers(-1, n, n))
    settings = TrainSettings(backbone_scale=0.5, loss_role=1.0, loss_doc=1.0, loss_items=0.5, loss_kv=0.5,
                             clip=0.5, kernels="fast", weight_decay=0.01)

    def run():
        out = forward(cfg, to_runtime(params), window, kreg.Ops("fast"))
        step = train_step(TrainState.start(cfg, params, settings), [Example(window, targets)], 1e-3)
        return [out.tag_logits, out.kv_scores, np.float64(step.loss), *step.grads.values()]

    before = numba.get_num_threads()
    try:
        rt.set_threads(2)
        parallel = run()
    finally:
        numba.set_num_threads(before)
    with rt.serial_kernels():
        serial = run()
    for i, (a, b) in enumerate(zip(parallel, serial)):
        assert_same_bits(np.asarray(a), np.asarray(b), f"output {i}: parallel sections against serial")


# ----------------------------------------------------------------------------------------
# exp, tanh, log: error sweeps
# ----------------------------------------------------------------------------------------
def ulp_errors(got, exact, fmt) -> np.ndarray:
    """|got - exact| in units of the spacing of the correctly rounded result in `fmt`
    (at a subnormal or zero result, the smallest subnormal)."""
    rounded = exact.astype(fmt)
    spacing = np.spacing(np.abs(rounded)).astype(LD)
    return np.abs(got.astype(LD) - exact) / spacing


def with_edges(x, edges, dtype):
    return np.concatenate([np.asarray(x, dtype), np.asarray(edges, dtype)])


def neighbours(values, count, dtype):
    """Each value and `count` representable numbers on each side."""
    out = []
    for v in np.asarray(values, dtype):
        lo = hi = v
        out.append(v)
        for _ in range(count):
            lo = np.nextafter(lo, dtype(-np.inf))
            hi = np.nextafter(hi, dtype(np.inf))
            out += [lo, hi]
    return np.array(out, dtype)


def check_sweep(name, x, exact, fmt, bound):
    ref = getattr(reference, name + "_ref")(x)
    fast = getattr(kc, name + "_fast")(x)
    assert_same_bits(fast, ref, name + " fast vs reference")
    with np.errstate(over="ignore"):
        finite = np.isfinite(exact.astype(fmt))
    assert np.array_equal(np.isfinite(ref), finite), f"{name}: overflow where the exact result does not"
    err = ulp_errors(ref[finite], exact[finite], fmt)
    worst = float(err.max())
    print(f"{name}: max error {worst:.3f} ulp over {x.size} points (bound {bound})")
    assert worst <= bound, f"{name}: {worst:.3f} ulp at x = {x[finite][np.argmax(err)]!r}"
    return worst


def test_exp32_error_sweep():
    edges = neighbours([kconst.EXP32_MAX, kconst.EXP32_MIN, -87.33654, 0.0, 1.0, -1.0], 8, F32)
    x = with_edges(np.linspace(-103, 88, 2 ** 20, dtype=F64), edges, F32)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(LD))
    check_sweep("exp32", x, exact, F32, EXP32_MAX_ULP)


def test_tanh32_error_sweep():
    edges = neighbours([kconst.TANH32_SMALL, -kconst.TANH32_SMALL, kconst.TANH32_BIG, -kconst.TANH32_BIG, 1e-20, 0.0], 8, F32)
    x = with_edges(np.linspace(-10, 10, 2 ** 20, dtype=F64), edges, F32)
    exact = np.tanh(x.astype(LD))
    check_sweep("tanh32", x, exact, F32, TANH32_MAX_ULP)


@pytest.mark.skipif(not EXTENDED_LONGDOUBLE, reason="needs an extended-precision long double")
def test_exp64_error_sweep():
    edges = neighbours([kconst.EXP64_MAX, kconst.EXP64_MIN, -708.3964185322641, 0.0, 1.0], 8, F64)
    x = with_edges(np.linspace(-745, 709, 2 ** 20), edges, F64)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(LD))
    check_sweep("exp64", x, exact, F64, EXP64_MAX_ULP)


@pytest.mark.skipif(not EXTENDED_LONGDOUBLE, reason="needs an extended-precision long double")
def test_log64_error_sweep():
    logspaced = np.exp(np.linspace(np.log(1e-300), np.log(1e300), 2 ** 20))
    near_one = np.linspace(0.5, 2.0, 2 ** 20)
    edges = neighbours([1.0, kconst.LOG64_SQRT_HALF, 2 * kconst.LOG64_SQRT_HALF, 5e-324, 2.2250738585072014e-308,
                        np.finfo(F64).max / 2], 6, F64)
    edges = edges[np.isfinite(edges) & (edges > 0)]
    for what, x in (("log-spaced", with_edges(logspaced, edges, F64)), ("[0.5, 2]", near_one)):
        exact = np.log(x.astype(LD))
        keep = x != 1.0  # log(1) = 0 exactly; checked with the special values
        print(what)
        check_sweep("log64", x[keep], exact[keep], F64, LOG64_MAX_ULP)


def test_overflow_and_underflow_thresholds_round_like_the_exact_result():
    """Around every threshold the result is the correctly rounded exp (to within the bound)
    and switches to inf / 0 exactly where the correctly rounded result does."""
    x = neighbours([kconst.EXP32_MAX, kconst.EXP32_MIN, -87.33654, -103.27893], 6, F32)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(LD)).astype(F32)
    assert_same_bits(reference.exp32_ref(x), want, "exp32 at thresholds")
    assert_same_bits(kc.exp32_fast(x), want, "exp32 fast at thresholds")
    assert reference.exp32_ref(kconst.EXP32_MAX) < np.inf and reference.exp32_ref(np.nextafter(kconst.EXP32_MAX, F32(np.inf))) == np.inf
    assert reference.exp32_ref(kconst.EXP32_MIN) == F32(2.0 ** -149)
    assert reference.exp32_ref(np.nextafter(kconst.EXP32_MIN, F32(-np.inf))) == 0.0

    x = neighbours([kconst.EXP64_MAX, kconst.EXP64_MIN, -708.3964185322641], 6, F64)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(LD))
    for got in (reference.exp64_ref(x), kc.exp64_fast(x)):
        with np.errstate(over="ignore"):
            assert np.array_equal(np.isinf(got), np.isinf(exact.astype(F64)))
        finite = np.isfinite(got)
        assert float(ulp_errors(got[finite], exact[finite], F64).max()) <= EXP64_MAX_ULP
    assert reference.exp64_ref(np.nextafter(kconst.EXP64_MAX, np.inf)) == np.inf
    assert reference.exp64_ref(np.nextafter(kconst.EXP64_MIN, -np.inf)) == 0.0


# ----------------------------------------------------------------------------------------
# Special values
# ----------------------------------------------------------------------------------------
NAN32 = np.array([0x7FC00000, 0xFFC00000, 0x7FC00123, 0x7F800001], np.uint32).view(F32)
DENORMALS32 = np.array([1e-45, -1e-45, 1e-39, -1e-39, 1.1754942e-38], F32)


def both(name, x):
    with np.errstate(all="ignore"):
        ref = getattr(reference, name + "_ref")(x)
        fast = getattr(kc, name + "_fast")(x)
    assert_same_bits(fast, ref, name)
    return ref


def test_exp32_special_values():
    nan = both("exp32", NAN32)
    assert np.all(np.isnan(nan))
    assert_same_bits(nan[:3], NAN32[:3], "quiet nan passes through unchanged")
    out = both("exp32", np.array([np.inf, -np.inf, 0.0, -0.0], F32))
    assert_same_bits(out, np.array([np.inf, 0.0, 1.0, 1.0], F32), "exp32 inf, -inf, 0, -0")
    assert np.all(both("exp32", DENORMALS32) == 1.0)
    assert both("exp32", np.array([1.0], F32))[0] == F32(np.e)  # correctly rounded here


def test_tanh32_special_values():
    nan = both("tanh32", NAN32)
    assert np.all(np.isnan(nan))
    out = both("tanh32", np.array([np.inf, -np.inf, 9.0, -9.0, 20.0, 0.0], F32))
    assert_same_bits(out, np.array([1, -1, 1, -1, 1, 0], F32), "tanh32 saturation and +0")
    # -0 gives +0: x + x*(x*x*q) with q < 0 adds +0 to -0 (documented; it changes no GELU value)
    assert bits(both("tanh32", np.array([-0.0], F32)))[0] == 0
    # below the square of the smallest normal, tanh(x) = x exactly (denormals kept)
    assert_same_bits(both("tanh32", DENORMALS32[:4]), DENORMALS32[:4], "tanh32 denormals")
    x = np.linspace(-9, 9, 20001, dtype=F32)
    x = x[x != 0]
    t = both("tanh32", x)
    assert np.all(np.abs(t) <= 1.0)
    assert_same_bits(both("tanh32", -x), -t, "tanh32 is odd (away from zero)")


def test_exp64_special_values():
    out = both("exp64", np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 1e-310]))
    assert np.isnan(out[0])
    assert_same_bits(out[1:], np.array([np.inf, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]), "exp64 specials")
    assert abs(both("exp64", np.array([1.0]))[0] - np.e) <= np.spacing(np.e)  # one ulp above here


def test_log64_special_values():
    x = np.array([np.nan, -1.0, -np.inf, -5e-324, 0.0, -0.0, np.inf, 1.0])
    out = both("log64", x)
    assert np.all(np.isnan(out[:4]))
    assert_same_bits(out[4:], np.array([-np.inf, -np.inf, np.inf, 0.0]), "log64 0, -0, inf, 1")
    # denormal inputs and the largest double: finite and within the bound
    x = np.array([5e-324, 1e-310, 2.2250738585072014e-308, np.finfo(F64).max])
    out = both("log64", x)
    if EXTENDED_LONGDOUBLE:
        assert float(ulp_errors(out, np.log(x.astype(LD)), F64).max()) <= LOG64_MAX_ULP
    assert both("log64", np.array([2.0]))[0] == kconst.EXP64_LN2_HI + kconst.EXP64_LN2_LO


# ----------------------------------------------------------------------------------------
# SplitMix64: the published test vector
# ----------------------------------------------------------------------------------------
def test_splitmix64_known_values_and_block_equals_scalar():
    rng = krng.SplitMix64(1234567)
    # Reference outputs of Vigna's splitmix64.c seeded with 1234567
    assert [rng.next_u64() for _ in range(3)] == [6457827717110365317, 3203168211198807973,
                                                  9817491932198370423]
    a, b = krng.SplitMix64(99), krng.SplitMix64(99)
    assert [a.next_u64() for _ in range(50)] == [int(v) for v in b.block(50)]
    assert a.state == b.state
    u = krng.SplitMix64(3).uniform(10000, -0.5, 0.5)
    assert u.dtype == F32 and u.min() >= -0.5 and u.max() < 0.5


@pytest.mark.parametrize("name", ["mm", "rowdot", "exp", "tanh", "exp64", "log64"])
def test_an_unknown_kernel_name_raises_before_any_primitive(name):
    """A kernel path is named once, in Ops(kernels): mm(a, b, "blas") used to run the reference
    silently; now no primitive runs without an Ops, and an Ops of an unknown name is refused."""
    a = np.ones((2, 2), F32)
    args = (a, a) if name in ("mm", "rowdot") else (a,)
    assert getattr(kreg.Ops("fast"), name)(*args).dtype == (F64 if name in ("exp64", "log64") else F32)
    with pytest.raises(ValueError, match=r"kernels must be one of \('reference', 'fast'\), not 'blas'"):
        kreg.Ops("blas")
    with pytest.raises(ValueError, match="not 'Fast'"):
        kreg.Ops(kernels="Fast")
    with pytest.raises(ValueError, match="not 'blas'"):
        rt.check_kernels("blas")


@pytest.mark.parametrize("k,m,n", [(1, 1, 1), (5, 3, 7), (17, 40, 33), (300, 2, 70), (40, 600, 3)])
def test_mm_tn_is_mm_of_the_transpose_bit_for_bit(k, m, n):
    """mm_tn(at, b) (k outermost, blocks of outputs) gives mm(at.T, b)'s bytes on both paths,
    with denormals, infinities, NaN and signed zeros among the terms."""
    rng = np.random.default_rng(k * 1000 + m + n)
    at = rng.standard_normal((k, m)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    specials = np.array([1e-40, -1e-42, np.inf, -0.0, 0.0, 3e38], F32)
    flat_a, flat_b = at.reshape(-1), b.reshape(-1)
    step = max(1, flat_a.size // len(specials))
    for j, v in enumerate(specials):
        flat_a[(j * step) % flat_a.size] = v
    flat_b[-1] = np.nan if flat_b.size > 3 else flat_b[-1]
    flat_b[0] = -np.inf if flat_b.size > 3 else flat_b[0]
    with np.errstate(all="ignore"):
        want = reference.mm_ref(np.ascontiguousarray(at.T), b)
        gots = (kreg.Ops("fast").mm_tn(at, b), kreg.Ops("reference").mm_tn(at, b), kc.mm_fast(np.ascontiguousarray(at.T), b))
    for got in gots:
        assert got.shape == (m, n)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_branch_free_exp32_and_tanh32_are_the_reference():
    """exp32_vec / tanh32_vec (what the maps, softmax and GELU run) against the reference,
    element by element, on the thresholds, the branch edges, specials and a wide sweep."""
    edges = [kconst.EXP32_MAX, kconst.EXP32_MIN, 0.5, 9.0, -0.5, -9.0, 0.0, -0.0, 1e-45, 44.36, -51.98]
    x = np.concatenate([np.nextafter(np.array(edges, F32)[:, None], np.array([[-np.inf, np.inf]], F32)).ravel(),
                        np.array(edges + [np.inf, -np.inf, np.nan], F32),
                        np.linspace(-110, 95, 4099).astype(F32)])
    e, t = np.empty_like(x), np.empty_like(x)
    kc.exp32_vec(x, e)
    kc.tanh32_vec(x, t)
    want_es, want_ts = reference.exp32_ref(x), reference.tanh32_ref(x)
    for i, v in enumerate(x):
        want_e, want_t = want_es[i], want_ts[i]
        assert e[i].view(np.uint32) == want_e.view(np.uint32) or (np.isnan(e[i]) and np.isnan(v)), v
        assert t[i].view(np.uint32) == want_t.view(np.uint32) or (np.isnan(t[i]) and np.isnan(v)), v
