"""The pair MLP's fused kernels (fused.py: linear8_relu_forward, linear32_forward,
linear16_relu_backward) give the reference layers' bytes at the base model's shapes (8 pair
features -> 32 hidden -> 16 biases), on random values and on special ones; the tiny model's
whole-model tests do not reach the 32- and 16-wide kernels."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine import layers as L
from dxstudio.engine.layers import Ops

F32 = np.float32
REF, FAST = Ops("reference"), Ops("fast")
SPECIAL = np.array([-0.0, 0.0, 1e-40, -1e-42, np.inf, -np.inf, 3e38, -3e38, 1.0, -1.0], F32)


def same(got, want, what):
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, what
    differ = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ == 0, f"{what}: {differ} of {got.size} elements differ"


def inputs(rng, n, k, m, special: bool):
    x = (rng.standard_normal((n, k)) * 2).astype(F32)
    w = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    if special:
        x.reshape(-1)[:: 7][: len(SPECIAL)] = SPECIAL[: len(x.reshape(-1)[:: 7])]
        w.reshape(-1)[3:: 11][:3] = [-0.0, 1e-41, 2e38][: len(w.reshape(-1)[3::11][:3])]
    return x, w, b


@pytest.mark.parametrize("n,special", [(1, False), (37, False), (5000, False), (300, True)])
def test_pair_mlp_fused_kernels_are_the_reference_layers(n, special, monkeypatch):
    from dxstudio.engine.kernels import fused

    used = set()
    for name in ("linear8_relu_forward", "linear32_forward", "linear16_relu_backward"):
        real = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda *a, _real=real, _name=name: used.add(_name) or _real(*a))
    rng = np.random.default_rng(n)
    with np.errstate(all="ignore"):
        pf, w1, b1 = inputs(rng, n, 8, 32, special)
        ph = [L.linear_relu_forward(ops, pf, w1, b1) for ops in (REF, FAST)]
        same(ph[1], ph[0], "linear8 + bias + relu")
        h = ph[0]
        _, w2, b2 = inputs(rng, 1, 32, 16, special)
        pb = [L.linear_forward(ops, h, w2, b2) for ops in (REF, FAST)]
        same(pb[1], pb[0], "linear32 + bias")
        dy = (rng.standard_normal((n, 16))).astype(F32)
        if special:
            dy.reshape(-1)[:: 5][: len(SPECIAL)] = SPECIAL[: len(dy.reshape(-1)[:: 5])]
        back = [L.linear_relu_backward(ops, dy, h, w2) for ops in (REF, FAST)]
        for k, name in enumerate(("dx through the relu", "dw", "db")):
            same(back[1][k], back[0][k], name)
    assert np.all(ph[0].view(np.uint32)[~(ph[0] > 0)] == 0), "the relu writes +0"
    assert used == {"linear8_relu_forward", "linear32_forward", "linear16_relu_backward"}, used
