"""Digests of the engine's results on fixed inputs, for comparing instruction sets.

tests/test_kernel_paths.py runs this file in a subprocess with NUMBA_CPU_NAME=generic (or
haswell), a fresh NUMBA_CACHE_DIR and DXSTUDIO_NUMBA_CACHE=0, so that LLVM compiles the fast
kernels for another CPU instead of reusing the host's cached build, and compares the
digests with the ones the host computes in-process through `digests()`.

    python tests/cpu_subprocess_check.py [part ...]     # parts: see PARTS; default all

prints one JSON object: {"digests": {part: sha256 hex}, "cpu_name": ..., "vector_registers": [...],
"fma_instructions": count, "assembly_chars": count, "fma_when_contraction_allowed": count,
"register_kind": where its 16-lane accumulators live, "tile": the mm_nt tile it ran (isa.TILE, chosen
from the target's features: AVX2's 4x2:8@4096 for haswell, SSE2's 2x1 for generic),
"cpu_seconds": this process's CPU time}.
"""
from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import numpy as np  # noqa: E402

from dxstudio.engine.kernels import compiled as kc, runtime as rt  # noqa: E402,F401
from synthetic import fake_window as _fake_window  # noqa: E402

F32 = np.float32


def _sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        if isinstance(a, float):
            h.update(struct.pack("<d", a))
        else:
            a = np.ascontiguousarray(a)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _matrices():
    """Shapes with K not a multiple of 16, K < 16, K = 1, one row or column; ordinary,
    denormal and overflowing values, and signed zeros."""
    rng = np.random.default_rng(20240611)
    pairs = []
    for m, k, n in ((37, 45, 29), (1, 1, 1), (5, 3, 70), (64, 16, 1), (1, 200, 33), (17, 33, 40)):
        pairs.append((rng.standard_normal((m, k)).astype(F32), rng.standard_normal((k, n)).astype(F32)))
    a = rng.standard_normal((9, 21)).astype(F32) * F32(1e-39)  # denormal inputs and products
    b = rng.standard_normal((21, 18)).astype(F32)
    pairs.append((a, b))
    a = rng.standard_normal((9, 21)).astype(F32) * F32(1e30)  # products overflow to +-inf
    b = rng.standard_normal((21, 18)).astype(F32) * F32(1e10)
    pairs.append((a, b))
    z = np.zeros((6, 19), F32)
    z[::2] = F32(-0.0)
    pairs.append((z, -np.ones((19, 20), F32)))
    return pairs


def _sweeps():
    x32 = np.concatenate([np.linspace(-104, 89, 40001, dtype=np.float64).astype(F32),
                          np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-39, -1e-39], F32)])
    x64 = np.concatenate([np.linspace(-746, 710, 40001),
                          np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, 1e-310])])
    pos = np.concatenate([np.exp(np.linspace(-700, 700, 40001)), np.linspace(0.5, 2, 40001),
                          np.array([0.0, -0.0, -1.0, np.inf, np.nan, 5e-324, 1e-310])])
    return x32, x64, pos




def _part_mm():
    return _sha(*(kc.mm_fast(a, b) for a, b in _matrices()))


def _part_rowdot():
    outs = []
    for a, _ in _matrices():
        outs.append(kc.rowdot_fast(a, a[:, ::-1]))  # each row against itself reversed
        outs.append(kc.rowdot_fast(a.reshape(1, -1), np.ones((1, a.size), F32)))  # one long row
    return _sha(*outs)


def _part_exp32():
    return _sha(kc.exp32_fast(_sweeps()[0]))


def _part_tanh32():
    return _sha(kc.tanh32_fast(_sweeps()[0] / F32(8)))


def _part_exp64():
    return _sha(kc.exp64_fast(_sweeps()[1]))


def _part_log64():
    return _sha(kc.log64_fast(_sweeps()[2]))


def _part_forward():
    from dxstudio.engine.layers import Ops
    from dxstudio.engine.model import forward

    from dxstudio.engine.config import SIZES
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.params import new_params

    cfg, base = SIZES["tiny"], SIZES["base"]
    rt = to_runtime(new_params(cfg, 7))
    outs = []
    # the tiny size, and the base size (its fixed-shape kernels: the pair MLP's 8 -> 32 -> 16)
    for c, params, n, seed in ((cfg, rt, 7, 1), (cfg, rt, 23, 2), (base, to_runtime(new_params(base, 3)), 21, 3)):
        o = forward(c, params, _fake_window(c, n, seed), Ops("fast"))
        outs += [o.tag_logits, o.role_logits, o.doc_logits, o.item_scores, o.kv_scores]
    return _sha(*outs)


