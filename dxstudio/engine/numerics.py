"""Exact, machine-independent numerics: the 16-lane dot product and the library's exp, tanh, log.

Every result here is a fixed sequence of separately rounded IEEE operations, so it is the same
bytes on every CPU, NumPy build and thread count. Each primitive is written twice, side by
side in its own section below, followed by the one line that chooses between them:

* `<name>_ref`: the reference path, plain NumPy elementwise operations (the 16 lanes are an
  axis of 16), short and easy to check against docs/numerics.md;
* `<name>_fast`: its compiled twin, Numba kernels built with fastmath off (no contraction into
  fused multiply-add, no reassociation), one thread per output row;
* `<name>(..., kernels)`: the dispatch, through `fast_path(kernels)`, which raises a
  ValueError for a kernel name that is not one of KERNELS.

`Ops` is the same choice for the layers (layers.py, model.py): one object per kernel path that
sends binary32 arrays on the fast path to the compiled kernels and everything else to the
reference (binary64 arrays: the finite-difference check of the backward).

Every constant is typed once, in the section "Constants"; the compiled kernels read the same
binary32 values (Numba freezes a module-level np.float32 as a binary32 constant). Tests hold
the two paths bit-identical. Nothing here uses BLAS or NumPy's exp/tanh/log.
"""
from __future__ import annotations

import math
import os
import threading
import types

import numpy as np

LANES = 16
F32 = np.float32
F64 = np.float64

# --------------------------------------------------------------------------------------
# Constants (docs/numerics.md gives their derivation and the measured errors)
# --------------------------------------------------------------------------------------
# binary32 exp: n = floor(x*log2e + 0.5), r = (x - n*LN2_HI) - n*LN2_LO, p = Taylor(7), e = p*2^n.
EXP32_LOG2E = F32(1.4426950408889634)
EXP32_LN2_HI = F32(6.9314575195e-01)  # 0x3f317200: 9 trailing zero bits, n*LN2_HI exact
EXP32_LN2_LO = F32(1.4286067653e-06)  # 0x35bfbe8e
EXP32_MAX = F32(88.72283)  # above: +inf
EXP32_MIN = F32(-103.97208)  # below: +0
EXP32_C = tuple(F32(1.0 / math.factorial(k)) for k in range(8))  # 1, 1, 1/2, ..., 1/7

# binary32 tanh: |x| < 0.5 odd Taylor series to x^17; |x| < 9: 1 - 2/(exp(2|x|) + 1); else 1.
TANH32_SMALL = F32(0.5)
TANH32_BIG = F32(9.0)
_TANH_TAYLOR = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075,
                -929569 / 638512875, 6404582 / 10854718875)
TANH32_C = tuple(F32(c) for c in _TANH_TAYLOR)

# binary64 exp: same scheme, Taylor degree 13.
EXP64_LOG2E = 1.4426950408889634
EXP64_LN2_HI = 6.93147180369123816490e-01  # fdlibm: 0x3fe62e42fee00000
EXP64_LN2_LO = 1.90821492927058770002e-10
EXP64_MAX = 709.782712893384
EXP64_MIN = -745.1332191019412
EXP64_C = tuple(1.0 / math.factorial(k) for k in range(14))

# binary64 log: x = m*2^e, m in [sqrt(1/2), sqrt(2)), s = (m-1)/(m+1),
# log m = 2s + 2s*R(s^2), R = s^2/3 + s^4/5 + ... + s^22/23.
LOG64_SQRT_HALF = 0.70710678118654752440
LOG64_C = tuple(1.0 / (2 * k + 1) for k in range(1, 12))  # 1/3 ... 1/23

# GELU, tanh form: y = 0.5 x (1 + tanh(c0 (x + c1 x^3))); its backward uses c3 = 3*c1, the
# product taken in binary64. Binary64 values: each path rounds them once to its precision
# (the binary32 ones below are what the fast path and the reference on binary32 use).
GELU_C0 = 0.7978845608028654  # sqrt(2 / pi)
GELU_C1 = 0.044715
GELU_C3 = 3.0 * GELU_C1
GELU32_C0, GELU32_C1, GELU32_C3 = F32(GELU_C0), F32(GELU_C1), F32(GELU_C3)  # 0x3f4c422a 0x3d372713 0x3e095d4f

# SplitMix64 (section 9): arithmetic modulo 2^64
MASK64 = (1 << 64) - 1
SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
SPLITMIX_MUL1 = 0xBF58476D1CE4E5B9
SPLITMIX_MUL2 = 0x94D049BB133111EB


# --------------------------------------------------------------------------------------
# The one dispatcher: which path runs, and (on the fast path) which build
# --------------------------------------------------------------------------------------
KERNELS = ("reference", "fast")


