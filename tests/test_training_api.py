"""The training API's rules: trainable sets, ignored targets, bad targets, clipping, padding row."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.config import size_config
from dxstudio.engine.inputs import window_inputs
from dxstudio.engine.losses import cross_entropy
from dxstudio.engine.page import Page, Word
from dxstudio.engine.params import new_params
from dxstudio.engine.training import (Example, Targets, TrainSettings, TrainState, batch_gradients,
                                      global_norm, train_step, trainable_scales)

CFG = size_config("tiny")
# weight_decay, clip and kernels have no engine default (their defaults are the settings table's); these
# are the values the engine's tests have always trained with
ENGINE_DEFAULTS = dict(weight_decay=0.01, clip=None, kernels="fast")


def make_page(n, seed=0):
    rng = np.random.default_rng(seed)
    words = []
    for i in range(n):
        x, y = float(rng.integers(0, 500)), float(rng.integers(0, 700))
        words.append(Word(["Total", "12.50", "ACME", "Inc.", "Date:", "2020-01-02", "x"][i % 7], (x, y, x + 60, y + 15)))
    return Page(f"p{seed}", 600, 800, tuple(words))


def example(n=6, seed=0, **targets):
    page = make_page(n, seed)
    rng = np.random.default_rng(seed + 100)
    t = dict(tags=rng.integers(0, CFG.n_tags, n))
    t.update(targets)
    return Example(window_inputs(page, CFG, 0, n), Targets(**t))


def moved(before, after):
    return {k for k in before if not np.array_equal(before[k], after[k])}


def test_head_only_trains_only_the_tag_head():
    p = new_params(CFG, 7)
    st = TrainState.start(CFG, p, TrainSettings(backbone_scale=0.0, **ENGINE_DEFAULTS, loss_role=1.0))
    assert list(trainable_scales(CFG, st.settings)) == ["tag_head.weight", "tag_head.bias"]
    before = {k: v.copy() for k, v in st.params.items()}
    train_step(st, [example(roles=np.zeros(6, np.int64))], 1e-2)
    assert moved(before, st.params) == {"tag_head.weight", "tag_head.bias"}


def test_positive_scale_trains_the_backbone_but_other_heads_only_with_their_loss():
    s = TrainSettings(backbone_scale=0.5, **ENGINE_DEFAULTS)
    scales = trainable_scales(CFG, s)
    assert scales["tag_head.weight"] == 1.0 and scales["blocks.0.qkv.weight"] == 0.5
    assert not any(k.startswith(("role_head", "doc_head", "rel_")) for k in scales)
    s2 = TrainSettings(backbone_scale=0.5, **ENGINE_DEFAULTS, loss_role=1.0, loss_kv=1.0)
    scales2 = trainable_scales(CFG, s2)
    assert scales2["role_head.weight"] == 0.5 and "rel_q.weight" in scales2 and "doc_head.weight" not in scales2
    st = TrainState.start(CFG, new_params(CFG, 7), s)
    before = {k: v.copy() for k, v in st.params.items()}
    train_step(st, [example()], 1e-2)
    changed = moved(before, st.params)
    assert "blocks.1.fc2.weight" in changed and "char_emb" in changed
    assert not any(k.startswith(("role_head", "doc_head", "rel_")) for k in changed)


def test_layer_decay_lowers_each_backbone_layer_below_the_top():
    plain = trainable_scales(CFG, TrainSettings(backbone_scale=0.5, **ENGINE_DEFAULTS))
    assert trainable_scales(CFG, TrainSettings(backbone_scale=0.5, layer_decay=1.0, **ENGINE_DEFAULTS)) == plain
    s = trainable_scales(CFG, TrainSettings(backbone_scale=0.5, layer_decay=0.5, **ENGINE_DEFAULTS))
    top = CFG.layers - 1
    assert list(s) == list(plain) and s["tag_head.weight"] == 1.0  # the same tensors, the head at its rate
    assert s[f"blocks.{top}.qkv.weight"] == 0.5 and s["final_ln.weight"] == 0.5
    assert s["blocks.0.fc1.weight"] == 0.5 * 0.5 ** top and s["char_emb"] == 0.5 * 0.5 ** CFG.layers
    s_role = trainable_scales(CFG, TrainSettings(backbone_scale=0.5, layer_decay=0.5, loss_role=1.0, **ENGINE_DEFAULTS))
    assert s_role["role_head.weight"] == 0.5  # the other heads sit on top, at the backbone's rate
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="layer_decay must be > 0 and <= 1"):
            trainable_scales(CFG, TrainSettings(backbone_scale=0.5, layer_decay=bad, **ENGINE_DEFAULTS))


def test_padding_row_of_char_emb_gets_no_gradient():
    st = TrainState.start(CFG, new_params(CFG, 7), TrainSettings(backbone_scale=1.0, **ENGINE_DEFAULTS))
    _, g = batch_gradients(CFG, st.params, [example(9, 3)], st.settings, list(trainable_scales(CFG, st.settings)))
    assert not np.any(g["char_emb"][0])
    assert np.any(g["char_emb"][2:])


def test_no_counted_word_gives_loss_zero_and_zero_gradients():
    loss, grad = cross_entropy(np.ones((4, 5), np.float32), np.full(4, -1))
    assert loss == 0.0 and not np.any(grad)
    st = TrainState.start(CFG, new_params(CFG, 7), TrainSettings(backbone_scale=1.0, **ENGINE_DEFAULTS))
    loss, g = batch_gradients(CFG, st.params, [example(tags=np.full(6, -1))], st.settings,
                              list(trainable_scales(CFG, st.settings)))
    assert loss == 0.0 and all(not np.any(v) for v in g.values())


def test_ignored_words_do_not_change_the_loss():
    z = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    l1, g1 = cross_entropy(z, np.array([1, -1, 3, -1, 0]), weight=np.arange(1, 8, dtype=float))
    l2, g2 = cross_entropy(z[[0, 2, 4]], np.array([1, 3, 0]), weight=np.arange(1, 8, dtype=float))
    assert l1 == l2 and np.array_equal(g1[[0, 2, 4]], g2) and not np.any(g1[[1, 3]])
    # matches a direct binary64 computation (PyTorch's weighted mean)
    zz = z.astype(float)[[0, 2, 4]]
    w = np.arange(1, 8, dtype=float)[[1, 3, 0]]
    nll = np.log(np.exp(zz).sum(1)) - zz[[0, 1, 2], [1, 3, 0]]
    assert abs(l1 - (w * nll).sum() / w.sum()) < 1e-12


@pytest.mark.parametrize("targets, message", [
    (dict(tags=np.zeros(5, np.int64)), "length"),
    (dict(tags=np.full(6, CFG.n_tags)), "outside"),
    (dict(tags=np.zeros(6, np.int64), items=np.full(6, 6)), "outside the 6 words"),
    (dict(tags=np.zeros(6, np.int64), roles=np.full(6, 9)), "roles"),
    (dict(tags=np.zeros(6, np.int64), doc=17), "document type"),
    (dict(tags=np.zeros(6)), "integers"),
])
def test_bad_targets_are_clear_errors(targets, message):
    st = TrainState.start(CFG, new_params(CFG, 7), TrainSettings(backbone_scale=1.0, **ENGINE_DEFAULTS, loss_items=1, loss_role=1, loss_doc=1))
    ex = example()
    ex.targets = Targets(**targets)
    with pytest.raises(ValueError, match=message):
        train_step(st, [ex], 1e-3)


def test_clipping_scales_the_gradient_to_the_threshold():
    s = TrainSettings(backbone_scale=1.0, **ENGINE_DEFAULTS)
    st = TrainState.start(CFG, new_params(CFG, 7), s)
    wanted = list(trainable_scales(CFG, s))
    _, g = batch_gradients(CFG, st.params, [example()], s, wanted)
    norm = global_norm(g)
    ref = np.sqrt(sum(float((v.astype(float) ** 2).sum()) for v in g.values()))
    assert abs(norm - ref) / ref < 1e-5
    clip = norm / 4
    st2 = TrainState.start(CFG, new_params(CFG, 7), TrainSettings(backbone_scale=1.0, clip=clip, weight_decay=0.01, kernels="fast"))
    res = train_step(st2, [example()], 1e-3)
    assert res.grad_norm == norm
    assert abs(global_norm(res.grads) - clip) / clip < 1e-4