def _part_train_step():
    from dxstudio.engine.readiness import training_run
    from dxstudio.engine.training import TrainState, train_step

    cfg, container, examples, settings = training_run()  # the step readiness.prepare compiles
    state = TrainState.start(cfg, container, settings)
    result = train_step(state, examples, 1e-3)
    return _sha(float(result.loss), float(result.grad_norm), *result.grads.values(),
                *state.container_params().values())


PARTS = {"mm": _part_mm, "rowdot": _part_rowdot, "exp32": _part_exp32, "tanh32": _part_tanh32,
         "exp64": _part_exp64, "log64": _part_log64, "forward": _part_forward,
         "train_step": _part_train_step}


def digests(parts=None) -> dict:
    """SHA-256 of each part's result bytes on the fixed inputs."""
    parts = list(PARTS) if not parts else list(parts)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown parts {unknown}; choose from {list(PARTS)}")
    return {p: PARTS[p]() for p in parts}


def _compiled_assembly(sample: bool = False, elsewhere: dict | None = None) -> tuple[str, int]:
    """The assembly of every compiled fast kernel (empty for builds loaded from the cache), and
    how many compiled (kernel, signature) pairs gave none (loaded from the cache). sample: the
    products, exp and tanh only (SAMPLE_KERNELS), enough to show the instruction set a build
    targets (Numba's target is the whole process's); every kernel: the FMA count's proof.
    elsewhere: assembly_map() of another process of the same run (the test suite's second worker
    compiled the training step's kernels that this one loaded from the cache it shares)."""
    found = assembly_map(sample)
    for key, asm in found.items():
        if asm is None and elsewhere:
            found[key] = elsewhere.get(key)
    return "\n".join(a for a in found.values() if a), sum(a is None for a in found.values())


def _kernels(sample: bool = False) -> list:
    kernels = [*kc._MM, *kc._MM_TN, *kc._MM_NT, *kc._PACK_T, *kc._ROWDOT, kc.fold16,
               kc.exp32_vec, kc.tanh32_vec, kc.exp64_scalar,
               kc.log64_scalar, *kc._MAP_EXP32, *kc._MAP_TANH32, kc._map_exp64, kc._map_log64,
               kc.rows32_block, kc.transpose32]
    if sample:
        return kernels
    from dxstudio.engine.blocks import transformer
    from dxstudio.engine.kernels import fused

    for pair in (fused._LAYERNORM_FWD, fused._LAYERNORM_BWD, fused._SOFTMAX_FWD, fused._SOFTMAX_BWD,
                 fused._GELU_FWD, fused._GELU_BWD, fused._RELU_FWD, fused._RELU_BWD, fused._LINEAR8_RELU,
                 fused._LINEAR32, fused._LINEAR16_RELU_BWD,
                 (transformer._attention_heads_par, transformer._attention_heads_ser)):
        kernels += list(pair)  # the fused layer kernels: (parallel, serial) builds
    # the forward's compiled sections (a block, the characters, the embedding sum, the heads)
    kernels += [transformer._block_forward_body, fused._charconv_words_body, fused._embed_forward_body,
                fused._heads_forward_body, fused._linear_nt, fused._layernorm_nt, fused._pointer_scores,
                transformer._block_forward_lean, fused._heads_forward_lean, fused._pair_bias_body, transformer._add_into]
    return kernels


def _carried(kernels) -> set:
    """ids of the libraries of the (kernel, signature) pairs compiled in this process whose code
    another listed pair compiled here carries: Numba links a callee's module into its caller's
    (and so on down), so the caller's assembly holds the callee's code, compiled for the same
    target with the same options. Emitting the callee's again was half of the host build's
    facts (a preparation's 46 pairs: 23.7 s of CPU; the 16 that no other carries: 11.4 s).
    A callee loaded from the cache is never carried (its module is object code, not linked in)."""
    libraries = [kernel.overloads[sig].library for kernel in kernels
                 for sig in kernel.signatures if sig in getattr(kernel, "overloads", {})]
    carried = set()

    def walk(library):
        for callee in getattr(library, "_linking_libraries", ()):
            if not getattr(callee, "_disable_inspection", True) and id(callee) not in carried:
                carried.add(id(callee))
                walk(callee)

    for library in libraries:
        if not getattr(library, "_disable_inspection", True):  # compiled here
            walk(library)
    return carried


