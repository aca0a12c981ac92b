"""The engine's numeric constants, each typed once (docs/numerics.md gives their derivation
and the measured errors). Binary32 values are np.float32: Numba freezes a module-level
np.float32 as a binary32 constant, so the reference and the compiled kernels read the same bits."""
from __future__ import annotations

import math

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
