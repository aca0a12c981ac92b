"""The instruction set the kernels are compiled for and the shape of the register-blocked
products that follows from it: the one place both are decided (issue 26).

    target_cpu()        (name, features) LLVM compiles for, as Numba decides them
    register_kind(...)  zmm (AVX-512), ymm (AVX/AVX2), xmm (SSE2), neon: where a 16-lane
                        accumulator lives
    TILE_SHAPES         register kind -> mm_nt's tile (rows of a, rows of bt)
    _MR, _NR            the tile that runs (intrinsics._make_tile, compiled._mm_nt_body);
                        DXSTUDIO_TILE=MxN forces one (benchmarks, the same-bytes tests)
    TRANSPOSE_BLOCK     register kind -> side of the square sub-blocks a 16 x 16 transpose
                        is done in (_TBLOCK: the target's; intrinsics._t16)
    describe_target()   one line for the benchmarks: CPU, vector flags, tile

The engine's cache stamp (runtime.engine_source_digest) includes the tile, so a build cached for
one shape is never loaded for another.
"""
from __future__ import annotations

import os

# A 16-lane accumulator is one zmm register on AVX-512 (32 of them), two ymm on AVX/AVX2 (16 of
# them), four xmm on SSE2 (16) or four q registers on ARM64 NEON (32). mm_nt's tile keeps
# _MR x _NR accumulators in registers across its k loop; a tile whose accumulators fill half of
# the register file leaves the other half to the operands. The 4 x 4 tile of AVX-512 is 32 ymm
# registers on AVX2, twice what there is: LLVM spills them to the stack every chunk (measured on
# a 2-core AMD EPYC: 2 x 2 runs mm_nt 1.8-2.8x faster than 4 x 4). The shape changes no bit: each
# output has its own accumulator, its lanes take the same products in the same order (chunk c of
# k adds a[16c + l] b[16c + l] to lane l) and the fold is the same (_fold_tile_ir); register
# blocking over outputs only chooses which outputs run side by side.
TILE_SHAPES = {  # register kind: (rows of a, rows of bt) per tile (accumulators: TILE_LANES below)
    "zmm": (4, 4),  # AVX-512: 16 accumulators, 16 of 32 registers
    "ymm": (4, 2),  # AVX / AVX2: 8 accumulators of 8 lanes (TILE_LANES), 8 of 16 registers
    "xmm": (2, 1),  # SSE2 (x86-64 baseline): 2 accumulators, 8 of 16 registers
    "neon": (2, 2),  # ARM64 NEON (on paper): 4 accumulators, 16 of 32 registers
}


def target_cpu() -> tuple[str, str]:
    """(name, features) of the CPU LLVM compiles the kernels for, as Numba decides them
    (numba.core.config and codegen): NUMBA_CPU_NAME / NUMBA_CPU_FEATURES when set (the
    cross-CPU tests; "generic" alone means no features), else the host's. Through llvmlite
    only: this module imports no Numba, so runtime.py may ask it while it sets Numba up."""
    import llvmlite.binding as llvm

    name = os.environ.get("NUMBA_CPU_NAME") or None
    features = os.environ.get("NUMBA_CPU_FEATURES")
    if features is None and str(name).lower() == "generic":
        features = ""
    if features is None:
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:
            features = ""
    return name or llvm.get_host_cpu_name(), features


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


# Lanes per pass of the tile's k loop: 16 takes every chunk of 16 whole (a 16-lane accumulator
# per output); 8 runs the loop twice, lanes 0-7 of every chunk, then lanes 8-15 (an 8-lane
# accumulator per output, one ymm register), then joins the halves and folds. Each lane still
# takes its chunks in ascending order from +0 and the fold is the same: the same bytes, with half
# the registers per output (DXSTUDIO_TILE=MxN:8 to try it; measured in bench/README.md). AVX2's
# 4 x 2 tile in passes of 8 lanes (one ymm per output) loads 6 ymm a half-chunk for 8 products
# where 2 x 2 at 16 lanes loads 8 for 8, and folds 8 outputs at a time: 4-20% more GFLOP/s on the
# blocks' shapes on Zen 3 (bench/README.md, 7 December, 04:10). tile_acc takes the same passes.
TILE_LANES = {"zmm": 16, "ymm": 8, "xmm": 16, "neon": 16}


# mm_nt's outputs in column blocks: the rows of bt (the products' columns) in blocks of about
# TILE_PANEL binary32 (16 KB: half of Zen 2's 32 KB L1), every row pair of a task swept over one
# block before the next, so the block is read from L1 by each of the task's rows instead of the
# whole bt from L2 (0: every column for one row pair, then the next: AVX-512's order, kept as it
# was measured). Each output is still one tile's dot16, computed whole: the order of the outputs
# changes no bit. DXSTUDIO_TILE=MxN[:L]@P forces P (0 = off); a forced shape without @ has 0.
TILE_PANEL = {"zmm": 0, "ymm": 4096, "xmm": 0, "neon": 0}