def assembly_map(sample: bool = False) -> dict:
    """{"module.kernel(signature)": its assembly, "" where another listed pair compiled here
    carries its code (_carried: it is in that one's assembly), or None where this process loaded
    it from the cache}, for every compiled (kernel, signature) pair of _kernels(sample)."""
    import warnings

    found = {}
    kernels = _kernels(sample)
    carried = _carried(kernels)
    for kernel in kernels:
        for sig in kernel.signatures:
            key = f"{kernel.py_func.__module__}.{kernel.py_func.__qualname__}{sig}"
            overload = getattr(kernel, "overloads", {}).get(sig)
            if overload is not None and id(overload.library) in carried:
                found[key] = ""
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    asm = kernel.inspect_asm(sig)
                except Exception:  # a build loaded from the cache carries no assembly
                    asm = None
            # Numba answers for cached code with a warning ("Inspection disabled for cached
            # code. Invalid result is returned.") and a placeholder: not this kernel's assembly
            if any("cached code" in str(w.message) for w in caught):
                asm = None
            found[key] = asm
    return found


# DXSTUDIO_CHECK_ASSEMBLY=sample (tests/conftest.py sets it for the generic build): the assembly
# of SAMPLE_KERNELS only. x86-64's baseline has no FMA instruction to count and no register
# wider than xmm, so the sample shows what the whole would (the target is the process's); the
# whole engine's assembly is 7-9 s of CPU more. The builds with FMA (haswell, the host's) read
# every kernel.
def assembly_facts(sample: bool | None = None, elsewhere: dict | None = None) -> dict:
    """Which x86 vector registers the compiled kernels use (xmm: SSE, ymm: AVX, zmm: AVX-512),
    proof that the subprocess really compiled for another instruction set, and how many fused
    multiply-add instructions they contain (the rules allow none). "assembly_of": "every kernel"
    or "sample" (DXSTUDIO_CHECK_ASSEMBLY=sample)."""
    import os

    if sample is None:
        sample = os.environ.get("DXSTUDIO_CHECK_ASSEMBLY", "all") == "sample"
    asm, missing = _compiled_assembly(sample, elsewhere)
    return {"assembly_chars": len(asm), "kernels_without_assembly": missing, "fma_instructions": _count_fma(asm),
            "assembly_of": "sample" if sample else "every kernel",
            "vector_registers": [r for r in ("xmm", "ymm", "zmm") if f"%{r}" in asm],
            "fma_when_contraction_allowed": _count_fma(_contracted_sample_assembly())}


def _count_fma(asm: str) -> int:
    return sum(asm.count(op) for op in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub"))


def _contracted_sample_assembly() -> str:
    """a*b + c compiled with contraction allowed: shows that the count above would see a fused
    multiply-add if LLVM emitted one (on a CPU with FMA)."""
    import numba

    @numba.njit(fastmath={"contract"})
    def multiply_add(a, b, c):
        return a * b + c

    multiply_add(np.float32(1), np.float32(2), np.float32(3))
    return multiply_add.inspect_asm(multiply_add.signatures[0])


def parallel_builds_compiled() -> list[str]:
    """The parallel builds (runtime._build's `*_par` kernels) this process compiled. A process
    whose kernels have one thread runs the sections' serial builds only (runtime.section_par),
    which must not compile, link or optimise a parallel one: none."""
    from numba.core.registry import CPUDispatcher

    from dxstudio.engine.blocks import transformer
    from dxstudio.engine.kernels import fused

    found = set()
    for module in (kc, fused, transformer):
        for value in vars(module).values():
            kernels = value if isinstance(value, tuple) else (value,)
            for k in kernels:
                if isinstance(k, CPUDispatcher) and k.py_func.__name__.endswith("_par") and k.signatures:
                    found.add(k.py_func.__name__)
    return sorted(found)


def main(argv) -> int:
    import numba

    import resource

    from dxstudio.engine.kernels import isa

    result = {"digests": digests(argv), "cpu_name": numba.config.CPU_NAME, **assembly_facts(),
              "register_kind": isa.register_kind(*isa.target_cpu()), "tile": isa.TILE,
              "threads": numba.get_num_threads(), "parallel_builds_compiled": parallel_builds_compiled()}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 1)  # compiling is most of it
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
