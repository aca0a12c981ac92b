"""The registry of operations: for every operation with a compiled twin, one entry naming its
reference implementation, its compiled implementation and the rule saying when the compiled one
applies. Every choice of kernel path in the engine is a call of an entry (or `Ops`, which calls
the products' and maps' entries): no layer or section tests shapes and dtypes itself.

    op = register(name, reference, compiled, applies)   an Op; `op(ops, *args)` runs it
    late(module, "name")  a compiled implementation looked up on its module at each call
    op(ops, *args)        compiled(*args) when ops is the fast path and applies(*args),
                          else reference(ops, *args) (reference_ops=False: reference(*args))
    op.uses_compiled(ops, *args) -> bool    the same choice, asked without running
    REGISTRY[name] -> Op  every operation registered (the products and maps here, the layers in
                          layers.py, the forward sections and blocks where they are defined)
    Ops(kernels)          the arithmetic as the layers see it: .mm .mm_nt .mm_tn .rowdot .exp
                          .tanh .exp64 .log64 .colsum .rowsum, and .compiled(*arrays)

The compiled implementation computes the reference's operations in the reference's order: the
choice changes speed, never a byte (tests hold both paths bit-identical). Binary64 arrays (the
finite-difference check of the backward) always take the reference.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import compiled as kc
from . import reference as ref
from .constants import F32, F64
from .runtime import check_kernels


def binary32(*arrays) -> bool:
    """The default rule: every array is binary32."""
    return all(a.dtype == F32 for a in arrays)


class Op:
    """One operation: reference, compiled twin, and when the twin applies (shapes, dtypes)."""

    __slots__ = ("name", "reference", "compiled", "applies", "reference_ops")

    def __init__(self, name: str, reference: Callable, compiled: Callable, applies: Callable = binary32,
                 reference_ops: bool = True):
        self.name = name
        self.reference = reference  # reference(ops, *args) (or reference(*args): reference_ops=False)
        self.compiled = compiled  # compiled(*args)
        self.applies = applies  # applies(*args) -> bool, on the fast path
        self.reference_ops = reference_ops

    def uses_compiled(self, ops, *args) -> bool:
        return ops.fast and self.applies(*args)

    def __call__(self, ops, *args):
        if ops.fast and self.applies(*args):
            return self.compiled(*args)
        return self.reference(ops, *args) if self.reference_ops else self.reference(*args)

    def __repr__(self) -> str:
        return f"Op({self.name!r})"


REGISTRY: dict[str, Op] = {}


def late(module, name: str) -> Callable:
    """module.name looked up at every call, not once at registration: a compiled implementation
    given so can be replaced on its module (the tests count which compiled kernels run)."""
    def call(*args):
        return getattr(module, name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


def register(name: str, reference: Callable, compiled: Callable, applies: Callable = binary32,
             reference_ops: bool = True) -> Op:
    """Register (or replace: a module reloaded) the operation `name`; returns its Op."""
    op = Op(name, reference, compiled, applies, reference_ops)
    REGISTRY[name] = op
    return op


# ---- the products and maps ---------------------------------------------------------------
def _mm_nt_compiled(a, bt, bias=None):
    """On the fast path the bias is added in the product's epilogue (the same one rounding)."""
    m, k = a.shape
    if kc._nt_pays(m, k, bt.shape[0]):
        return kc.mm_nt_fast(a, bt, bias)
    out = kc.mm_fast(a, np.ascontiguousarray(bt.T))
    return out if bias is None else out + bias


def _mm_nt_reference(a, bt, bias=None):
    out = ref.mm_nt_ref(a, bt)
    return out if bias is None else out + bias


MM = register("mm", ref.mm_ref, kc.mm_fast, reference_ops=False)
MM_NT = register("mm_nt", _mm_nt_reference, _mm_nt_compiled,
                 lambda a, bt, bias=None: binary32(a, bt) and (bias is None or bias.dtype == F32),
                 reference_ops=False)
MM_TN = register("mm_tn", ref.mm_tn_ref, kc.mm_tn_fast, reference_ops=False)
ROWDOT = register("rowdot", ref.rowdot_ref, kc.rowdot_fast, reference_ops=False)
# exp and tanh: binary32 on either path (the compiled maps take any non-binary64 input as
# binary32, as the reference does); binary64 is the finite-difference check: NumPy's
EXP = register("exp", lambda x: np.exp(x) if x.dtype == F64 else ref.exp32_ref(x), kc.exp32_fast,
               lambda x: x.dtype != F64, reference_ops=False)
TANH = register("tanh", lambda x: np.tanh(x) if x.dtype == F64 else ref.tanh32_ref(x), kc.tanh32_fast,
                lambda x: x.dtype != F64, reference_ops=False)
EXP64 = register("exp64", ref.exp64_ref, kc.exp64_fast, lambda x: True, reference_ops=False)
LOG64 = register("log64", ref.log64_ref, kc.log64_fast, lambda x: True, reference_ops=False)


class Ops:
    """The arithmetic that depends on the kernel path, as the layers see it.

    `compiled(*arrays)` is the default rule of the registry (the fast path with binary32 arrays);
    each method is its operation's registry entry."""

    def __init__(self, kernels: str = "fast"):
        self.kernels = check_kernels(kernels)
        self.fast = self.kernels == "fast"

    def compiled(self, *arrays) -> bool:
        """True where the compiled kernel runs: the fast path with binary32 arrays."""
        return self.fast and binary32(*arrays)

    def mm(self, a, b):
        return MM(self, a, b)

    def mm_nt(self, a, bt, bias=None):
        """a bt^T (+ bias), bt (N, K) with k contiguous: the linear layers' x W^T + b and q k^T."""
        return MM_NT(self, a, bt, bias)

    def mm_tn(self, at, b):
        """at^T b: the weight gradients' products, at (K, M) as it is (no transposed copy)."""
        return MM_TN(self, at, b)

    def rowdot(self, a, b):
        return ROWDOT(self, a, b)

    def exp(self, x):
        return EXP(self, x)

    def tanh(self, x):
        return TANH(self, x)

    def exp64(self, x):
        """The losses' binary64 exp (never NumPy's)."""
        return EXP64(self, x)

    def log64(self, x):
        return LOG64(self, x)

    def colsum(self, a):
        """Column sums: dot16 with ones along the row axis (rows ascending)."""
        return self.mm(np.ones((1, a.shape[0]), a.dtype), a)[0]

    def rowsum(self, a):
        return self.rowdot(a, np.ones_like(a))
