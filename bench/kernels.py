"""Each compiled kernel alone: its assembly (no FMA, vector width) and its speed against the
machine's peak, one thread.

    DXSTUDIO_NUMBA_CACHE=0 python bench/kernels.py [--repeats 15]
    python bench/kernels.py --backward [--sizes 150,400] [--repeats 15]   # a block's backward, part by part

DXSTUDIO_NUMBA_CACHE=0 makes Numba compile here, so inspect_asm has the assembly (a build loaded
from the cache carries none). For every kernel: the count of multiply and add instructions by
register width (xmm: 4 lanes, ymm: 8, zmm: 16; scalar `ss`/`sd` forms counted apart) and of
fused multiply-adds (must be 0). Then each product kernel on the shapes the base model uses at
150 and 400 words, the best of --repeats calls timed by the process's CPU clock (robust on a
shared machine), as GFLOP/s (2*M*K*N) and as a fraction of the peak: without FMA one core issues
two 16-lane binary32 operations a cycle (issue 13's rule of thumb: 32 flop/cycle; Zen 5 can
issue four, 64), at the clock /proc/cpuinfo reports. The last line is a JSON object.

--backward: one transformer block's backward at the base size (d 128, 4 heads, ffn 512), part by
part as its compiled call runs them (the serial builds, one thread, the median of --repeats on the
CPU clock): each linear layer's packs (pack_t), dx = dy W and dW = dy^T x (mm_nt on the packed
operands, with their M x K x N and GFLOP/s), the bias sums; the attention's adjoints for 4 heads,
whole and product by product; then the whole block in one call, so what is not a product shows.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench import common as C  # noqa: E402
from dxstudio.engine.kernels import compiled as kc, fused, runtime as rt  # noqa: E402


def clock_ghz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1e3
    except OSError:
        pass
    return 3.0


def asm_facts(kernel) -> dict:
    text = "\n".join(kernel.inspect_asm(sig) for sig in kernel.signatures)
    ops = collections.Counter()
    for op, kind, reg in re.findall(r"\bv(mul|add|sub|div)(ps|ss|pd|sd)\s+[^\n]*?%([xyz]mm)", text):
        ops[f"{op}{kind}.{reg}" if kind in ("ps", "pd") else f"{op}{kind}"] += 1
    fma = len(re.findall(r"\bv(?:fn?madd|fn?msub)\w*", text))
    # vector registers moved to or from the stack: spills (and their reloads), by width
    spills = collections.Counter(
        m.group(1) or m.group(2) for m in re.finditer(
            r"\bvmov\w*\s+(?:%([xyz]mm)\d+,\s*-?\d*\(%rsp\)|-?\d*\(%rsp\),\s*%([xyz]mm)\d+)", text))
    return {"fma": fma, "ops": dict(sorted(ops.items())), "spills": dict(sorted(spills.items()))}


def best_cpu_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def median_cpu_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return float(np.median(times))


def backward_parts(sizes, repeats: int) -> dict:
    """--backward: a block's backward part by part (see the module's doc)."""
    from dxstudio.engine.blocks import transformer as T

    f32 = np.float32
    d, ffn, heads = 128, 512, 4
    dh = d // heads
    rng = np.random.default_rng(0)
    figures = {}
    for n in sizes:
        def r(*shape):
            return rng.standard_normal(shape).astype(f32)

        n16 = (n + 15) // 16 * 16
        zb = np.zeros(max(ffn, 3 * d, n16) + 8, f32)
        rows, parts = [], 0.0

        def part(name, fn, flops=0):
            nonlocal parts
            sec = median_cpu_seconds(fn, repeats)
            parts += sec
            g = flops / sec / 1e9 if flops else 0.0
            figures[f"ms_bwd_{n}_{name.split()[0]}_{name.split()[1]}"] = 1e3 * sec
            rows.append(f"  {name:44s} {1e3 * sec:8.3f} ms" + (f"  {g:6.1f} GFLOP/s" if flops else ""))

        for layer, out_f, in_f in (("fc2", d, ffn), ("fc1", ffn, d), ("proj", d, d), ("qkv", 3 * d, d)):
            dy, x, w = r(n, out_f), r(n, in_f), r(out_f, in_f)
            dyt, wp, xp = fused._packed(dy, False), fused._packed(w, False), fused._packed(x, False)
            dx, dw, db = np.empty((n, in_f), f32), np.empty((out_f, in_f), f32), np.empty(out_f, f32)
            part(f"{layer} packs (dy, W, x)", lambda: (fused._packed(dy, False), fused._packed(w, False),
                                                        fused._packed(x, False)))
            part(f"{layer} dx=dyW {n}x{out_f}x{in_f}", lambda: fused._nt(dy, wp, zb, dx, False), 2 * n * out_f * in_f)
            part(f"{layer} dW=dyTx {out_f}x{n16}x{in_f}", lambda: fused._nt(dyt, xp, zb, dw, False),
                 2 * n * out_f * in_f)
            part(f"{layer} db rowsums", lambda: fused._rowsums(dyt, db))
        da, qkv = r(n, d), r(n, 3 * d)
        probs = np.abs(r(heads, n, n))
        probs /= probs.sum(-1, keepdims=True)
        dqkv, dpb = np.empty((n, 3 * d), f32), np.zeros((16, n * n), f32)
        sec = median_cpu_seconds(lambda: T._attention_bwd_ser(da, qkv, probs, heads, f32(5.65), dqkv, dpb, 0), repeats)
        figures[f"ms_bwd_{n}_attention"] = 1e3 * sec
        rows.append(f"  {'attention, 4 heads, whole':44s} {1e3 * sec:8.3f} ms  {4 * 8 * n * n * dh / sec / 1e9:6.1f} GFLOP/s")
        parts += sec
        dah, vh, p = r(n, dh), r(n, dh), probs[0]
        vt = kc.transpose32(vh.reshape(-1), 0, dh, n)
        dp, out = np.empty((n, n), f32), np.empty((n, dh), f32)
        pt, daht = kc.pack_t(p), kc.pack_t(dah)
        tb = np.empty(64, f32)
        for name, fn in ((f" dp=da vT {n}x32x{n} (rows32)", lambda: kc.rows32_block(
                              dah.reshape(-1), 0, dh, np.int64(0), n, vt, zb[:n16], dp.reshape(-1), n, n, tb)),
                         (f" dv=pT da {n}x{n16}x32", lambda: fused._mm_nt_ser(pt, daht, zb, out)),
                         (f" dq=dsc k {n}x{n}x32", lambda: fused._mm_nt_ser(p, daht, zb, out))):
            sec = median_cpu_seconds(fn, repeats)
            rows.append(f"    {name:42s} {1e3 * sec:8.3f} ms  {2 * n * n * dh / sec / 1e9:6.1f} GFLOP/s (one head)")
        xh, inv = r(n, d), np.abs(r(n))
        w = T.Weights(*(r(*s) for s in [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (ffn, d), (ffn,),
                                         (d, ffn), (d,)]))
        g, f1, t, h2, a, h = r(n, ffn), r(n, ffn), r(n, ffn), r(n, d), r(n, d), r(n, d)
        whole = median_cpu_seconds(lambda: T._block_backward_body(da, w, g, f1, t, h2, xh, inv, a, qkv, probs, h, xh,
                                                                   inv, dpb, 0, heads, f32(5.65), False), repeats)
        figures[f"ms_bwd_{n}_block"] = 1e3 * whole
        print(f"block backward at {n} words (base size), serial builds, median of {repeats} on the CPU clock:")
        print("\n".join(rows))
        print(f"  {'the parts above':44s} {1e3 * parts:8.3f} ms")
        print(f"  {'the whole block, one call':44s} {1e3 * whole:8.3f} ms")
    return figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--backward", action="store_true", help="a block's backward part by part, then exit")
    ap.add_argument("--sizes", default="150,400", help="words for --backward (default 150,400)")
    args = ap.parse_args(argv)
    rt.set_threads(1)
    if args.backward:
        print(C.target_line())
        figures = backward_parts([int(v) for v in args.sizes.split(",")], args.repeats)
        print(C.json_line(figures))
        return 0
    rng = np.random.default_rng(0)
    ghz = clock_ghz()
    peak = 32 * ghz
    print(C.target_line())
    print(f"clock {ghz:.2f} GHz (as /proc/cpuinfo reports); peak without FMA: {peak:.0f} GFLOP/s at 32 flop/cycle "
          f"({2 * peak:.0f} at 64)")
    # shapes (M, K, N) of mm and (K, M, N) of mm_tn that the base model runs at 150 / 400 words
    shapes = {"mm": [(150, 128, 384), (150, 128, 512), (150, 512, 128), (150, 32, 150), (150, 150, 32),
                     (22500, 8, 32), (22500, 32, 16), (400, 128, 512), (400, 32, 400), (400, 400, 32),
                     (160000, 8, 32), (160000, 32, 16)],
              "mm_tn": [(150, 512, 128), (150, 150, 32), (22500, 16, 32), (400, 512, 128), (400, 400, 32),
                        (160000, 16, 32), (160000, 32, 8)]}
    figures, rows = {"tile": C.target_tile()}, []
    # mm_nt (a bt^T, the register-blocked tiles) as the layers call it: x W^T with W (N, K) as
    # stored, q k^T; mm and mm_tn below include their transposed copies (pack_t)
    for m, k, n in [(150, 128, 384), (150, 128, 512), (150, 512, 128), (150, 32, 150), (400, 128, 512),
                    (400, 512, 128), (400, 32, 400), (22500, 32, 16), (160000, 32, 16)]:
        a, bt = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        sec = best_cpu_seconds(lambda: kc.mm_nt_fast(a, bt), args.repeats)
        g = 2 * m * k * n / sec / 1e9
        figures[f"gflops_mm_nt_{m}x{k}x{n}"] = g
        rows.append(f"  {'mm_nt':6s} {str((m, k, n)):20s} {1e3 * sec:8.3f} ms  {g:6.1f} GFLOP/s  {100 * g / peak:5.1f}% of peak")
    for name, fn in (("mm", kc.mm_fast), ("mm_tn", kc.mm_tn_fast)):
        for s in shapes[name]:
            if name == "mm":
                m, k, n = s
                a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
            else:
                k, m, n = s
                a, b = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
            sec = best_cpu_seconds(lambda: fn(a, b), args.repeats)
            g = 2 * m * k * n / sec / 1e9
            key = f"{name}_{'x'.join(map(str, s))}"
            figures[f"gflops_{key}"] = g
            rows.append(f"  {name:6s} {str(s):20s} {1e3 * sec:8.3f} ms  {g:6.1f} GFLOP/s  {100 * g / peak:5.1f}% of peak")
    for n_pairs in (22500, 160000):  # the pair MLP's fused kernels over the n^2 pairs (150, 400 words)
        pf = rng.standard_normal((n_pairs, 8)).astype(np.float32)
        w1, b1 = rng.standard_normal((32, 8)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
        ph = fused.linear8_relu_forward(pf, w1, b1)
        w2, b2 = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
        dy = rng.standard_normal((n_pairs, 16)).astype(np.float32)
        for name, fn, flops in (("linear8_relu", lambda: fused.linear8_relu_forward(pf, w1, b1), 2 * 8 * 32),
                                ("linear32", lambda: fused.linear32_forward(ph, w2, b2), 2 * 32 * 16),
                                ("linear16_relu_bwd", lambda: fused.linear16_relu_backward(dy, w2, ph), 2 * 16 * 32)):
            sec = best_cpu_seconds(fn, args.repeats)
            g = n_pairs * flops / sec / 1e9
            figures[f"gflops_{name}_{n_pairs}"] = g
            rows.append(f"  {name:17s} {n_pairs:6d} pairs  {1e3 * sec:8.3f} ms  {g:6.1f} GFLOP/s  {100 * g / peak:5.1f}% of peak")
    x = rng.standard_normal(1 << 20).astype(np.float32) * 4
    out = np.empty_like(x)
    sq = rng.standard_normal((400, 400)).astype(np.float32)
    for name, fn, count in (("exp32_vec", lambda: kc.exp32_vec(x, out), x.size),
                            ("tanh32_vec", lambda: kc.tanh32_vec(x, out), x.size),
                            ("pack_t 400x400", lambda: kc.pack_t(sq), sq.size),
                            ("scaled softmax 400x400", lambda: fused.scaled_softmax_forward(sq, sq, 5.65), sq.size)):
        sec = best_cpu_seconds(fn, args.repeats)
        figures[f"ns_per_element_{name.replace(' ', '_')}"] = 1e9 * sec / count
        rows.append(f"  {name:22s} {1e9 * sec / count:6.2f} ns per element")
    print("products, one thread, best of the CPU clock:")
    print("\n".join(rows))
    small = rng.standard_normal((4, 8)).astype(np.float32)
    fused.softmax_forward(small)  # compile the serial builds of the fused layers for inspect_asm
    fused.layernorm_forward(small, small[0], small[0], 1e-5)
    fused.gelu_forward(small)
    kc.rowdot_fast(small, small)
    kc._MM[1](small, np.ascontiguousarray(small.T), np.empty((4, 4), np.float32))
    kc._MM_TN[1](small, small, np.empty((8, 8), np.float32))
    kc._MM_NT[1](small, small, np.zeros(4, np.float32), np.empty((4, 4), np.float32))
    kc._PACK_T[1](small, np.zeros((8, 16), np.float32))
    fused.softmax_backward(small, small)
    fused.layernorm_backward(small, fused.layernorm_forward(small, small[0], small[0], 1e-5)[1:], small[0])
    fused._ADAMW[1](small.reshape(-1), small.reshape(-1), small.reshape(-1).copy(), np.abs(small).reshape(-1),
                    True, *(np.float32(v) for v in (0.99, 0.9, 0.1, 0.999, 0.001, 0.5, 1e-8, 1e-3)))
    fused.adamw_all(fused.AdamWTable([small.reshape(-1).copy()], [small.reshape(-1).copy()],
                                     [np.abs(small).reshape(-1)]), [small.reshape(-1)], [True],
                    [np.float32(0.99)], [np.float32(1e-3)], 0.9, 0.1, 0.999, 0.001, 0.5, 1e-8)
    kc.rows32_product(rng.standard_normal((40, 32)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32))
    print("assembly (inspect_asm; counts of instructions, by register width; stack moves: vector registers "
          "stored to or loaded from the stack, i.e. spills):")
    kernels = {"mm_nt (serial)": kc._MM_NT[1], "pack_t (serial)": kc._PACK_T[1],
               "mm (serial)": kc._MM[1], "mm_tn (serial)": kc._MM_TN[1], "rowdot (serial)": kc._ROWDOT[1],
               "softmax bwd (serial)": fused._SOFTMAX_BWD[1], "layernorm bwd (serial)": fused._LAYERNORM_BWD[1],
               "adamw (serial)": fused._ADAMW[1], "adamw_all (serial)": fused._ADAMW_ALL[1],
               "rows32 (serial)": kc.ROWS32[1],
               "linear8_relu (parallel)": fused._LINEAR8_RELU[0], "linear32 (parallel)": fused._LINEAR32[0],
               "linear16_relu_bwd (parallel)": fused._LINEAR16_RELU_BWD[0],
               "exp32_vec": kc.exp32_vec, "tanh32_vec": kc.tanh32_vec, "softmax fwd (serial)": fused._SOFTMAX_FWD[1],
               "layernorm fwd (serial)": fused._LAYERNORM_FWD[1], "gelu fwd (serial)": fused._GELU_FWD[1]}
    for label, kernel in kernels.items():
        if not kernel.signatures:
            continue
        try:
            facts = asm_facts(kernel)
        except Exception as e:  # a cached build carries no assembly
            print(f"  {label}: no assembly ({type(e).__name__}); run with DXSTUDIO_NUMBA_CACHE=0")
            continue
        figures[f"fma_{label.split()[0]}"] = facts["fma"]
        figures[f"spills_{label.split()[0]}"] = sum(facts["spills"].values())
        print(f"  {label:24s} FMA {facts['fma']}  stack moves {facts['spills'] or 0}  {facts['ops']}")
    figures["clock_ghz"] = ghz
    print(C.json_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
