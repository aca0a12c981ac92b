"""The IR intrinsics: kernels written as LLVM IR through Numba intrinsics (llvmlite), because
Numba keeps no array in registers. Plain fmul/fadd without fast-math flags, so LLVM may not
contract them into fused multiply-adds (the assembly is checked).

    _make_tile / _tile_mr_nr    mm_nt's register-blocked tile of _MR x _NR outputs
    _make_rows32 / _rows32_x*   32-term products with 16 outputs in a register's lanes
    _make_t16 / _t16            a 16 x 16 block transposed in registers (pack_t), in sub-blocks per ISA
    lanes_dot, lanes_sum, lanes_max        16-lane row loops in one register
    lanes_dot_acc, lanes_sum_acc           the same, continued from stored lanes (K-blocked dot16)
    tile_acc                    lanes_dot_acc for a tile of _MR x _NR outputs, in registers
    exp32_lanes, tanh32_lanes, gelu_lanes  the branch-free exp32 / tanh32 / GELU, a register per 16
    softmax_row_max_*, softmax_row_exp_sum, softmax_row_div  a softmax row's three passes (s and max, exp and sum, / sum)
"""
from __future__ import annotations

from . import runtime  # noqa: F401  (the environment before Numba starts)
from .constants import (EXP32_C, EXP32_LN2_HI, EXP32_LN2_LO, EXP32_LOG2E, EXP32_MAX, EXP32_MIN, GELU32_C0,
                        GELU32_C1, TANH32_BIG, TANH32_C, TANH32_SMALL)

# ---- mm_nt: C[i, j] = dot16(a[i, :], bt[j, :]), register-blocked ------------------------
# Both operands have k contiguous, so the 16 lanes of dot16 are the 16 floats of one vector
# register: lane l of output (i, j) is acc_ij[l], and chunk c of k adds a[i, 16c:16c+16] *
# bt[j, 16c:16c+16] to it (16 products rounded, then 16 sums rounded: docs/numerics.md
# section 1, rule 3, lane by lane). A tile of _MR x _NR outputs keeps its accumulators in
# registers across the whole k loop (its shape per instruction set: isa.py); the tile is
# written as LLVM IR through a Numba intrinsic, because Numba keeps no array in registers.
# The IR has plain fmul and fadd without fast-math flags, so LLVM may not contract them into
# fused multiply-adds (the assembly is checked). A k that is not a multiple of 16 is padded
# with zeros in both operands: the padding adds +0 * +0 = +0 to a lane, and x + (+0) == x for
# every accumulator value (a lane starts at +0 and a sum of two values is -0 only when both
# are -0, so a lane is never -0). The fold is the spec's: lanes l and l+8, then l+4, l+2, l+1,
# done for the 16 outputs of a tile at once (pairs of registers shuffled into halves).
from .isa import _LANES, _MR, _NR, _PANEL, _TBLOCK  # noqa: E402, F401  (output tile: rows of a x rows of bt, chosen per instruction set; the transposes' sub-block)

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