# A 16 x 16 block transposed in registers (intrinsics._t16: pack_t, the attention's strips, the
# pair MLP's backward) in square sub-blocks of TRANSPOSE_BLOCK floats a side, each loaded, shuffled
# and stored before the next: 16 <16 x float> rows are 32 ymm registers on AVX2, so the whole block
# at once spills half of them to the stack (122 vector stack moves in pack_t's build); four 8 x 8
# blocks of one ymm a row fit (21). AVX-512 keeps one 16 x 16 block (16 of 32 zmm). Moves only: no
# arithmetic, so every choice gives the same bytes. (Measured on AVX2 in bench/README.md, 7 December.)
TRANSPOSE_BLOCK = {"zmm": 16, "ymm": 8, "xmm": 4, "neon": 8}


def _tile_panel(kind: str) -> int:
    """Floats of bt per column block: DXSTUDIO_TILE=...@P, else TILE_PANEL of the register kind."""
    forced = os.environ.get("DXSTUDIO_TILE", "").strip().lower()
    if "@" in forced:
        try:
            panel = int(forced.split("@", 1)[1])
        except ValueError:
            raise ValueError(f"DXSTUDIO_TILE={forced!r}: expected rows x cols[:lanes][@floats] such as 2x2@4096") from None
        if panel < 0 or panel > 1 << 20:
            raise ValueError(f"DXSTUDIO_TILE={forced!r}: the column block must be 0 to {1 << 20} floats")
        return panel
    return 0 if forced else TILE_PANEL.get(kind, 0)


def _tile_lanes(kind: str) -> int:
    """Lanes per pass: DXSTUDIO_TILE=MxN:L (L in 4, 8, 16), else TILE_LANES of the register kind."""
    forced = os.environ.get("DXSTUDIO_TILE", "").strip().lower().split("@", 1)[0]
    if ":" in forced:
        try:
            lanes = int(forced.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"DXSTUDIO_TILE={forced!r}: expected rows x cols[:lanes] such as 4x2:8") from None
        if lanes not in (4, 8, 16):
            raise ValueError(f"DXSTUDIO_TILE={forced!r}: lanes per pass must be 4, 8 or 16")
        return lanes
    return 16 if forced else TILE_LANES.get(kind, 16)


def _tile_shape() -> tuple[str, int, int]:
    """(why, rows, cols) of mm_nt's tile: DXSTUDIO_TILE=MxN[:L] (M, N in 1, 2, 4; benchmarks and the
    test that every shape gives the same bytes), else the target's register kind."""
    forced = os.environ.get("DXSTUDIO_TILE", "").strip().lower().split("@", 1)[0].split(":", 1)[0]
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


def tile_name(mr: int, nr: int, lanes: int = 16, panel: int = 0) -> str:
    """The tile as DXSTUDIO_TILE spells it: MxN, :L when fewer than 16 lanes a pass, @P with column blocks."""
    return (f"{mr}x{nr}" if lanes == 16 else f"{mr}x{nr}:{lanes}") + (f"@{panel}" if panel else "")


def default_tile(kind: str) -> str:
    """The tile a build for that register kind runs when nothing forces one (TILE_SHAPES,
    TILE_LANES, TILE_PANEL): the cross-CPU tests check that a build for another target ran it."""
    return tile_name(*TILE_SHAPES[kind], TILE_LANES.get(kind, 16), TILE_PANEL.get(kind, 0))


TILE_CHOICE, _MR, _NR = _tile_shape()  # output tile: rows of a x rows of bt (a power of two)
_LANES = _tile_lanes(TILE_CHOICE)  # lanes per pass of its k loop
_PANEL = _tile_panel(TILE_CHOICE)  # floats of bt per column block of mm_nt (0: no blocks)
TILE = tile_name(_MR, _NR, _LANES, _PANEL)
# the transposes' sub-block: the target's (a forced tile leaves it to the target too)
_TBLOCK = TRANSPOSE_BLOCK[register_kind(*target_cpu())]


def describe_target() -> str:
    """One line for the benchmarks: the target CPU, its vector flags, and the tile that runs."""
    name, features = target_cpu()
    flags = [f[1:] for f in features.split(",") if f.startswith("+") and
             (f[1:] in ("sse2", "avx", "avx2", "fma", "neon") or f[1:].startswith("avx512"))]
    kind = register_kind(name, features)
    return (f"target CPU {name} ({' '.join(sorted(flags)) or 'baseline flags'}): 16-lane accumulators in "
            f"{kind} registers; mm_nt tile {TILE} ({'forced by ' if TILE_CHOICE.startswith('D') else 'for '}"
            f"{TILE_CHOICE}{'' if TILE_CHOICE.startswith('D') else ', the default'}); transposes in {_TBLOCK} x {_TBLOCK} blocks")
