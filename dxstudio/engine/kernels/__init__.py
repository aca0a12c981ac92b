"""The engine's exact, machine-independent arithmetic: one module per concern.

Every result is a fixed sequence of separately rounded IEEE operations, so it is the same bytes
on every CPU, NumPy build and thread count (docs/numerics.md). Nothing here uses BLAS or NumPy's
exp/tanh/log. Import the module you need; this file imports nothing.

    constants.py   every numeric constant, typed once (binary32 ones as np.float32)
    reference.py   the reference arithmetic in NumPy: dot16/mm/mm_nt/mm_tn/rowdot, exp32,
                   tanh32, exp64, log64 (one definition each)
    intrinsics.py  kernels written as LLVM IR (llvmlite): mm_nt's tile, rows32, the lane loops
                   and the branch-free exp32/tanh32/GELU a register at a time
    compiled.py    the compiled bodies of the arithmetic (Numba), the same bytes as reference.py
    fused.py       the compiled layer kernels and forward sections (layer norm, softmax, GELU,
                   ReLU, the pair MLP, AdamW, the embedding, the heads)
    isa.py         the instruction set the kernels are compiled for and the tile shape of the
                   register-blocked products it asks for (AVX-512 4x4, AVX2 2x2, ...)
    runtime.py     OpenMP environment, glibc malloc tuning, Numba's cache stamped with the
                   engine's digest, the (parallel, serial) builds and the threads policy
    registry.py    one entry per operation: reference, compiled, when the compiled one applies;
                   `Ops`, the layers' view of it
    rng.py         SplitMix64, the one random source
"""
