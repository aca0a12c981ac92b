"""A block's compiled forward with each head's query rows in blocks (transformer._attention_heads_body
from _ATT_ROWS_FROM words, issue 26): the reference block's bytes (output, probabilities and every
kept activation) at word counts below, at and past the threshold and with a last block of a few
rows, kept and lean, with -0, denormals and large values in the pair bias."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.blocks import transformer as TB
from dxstudio.engine.config import size_config
from dxstudio.engine.kernels.registry import Ops
from dxstudio.engine.params import new_params

F32 = np.float32
REF, FAST = Ops("reference"), Ops("fast")


def _same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, what
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


@pytest.mark.parametrize("n", [TB._ATT_ROWS_FROM - 1, TB._ATT_ROWS_FROM, TB._ATT_ROWS_FROM + 1,
                               TB._ATT_ROWS_FROM + TB._ATT_ROWS + 5, 411])
def test_row_blocked_attention_gives_the_reference_block(n):
    cfg = size_config("base")
    p = new_params(cfg, 0)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, cfg.d_model)).astype(F32)
    pbias_t = (rng.standard_normal((cfg.layers * cfg.heads, n * n)) * 2).astype(F32)
    pbias_t[:, ::7] = F32(-0.0)
    pbias_t[1, 3::11] = F32(1e-40)
    pbias_t[2, 5::13] = F32(60.0)  # scores far above the rest: exp of the row's other terms underflow
    row0 = cfg.heads  # the second block's rows of the pair bias
    with np.errstate(all="ignore"):
        want, wacts = TB.forward(REF, cfg, p, "blocks.1.", x, pbias_t, row0, True, False)
        got, gacts = TB.forward(FAST, cfg, p, "blocks.1.", x, pbias_t, row0, True, False)
        lean, _ = TB.forward(FAST, cfg, p, "blocks.1.", x, pbias_t, row0, False, False)
    _same(got, want, f"block output, {n} words")
    _same(lean, want, f"lean block output, {n} words")
    for hd in range(cfg.heads):
        _same(gacts.probs[hd], wacts.probs[hd], f"probabilities of head {hd}, {n} words")
    for name in ("h", "qkv", "a", "h2", "f1", "g", "t"):
        _same(getattr(gacts, name), getattr(wacts, name), f"{name}, {n} words")
