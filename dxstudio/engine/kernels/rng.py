"""SplitMix64: the one random source (new models, tag-head draws, batch permutations)."""
from __future__ import annotations

import numpy as np

from .constants import F32, F64, MASK64, SPLITMIX_GAMMA, SPLITMIX_MUL1, SPLITMIX_MUL2


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