def check_kernels(kernels: str) -> str:
    """The kernel path's name, or a ValueError naming the choices."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, not {kernels!r}")
    return kernels


def fast_path(kernels: str) -> bool:
    """True for "fast", False for "reference"; any other name raises (never a silent fallback)."""
    return check_kernels(kernels) == "fast"


class Ops:
    """The arithmetic that depends on the kernel path, as the layers see it.

    `compiled(*arrays)` is the one decision: the compiled twin runs on the fast path when every
    array is binary32; otherwise the reference runs (binary64 arrays: the finite-difference
    check, where exp and tanh are NumPy's: it checks calculus, not bytes)."""

    def __init__(self, kernels: str = "fast"):
        self.kernels = check_kernels(kernels)
        self.fast = self.kernels == "fast"

    def compiled(self, *arrays) -> bool:
        """True where the compiled kernel runs: the fast path with binary32 arrays."""
        return self.fast and all(a.dtype == F32 for a in arrays)

    def mm(self, a, b):
        return mm_fast(a, b) if self.compiled(a, b) else mm_ref(a, b)

    def mm_nt(self, a, bt, bias=None):
        """a bt^T (+ bias), bt (N, K) with k contiguous: the linear layers' x W^T + b and q k^T.
        On the fast path the bias is added in the product's epilogue (the same one rounding)."""
        if self.compiled(a, bt) and (bias is None or bias.dtype == F32):
            m, k = a.shape
            if _nt_pays(m, k, bt.shape[0]):
                return mm_nt_fast(a, bt, bias)
            out = mm_fast(a, np.ascontiguousarray(bt.T))
        else:
            out = mm_nt_ref(a, bt)
        return out if bias is None else out + bias

    def mm_tn(self, at, b):
        """at^T b: the weight gradients' products, at (K, M) as it is (no transposed copy)."""
        return mm_tn_fast(at, b) if self.compiled(at, b) else mm_tn_ref(at, b)

    def rowdot(self, a, b):
        return rowdot_fast(a, b) if self.compiled(a, b) else rowdot_ref(a, b)

    def exp(self, x):
        if x.dtype == F64:
            return np.exp(x)
        return exp32_fast(x) if self.fast else exp32_ref(x)

    def tanh(self, x):
        if x.dtype == F64:
            return np.tanh(x)
        return tanh32_fast(x) if self.fast else tanh32_ref(x)

    def colsum(self, a):
        """Column sums: dot16 with ones along the row axis (rows ascending)."""
        return self.mm(np.ones((1, a.shape[0]), a.dtype), a)[0]

    def rowsum(self, a):
        return self.rowdot(a, np.ones_like(a))


_NUMBA_CACHE = os.environ.get("DXSTUDIO_NUMBA_CACHE", "1") != "0"

# OpenMP threads that spin while waiting take the other core from everyone on a busy
# machine (a 15x slowdown measured with two processes on two cores); passive waiting costs
# little when the machine is idle. Must be set before the OpenMP runtime starts.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ...but a thread that sleeps at once after every parallel region takes a futex wake-up to start
# the next one: a forward pass at 2 threads made ~40 of them and ran 4x slower than at 1 thread
# (50 words: 4.0 against 1.0 ms). GNU OpenMP's spin count, when given, wins over PASSIVE: a
# short spin (2,000 pauses, some tens of µs) then sleep. 2 threads: 0.77 / 2.1 / 8.8 ms at 50 /
# 150 / 400 words (1 thread: 1.0 / 3.5 / 14.5), and an idle thread still leaves the core soon.
os.environ.setdefault("GOMP_SPINCOUNT", "2000")



def _keep_freed_memory() -> bool:
    """glibc returns a freed block of 128 KB or more to the kernel (mmap/trim), so the next
    step's activation of that size page-faults again: at 400 words a training step spent a
    fifth of its time in the kernel on 10,000 page faults. Blocks up to 32 MB come from the
    heap and freed memory stays mapped (peak resident memory unchanged: the same high-water
    mark). glibc only; DXSTUDIO_MALLOC_TUNE=0, or the MALLOC_*_ variables, leave malloc alone."""
    if os.environ.get("DXSTUDIO_MALLOC_TUNE", "1") == "0" or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to do
        return False


MALLOC_TUNED = _keep_freed_memory()

import numba  # noqa: E402  (after the environment above)
from numba import njit, prange  # noqa: E402

_jit = dict(cache=_NUMBA_CACHE, nogil=True, fastmath=False, error_model="numpy")

# ---- The instruction set and the tile shape: the one place both are decided -------------
# A 16-lane accumulator is one zmm register on AVX-512 (32 of them), two ymm on AVX/AVX2 (16 of
# them), four xmm on SSE2 (16) or four q registers on ARM64 NEON (32). mm_nt's tile keeps
# _MR x _NR accumulators in registers across its k loop; a tile whose accumulators fill half of
# the register file leaves the other half to the operands. The 4 x 4 tile of AVX-512 is 32 ymm
# registers on AVX2, twice what there is: LLVM spills them to the stack every chunk (measured on
# a 2-core AMD EPYC: 2 x 2 runs mm_nt 1.8-2.8x faster than 4 x 4). The shape changes no bit: each
# output has its own accumulator, its lanes take the same products in the same order (chunk c of
# k adds a[16c + l] b[16c + l] to lane l) and the fold is the same (_fold_tile_ir); register
# blocking over outputs only chooses which outputs run side by side.
TILE_SHAPES = {  # register kind: (rows of a, rows of bt) per tile, 16-lane accumulators
    "zmm": (4, 4),  # AVX-512: 16 accumulators, 16 of 32 registers
    "ymm": (2, 2),  # AVX / AVX2: 4 accumulators, 8 of 16 registers
    "xmm": (2, 1),  # SSE2 (x86-64 baseline): 2 accumulators, 8 of 16 registers
    "neon": (2, 2),  # ARM64 NEON (on paper): 4 accumulators, 16 of 32 registers
}


def target_cpu() -> tuple[str, str]:
    """(name, features) of the CPU LLVM compiles the kernels for, as Numba decides them:
    NUMBA_CPU_NAME / NUMBA_CPU_FEATURES when set (the cross-CPU tests), else the host's."""
    import llvmlite.binding as llvm
    from numba.core import codegen as _codegen

    name = numba.config.CPU_NAME or llvm.get_host_cpu_name()
    features = numba.config.CPU_FEATURES
    if features is None:
        features = _codegen.get_host_cpu_features()
    return name, features


def register_kind(name: str, features: str, machine: str | None = None) -> str:
    """The vector registers a 16-lane accumulator lives in on that target: zmm, ymm, xmm, neon."""
    import platform

    machine = (machine or platform.machine()).lower()
    if machine in ("arm64", "aarch64"):
        return "neon"
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return "zmm"
    if "+avx" in flags or "+avx2" in flags:
        return "ymm"
    if not features and name not in ("generic", "x86-64"):  # a named CPU without a feature list:
        return "ymm"  # LLVM takes that CPU's features; AVX for every x86 sold since 2011
    return "xmm"


def _tile_shape() -> tuple[str, int, int]:
    """(why, rows, cols) of mm_nt's tile: DXSTUDIO_TILE=MxN (M, N in 1, 2, 4; benchmarks and the
    test that every shape gives the same bytes), else the target's register kind."""
    forced = os.environ.get("DXSTUDIO_TILE", "").strip().lower()
    if forced:
        try:
            mr, nr = (int(v) for v in forced.split("x"))
        except ValueError:
            raise ValueError(f"DXSTUDIO_TILE={forced!r}: expected rows x cols such as 2x2") from None
        if mr not in (1, 2, 4) or nr not in (1, 2, 4):
            raise ValueError(f"DXSTUDIO_TILE={forced!r}: rows and cols must each be 1, 2 or 4")
        return "DXSTUDIO_TILE", mr, nr
    kind = register_kind(*target_cpu())
    return kind, *TILE_SHAPES[kind]


TILE_CHOICE, _MR, _NR = _tile_shape()  # output tile: rows of a x rows of bt (a power of two)


def describe_target() -> str:
    """One line for the benchmarks: the target CPU, its vector flags, and the tile that runs."""
    name, features = target_cpu()
    flags = [f[1:] for f in features.split(",") if f.startswith("+") and
             (f[1:] in ("sse2", "avx", "avx2", "fma", "neon") or f[1:].startswith("avx512"))]
    kind = register_kind(name, features)
    return (f"target CPU {name} ({' '.join(sorted(flags)) or 'baseline flags'}): 16-lane accumulators in "
            f"{kind} registers; mm_nt tile {_MR}x{_NR} ({'forced by ' if TILE_CHOICE.startswith('D') else 'for '}"
            f"{TILE_CHOICE}{'' if TILE_CHOICE.startswith('D') else ', the default'})")


# The engine's files whose kernels call one another (fused.py's call numerics.py's products,
# lanes and exp). Numba keys a cached kernel to its own file's contents only, so after an edit
# (or an upgrade) that changes numerics.py alone, fused.py's cached kernels would still hold the
# old code of what they call (seen here: a segmentation fault, then slower code). The locators
# below stamp every kernel of these files with the digest of all of them together.
ENGINE_KERNEL_FILES = ("numerics.py", "fused.py")


def engine_source_digest() -> str:
    import hashlib

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in ENGINE_KERNEL_FILES:
        with open(os.path.join(here, name), "rb") as fh:
            h.update(name.encode() + b"\0" + fh.read() + b"\0")
    # the tile shape is a choice made at import (the target CPU, DXSTUDIO_TILE): a build cached
    # for one shape is never loaded for another
    h.update(f"tile {_MR}x{_NR}".encode())
    return h.hexdigest()


def _stamp_engine_caches() -> bool:
    """Put, before Numba's own cache locators, one subclass of each whose source stamp for a
    function of ENGINE_KERNEL_FILES is (the digest of all of them, Numba's stamp). Numba's
    internals differ between versions: where they are not as expected, nothing changes."""
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in Numba 0.6x
        bases = list(impl._locator_classes)
        here = os.path.dirname(os.path.abspath(__file__))
        ours = {os.path.join(here, name) for name in ENGINE_KERNEL_FILES}
        digest = engine_source_digest()
    except Exception:  # pragma: no cover - another Numba, or no source files
        return False
    made = []
    for base in bases:
        if getattr(base, "_dxstudio_engine", False) or not hasattr(base, "get_source_stamp"):
            continue

        def get_source_stamp(self, _base=base):
            return ("dxstudio-engine", digest, _base.get_source_stamp(self))

        def from_function(cls, py_func, py_file, _base=base):
            if os.path.abspath(py_file) not in ours:
                return None
            return _base.from_function.__func__(cls, py_func, py_file)

        made.append(type("Engine" + base.__name__.lstrip("_"), (base,),
                         {"get_source_stamp": get_source_stamp, "from_function": classmethod(from_function),
                          "_dxstudio_engine": True}))
    impl._locator_classes[:0] = made
    return bool(made)


ENGINE_CACHE_STAMPED = _NUMBA_CACHE and _stamp_engine_caches()


def _renamed(fn, name):
    """A copy of fn under another name: Numba's on-disk cache keys functions by name, so the
    parallel and the serial build of one body need distinct names or they evict each other."""
    code = fn.__code__.replace(co_name=name)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    g = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    g.__qualname__ = name
    return g


def _build(body, name):
    """(parallel build, serial build) of one kernel body, under distinct names for the cache.
    One thread owns each output row (or element), so both give the same bytes; the serial
    one runs for small inputs and when examples are spread over Python threads (Numba's
    default thread pool is not re-entrant)."""
    return (njit(parallel=True, **_jit)(_renamed(body, name + "_par")),
            njit(**_jit)(_renamed(body, name + "_ser")))


_serial = threading.local()

# Below this many multiply-adds a kernel runs on the calling thread: waking the thread pool
# costs more than the work (milliseconds on a busy machine). Either way the bytes are the same.
PARALLEL_MIN_WORK = 1 << 18


def pick(kernels, rows: int, work: int):
    """The build to run of (parallel, serial): the parallel one for a large input, outside
    serial_kernels(). Threads never change a result: this choice is about speed only."""
    par, ser = kernels
    return par if parallel_pays(rows, work) else ser


def parallel_pays(rows: int, work: int, allowed: bool | None = None) -> bool:
    """pick's choice: a large input, outside serial_kernels(), and more than one Numba thread
    (on one thread a parallel build still launches its thread pool's scheduler for every call,
    a few µs each, 8% of a forward pass at 150 words). The compiled forward sections
    (fused.block_forward, ...) take it to choose the builds they call; allowed: the answer of
    parallel_allowed() when the caller already has it."""
    if rows <= 1 or work < PARALLEL_MIN_WORK:
        return False
    return parallel_allowed() if allowed is None else allowed


def parallel_allowed() -> bool:
    """Outside serial_kernels() with more than one Numba thread: parallel_pays without the size
    test. model.forward asks once (a microsecond) and hands the answer to its sections."""
    return not getattr(_serial, "on", False) and numba.get_num_threads() > 1


class serial_kernels:
    """Within this context the calling thread uses the single-threaded compiled kernels."""

    def __enter__(self):
        self.prev = getattr(_serial, "on", False)
        _serial.on = True

    def __exit__(self, *exc):
        _serial.on = self.prev


def set_threads(n: int) -> None:
    """Number of threads of the compiled kernels (results do not depend on it)."""
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))


# --------------------------------------------------------------------------------------
# dot16 and the lane fold
# --------------------------------------------------------------------------------------
def _fold_lanes_ref(acc: np.ndarray, axis: int) -> np.ndarray:
    """Fold the 16 lanes in halves: l<8, l<4, l<2, then a[0] + a[1]."""
    a = np.moveaxis(acc, axis, 0)
    a = a[:8] + a[8:]
    a = a[:4] + a[4:]
    a = a[:2] + a[2:]
    return a[0] + a[1]


@njit(inline="always", **_jit)  # inlined: in a loop over outputs each lane stays a scalar LLVM vectorises
def fold8(a0, a1, a2, a3, a4, a5, a6, a7):
    """fold16's last three steps, on its 8 lanes after the first: l < 4, l < 2, then a[0] + a[1]."""
    a0 = a0 + a4
    a1 = a1 + a5
    a2 = a2 + a6
    a3 = a3 + a7
    a0 = a0 + a2
    a1 = a1 + a3
    return a0 + a1


@njit(**_jit)
def fold16(acc):
    """The 16 lanes folded in halves: l < 8, l < 4, l < 2, then a[0] + a[1]."""
    return fold8(acc[0] + acc[8], acc[1] + acc[9], acc[2] + acc[10], acc[3] + acc[11],
                 acc[4] + acc[12], acc[5] + acc[13], acc[6] + acc[14], acc[7] + acc[15])


def dot16_ref(x: np.ndarray, y: np.ndarray) -> F32:
    """dot16 of two vectors."""
    return mm_ref(np.asarray(x, F32)[None, :], np.asarray(y, F32)[:, None])[0, 0]


