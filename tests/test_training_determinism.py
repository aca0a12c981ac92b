"""Training is deterministic and its gradients are right.

* Fast vs reference kernels and degree 1 vs degree 4: the forward values, the loss, the
  gradients (after clipping), the updated weights and the AdamW moments are bit-identical over
  three steps, with every loss term on, clipping active and tag class weights.
* A finite-difference check in binary64 on the tiny model (the reference path runs in binary64
  when given binary64 parameters) for every tensor's gradient: with a random linear loss on
  all outputs, and with the real cross-entropy terms (a small binary64 cross-entropy written
  here, checked against losses.py).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pytest

from dxstudio.engine.config import SIZES
from dxstudio.engine.layers import Ops
from dxstudio.engine.losses import cross_entropy
from dxstudio.engine.model import OutputGrads, backward, forward, to_runtime
from dxstudio.engine.params import new_params
from dxstudio.engine.training import Example, Targets, TrainSettings, TrainState, train_step, trainable_scales
from synthetic import fake_window

F32 = np.float32
F64 = np.float64
OUTPUTS = {"tag": "tag_logits", "role": "role_logits", "doc": "doc_logits", "items": "item_scores",
           "kv": "kv_scores"}




def batch(cfg, step, sizes):
    """The examples of one step: random targets with some ignored (-1) words."""
    rng = np.random.default_rng(100 + step)
    out = []
    for k, n in enumerate(sizes):
        targets = Targets(tags=rng.integers(-1, cfg.n_tags, n), roles=rng.integers(-1, len(cfg.roles), n),
                          doc=int(rng.integers(0, len(cfg.doc_types))), items=rng.integers(-1, n, n),
                          kv=rng.integers(-1, n, n))
        out.append(Example(fake_window(cfg, n, 1000 * step + k), targets))
    return out


def every_term_settings(cfg, kernels, degree, clip):
    return TrainSettings(backbone_scale=0.5, loss_tag=1.0, loss_role=0.7, loss_doc=0.3, loss_items=0.5,
                         loss_kv=0.25, tag_class_weights=(1.0,) + (3.0,) * (cfg.n_tags - 1),
                         clip=clip, degree=degree, kernels=kernels, weight_decay=0.01)


def run_steps(cfg, container, kernels, degree, sizes, steps=3, clip=0.5, lr=2e-3):
    """Everything a step produces, as a list of (label, array) per step."""
    state = TrainState.start(cfg, container, every_term_settings(cfg, kernels, degree, clip))
    ops = Ops(kernels)
    record = []
    for step in range(steps):
        examples = batch(cfg, step, sizes)
        items = []
        for k, ex in enumerate(examples):
            out = forward(cfg, state.params, ex.inputs, ops)
            items += [(f"example {k} {name}", getattr(out, name)) for name in OUTPUTS.values()]
        result = train_step(state, examples, lr)
        items.append(("loss", np.array([result.loss], F64)))
        items.append(("grad norm", np.array([result.grad_norm], F64)))
        items += [(f"gradient {name}", g) for name, g in result.grads.items()]
        items += [(f"weight {name}", p.copy()) for name, p in state.params.items()]
        items += [(f"adam m {name}", m.copy()) for name, m in state.m.items()]
        items += [(f"adam v {name}", v.copy()) for name, v in state.v.items()]
        record.append((result, items))
    return state, record


def as_bits(a):
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_runs_identical(runs):
    (label0, (_, record0)) = runs[0]
    for label, (_, record) in runs[1:]:
        for step, ((_, want), (_, got)) in enumerate(zip(record0, record)):
            assert [name for name, _ in got] == [name for name, _ in want]
            for (name, g), (_, w) in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, f"{label} step {step} {name}"
                assert np.array_equal(as_bits(g), as_bits(w)), f"{label} differs from {label0} at step {step}: {name}"


def check_determinism(cfg, sizes, combos):
    container = new_params(cfg, 7)
    runs = [(f"{k} degree {d}", run_steps(cfg, container, k, d, sizes)) for k, d in combos]
    assert_runs_identical(runs)
    # the run was not trivial: clipping acted, every trainable tensor got a gradient and moved
    state, record = runs[0][1]
    trained = trainable_scales(cfg, state.settings)
    assert list(trained) == list(state.params), "every loss on: every tensor trains"
    start = to_runtime(container)
    for result, _ in record:
        assert result.grad_norm > state.settings.clip, "clipping must be active in this test"
        assert np.isfinite(result.loss) and result.loss > 0
        for name in trained:
            assert np.any(result.grads[name] != 0), f"no gradient reached {name}"
    for name in trained:
        assert not np.array_equal(state.params[name], start[name]), f"{name} did not change"
    losses = [result.loss for result, _ in record]
    return losses


def test_tiny_model_paths_and_degrees_bit_identical():
    cfg = SIZES["tiny"]
    check_determinism(cfg, sizes=(5, 9, 3, 1, 12),
                      combos=[("reference", 1), ("fast", 1), ("fast", 4), ("reference", 4)])


@pytest.mark.heavy
def test_base_model_paths_and_degrees_bit_identical():
    cfg = SIZES["base"]
    check_determinism(cfg, sizes=(24, 7, 130, 1),
                      combos=[("reference", 1), ("fast", 1), ("fast", 4), ("reference", 4)])


def test_degree_larger_than_the_batch_and_batch_of_one(monkeypatch):
    # Degree 4 on a batch of 3: each example on its own worker thread, all three at once (a
    # barrier that waits for all three proves it); on a batch of one, on the caller's thread.
    # Both give degree 1's bytes.
    from dxstudio.engine import training

    real = training.example_gradients
    calls = []
    barrier = None

    def spy(*args, **kwargs):
        calls.append(threading.get_ident())
        if barrier is not None:
            barrier.wait()  # BrokenBarrierError after the timeout: the examples did not run together
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "example_gradients", spy)
    cfg = SIZES["tiny"]
    container = new_params(cfg, 7)
    main = threading.get_ident()
    for sizes in ((6, 2, 9), (6,)):
        runs = []
        for degree in (1, 4):
            calls.clear()
            threaded = degree > len(sizes) > 1
            barrier = threading.Barrier(len(sizes), timeout=60) if threaded else None
            runs.append((f"batch {sizes} degree {degree}",
                         run_steps(cfg, container, "fast", degree, sizes=sizes, steps=2)))
            assert len(calls) == 2 * len(sizes)
            if threaded:
                assert main not in calls
            else:
                assert set(calls) == {main}
        assert_runs_identical(runs)


# ----------------------------------------------------------------------------------------
# Finite differences in binary64
# ----------------------------------------------------------------------------------------
def cross_entropy64(z, targets, weight=None, scale=1.0):
    """PyTorch's weighted mean cross-entropy with ignored negative targets, in binary64 NumPy:
    (loss, gradient w.r.t. z)."""
    z = np.asarray(z, F64)
    t = np.asarray(targets)
    grad = np.zeros_like(z)
    rows = np.nonzero(t >= 0)[0]
    if rows.size == 0:
        return 0.0, grad
    w = np.ones(z.shape[1]) if weight is None else np.asarray(weight, F64)
    zr = z[rows]
    m = zr.max(axis=1, keepdims=True)
    e = np.exp(zr - m)
    s = e.sum(axis=1, keepdims=True)
    nll = (m[:, 0] + np.log(s[:, 0])) - zr[np.arange(rows.size), t[rows]]
    wt = w[t[rows]]
    loss = float((wt * nll).sum() / wt.sum())
    p = e / s
    p[np.arange(rows.size), t[rows]] -= 1.0
    grad[rows] = p * (scale * wt / wt.sum())[:, None]
    return loss, grad


TERM_WEIGHTS = {"tag": 1.0, "role": 0.7, "doc": 0.3, "items": 0.5, "kv": 0.25}


def ce_terms(cfg, out, targets, class_weights):
    """(total loss, output gradients) of the weighted cross-entropy terms."""
    total = 0.0
    grads = {}
    term_targets = {"tag": targets.tags, "role": targets.roles, "doc": np.array([targets.doc]),
                    "items": targets.items, "kv": targets.kv}
    for name, attr in OUTPUTS.items():
        z = getattr(out, attr)
        z2 = z[None, :] if name == "doc" else z
        loss, g = cross_entropy64(z2, term_targets[name], class_weights if name == "tag" else None,
                                  scale=TERM_WEIGHTS[name])
        total += TERM_WEIGHTS[name] * loss
        grads[name] = g[0] if name == "doc" else g
    return total, grads


@pytest.fixture(scope="module")
def tiny64():
    cfg = SIZES["tiny"]
    params = OrderedDict((k, v.astype(F64)) for k, v in to_runtime(new_params(cfg, 7)).items())
    # non-trivial layer norms and biases, so that their gradients are exercised in general position
    rng = np.random.default_rng(77)
    for name in params:
        if name.endswith(("bias", "ln.weight", "ln1.weight", "ln2.weight")):
            params[name] = params[name] + 0.1 * rng.standard_normal(params[name].shape)
    return cfg, params


FD_REL = 1e-6
FD_ABS_FLOOR = 1e-8


def directional_check(cfg, params, inp, loss_of_outputs, output_grads, seed, label):
    """For every tensor: the analytic directional derivative against a central difference."""
    ops = Ops("reference")
    out = forward(cfg, params, inp, ops, keep=True)
    assert out.tag_logits.dtype == F64, "the reference path keeps binary64"
    grads = backward(cfg, params, inp, out, OutputGrads(**output_grads(out)), ops)
    assert list(grads) == list(params)
    rng = np.random.default_rng(seed)
    h = 1e-6
    worst = 0.0
    for name, g in grads.items():
        direction = rng.standard_normal(g.shape)
        if name == "char_emb":
            direction[0] = 0.0  # the padding row is not a parameter of the function
        shifted = dict(params)
        shifted[name] = params[name] + h * direction
        up = loss_of_outputs(forward(cfg, shifted, inp, ops))
        shifted[name] = params[name] - h * direction
        down = loss_of_outputs(forward(cfg, shifted, inp, ops))
        numeric = (up - down) / (2 * h)
        analytic = float((g * direction).sum())
        # The central difference carries a truncation error of order h^2 and a rounding error
        # of about eps * |loss| / h (1e-9 here): a relative bound with an absolute floor.
        err = abs(numeric - analytic)
        worst = max(worst, err / (abs(analytic) + FD_ABS_FLOOR))
        print(f"{name:24s} analytic {analytic: .10e}  difference {numeric - analytic: .2e}")
        assert err <= FD_REL * abs(analytic) + FD_ABS_FLOOR, \
            f"{label}: gradient of {name}: analytic {analytic!r}, finite difference {numeric!r}"
    print(f"{label}: worst error {worst:.2e} (relative, with the floor) over {len(grads)} tensors")
    # softmax is invariant to one bias added to a whole row: the pair2 bias gets no gradient
    assert np.all(np.abs(grads["pair2.bias"]) < 1e-12)


def test_finite_differences_random_linear_loss(tiny64):
    cfg, params = tiny64
    inp = fake_window(cfg, 6, 1)
    rng = np.random.default_rng(3)
    out0 = forward(cfg, params, inp, Ops("reference"))
    weights = {name: rng.standard_normal(getattr(out0, attr).shape) for name, attr in OUTPUTS.items()}

    def loss(out):
        return sum(float((getattr(out, attr) * weights[name]).sum()) for name, attr in OUTPUTS.items())

    directional_check(cfg, params, inp, loss, lambda out: weights, seed=11, label="linear loss")


def test_finite_differences_cross_entropy(tiny64):
    cfg, params = tiny64
    n = 7
    inp = fake_window(cfg, n, 2)
    rng = np.random.default_rng(4)
    targets = Targets(tags=rng.integers(-1, cfg.n_tags, n), roles=rng.integers(-1, len(cfg.roles), n), doc=1,
                      items=rng.integers(-1, n, n), kv=rng.integers(-1, n, n))
    class_weights = np.array([1.0] + [3.0] * (cfg.n_tags - 1))

    def loss(out):
        return ce_terms(cfg, out, targets, class_weights)[0]

    def output_grads(out):
        return ce_terms(cfg, out, targets, class_weights)[1]

    directional_check(cfg, params, inp, loss, output_grads, seed=12, label="cross-entropy")


def test_library_cross_entropy_matches_binary64_reference():
    """losses.py (binary64 with the library's exp and log, gradient rounded once to binary32)
    against the NumPy binary64 formula: the loss to a few binary64 ulps, the gradient to the
    nearest binary32 (at most one binary32 ulp away)."""
    rng = np.random.default_rng(21)
    z = (rng.standard_normal((40, 9)) * 4).astype(F32)
    t = rng.integers(-1, 9, 40)
    w = rng.random(9) * 3 + 0.5
    for kernels in ("reference", "fast"):
        loss, grad = cross_entropy(z, t, w, scale=0.25, kernels=kernels)
        want_loss, want_grad = cross_entropy64(z, t, w, scale=0.25)
        assert abs(loss - want_loss) <= 8 * np.spacing(want_loss)
        assert grad.dtype == F32
        rounded = want_grad.astype(F32)
        assert np.all(np.abs(grad - rounded) <= np.spacing(np.abs(rounded)))
        assert np.all(grad[t < 0] == 0)
    a = cross_entropy(z, t, w, kernels="reference")
    b = cross_entropy(z, t, w, kernels="fast")
    assert a[0] == b[0] and np.array_equal(a[1].view(np.uint32), b[1].view(np.uint32))
    # no counted word: loss 0 and zero gradient
    loss, grad = cross_entropy(z, np.full(40, -1), w)
    assert loss == 0.0 and not np.any(grad)