def _make_tile(mr, nr, lanes=16):
    """Intrinsic tile(a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo, bias, zoff):
    out[ooff + r*ldo + c] = dot16 over nch chunks of 16 of a[aoff + r*lda + ...] and
    b[boff + c*ldb + ...], plus bias[zoff + c] (flat offsets into C-contiguous binary32
    arrays), r < mr, c < nr. A dot16 is never -0 (its lanes never are), so a bias of +0 changes
    no bit: products without a bias pass zeros. lanes < 16: the k loop in 16 / lanes passes,
    each over lanes of every chunk (isa.TILE_LANES), the same additions in each lane."""

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
            arow = [builder.add(aoff_, builder.mul(_ir.Constant(i64, r), lda_)) for r in range(mr)]
            brow = [builder.add(boff_, builder.mul(_ir.Constant(i64, c), ldb_)) for c in range(nr)]
            vl = _ir.VectorType(_ir.FloatType(), lanes)

            def step_of(part):
                def step(kc, accs):
                    k0 = builder.add(builder.mul(kc, _ir.Constant(i64, 16)), _ir.Constant(i64, part * lanes))

                    def load(base, off):
                        ptr = builder.gep(base, [builder.add(off, k0)])
                        return builder.load(builder.bitcast(ptr, vl.as_pointer()), align=4)

                    avs = [load(ap, o) for o in arow]
                    bvs = [load(bp, o) for o in brow]
                    return [builder.fadd(accs[r * nr + c], builder.fmul(avs[r], bvs[c]))
                            for r in range(mr) for c in range(nr)]
                return step

            # the accumulators in registers: lanes part*L .. part*L + L - 1 of every chunk, part by
            # part (one pass when L = 16); each lane takes its chunks ascending from +0 either way
            zl = _ir.Constant(vl, [0.0] * lanes)
            parts = [_chunk_loop(builder, nch_, [zl] * (mr * nr), step_of(q)) for q in range(16 // lanes)]
            res = []
            for o in range(mr * nr):  # each output's parts joined into its 16 lanes, in lane order
                vs = [pr[o] for pr in parts]
                while len(vs) > 1:
                    w = vs[0].type.count
                    vs = [builder.shuffle_vector(x, y, _ir.Constant(_ir.VectorType(i32, 2 * w), list(range(2 * w))))
                          for x, y in zip(vs[0::2], vs[1::2])]
                res.append(vs[0])
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


_tile_mr_nr = _make_tile(_MR, _NR, _LANES)


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


def _make_rows8_relu(rows, groups):
    """Intrinsic rows8_relu(x, xoff, ldx, wt, ldw, b, y, yoff, ldy): for r < rows, c < 16*groups,
    y[yoff + r*ldy + c] = relu(dot16 over k < 8 of x[xoff + r*ldx + k] and wt[k*ldw + c], plus
    b[c]) (the pair MLP's first layer, layers.linear_forward then relu_forward: flat offsets into
    C-contiguous binary32 arrays, wt holds W^T). Each output group of 16 is a register's lanes,
    the weights loaded once for the rows, x broadcast. dot16 with 8 terms: lane l < 8 takes
    (+0 + x[l] w[l]), lanes 8..15 stay +0; here the raw products are folded (l and l+4, l+2,
    l+1): a product's lane is the spec's but for -0 where the spec has +0, and a fold of such
    values stays so (the spec's sums are never -0; rows32's argument, above). rows32 adds +0 once
    to put that -0 right; here the ReLU does it: the value plus the bias then differs from the
    spec's only by -0 for +0 (where the bias is -0 too), and the ReLU (v > 0 ? v : +0, so -0 and
    NaN give +0, as relu_forward) gives +0 for both. One add an output fewer."""

    @_intrinsic
    def rows8_relu(typingctx, x, xoff, ldx, wt, ldw, b, y, yoff, ldy):
        sig = _nbtypes.void(x, xoff, ldx, wt, ldw, b, y, yoff, ldy)

        def codegen(context, builder, sig, args):
            i64 = _ir.IntType(64)
            i32 = _ir.IntType(32)
            v16 = _ir.VectorType(_ir.FloatType(), 16)
            xp, wp, bp, yp = (context.make_array(sig.args[k])(context, builder, args[k]).data for k in (0, 3, 5, 6))
            xoff_, ldx_, ldw_, yoff_, ldy_ = (
                context.cast(builder, args[k], sig.args[k], _nbtypes.int64) for k in (1, 2, 4, 7, 8))
            zero = _ir.Constant(v16, [0.0] * 16)
            undef = _ir.Constant(v16, None)
            lane0 = _ir.Constant(_ir.VectorType(i32, 16), [0] * 16)

            def at(base, off):
                return builder.bitcast(builder.gep(base, [off]), v16.as_pointer())

            def c64(v):
                return _ir.Constant(i64, v)

            w = [[builder.load(at(wp, builder.add(builder.mul(c64(k), ldw_), c64(16 * g))), align=4)
                  for g in range(groups)] for k in range(8)]
            bias = [builder.load(at(bp, c64(16 * g)), align=4) for g in range(groups)]
            for r in range(rows):
                xr = builder.add(xoff_, builder.mul(c64(r), ldx_))
                xs = []
                for k in range(8):
                    v = builder.insert_element(undef, builder.load(builder.gep(xp, [builder.add(xr, c64(k))])),
                                               _ir.Constant(i32, 0))
                    xs.append(builder.shuffle_vector(v, undef, lane0))
                yr = builder.add(yoff_, builder.mul(c64(r), ldy_))
                for g in range(groups):
                    p = [builder.fmul(xs[k], w[k][g]) for k in range(8)]
                    a = [builder.fadd(p[l], p[l + 4]) for l in range(4)]
                    a = [builder.fadd(a[l], a[l + 2]) for l in range(2)]
                    v = builder.fadd(builder.fadd(a[0], a[1]), bias[g])
                    v = builder.select(builder.fcmp_ordered(">", v, zero), v, zero)
                    builder.store(v, at(yp, builder.add(yr, c64(16 * g))), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return rows8_relu


_rows8_relu_x4 = _make_rows8_relu(4, 2)  # the pair MLP's 8 -> 32: four pairs, two registers of outputs
_rows8_relu_x1 = _make_rows8_relu(1, 2)


def _make_t16(w):
    """Intrinsic t16(x, xoff, ldx, out, ooff, ldo): out[ooff + c*ldo + r] = x[xoff + r*ldx + c] for
    r, c < 16: one 16 x 16 block transposed in registers, in square sub-blocks of w a side (16,
    8 or 4: isa.TRANSPOSE_BLOCK), each done whole before the next (w loads of <w x float>, log2(w)
    rounds of w two-register shuffles swapping blocks of w/2, ..., 1, w stores), so the registers a
    sub-block holds fit the target's register file. Moves only: no arithmetic, the same bytes for
    every w."""

    @_intrinsic
    def t16(typingctx, x, xoff, ldx, out, ooff, ldo):
        sig = _nbtypes.void(x, xoff, ldx, out, ooff, ldo)

        def codegen(context, builder, sig, args):
            x_, xoff_, ldx_, out_, ooff_, ldo_ = args
            i64 = _ir.IntType(64)
            i32 = _ir.IntType(32)
            xoff_, ldx_, ooff_, ldo_ = (context.cast(builder, v, t, _nbtypes.int64) for v, t in
                                        zip((xoff_, ldx_, ooff_, ldo_), (sig.args[1], sig.args[2], sig.args[4],
                                                                          sig.args[5])))
            xp = context.make_array(sig.args[0])(context, builder, x_).data
            op = context.make_array(sig.args[3])(context, builder, out_).data
            vw = _ir.VectorType(_ir.FloatType(), w)

            def at(base, off, line, ld, col):  # &base[off + line*ld + col] as a <w x float>*
                flat = builder.add(builder.add(off, builder.mul(_ir.Constant(i64, line), ld)), _ir.Constant(i64, col))
                return builder.bitcast(builder.gep(base, [flat]), vw.as_pointer())

            for r0 in range(0, 16, w):  # the sub-block of rows r0.., columns c0.. goes to rows c0.., columns r0..
                for c0 in range(0, 16, w):
                    rows = [builder.load(at(xp, xoff_, r0 + r, ldx_, c0), align=4) for r in range(w)]
                    d = w // 2
                    while d >= 1:
                        mi = _ir.Constant(_ir.VectorType(i32, w), [k if k & d == 0 else w + k - d for k in range(w)])
                        mj = _ir.Constant(_ir.VectorType(i32, w), [k + d if k & d == 0 else w + k for k in range(w)])
                        new = list(rows)
                        for i in range(w):
                            if i & d == 0:
                                new[i] = builder.shuffle_vector(rows[i], rows[i + d], mi)
                                new[i + d] = builder.shuffle_vector(rows[i], rows[i + d], mj)
                        rows = new
                        d //= 2
                    for c in range(w):
                        builder.store(rows[c], at(op, ooff_, c0 + c, ldo_, r0), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return t16


_t16 = _make_t16(_TBLOCK)


# ---- 16-lane row loops in registers: sums, dots and the maximum of 16-float chunks ----------
# Numba leaves a loop over a 16-float lane buffer scalar (the buffer lives in memory); these
# intrinsics keep the 16 lanes in one vector register across the chunks. lanes_dot and
# lanes_sum give the 16 lane accumulators of dot16 over whole chunks (lane l takes k = 16c + l,
# c ascending, each product rounded, then the sum rounded; the sum adds x, which is 1*x); the
# caller adds the last k % 16 terms into the stored lanes and folds them (fold16). With continued
# (lanes_dot_acc, lanes_sum_acc) the sums go on from the 16 lanes stored at out[ooff:], not from +0:
# a dot16 over a long k taken in blocks of chunks keeps each lane's terms in ascending k, one
# rounding each.
def _lanes_codegen(kind, continued=False):
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
        optr = builder.bitcast(builder.gep(optr, [ooff]), v16.as_pointer())

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

            start = builder.load(optr, align=4) if continued else _ir.Constant(v16, [0.0] * 16)
            (res,) = _chunk_loop(builder, nch, [start], step)
        builder.store(res, optr, align=4)
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


@_intrinsic
def lanes_dot_acc(typingctx, a, aoff, b, boff, nch, out, ooff):
    """out[ooff + l] += a[aoff + 16c + l] * b[boff + 16c + l] for c = 0 .. nch - 1 ascending (each
    product rounded, then each sum): lanes_dot continued from the stored lanes."""
    return _nbtypes.void(a, aoff, b, boff, nch, out, ooff), _lanes_codegen("dot", continued=True)


@_intrinsic
def lanes_sum_acc(typingctx, a, aoff, nch, out, ooff):
    """out[ooff + l] += a[aoff + 16c + l] for c ascending: lanes_sum continued."""
    return _nbtypes.void(a, aoff, nch, out, ooff), _lanes_codegen("sum", continued=True)


def _make_tile_acc(mr, nr, lanes=16):
    """Intrinsic tile_acc(a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo): for r < mr, c < nr,
    the 16 lanes stored at out[ooff + r*ldo + 16c:] += a[aoff + r*lda + 16k + l] * b[boff +
    c*ldb + 16k + l] for k = 0 .. nch - 1 ascending (each product rounded, then each sum):
    lanes_dot_acc for a tile of mr x nr outputs at once, the accumulators in registers across
    the chunks (mr + nr loads a chunk for mr * nr products instead of two for one). For dot16
    over a long k taken in blocks (the pair MLP's weight gradients over the pairs). lanes < 16:
    the chunks in 16 / lanes passes, each over lanes of every chunk (as mm_nt's tile: the same
    additions in each lane, the registers of mr * nr outputs at `lanes` floats each)."""

    @_intrinsic
    def tile_acc(typingctx, a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo):
        sig = _nbtypes.void(a, aoff, lda, b, boff, ldb, nch, out, ooff, ldo)

        def codegen(context, builder, sig, args):
            a_, aoff_, lda_, b_, boff_, ldb_, nch_, out_, ooff_, ldo_ = args
            i64 = _ir.IntType(64)
            aoff_, lda_, boff_, ldb_, nch_, ooff_, ldo_ = (
                context.cast(builder, v, sig.args[k], _nbtypes.int64)
                for v, k in zip((aoff_, lda_, boff_, ldb_, nch_, ooff_, ldo_), (1, 2, 4, 5, 6, 8, 9)))
            ap = context.make_array(sig.args[0])(context, builder, a_).data
            bp = context.make_array(sig.args[3])(context, builder, b_).data
            op = context.make_array(sig.args[7])(context, builder, out_).data
            vl = _ir.VectorType(_ir.FloatType(), lanes)
            for part in range(16 // lanes):  # lanes part*L .. part*L + L - 1 of every output, in turn
                arow = [builder.add(aoff_, builder.add(builder.mul(_ir.Constant(i64, r), lda_), _ir.Constant(i64, part * lanes)))
                        for r in range(mr)]
                brow = [builder.add(boff_, builder.add(builder.mul(_ir.Constant(i64, c), ldb_), _ir.Constant(i64, part * lanes)))
                        for c in range(nr)]
                optrs = [builder.bitcast(builder.gep(op, [builder.add(builder.add(ooff_, builder.mul(_ir.Constant(i64, r), ldo_)),
                                                                      _ir.Constant(i64, 16 * c + part * lanes))]), vl.as_pointer())
                         for r in range(mr) for c in range(nr)]

                def load(base, off, kc):
                    ptr = builder.gep(base, [builder.add(off, builder.mul(kc, _ir.Constant(i64, 16)))])
                    return builder.load(builder.bitcast(ptr, vl.as_pointer()), align=4)

                def step(kc, accs, arow=arow, brow=brow, load=load):
                    avs = [load(ap, o, kc) for o in arow]
                    bvs = [load(bp, o, kc) for o in brow]
                    return [builder.fadd(accs[r * nr + c], builder.fmul(avs[r], bvs[c])) for r in range(mr) for c in range(nr)]

                starts = [builder.load(q, align=4) for q in optrs]
                res = _chunk_loop(builder, nch_, starts, step)
                for q, v in zip(optrs, res):
                    builder.store(v, q, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile_acc


tile_acc = _make_tile_acc(_MR, _NR, _LANES)  # the instruction set's tile and lanes per pass (isa.py)


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


def _splat_ir(builder, x):
    """A <16 x float> with the scalar float x in every lane."""
    v16 = _ir.VectorType(_ir.FloatType(), 16)
    i32 = _ir.IntType(32)
    v = builder.insert_element(_ir.Constant(v16, _ir.Undefined), x, _ir.Constant(i32, 0))
    return builder.shuffle_vector(v, v, _ir.Constant(_ir.VectorType(i32, 16), [0] * 16))


# ---- the softmax row in three passes, each one intrinsic over the whole row (fused's softmax):
# s and its maximum, exp(s - top) and its dot16 with ones, the division by that sum; each the
# reference's operations on each element (docs/numerics.md section 3). The row's whole chunks of
# 16 a register each, its last m % 16 elements as one more chunk under a lane mask (masked loads
# and stores: nothing outside the row is read or written; the mask's other lanes add +0 to the
# sum's lanes, which changes no lane: a lane is never -0); the maximum and the sum's fold in
# registers. Before: six passes and the rows' tails, maxima and folds in scalar code (a 55-word
# row spent most of its time there).
def _row_parts(context, builder, m_arg, m_type):
    """(nch, mask) of a row of m elements: its whole chunks of 16, and the mask of the last
    chunk's lanes < m % 16."""
    i64 = _ir.IntType(64)
    i32 = _ir.IntType(32)
    m = context.cast(builder, m_arg, m_type, _nbtypes.int64)
    nch = builder.ashr(m, _ir.Constant(i64, 4))
    rem = builder.trunc(builder.and_(m, _ir.Constant(i64, 15)), i32)
    iv = _ir.VectorType(i32, 16)
    rv = builder.insert_element(_ir.Constant(iv, _ir.Undefined), rem, _ir.Constant(i32, 0))
    rv = builder.shuffle_vector(rv, rv, _ir.Constant(iv, [0] * 16))
    mask = builder.icmp_signed("<", _ir.Constant(iv, list(range(16))), rv)
    return nch, mask


def _masked(builder, kind):
    """llvm.masked.load / llvm.masked.store of a <16 x float>."""
    v16 = _ir.VectorType(_ir.FloatType(), 16)
    m16 = _ir.VectorType(_ir.IntType(1), 16)
    mod = builder.module
    name = f"llvm.masked.{kind}.v16f32.p0"
    fn = mod.globals.get(name)
    if fn is None:
        if kind == "load":
            fnty = _ir.FunctionType(v16, [v16.as_pointer(), _ir.IntType(32), m16, v16])
        else:
            fnty = _ir.FunctionType(_ir.VoidType(), [v16, v16.as_pointer(), _ir.IntType(32), m16])
        fn = _ir.Function(mod, fnty, name)
    return fn


def _mload(builder, ptr, mask):
    v16 = _ir.VectorType(_ir.FloatType(), 16)
    return builder.call(_masked(builder, "load"), [ptr, _ir.Constant(_ir.IntType(32), 4), mask,
                                                   _ir.Constant(v16, [0.0] * 16)])


def _mstore(builder, v, ptr, mask):
    builder.call(_masked(builder, "store"), [v, ptr, _ir.Constant(_ir.IntType(32), 4), mask])


def _vptr(builder, base, off, c):
    i64 = _ir.IntType(64)
    v16 = _ir.VectorType(_ir.FloatType(), 16)
    return builder.bitcast(builder.gep(base, [builder.add(off, builder.mul(c, _ir.Constant(i64, 16)))]),
                           v16.as_pointer())


def _make_softmax_row_max(scaled):
    """Intrinsic (raw, roff, bias, boff, scale, p, poff, m) -> top: p[poff + j] = s_j for j < m,
    s_j = raw[roff + j] / scale + bias[boff + j] (the division, then the sum, each rounded) when
    scaled, else raw[roff + j] (bias and scale unused); returns the largest s_j, or NaN when any
    is a NaN (the caller then scans the row itself, whose order picks the NaN; it scans a maximum
    of zero too, whose sign the order picks: every other maximum is the same in any order)."""

    @_intrinsic
    def row_max(typingctx, raw, roff, bias, boff, scale, p, poff, m):
        sig = _nbtypes.float32(raw, roff, bias, boff, scale, p, poff, m)

        def codegen(context, builder, sig, args):
            f32 = _ir.FloatType()
            v16 = _ir.VectorType(f32, 16)
            i32 = _ir.IntType(32)
            rp = context.make_array(sig.args[0])(context, builder, args[0]).data
            bp = context.make_array(sig.args[2])(context, builder, args[2]).data
            pp = context.make_array(sig.args[5])(context, builder, args[5]).data
            roff_, boff_, poff_ = (context.cast(builder, args[i], sig.args[i], _nbtypes.int64) for i in (1, 3, 6))
            sv = _splat_ir(builder, context.cast(builder, args[4], sig.args[4], _nbtypes.float32))
            nch, mask = _row_parts(context, builder, args[7], sig.args[7])

            def score(r, b):
                return builder.fadd(builder.fdiv(r, sv), b) if scaled else r

            def step(c, vals):
                top, bad = vals
                s = score(builder.load(_vptr(builder, rp, roff_, c), align=4),
                          builder.load(_vptr(builder, bp, boff_, c), align=4) if scaled else None)
                builder.store(s, _vptr(builder, pp, poff_, c), align=4)
                top = builder.select(builder.fcmp_ordered(">", s, top), s, top)
                return [top, builder.or_(bad, builder.fcmp_unordered("uno", s, s))]

            ninf = _ir.Constant(v16, [float("-inf")] * 16)
            bad0 = _ir.Constant(_ir.VectorType(_ir.IntType(1), 16), [0] * 16)
            top, bad = _chunk_loop(builder, nch, [ninf, bad0], step)
            # the last m % 16 elements (the mask's lanes; none when m % 16 == 0)
            s = score(_mload(builder, _vptr(builder, rp, roff_, nch), mask),
                      _mload(builder, _vptr(builder, bp, boff_, nch), mask) if scaled else None)
            _mstore(builder, s, _vptr(builder, pp, poff_, nch), mask)
            st = builder.select(mask, s, ninf)
            top = builder.select(builder.fcmp_ordered(">", st, top), st, top)
            bad = builder.or_(bad, builder.and_(mask, builder.fcmp_unordered("uno", s, s)))
            # the 16 lanes' maximum (no NaN among them when it is used)
            w = 16
            while w > 1:
                h = w // 2
                lo = builder.shuffle_vector(top, top, _ir.Constant(_ir.VectorType(i32, h), list(range(h))))
                hi = builder.shuffle_vector(top, top, _ir.Constant(_ir.VectorType(i32, h), list(range(h, w))))
                top = builder.select(builder.fcmp_ordered(">", hi, lo), hi, lo)
                w = h
            top = builder.extract_element(top, _ir.Constant(i32, 0))
            anybad = builder.icmp_unsigned("!=", builder.bitcast(bad, _ir.IntType(16)), _ir.Constant(_ir.IntType(16), 0))
            return builder.select(anybad, _ir.Constant(f32, float("nan")), top)

        return sig, codegen

    return row_max


softmax_row_max_scaled = _make_softmax_row_max(True)
softmax_row_max_plain = _make_softmax_row_max(False)


@_intrinsic
def softmax_row_exp_sum(typingctx, p, poff, top, m):
    """p[poff + j] = exp32(p[poff + j] - top) for j < m in place; returns dot16 of them with ones
    (lane j & 15, j ascending from +0, then the spec's fold)."""
    sig = _nbtypes.float32(p, poff, top, m)

    def codegen(context, builder, sig, args):
        v16 = _ir.VectorType(_ir.FloatType(), 16)
        pp = context.make_array(sig.args[0])(context, builder, args[0]).data
        poff_ = context.cast(builder, args[1], sig.args[1], _nbtypes.int64)
        tv = _splat_ir(builder, context.cast(builder, args[2], sig.args[2], _nbtypes.float32))
        nch, mask = _row_parts(context, builder, args[3], sig.args[3])

        def step(c, vals):
            ptr = _vptr(builder, pp, poff_, c)
            e = _exp32_ir(builder, builder.fsub(builder.load(ptr, align=4), tv))
            builder.store(e, ptr, align=4)
            return [builder.fadd(vals[0], e)]

        zero = _ir.Constant(v16, [0.0] * 16)
        (acc,) = _chunk_loop(builder, nch, [zero], step)
        ptr = _vptr(builder, pp, poff_, nch)
        e = _exp32_ir(builder, builder.fsub(_mload(builder, ptr, mask), tv))
        _mstore(builder, e, ptr, mask)
        acc = builder.fadd(acc, builder.select(mask, e, zero))  # + (+0) in the other lanes: no change
        (z,) = _fold_tile_ir(builder, [acc])
        return builder.extract_element(z, _ir.Constant(_ir.IntType(32), 0))

    return sig, codegen


@_intrinsic
def softmax_row_div(typingctx, p, poff, z, m):
    """p[poff + j] = p[poff + j] / z for j < m (each division rounded)."""
    sig = _nbtypes.void(p, poff, z, m)

    def codegen(context, builder, sig, args):
        pp = context.make_array(sig.args[0])(context, builder, args[0]).data
        poff_ = context.cast(builder, args[1], sig.args[1], _nbtypes.int64)
        zv = _splat_ir(builder, context.cast(builder, args[2], sig.args[2], _nbtypes.float32))
        nch, mask = _row_parts(context, builder, args[3], sig.args[3])

        def step(c, vals):
            ptr = _vptr(builder, pp, poff_, c)
            builder.store(builder.fdiv(builder.load(ptr, align=4), zv), ptr, align=4)
            return vals

        _chunk_loop(builder, nch, [], step)
        ptr = _vptr(builder, pp, poff_, nch)
        _mstore(builder, builder.fdiv(_mload(builder, ptr, mask), zv), ptr, mask)
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


@_intrinsic
def f32_ptr(typingctx, addr):
    """The binary32 pointer at integer address addr (an array's data address, taken in Python
    while the array is held): numba.carray(f32_ptr(addr), n) views it. The optimizer's one call
    over every tensor (fused.adamw_all) reads its tensors so, without a container of arrays."""
    sig = _nbtypes.CPointer(_nbtypes.float32)(_nbtypes.int64)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return sig, codegen