# ---- mm: C[i, j] = dot16(a[i, :], b[:, j]) --------------------------------------------
def mm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C[i, j] = dot16(a[i, :], b[:, j]) for a (M, K), b (K, N), binary32."""
    # binary32 in the engine; binary64 only for the finite-difference check of the backward
    dt = F64 if (np.asarray(a).dtype == F64 or np.asarray(b).dtype == F64) else F32
    a = np.asarray(a, dt)
    b = np.asarray(b, dt)
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"mm: inner sizes differ ({a.shape} x {b.shape})")
    acc = np.zeros((m, LANES, n), dt)
    for k0 in range(0, k, LANES):
        k1 = min(k0 + LANES, k)
        # lane l takes k0 + l: one product rounded, then one sum rounded
        acc[:, : k1 - k0, :] += a[:, k0:k1, None] * b[None, k0:k1, :]
    return _fold_lanes_ref(acc, 1)


_COLS = 512  # output columns per pass: the 16 accumulator rows (16 x 512 binary32 = 32 KB) stay in L1


def _mm_body(a, b, out):
    m, k = a.shape
    n = b.shape[1]
    rows = 1 if m < 256 else 16  # rows per task: one accumulator block serves them all
    width = min(n, _COLS)
    for blk in prange((m + rows - 1) // rows):
        acc = np.empty((16, width), np.float32)
        for i in range(blk * rows, min(m, blk * rows + rows)):
            arow = a[i]
            for j0 in range(0, n, width):
                w = min(width, n - j0)
                for lane in range(16):
                    for j in range(w):
                        acc[lane, j] = np.float32(0.0)
                for kk in range(k):
                    aik = arow[kk]
                    row = acc[kk & 15]
                    brow = b[kk, j0:j0 + w]
                    for j in range(w):  # row views: the compiler sees one contiguous vector loop
                        row[j] += aik * brow[j]
                orow = out[i, j0:j0 + w]
                for j in range(w):
                    a0 = acc[0, j] + acc[8, j]
                    a1 = acc[1, j] + acc[9, j]
                    a2 = acc[2, j] + acc[10, j]
                    a3 = acc[3, j] + acc[11, j]
                    a4 = acc[4, j] + acc[12, j]
                    a5 = acc[5, j] + acc[13, j]
                    a6 = acc[6, j] + acc[14, j]
                    a7 = acc[7, j] + acc[15, j]
                    a0 = a0 + a4
                    a1 = a1 + a5
                    a2 = a2 + a6
                    a3 = a3 + a7
                    a0 = a0 + a2
                    a1 = a1 + a3
                    orow[j] = a0 + a1


_MM = _build(_mm_body, "_mm")


def _mm_tn_body(at, b, out):
    """out = at^T b, at (K, M), b (K, N): k outermost, so both operands stream through once
    (the weight gradients, K = the rows of a window or its n^2 pairs). Each output's 16 lanes
    take the same terms in the same order as mm(at.T, b)."""
    k, m = at.shape
    n = b.shape[1]
    rows = max(1, min(m, 1024 // max(n, 1)))  # outputs per task: rows * n * 16 binary32 <= 64 KB
    for blk in prange((m + rows - 1) // rows):
        i0 = blk * rows
        r = min(rows, m - i0)
        acc = np.zeros((16, r, n), np.float32)
        for kk in range(k):
            lane = kk & 15
            for i in range(r):
                aik = at[kk, i0 + i]
                for j in range(n):
                    acc[lane, i, j] += aik * b[kk, j]
        for i in range(r):
            for j in range(n):
                a0 = acc[0, i, j] + acc[8, i, j]
                a1 = acc[1, i, j] + acc[9, i, j]
                a2 = acc[2, i, j] + acc[10, i, j]
                a3 = acc[3, i, j] + acc[11, i, j]
                a4 = acc[4, i, j] + acc[12, i, j]
                a5 = acc[5, i, j] + acc[13, i, j]
                a6 = acc[6, i, j] + acc[14, i, j]
                a7 = acc[7, i, j] + acc[15, i, j]
                a0 = a0 + a4
                a1 = a1 + a5
                a2 = a2 + a6
                a3 = a3 + a7
                a0 = a0 + a2
                a1 = a1 + a3
                out[i0 + i, j] = a0 + a1


_MM_TN = _build(_mm_tn_body, "_mm_tn")


def mm_fast(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, F32)
    b = np.asarray(b, F32)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"mm: inner sizes differ ({a.shape} x {b.shape})")
    m, k = a.shape
    n = b.shape[1]
    if _nt_pays(m, k, n):  # b transposed once, then the register-blocked tiles
        return mm_nt_fast(a, pack_t(b))
    out = np.empty((m, n), F32)
    pick(_MM, m, m * k * n)(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
    return out


def mm_tn_ref(at: np.ndarray, b: np.ndarray) -> np.ndarray:
    """at^T b: C[i, j] = dot16(at[:, i], b[:, j])."""
    return mm_ref(np.asarray(at).T, b)


def mm_tn_fast(at: np.ndarray, b: np.ndarray) -> np.ndarray:
    at = np.ascontiguousarray(at, F32)
    b = np.ascontiguousarray(b, F32)
    if at.shape[0] != b.shape[0]:
        raise ValueError(f"mm_tn: inner sizes differ ({at.shape}^T x {b.shape})")
    k, m = at.shape
    n = b.shape[1]
    if k <= _NT_MAX_K_TN and _nt_pays(m, k, n):  # both transposed (k padded to 16), then mm_nt
        return mm_nt_fast(pack_t(at), pack_t(b))
    out = np.empty((at.shape[1], b.shape[1]), F32)
    pick(_MM_TN, at.shape[1], at.size * b.shape[1])(at, b, out)
    return out


def mm_tn(at, b, kernels: str = "fast"):
    """C = at^T b (C[i, j] = dot16(at[:, i], b[:, j])), without transposing at."""
    return mm_tn_fast(at, b) if fast_path(kernels) else mm_tn_ref(at, b)


def mm(a, b, kernels: str = "fast"):
    return mm_fast(a, b) if fast_path(kernels) else mm_ref(a, b)


# ---- mm_nt: C[i, j] = dot16(a[i, :], bt[j, :]), register-blocked ------------------------
# Both operands have k contiguous, so the 16 lanes of dot16 are the 16 floats of one vector
# register: lane l of output (i, j) is acc_ij[l], and chunk c of k adds a[i, 16c:16c+16] *
# bt[j, 16c:16c+16] to it (16 products rounded, then 16 sums rounded: docs/numerics.md
# section 1, rule 3, lane by lane). A tile of _MR x _NR outputs keeps its accumulators in
# registers across the whole k loop (its shape: the section above); the tile is
# written as LLVM IR through a Numba intrinsic, because Numba keeps no array in registers.
# The IR has plain fmul and fadd without fast-math flags, so LLVM may not contract them into
# fused multiply-adds (the assembly is checked). A k that is not a multiple of 16 is padded
# with zeros in both operands: the padding adds +0 * +0 = +0 to a lane, and x + (+0) == x for
# every accumulator value (a lane starts at +0 and a sum of two values is -0 only when both
# are -0, so a lane is never -0). The fold is the spec's: lanes l and l+8, then l+4, l+2, l+1,
# done for the 16 outputs of a tile at once (pairs of registers shuffled into halves).

try:
    from llvmlite import ir as _ir
    from numba.core import types as _nbtypes
    from numba.core.extending import intrinsic as _intrinsic
except ImportError:  # pragma: no cover - llvmlite and numba ship together
    _intrinsic = None


def _fold_tile_ir(builder, vecs):
    """The 16-lane fold of each <16 x float> in vecs (a power of two of them), in the spec's
    order: every step adds lane l and lane l + s/2 of each output's segment of s lanes.
    Pairs of registers are shuffled so one fadd does a step for several outputs; the outputs
    come out in order. Returns a list of vectors holding the outputs in order."""
    i32 = _ir.IntType(32)
    s = 16
    while s > 1:
        h = s // 2
        if len(vecs) >= 2:
            nxt = []
            for v, w in zip(vecs[0::2], vecs[1::2]):
                segs = 16 // s
                lo = [g * s + i for g in range(segs) for i in range(h)]
                lo = lo + [16 + x for x in lo]
                hi = [x + h for x in lo]
                vl = builder.shuffle_vector(v, w, _ir.Constant(_ir.VectorType(i32, 16), lo))
                vh = builder.shuffle_vector(v, w, _ir.Constant(_ir.VectorType(i32, 16), hi))
                nxt.append(builder.fadd(vl, vh))
            vecs = nxt
        else:
            (v,) = vecs
            width = v.type.count
            lo = [g * s + i for g in range(width // s) for i in range(h)]
            hi = [x + h for x in lo]
            vl = builder.shuffle_vector(v, v, _ir.Constant(_ir.VectorType(i32, len(lo)), lo))
            vh = builder.shuffle_vector(v, v, _ir.Constant(_ir.VectorType(i32, len(hi)), hi))
            vecs = [builder.fadd(vl, vh)]
        s = h
    return vecs


def _chunk_loop(builder, nch, inits, step):
    """A loop over c in [0, nch) carrying vector values: step(c, values) -> new values.
    Returns the values after the loop (the inits when nch <= 0). The one loop of the IR
    kernels: mm_nt's tile (its accumulators), the lane loops and the lane maps below."""
    i64 = _ir.IntType(64)
    pre = builder.basic_block
    loop = builder.append_basic_block("lanes.loop")
    done = builder.append_basic_block("lanes.done")
    builder.cbranch(builder.icmp_signed(">", nch, _ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    c = builder.phi(i64)
    c.add_incoming(_ir.Constant(i64, 0), pre)
    phis = []
    for v in inits:
        p = builder.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    new = step(c, phis)
    cn = builder.add(c, _ir.Constant(i64, 1))
    end = builder.basic_block
    c.add_incoming(cn, end)
    for p, v in zip(phis, new):
        p.add_incoming(v, end)
    builder.cbranch(builder.icmp_signed("<", cn, nch), loop, done)
    builder.position_at_end(done)
    outs = []
    for v0, v in zip(inits, new):
        p = builder.phi(v0.type)
        p.add_incoming(v0, pre)
        p.add_incoming(v, end)
        outs.append(p)
    return outs


def _make_tile(mr, nr):
    """Intrinsic tile(a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo, bias, zoff):
    out[ooff + r*ldo + c] = dot16 over nch chunks of 16 of a[aoff + r*lda + ...] and
    b[boff + c*ldb + ...], plus bias[zoff + c] (flat offsets into C-contiguous binary32
    arrays), r < mr, c < nr. A dot16 is never -0 (its lanes never are), so a bias of +0 changes
    no bit: products without a bias pass zeros."""

    @_intrinsic
    def tile(typingctx, a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo, bias, zoff):
        sig = _nbtypes.void(a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo, bias, zoff)

        def codegen(context, builder, sig, args):
            a_, aoff_, lda_, b_, boff_, ldb_, nch_, out_, ooff_, ldo_, bias_, zoff_ = args
            i64 = _ir.IntType(64)
            i32 = _ir.IntType(32)
            aoff_, lda_, boff_, ldb_, nch_, ooff_, ldo_, zoff_ = (
                context.cast(builder, v, t, _nbtypes.int64)
                for v, t in zip((aoff_, lda_, boff_, ldb_, nch_, ooff_, ldo_, zoff_),
                                (sig.args[1], sig.args[2], sig.args[4], sig.args[5], sig.args[6], sig.args[8],
                                 sig.args[9], sig.args[11])))
            zp = context.make_array(sig.args[10])(context, builder, bias_).data
            ap = context.make_array(sig.args[0])(context, builder, a_).data
            bp = context.make_array(sig.args[3])(context, builder, b_).data
            op = context.make_array(sig.args[7])(context, builder, out_).data
            v16 = _ir.VectorType(_ir.FloatType(), 16)
            zero = _ir.Constant(v16, [0.0] * 16)
            arow = [builder.add(aoff_, builder.mul(_ir.Constant(i64, r), lda_)) for r in range(mr)]
            brow = [builder.add(boff_, builder.mul(_ir.Constant(i64, c), ldb_)) for c in range(nr)]

            def step(kc, accs):
                k0 = builder.mul(kc, _ir.Constant(i64, 16))

                def load(base, off):
                    ptr = builder.gep(base, [builder.add(off, k0)])
                    return builder.load(builder.bitcast(ptr, v16.as_pointer()), align=4)

                avs = [load(ap, o) for o in arow]
                bvs = [load(bp, o) for o in brow]
                return [builder.fadd(accs[r * nr + c], builder.fmul(avs[r], bvs[c]))
                        for r in range(mr) for c in range(nr)]

            res = _chunk_loop(builder, nch_, [zero] * (mr * nr), step)  # 16 accumulators in registers
            folded = _fold_tile_ir(builder, res)  # the outputs r*nr + c in order
            width = folded[0].type.count
            vnr = _ir.VectorType(_ir.FloatType(), nr)
            bvec = builder.load(builder.bitcast(builder.gep(zp, [zoff_]), vnr.as_pointer()), align=4)
            for r in range(mr):
                v = folded[r * nr // width]
                first = r * nr % width
                row = builder.shuffle_vector(
                    v, v, _ir.Constant(_ir.VectorType(i32, nr), list(range(first, first + nr))))
                row = builder.fadd(row, bvec)  # the epilogue: dot16 + bias[c], one rounding
                off = builder.add(ooff_, builder.mul(_ir.Constant(i64, r), ldo_))
                ptr = builder.gep(op, [off])
                builder.store(row, builder.bitcast(ptr, vnr.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_tile_mr_nr = _make_tile(_MR, _NR)


# ---- 32-term products with the outputs in the lanes -------------------------------------
# At k = 32 the tile above spends as much on its fold as on its products (two chunks, then 30
# shuffles and 15 adds a tile). Here 16 outputs share a register instead: dot16's lane l is a
# register of its own, across 16 outputs (+0 + x[l] w[l], then + x[l + 16] w[l + 16], the x
# broadcast), and the fold is plain register adds in the spec's order (lanes l and l + 8, then
# l + 4, l + 2, l + 1), done depth first so few registers stay live. _ROWS32 rows of x share
# every weight register. The operations are the spec's, in its order, for every output: the
# pair MLP's second layer (32 -> 16 over the n^2 pairs) and the attention scores q k^T (32 per
# head) of the base model take it, 1.7x faster than the tiles.
_ROWS32 = 4


def _make_rows32(rows):
    """Intrinsic rows32(x, xoff, ldx, wt, woff, ldw, b, boff, y, yoff, ldy): for r < rows, c < 16,
    y[yoff + r*ldy + c] = dot16 over k < 32 of x[xoff + r*ldx + k] and wt[woff + k*ldw + c], plus
    b[boff + c] (flat offsets into C-contiguous binary32 arrays; wt holds W^T)."""

    @_intrinsic
    def rows32(typingctx, x, xoff, ldx, wt, woff, ldw, b, boff, y, yoff, ldy):
        sig = _nbtypes.void(x, xoff, ldx, wt, woff, ldw, b, boff, y, yoff, ldy)

        def codegen(context, builder, sig, args):
            i64 = _ir.IntType(64)
            i32 = _ir.IntType(32)
            v16 = _ir.VectorType(_ir.FloatType(), 16)
            xp, wp, bp, yp = (context.make_array(sig.args[k])(context, builder, args[k]).data for k in (0, 3, 6, 8))
            xoff_, ldx_, woff_, ldw_, boff_, yoff_, ldy_ = (
                context.cast(builder, args[k], sig.args[k], _nbtypes.int64) for k in (1, 2, 4, 5, 7, 9, 10))
            zero = _ir.Constant(v16, [0.0] * 16)
            undef = _ir.Constant(v16, None)
            lane0 = _ir.Constant(_ir.VectorType(i32, 16), [0] * 16)

            def at(base, off):
                return builder.bitcast(builder.gep(base, [off]), v16.as_pointer())

            def offset(base_off, k, ld):
                return builder.add(base_off, builder.mul(_ir.Constant(i64, k), ld))

            def broadcast(off):
                v = builder.insert_element(undef, builder.load(builder.gep(xp, [off])), _ir.Constant(i32, 0))
                return builder.shuffle_vector(v, undef, lane0)

            xrow = [offset(xoff_, r, ldx_) for r in range(rows)]

            def lane(l):  # dot16's lane l of every row: x[l] w[l] + x[l + 16] w[l + 16] (see below)
                w_lo = builder.load(at(wp, offset(woff_, l, ldw_)), align=4)
                w_hi = builder.load(at(wp, offset(woff_, l + 16, ldw_)), align=4)
                out = []
                for xr in xrow:
                    lo = builder.fmul(broadcast(builder.add(xr, _ir.Constant(i64, l))), w_lo)
                    hi = builder.fmul(broadcast(builder.add(xr, _ir.Constant(i64, l + 16))), w_hi)
                    out.append(builder.fadd(lo, hi))
                return out

            def fold(step, l):  # the fold's value at lane l after the steps of `step` and wider
                if step == 16:
                    return lane(l)
                lo, hi = fold(step * 2, l), fold(step * 2, l + step)
                return [builder.fadd(u, v) for u, v in zip(lo, hi)]

            # A lane starts from +0 in the spec: (+0 + lo) + hi. lo + hi is the same bits but for
            # lo = hi = -0, where it gives -0 for the spec's +0; a fold of such lanes stays the
            # same bits or -0 for +0 (the spec's lanes and sums are never -0), so adding +0 once
            # to the folded value gives the spec's dot16 exactly: one add an output instead of 16.
            dots = [builder.fadd(v, zero) for v in fold(1, 0)]
            bias = builder.load(at(bp, boff_), align=4)
            for r, dot in enumerate(dots):
                builder.store(builder.fadd(dot, bias), at(yp, offset(yoff_, r, ldy_)), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return rows32


_rows32_x4 = _make_rows32(_ROWS32)
_rows32_x1 = _make_rows32(1)


@njit(**_jit)
def rows32_block(x, xoff, ldx, i0, i1, wt, b, y, ldy, m, tb):
    """y[i*ldy + c] = dot16(x[xoff + i*ldx + (0..31)], W[c, :]) + b[c] for i0 <= i < i1, c < m:
    x and y flat (x's rows may be 32 columns of a wider array, read in place), wt = W^T padded
    with +0 to (32, m16) columns, b (m16,) padded with +0, m16 = m rounded up to 16; tb: 64
    floats of scratch for the last columns when m is not a multiple of 16."""
    m16 = wt.shape[1]
    wf = wt.reshape(m16 * 32)
    whole = m // 16 * 16
    i = i0
    while i < i1:
        nr = _ROWS32 if i1 - i >= _ROWS32 else 1
        for c0 in range(0, whole, 16):
            if nr == _ROWS32:
                _rows32_x4(x, xoff + i * ldx, ldx, wf, c0, m16, b, c0, y, i * ldy + c0, ldy)
            else:
                _rows32_x1(x, xoff + i * ldx, ldx, wf, c0, m16, b, c0, y, i * ldy + c0, ldy)
        if whole < m:  # the last columns into tb, then the ones that exist
            if nr == _ROWS32:
                _rows32_x4(x, xoff + i * ldx, ldx, wf, whole, m16, b, whole, tb, 0, 16)
            else:
                _rows32_x1(x, xoff + i * ldx, ldx, wf, whole, m16, b, whole, tb, 0, 16)
            for r in range(nr):
                for c in range(m - whole):
                    y[(i + r) * ldy + whole + c] = tb[r * 16 + c]
        i += nr


_ROWS32_TASK = 64  # rows of x per task of the parallel build


def _rows32_body(x, xoff, ldx, n, wt, b, y, ldy, m):
    nblk = (n + _ROWS32_TASK - 1) // _ROWS32_TASK
    tbs = np.empty((nblk, _ROWS32 * 16), np.float32)
    for blk in prange(nblk):
        tb = tbs[blk]
        rows32_block(x, xoff, ldx, blk * _ROWS32_TASK, min(n, blk * _ROWS32_TASK + _ROWS32_TASK), wt, b, y, ldy, m, tb)


ROWS32 = _build(_rows32_body, "_rows32")  # (parallel, serial): rows32_block over all n rows


@njit(**_jit)
def transpose32_into(x, xoff, ldx, n, wt):
    """wt (32, n16) = W^T for rows32_block from n rows of 32 at x[xoff + i*ldx + k] (flat), +0 past n."""
    for i in range(n):
        for k in range(32):
            wt[k, i] = x[xoff + i * ldx + k]
    for k in range(32):
        for i in range(n, wt.shape[1]):
            wt[k, i] = np.float32(0.0)


@njit(**_jit)
def transpose32(x, xoff, ldx, n):
    """transpose32_into a new (32, n16) array."""
    wt = np.empty((32, (n + 15) // 16 * 16), np.float32)
    transpose32_into(x, xoff, ldx, n, wt)
    return wt

_NT_ROWS = 16  # rows of a per task (a multiple of _MR)


def _mm_nt_body(a, bt, bias, out):
    m, k = a.shape
    n = bt.shape[0]
    nch = (k + 15) // 16
    k16 = nch * 16
    nfull = n // _NR * _NR
    if bt.shape[1] == k16:  # bt as it is (k a multiple of 16, or padded by pack_t); only a
        # last partial tile of its rows is packed
        bp = bt
        bfull = nfull
    else:  # every row of bt padded with zeros to k16
        bp = np.zeros(((n + _NR - 1) // _NR * _NR, k16), np.float32)
        for j in range(n):
            for kk in range(k):
                bp[j, kk] = bt[j, kk]
        bfull = bp.shape[0]
    btail = np.zeros((_NR, k16), np.float32)
    for j in range(bfull, n):
        for kk in range(k):
            btail[j - bfull, kk] = bt[j, kk]
    outf = out.reshape(m * n)  # flat views made once: a view per tile costs reference counts
    ntile = n // _NR * _NR  # columns in whole tiles
    nblk = (m + _NT_ROWS - 1) // _NT_ROWS
    # each task's scratch, allocated once per call: a panel of rows padded with +0 to k16 (with
    # k a multiple of 16 only the last rows take one: a single panel, for the last task alone)
    # and a tile's outputs
    own = 1 if k16 != k else 0  # a panel per task, or the one panel
    aps = np.zeros((nblk if own else 1, _MR, k16), np.float32)
    tbs = np.empty((nblk, _MR * _NR), np.float32)
    for blk in prange(nblk):
        ap = aps[np.int64(blk) * own]
        tb = tbs[blk]
        for i0 in range(blk * _NT_ROWS, min(m, blk * _NT_ROWS + _NT_ROWS), _MR):
            mr = min(_MR, m - i0)
            direct = mr == _MR and k16 == k
            if not direct:  # the panel's rows, zero past k (ap's padding columns stay +0)
                for r in range(mr):
                    arow = a[i0 + r]
                    prow = ap[r]
                    for kk in range(k):
                        prow[kk] = arow[kk]
                for r in range(mr, _MR):
                    prow = ap[r]
                    for kk in range(k):
                        prow[kk] = np.float32(0.0)
            for j0 in range(0, ntile, _NR):  # whole tiles (their columns are rows of bp)
                if direct:
                    _tile_mr_nr(a, i0 * k, k, bp, j0 * k16, k16, nch, outf, i0 * n + j0, n, bias, j0)
                elif mr == _MR:
                    _tile_mr_nr(ap, 0, k16, bp, j0 * k16, k16, nch, outf, i0 * n + j0, n, bias, j0)
                else:  # the last rows: into tb, then the rows that exist
                    _tile_mr_nr(ap, 0, k16, bp, j0 * k16, k16, nch, tb, 0, _NR, bias, j0)
                    for r in range(mr):
                        for c in range(_NR):
                            out[i0 + r, j0 + c] = tb[r * _NR + c]
            if ntile < n:  # the last columns: from bp when it was padded, else from btail
                if bfull > ntile:
                    if direct:
                        _tile_mr_nr(a, i0 * k, k, bp, ntile * k16, k16, nch, tb, 0, _NR, bias, ntile)
                    else:
                        _tile_mr_nr(ap, 0, k16, bp, ntile * k16, k16, nch, tb, 0, _NR, bias, ntile)
                else:
                    if direct:
                        _tile_mr_nr(a, i0 * k, k, btail, 0, k16, nch, tb, 0, _NR, bias, ntile)
                    else:
                        _tile_mr_nr(ap, 0, k16, btail, 0, k16, nch, tb, 0, _NR, bias, ntile)
                for r in range(mr):
                    for c in range(n - ntile):
                        out[i0 + r, ntile + c] = tb[r * _NR + c]


_MM_NT = _build(_mm_nt_body, "_mm_nt")


# When the register-blocked product (mm_nt) runs for mm and mm_tn: at least two tiles of the
# AVX-512 shape (4 x 4) each way, whatever the shape that runs (the same routing on every CPU),
# so narrower products keep the older kernels; mm_tn over a long k (the n^2 pairs'
# weight gradients, k = 160000 for 16 x 32 outputs) keeps its k-outermost kernel, which
# streams its operands once instead of transposing them. Either way the bytes are the same.
_NT_MAX_K_TN = 4096


def _nt_pays(m: int, k: int, n: int) -> bool:
    return m >= 8 and n >= 8 and k >= 8


@_intrinsic
def _t16(typingctx, x, xoff, ldx, out, ooff, ldo):
    """out[ooff + c*ldo + r] = x[xoff + r*ldx + c] for r, c < 16: one 16 x 16 block transposed in
    registers (16 loads, four rounds of 16 two-register shuffles swapping blocks of 8, 4, 2, 1,
    16 stores). Moves only: no arithmetic."""
    sig = _nbtypes.void(x, xoff, ldx, out, ooff, ldo)

    def codegen(context, builder, sig, args):
        x_, xoff_, ldx_, out_, ooff_, ldo_ = args
        i64 = _ir.IntType(64)
        i32 = _ir.IntType(32)
        xoff_, ldx_, ooff_, ldo_ = (context.cast(builder, v, t, _nbtypes.int64) for v, t in
                                    zip((xoff_, ldx_, ooff_, ldo_), (sig.args[1], sig.args[2], sig.args[4], sig.args[5])))
        xp = context.make_array(sig.args[0])(context, builder, x_).data
        op = context.make_array(sig.args[3])(context, builder, out_).data
        v16 = _ir.VectorType(_ir.FloatType(), 16)
        rows = []
        for r in range(16):
            ptr = builder.gep(xp, [builder.add(xoff_, builder.mul(_ir.Constant(i64, r), ldx_))])
            rows.append(builder.load(builder.bitcast(ptr, v16.as_pointer()), align=4))
        for d in (8, 4, 2, 1):
            mi = _ir.Constant(_ir.VectorType(i32, 16), [k if k & d == 0 else 16 + k - d for k in range(16)])
            mj = _ir.Constant(_ir.VectorType(i32, 16), [k + d if k & d == 0 else 16 + k for k in range(16)])
            new = list(rows)
            for i in range(16):
                if i & d == 0:
                    new[i] = builder.shuffle_vector(rows[i], rows[i + d], mi)
                    new[i + d] = builder.shuffle_vector(rows[i], rows[i + d], mj)
            rows = new
        for c in range(16):
            ptr = builder.gep(op, [builder.add(ooff_, builder.mul(_ir.Constant(i64, c), ldo_))])
            builder.store(rows[c], builder.bitcast(ptr, v16.as_pointer()), align=4)
        return context.get_dummy_value()

    return sig, codegen


def _pack_t_body(x, out):
    """out[j, kk] = x[kk, j] for kk < x.shape[0]; the columns past it are left as they are
    (zeros: the padding of k to a multiple of 16). Blocks of 16 x 16 for the caches."""
    k, n = x.shape
    kp = out.shape[1]
    for jb in prange((n + 15) // 16):
        j0 = jb * 16
        j1 = min(n, j0 + 16)
        for k0 in range(0, k, 16):
            k1 = min(k, k0 + 16)
            if k1 - k0 == 16 and j1 - j0 == 16:  # a whole block: in registers
                _t16(x, k0 * n + j0, n, out, j0 * kp + k0, kp)
            else:
                for kk in range(k0, k1):
                    for j in range(j0, j1):
                        out[j, kk] = x[kk, j]


_PACK_T = _build(_pack_t_body, "_pack_t")


def pack_t(x: np.ndarray) -> np.ndarray:
    """x (K, N) -> (N, K16): x transposed, k padded with +0 to a multiple of 16, so mm_nt
    takes it as it is (the padding adds +0 to lanes, which changes no accumulator)."""
    x = np.ascontiguousarray(x, F32)
    k, n = x.shape
    k16 = (k + 15) // 16 * 16
    out = np.zeros((n, k16), F32) if k16 != k else np.empty((n, k16), F32)
    pick(_PACK_T, n, x.size)(x, out)
    return out


def mm_nt_ref(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """C[i, j] = dot16(a[i, :], bt[j, :]): mm(a, bt.T)."""
    return mm_ref(a, np.asarray(bt).T)


def mm_nt_fast(a: np.ndarray, bt: np.ndarray, bias=None) -> np.ndarray:
    """a bt^T, plus bias (N,) added to every row in the tile's epilogue when given."""
    a = np.ascontiguousarray(a, F32)
    bt = np.ascontiguousarray(bt, F32)
    if a.shape[1] != bt.shape[1] and bt.shape[1] != (a.shape[1] + 15) // 16 * 16:  # or padded by pack_t
        raise ValueError(f"mm_nt: inner sizes differ ({a.shape} x {bt.shape}^T)")
    m, k = a.shape
    n = bt.shape[0]
    if k == 32 and bt.shape[1] == 32 and n >= 16:  # 32 terms: the outputs in the lanes
        return rows32_product(a, bt, bias)
    out = np.empty((m, n), F32)
    biasp = np.zeros((n + _NR - 1) // _NR * _NR, F32)  # whole tiles read whole bias vectors
    if bias is not None:
        biasp[:n] = bias
    pick(_MM_NT, (m + _NT_ROWS - 1) // _NT_ROWS, m * k * n)(a, bt, biasp, out)
    return out


def rows32_product(a: np.ndarray, bt: np.ndarray, bias=None) -> np.ndarray:
    """a bt^T (+ bias) for a (M, 32) and bt (N, 32) on ROWS32 (16 outputs in a register's lanes):
    mm_nt_fast's bytes, any N."""
    a = np.ascontiguousarray(a, F32)
    bt = np.ascontiguousarray(bt, F32)
    m = a.shape[0]
    n = bt.shape[0]
    out = np.empty((m, n), F32)
    biasp = np.zeros((n + 15) // 16 * 16, F32)  # whole registers read whole bias vectors
    if bias is not None:
        biasp[:n] = bias
    pick(ROWS32, m, m * 32 * n)(a.reshape(-1), 0, 32, m, transpose32(bt.reshape(-1), 0, 32, n), biasp,
                                out.reshape(-1), n, n)
    return out


def mm_nt(a, bt, kernels: str = "fast"):
    """C = a bt^T (C[i, j] = dot16(a[i, :], bt[j, :])): both operands with k contiguous."""
    return mm_nt_fast(a, bt) if fast_path(kernels) else mm_nt_ref(a, bt)


# ---- 16-lane row loops in registers: sums, dots and the maximum of 16-float chunks ----------
# Numba leaves a loop over a 16-float lane buffer scalar (the buffer lives in memory); these
# intrinsics keep the 16 lanes in one vector register across the chunks. lanes_dot and
# lanes_sum give the 16 lane accumulators of dot16 over whole chunks (lane l takes k = 16c + l,
# c ascending, each product rounded, then the sum rounded; the sum adds x, which is 1*x); the
# caller adds the last k % 16 terms into the stored lanes and folds them (fold16).
def _lanes_codegen(kind):
    def codegen(context, builder, sig, args):
        i64 = _ir.IntType(64)
        v16 = _ir.VectorType(_ir.FloatType(), 16)
        nin = 2 if kind == "dot" else 1
        ptrs, offs = [], []
        for t in range(nin):
            ptrs.append(context.make_array(sig.args[2 * t])(context, builder, args[2 * t]).data)
            offs.append(context.cast(builder, args[2 * t + 1], sig.args[2 * t + 1], _nbtypes.int64))
        nch = context.cast(builder, args[2 * nin], sig.args[2 * nin], _nbtypes.int64)
        optr = context.make_array(sig.args[2 * nin + 1])(context, builder, args[2 * nin + 1]).data
        ooff = context.cast(builder, args[2 * nin + 2], sig.args[2 * nin + 2], _nbtypes.int64)

        def load(t, c):
            ptr = builder.gep(ptrs[t], [builder.add(offs[t], builder.mul(c, _ir.Constant(i64, 16)))])
            return builder.load(builder.bitcast(ptr, v16.as_pointer()), align=4)

        if kind == "max":
            bad0 = _ir.Constant(_ir.VectorType(_ir.IntType(1), 16), [0] * 16)

            def step(c, vals):
                top, bad = vals
                v = load(0, c)
                top = builder.select(builder.fcmp_ordered(">", v, top), v, top)
                return [top, builder.or_(bad, builder.fcmp_unordered("uno", v, v))]

            res, bad = _chunk_loop(builder, nch, [_ir.Constant(v16, [float("-inf")] * 16), bad0], step)
        else:
            def step(c, vals):
                x = load(0, c)
                if kind == "dot":
                    x = builder.fmul(x, load(1, c))
                return [builder.fadd(vals[0], x)]

            (res,) = _chunk_loop(builder, nch, [_ir.Constant(v16, [0.0] * 16)], step)
        ptr = builder.gep(optr, [ooff])
        builder.store(res, builder.bitcast(ptr, v16.as_pointer()), align=4)
        if kind == "max":
            anybad = builder.icmp_unsigned("!=", builder.bitcast(bad, _ir.IntType(16)), _ir.Constant(_ir.IntType(16), 0))
            return anybad
        return context.get_dummy_value()

    return codegen


@_intrinsic
def lanes_dot(typingctx, a, aoff, b, boff, nch, out, ooff):
    """out[ooff + l] = lane l of dot16(a[aoff:], b[boff:]) over nch whole chunks of 16."""
    return _nbtypes.void(a, aoff, b, boff, nch, out, ooff), _lanes_codegen("dot")


@_intrinsic
def lanes_sum(typingctx, a, aoff, nch, out, ooff):
    """out[ooff + l] = lane l of dot16(a[aoff:], 1) over nch whole chunks of 16."""
    return _nbtypes.void(a, aoff, nch, out, ooff), _lanes_codegen("sum")


@_intrinsic
def lanes_max(typingctx, a, aoff, nch, out, ooff):
    """out[ooff + l] = the largest of a[aoff + 16c + l] (strict >, from -inf) over nch chunks;
    returns True when any of them is a NaN (then the caller scans the row itself)."""
    return _nbtypes.boolean(a, aoff, nch, out, ooff), _lanes_codegen("max")


def _exp32_ir(builder, v, in_range=False):
    """exp32 of every lane of the <16 x float> v: exp32_vec's branch-free operations, lane by
    lane, in IR (plain fmul/fadd/fsub without fast-math flags, llvm.floor, the exponent bits).
    in_range: the caller knows every lane is a number in [EXP32_MIN, EXP32_MAX] (tanh32's
    2 min(|x|, 9)), where the clamps and the special cases select the formula's own value:
    they are left out (a sixth of the operations)."""
    f32 = _ir.FloatType()
    v16 = _ir.VectorType(f32, 16)
    i16 = _ir.VectorType(_ir.IntType(32), 16)

    def splat(c):
        return _ir.Constant(v16, [float(c)] * 16)

    def isplat(c):
        return _ir.Constant(i16, [int(c)] * 16)

    mod = builder.module
    floor = mod.globals.get("llvm.floor.v16f32") or _ir.Function(mod, _ir.FunctionType(v16, [v16]),
                                                                  "llvm.floor.v16f32")
    xc = v
    if not in_range:
        xc = builder.select(builder.fcmp_ordered("==", v, v), v, splat(0.0))  # a NaN as 0
        xc = builder.select(builder.fcmp_ordered(">", xc, splat(EXP32_MAX)), splat(EXP32_MAX), xc)
        xc = builder.select(builder.fcmp_ordered("<", xc, splat(EXP32_MIN)), splat(EXP32_MIN), xc)
    n = builder.call(floor, [builder.fadd(builder.fmul(xc, splat(EXP32_LOG2E)), splat(0.5))])
    r = builder.fsub(builder.fsub(xc, builder.fmul(n, splat(EXP32_LN2_HI))), builder.fmul(n, splat(EXP32_LN2_LO)))
    c = EXP32_C
    p = splat(c[7])
    for k in range(6, -1, -1):
        p = builder.fadd(builder.fmul(p, r), splat(c[k]))
    ni = builder.fptosi(n, i16)
    n1 = builder.ashr(ni, isplat(1))  # floor(n / 2)
    bits1 = builder.shl(builder.add(n1, isplat(127)), isplat(23))
    bits2 = builder.shl(builder.add(builder.sub(ni, n1), isplat(127)), isplat(23))
    e = builder.fmul(builder.fmul(p, builder.bitcast(bits1, v16)), builder.bitcast(bits2, v16))
    if in_range:
        return e
    e = builder.select(builder.fcmp_ordered(">", v, splat(EXP32_MAX)), splat(float("inf")), e)
    e = builder.select(builder.fcmp_ordered("<", v, splat(EXP32_MIN)), splat(0.0), e)
    return builder.select(builder.fcmp_unordered("uno", v, v), v, e)


@_intrinsic
def exp32_lanes(typingctx, x, xoff, out, ooff, nch):
    """out[ooff + 16c + l] = exp32(x[xoff + 16c + l]) for c < nch, l < 16: whole chunks of 16 in
    a register each (out may be x). Contiguous arrays; the caller does the last x.size % 16."""
    sig = _nbtypes.void(x, xoff, out, ooff, nch)

    def codegen(context, builder, sig, args):
        i64 = _ir.IntType(64)
        v16 = _ir.VectorType(_ir.FloatType(), 16)
        xp = context.make_array(sig.args[0])(context, builder, args[0]).data
        op = context.make_array(sig.args[2])(context, builder, args[2]).data
        xoff_, ooff_, nch_ = (context.cast(builder, args[i], sig.args[i], _nbtypes.int64) for i in (1, 3, 4))

        def step(c, vals):
            at = builder.mul(c, _ir.Constant(i64, 16))
            src = builder.bitcast(builder.gep(xp, [builder.add(xoff_, at)]), v16.as_pointer())
            dst = builder.bitcast(builder.gep(op, [builder.add(ooff_, at)]), v16.as_pointer())
            builder.store(_exp32_ir(builder, builder.load(src, align=4)), dst, align=4)
            return vals

        _chunk_loop(builder, nch_, [], step)
        return context.get_dummy_value()

    return sig, codegen


def _tanh32_ir(builder, v):
    """tanh32 of every lane of the <16 x float> v: tanh32_vec's branch-free operations in IR
    (both formulas, the exp on 2*min(|x|, 9), then the selects)."""
    f32 = _ir.FloatType()
    v16 = _ir.VectorType(f32, 16)

    def splat(c):
        return _ir.Constant(v16, [float(c)] * 16)

    mod = builder.module
    fabs = mod.globals.get("llvm.fabs.v16f32") or _ir.Function(mod, _ir.FunctionType(v16, [v16]), "llvm.fabs.v16f32")
    ax = builder.call(fabs, [v])
    capped = builder.select(builder.fcmp_ordered("<", ax, splat(TANH32_BIG)), ax, splat(TANH32_BIG))
    # 2 * capped is in [0, 18] and never NaN (an unordered compare selects 9)
    e = _exp32_ir(builder, builder.fmul(splat(2.0), capped), in_range=True)
    c = TANH32_C
    x2 = builder.fmul(v, v)
    q = splat(c[8])
    for k in range(7, 0, -1):
        q = builder.fadd(builder.fmul(q, x2), splat(c[k]))
    small = builder.fadd(v, builder.fmul(v, builder.fmul(x2, q)))
    mid = builder.fsub(splat(1.0), builder.fdiv(splat(2.0), builder.fadd(e, splat(1.0))))
    neg = builder.fcmp_ordered("<", v, splat(0.0))
    mid = builder.select(neg, builder.fneg(mid), mid)
    t = builder.select(builder.fcmp_ordered("<", ax, splat(TANH32_SMALL)), small, mid)
    one = builder.select(neg, splat(-1.0), splat(1.0))
    t = builder.select(builder.fcmp_ordered(">=", ax, splat(TANH32_BIG)), one, t)
    return builder.select(builder.fcmp_unordered("uno", v, v), v, t)


def _gelu_ir(builder, v):
    """(y, t) of GELU's forward for every lane: u = c0*(x + c1*((x*x)*x)), t = tanh32(u),
    y = (0.5*x)*(1 + t), as fused.gelu_forward."""
    v16 = _ir.VectorType(_ir.FloatType(), 16)

    def splat(c):
        return _ir.Constant(v16, [float(c)] * 16)

    u = builder.fmul(splat(GELU32_C0), builder.fadd(v, builder.fmul(splat(GELU32_C1), builder.fmul(builder.fmul(v, v), v))))
    t = _tanh32_ir(builder, u)
    return builder.fmul(builder.fmul(splat(0.5), v), builder.fadd(splat(1.0), t)), t


def _map_lanes_codegen(fn, nout):
    """codegen of an intrinsic (x, xoff, out1, [out2,] ooff, nch): fn(builder, <16 x float>) gives
    nout vectors, stored at ooff + 16c of each output, for c < nch."""
    def codegen(context, builder, sig, args):
        i64 = _ir.IntType(64)
        v16 = _ir.VectorType(_ir.FloatType(), 16)
        xp = context.make_array(sig.args[0])(context, builder, args[0]).data
        outs = [context.make_array(sig.args[2 + k])(context, builder, args[2 + k]).data for k in range(nout)]
        xoff_, ooff_, nch_ = (context.cast(builder, args[i], sig.args[i], _nbtypes.int64)
                              for i in (1, 2 + nout, 3 + nout))

        def step(c, vals):
            at = builder.mul(c, _ir.Constant(i64, 16))
            src = builder.bitcast(builder.gep(xp, [builder.add(xoff_, at)]), v16.as_pointer())
            res = fn(builder, builder.load(src, align=4))
            res = res if isinstance(res, tuple) else (res,)
            for op, r in zip(outs, res):
                builder.store(r, builder.bitcast(builder.gep(op, [builder.add(ooff_, at)]), v16.as_pointer()), align=4)
            return vals

        _chunk_loop(builder, nch_, [], step)
        return context.get_dummy_value()

    return codegen


@_intrinsic
def tanh32_lanes(typingctx, x, xoff, out, ooff, nch):
    """out[ooff + 16c + l] = tanh32(x[xoff + 16c + l]) for c < nch (contiguous; out may be x)."""
    return _nbtypes.void(x, xoff, out, ooff, nch), _map_lanes_codegen(_tanh32_ir, 1)


@_intrinsic
def gelu_lanes(typingctx, x, xoff, y, t, ooff, nch):
    """y, t at ooff + 16c + l: GELU's output and tanh32 of its argument, for c < nch."""
    return _nbtypes.void(x, xoff, y, t, ooff, nch), _map_lanes_codegen(_gelu_ir, 2)


# ---- rowdot: out[i] = dot16(a[i, :], b[i, :]) -----------------------------------------
def rowdot_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """out[i] = dot16(a[i, :], b[i, :]) (the same dtype as a; binary64 only in checks)."""
    a, b = np.asarray(a), np.asarray(b)
    m, k = a.shape
    acc = np.zeros((m, LANES), a.dtype)
    for k0 in range(0, k, LANES):
        k1 = min(k0 + LANES, k)
        acc[:, : k1 - k0] += a[:, k0:k1] * b[:, k0:k1]
    return _fold_lanes_ref(acc, 1)


def _rowdot_body(a, b, out):
    m, k = a.shape
    k16 = k // 16 * 16
    nblk = (m + 15) // 16
    accs = np.empty((nblk, 16), np.float32)
    for blk in prange(nblk):
        acc = accs[blk]
        for i in range(blk * 16, min(m, blk * 16 + 16)):
            lanes_dot(a, i * k, b, i * k, k16 // 16, acc, 0)  # whole chunks in a register
            for kk in range(k16, k):
                acc[kk & 15] += a[i, kk] * b[i, kk]
            out[i] = fold16(acc)


_ROWDOT = _build(_rowdot_body, "_rowdot")


def rowdot_fast(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, F32)
    b = np.ascontiguousarray(b, F32)
    out = np.empty(a.shape[0], F32)
    pick(_ROWDOT, a.shape[0], a.size)(a, b, out)
    return out


def rowdot(a, b, kernels: str = "fast"):
    return rowdot_fast(a, b) if fast_path(kernels) else rowdot_ref(a, b)


# --------------------------------------------------------------------------------------
# Elementwise maps of the scalar kernels
# --------------------------------------------------------------------------------------
def _mapper(kernels, dtype):
    """The elementwise map of a scalar kernel, given as (parallel, serial) builds; each element
    is computed alone, so the split over threads cannot change a byte."""

    def run(x):
        x = np.asarray(x, dtype)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        pick(kernels, flat.size, flat.size)(flat, out)
        return out.reshape(x.shape)

    return run


# ---- exp32 ----------------------------------------------------------------------------
def _ldexp32(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """p * 2^n in two exact-power steps (each power is a normal binary32), rounded once at the end."""
    n1 = np.floor_divide(n, 2)
    n2 = n - n1
    s1 = np.ldexp(1.0, n1).astype(F32)
    s2 = np.ldexp(1.0, n2).astype(F32)
    return (p * s1) * s2


def exp32_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        xc = np.clip(x, EXP32_MIN, EXP32_MAX)
        n = np.floor(xc * EXP32_LOG2E + F32(0.5))
        r = (xc - n * EXP32_LN2_HI) - n * EXP32_LN2_LO
        c = EXP32_C
        p = c[7]
        for k in range(6, -1, -1):
            p = p * r + c[k]
        out = _ldexp32(p.astype(F32), n.astype(np.int64))
        out = np.where(x > EXP32_MAX, F32(np.inf), out)
        out = np.where(x < EXP32_MIN, F32(0.0), out)
        out = np.where(np.isnan(x), x, out)
    return out.astype(F32)


@njit(**_jit)
def exp32_scalar(x):
    if x != x:
        return x
    if x > EXP32_MAX:
        return np.float32(np.inf)
    if x < EXP32_MIN:
        return np.float32(0.0)
    n = np.float32(math.floor(x * EXP32_LOG2E + np.float32(0.5)))
    r = (x - n * EXP32_LN2_HI) - n * EXP32_LN2_LO
    c = EXP32_C
    p = c[7]
    p = p * r + c[6]
    p = p * r + c[5]
    p = p * r + c[4]
    p = p * r + c[3]
    p = p * r + c[2]
    p = p * r + c[1]
    p = p * r + c[0]
    ni = np.int64(n)
    n1 = ni // 2
    s1 = np.float32(math.ldexp(1.0, n1))
    s2 = np.float32(math.ldexp(1.0, ni - n1))
    return (p * s1) * s2


_VEC_CHUNK = 256  # elements per pass of the branch-free kernels (their scratch stays in L1)


@njit(**_jit)
def exp32_vec(x, out):
    """out[i] = exp32_scalar(x[i]) for 1-D binary32 arrays (out may be x), the same bytes, written
    without branches so the loops vectorize: every element takes the in-range formula on its value
    clamped to [EXP32_MIN, EXP32_MAX] (a NaN as 0), 2^n1 and 2^n2 are built from their exponent
    bits (both normal: n1, n2 in [-75, 64]), and the special cases are selected at the end.
    Contiguous arrays of 16 or more take exp32_lanes (the same operations in IR, a register
    per 16) for their whole chunks of 16; the last x.size % 16 take the loops below."""
    m = x.size
    if m >= 16 and x.strides[0] == 4 and out.strides[0] == 4:
        whole = m // 16 * 16
        exp32_lanes(x, 0, out, 0, m // 16)
        if whole == m:
            return
        x = x[whole:]
        out = out[whole:]
        m = x.size
    pbuf = np.empty(_VEC_CHUNK, np.float32)
    xbuf = np.empty(_VEC_CHUNK, np.float32)  # the inputs again: out may be x, and a loop that
    # reads x and writes out then runs scalar (LLVM's overlap check fails when they are one array)
    bits1 = np.empty(_VEC_CHUNK, np.int32)  # 2^n1 and 2^n2 in two arrays: unit-stride loops
    bits2 = np.empty(_VEC_CHUNK, np.int32)  # (interleaved, LLVM made gathers and scatters)
    scale1 = bits1.view(np.float32)
    scale2 = bits2.view(np.float32)
    for c0 in range(0, m, _VEC_CHUNK):
        c1 = min(m, c0 + _VEC_CHUNK)
        xs = x[c0:c1]  # chunk views: indices from 0, so no negative-index wraparound (which
        os = out[c0:c1]  # made LLVM gather and scatter)
        for j in range(c1 - c0):
            v = xs[j]
            xbuf[j] = v
            xc = v if v == v else np.float32(0.0)
            xc = EXP32_MAX if xc > EXP32_MAX else xc
            xc = EXP32_MIN if xc < EXP32_MIN else xc
            n = np.floor(xc * EXP32_LOG2E + np.float32(0.5))
            r = (xc - n * EXP32_LN2_HI) - n * EXP32_LN2_LO
            c = EXP32_C
            p = c[7]
            p = p * r + c[6]
            p = p * r + c[5]
            p = p * r + c[4]
            p = p * r + c[3]
            p = p * r + c[2]
            p = p * r + c[1]
            p = p * r + c[0]
            pbuf[j] = p
            ni = np.int32(n)
            n1 = ni >> 1  # floor(n / 2), as ni // 2
            bits1[j] = (n1 + np.int32(127)) << 23
            bits2[j] = (ni - n1 + np.int32(127)) << 23
        for j in range(c1 - c0):
            v = xbuf[j]
            e = (pbuf[j] * scale1[j]) * scale2[j]
            e = np.float32(np.inf) if v > EXP32_MAX else e
            e = np.float32(0.0) if v < EXP32_MIN else e
            os[j] = v if v != v else e


@njit(**_jit)
def tanh32_vec(x, out):
    """out[i] = tanh32_scalar(x[i]) for 1-D binary32 arrays (out may be x), the same bytes,
    branch-free: both formulas for every element (the exp on 2*min(|x|, 9)), then selected.
    Contiguous arrays take tanh32_lanes (the same operations in IR) for their whole chunks of 16."""
    m = x.size
    if m >= 16 and x.strides[0] == 4 and out.strides[0] == 4:
        whole = m // 16 * 16
        tanh32_lanes(x, 0, out, 0, m // 16)
        if whole == m:
            return
        x = x[whole:]
        out = out[whole:]
        m = x.size
    e = np.empty(m, np.float32)
    for j in range(m):
        e[j] = np.float32(2.0) * min(abs(x[j]), TANH32_BIG)
    exp32_vec(e, e)
    c = TANH32_C
    for j in range(m):
        v = x[j]
        ax = abs(v)
        x2 = v * v
        q = c[8]
        q = q * x2 + c[7]
        q = q * x2 + c[6]
        q = q * x2 + c[5]
        q = q * x2 + c[4]
        q = q * x2 + c[3]
        q = q * x2 + c[2]
        q = q * x2 + c[1]
        small = v + v * (x2 * q)
        mid = np.float32(1.0) - np.float32(2.0) / (e[j] + np.float32(1.0))
        mid = -mid if v < 0 else mid
        t = small if ax < TANH32_SMALL else mid
        one = np.float32(-1.0) if v < 0 else np.float32(1.0)
        t = one if ax >= TANH32_BIG else t
        out[j] = v if v != v else t


_MAP_BLOCK = 4096  # elements per thread's share of an elementwise map


def _map_exp32_body(x, out):
    for blk in prange((x.size + _MAP_BLOCK - 1) // _MAP_BLOCK):
        lo = blk * _MAP_BLOCK
        hi = min(x.size, lo + _MAP_BLOCK)
        exp32_vec(x[lo:hi], out[lo:hi])


_MAP_EXP32 = _build(_map_exp32_body, "_map_exp32")
exp32_fast = _mapper(_MAP_EXP32, F32)


def exp32(x, kernels: str = "fast"):
    return exp32_fast(x) if fast_path(kernels) else exp32_ref(x)


# ---- tanh32 ---------------------------------------------------------------------------
def tanh32_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F32)
    ax = np.abs(x)
    c = TANH32_C
    x2 = x * x
    q = c[8]
    for k in range(7, 0, -1):
        q = q * x2 + c[k]
    small = x + x * (x2 * q)
    e = exp32_ref(F32(2.0) * np.minimum(ax, TANH32_BIG))
    mid = F32(1.0) - F32(2.0) / (e + F32(1.0))
    mid = np.where(x < 0, -mid, mid)
    out = np.where(ax < TANH32_SMALL, small, mid)
    out = np.where(ax >= TANH32_BIG, np.where(x < 0, F32(-1.0), F32(1.0)), out)
    out = np.where(np.isnan(x), x, out)
    return out.astype(F32)


@njit(**_jit)
def tanh32_scalar(x):
    if x != x:
        return x
    ax = abs(x)
    if ax >= TANH32_BIG:
        return np.float32(-1.0) if x < 0 else np.float32(1.0)
    if ax < TANH32_SMALL:
        c = TANH32_C
        x2 = x * x
        q = c[8]
        q = q * x2 + c[7]
        q = q * x2 + c[6]
        q = q * x2 + c[5]
        q = q * x2 + c[4]
        q = q * x2 + c[3]
        q = q * x2 + c[2]
        q = q * x2 + c[1]
        return x + x * (x2 * q)
    e = exp32_scalar(np.float32(2.0) * ax)
    t = np.float32(1.0) - np.float32(2.0) / (e + np.float32(1.0))
    return -t if x < 0 else t


def _map_tanh32_body(x, out):
    for blk in prange((x.size + _MAP_BLOCK - 1) // _MAP_BLOCK):
        lo = blk * _MAP_BLOCK
        hi = min(x.size, lo + _MAP_BLOCK)
        tanh32_vec(x[lo:hi], out[lo:hi])


_MAP_TANH32 = _build(_map_tanh32_body, "_map_tanh32")
tanh32_fast = _mapper(_MAP_TANH32, F32)


def tanh32(x, kernels: str = "fast"):
    return tanh32_fast(x) if fast_path(kernels) else tanh32_ref(x)


# ---- exp64 (the losses) ---------------------------------------------------------------
def exp64_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F64)
    with np.errstate(invalid="ignore", over="ignore"):
        xc = np.clip(x, EXP64_MIN, EXP64_MAX)
        n = np.floor(xc * EXP64_LOG2E + 0.5)
        r = (xc - n * EXP64_LN2_HI) - n * EXP64_LN2_LO
        c = EXP64_C
        p = np.full_like(r, c[13])
        for k in range(12, -1, -1):
            p = p * r + c[k]
        ni = n.astype(np.int64)
        n1 = np.floor_divide(ni, 2)
        out = (p * np.ldexp(1.0, n1)) * np.ldexp(1.0, ni - n1)
        out = np.where(x > EXP64_MAX, np.inf, out)
        out = np.where(x < EXP64_MIN, 0.0, out)
        out = np.where(np.isnan(x), x, out)
    return out


@njit(**_jit)
def exp64_scalar(x):
    if x != x:
        return x
    if x > EXP64_MAX:
        return np.inf
    if x < EXP64_MIN:
        return 0.0
    n = math.floor(x * EXP64_LOG2E + 0.5)
    r = (x - n * EXP64_LN2_HI) - n * EXP64_LN2_LO
    c = EXP64_C
    p = c[13]
    for k in range(12, -1, -1):
        p = p * r + c[k]
    ni = np.int64(n)
    n1 = ni // 2
    return (p * math.ldexp(1.0, n1)) * math.ldexp(1.0, ni - n1)


@njit(**_jit)
def _map_exp64(x, out):
    for i in range(x.size):
        out[i] = exp64_scalar(x[i])


exp64_fast = _mapper((_map_exp64, _map_exp64), F64)  # binary64 maps serve the losses: small


def exp64(x, kernels: str = "fast"):
    return exp64_fast(x) if fast_path(kernels) else exp64_ref(x)


# ---- log64 (the losses) ---------------------------------------------------------------
def log64_ref(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F64)
    with np.errstate(invalid="ignore", divide="ignore"):
        m, e = np.frexp(x)
        low = m < LOG64_SQRT_HALF
        m = np.where(low, m * 2.0, m)
        e = np.where(low, e - 1, e).astype(F64)
        f = m - 1.0
        s = f / (2.0 + f)
        s2 = s * s
        c = LOG64_C
        q = np.full_like(s, c[10])
        for k in range(9, -1, -1):
            q = q * s2 + c[k]
        t = 2.0 * s
        out = e * EXP64_LN2_HI + (t + (t * (s2 * q) + e * EXP64_LN2_LO))
        out = np.where(x == 0, -np.inf, out)
        out = np.where(x < 0, np.nan, out)
        out = np.where(np.isposinf(x), np.inf, out)
        out = np.where(np.isnan(x), x, out)
    return out


@njit(**_jit)
def log64_scalar(x):
    if x != x:
        return x
    if x < 0.0:
        return np.nan
    if x == 0.0:
        return -np.inf
    if x == np.inf:
        return np.inf
    m, e = math.frexp(x)
    if m < LOG64_SQRT_HALF:
        m = m * 2.0
        e = e - 1
    ef = float(e)
    f = m - 1.0
    s = f / (2.0 + f)
    s2 = s * s
    c = LOG64_C
    q = c[10]
    for k in range(9, -1, -1):
        q = q * s2 + c[k]
    t = 2.0 * s
    return ef * EXP64_LN2_HI + (t + (t * (s2 * q) + ef * EXP64_LN2_LO))


@njit(**_jit)
def _map_log64(x, out):
    for i in range(x.size):
        out[i] = log64_scalar(x[i])


log64_fast = _mapper((_map_log64, _map_log64), F64)


def log64(x, kernels: str = "fast"):
    return log64_fast(x) if fast_path(kernels) else log64_ref(x)


# --------------------------------------------------------------------------------------
# SplitMix64: the one random source (new models, tag-head draws, batch permutations)
# --------------------------------------------------------------------------------------
def splitmix64_block(state: int, count: int) -> tuple[np.ndarray, int]:
    """The next `count` SplitMix64 outputs from `state`, and the state after them.

    Output k (k = 1..count) mixes state + k * gamma; uint64 arithmetic wraps modulo 2^64
    exactly as the scalar algorithm does.
    """
    state &= MASK64
    k = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + k * np.uint64(SPLITMIX_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(SPLITMIX_MUL1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(SPLITMIX_MUL2)
        z = z ^ (z >> np.uint64(31))
    return z, (state + count * SPLITMIX_GAMMA) & MASK64


class SplitMix64:
    """Scalar SplitMix64 with block draws; `uniform` gives binary32 in (lo, hi)."""

    def __init__(self, seed: int):
        self.state = int(seed) & MASK64

    def next_u64(self) -> int:
        z, self.state = splitmix64_block(self.state, 1)
        return int(z[0])

    def block(self, count: int) -> np.ndarray:
        z, self.state = splitmix64_block(self.state, count)
        return z

    def uniform(self, count: int, lo: float, hi: float) -> np.ndarray:
        """u = (z >> 40) * 2^-24 in [0, 1) exactly; v = lo + (hi - lo) * u in binary64, rounded to binary32."""
        z = self.block(count)
        u = (z >> np.uint64(40)).astype(F64) * (2.0 ** -24)
        return (lo + (hi - lo) * u).astype(F32)
