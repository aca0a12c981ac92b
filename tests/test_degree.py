"""The examples of a step at degree > 1 (issue 26, items 3 and 5): handed to the threads longest
first, summed by the caller in example order, the same bytes as degree 1; a failing example's
error is raised and the pool stays usable; a runner that hands back sums (each task continuing
the previous task's partial sum, as the Ray tasks do) gives degree 1's bytes; the held-out
pages scored side by side give the predictions of one at a time. Tiny model: seconds."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from dxstudio.engine import training
from dxstudio.engine.config import SIZES
from dxstudio.engine.params import new_params
from dxstudio.engine.training import Example, Targets, TrainSettings, TrainState, add_in_order, train_step
from synthetic import fake_window

CFG = SIZES["tiny"]


def settings(degree):
    return TrainSettings(backbone_scale=0.5, loss_tag=1.0, tag_class_weights=(1.0,) + (3.0,) * (CFG.n_tags - 1),
                         clip=0.5, degree=degree, kernels="fast", weight_decay=0.01)


def examples(sizes, seed=3):
    rng = np.random.default_rng(seed)
    return [Example(fake_window(CFG, n, 50 + k), Targets(tags=rng.integers(-1, CFG.n_tags, n)))
            for k, n in enumerate(sizes)]


def steps(degree, sizes=(3, 20, 7, 12), runner=None, n=2):
    state = TrainState.start(CFG, new_params(CFG, 7), settings(degree))
    state.runner = runner
    out = []
    for step in range(n):
        res = train_step(state, examples(sizes, seed=step), 2e-3)
        out.append((res.loss, [g.tobytes() for g in res.grads.values()]))
    return out, {k: v.tobytes() for k, v in state.params.items()}


def test_longest_examples_first_and_the_bytes_of_degree_1(monkeypatch):
    want = steps(1)
    real = training.example_gradients
    started, barrier = [], threading.Barrier(2, timeout=60)

    def spy(cfg, params, ex, *a, **k):
        started.append(ex.inputs.n)
        if len(started) <= 2:  # the first two run together: both were taken before either ended
            barrier.wait()
        return real(cfg, params, ex, *a, **k)

    monkeypatch.setattr(training, "example_gradients", spy)
    steps(2, n=1)
    assert set(started[:2]) == {20, 12}  # the two longest of (3, 20, 7, 12) first
    monkeypatch.setattr(training, "example_gradients", real)
    assert steps(2) == want and steps(3) == want


def test_a_failing_example_raises_and_the_pool_stays_usable(monkeypatch):
    real = training.example_gradients

    def bad(cfg, params, ex, *a, **k):
        if ex.inputs.n == 7:
            raise ValueError("example of 7 words failed")
        return real(cfg, params, ex, *a, **k)

    monkeypatch.setattr(training, "example_gradients", bad)
    with pytest.raises(ValueError, match="7 words failed"):
        steps(2, n=1)
    monkeypatch.setattr(training, "example_gradients", real)
    assert steps(2) == steps(1)


class ChainedSums:
    """The Ray runner's arithmetic without Ray: consecutive runs of the examples, each run's sets
    added onto the previous run's partial sum with add_in_order (cluster._gradient_run)."""
    sums = True

    def __init__(self, runs):
        self.runs = runs

    def __call__(self, cfg, params, exs, st, wanted, b):
        loss, total, start = 0.0, {}, 0
        for size in self.runs:
            sets = [training.example_gradients(cfg, params, ex, st, wanted, b) for ex in exs[start:start + size]]
            loss, total = add_in_order(loss, dict(total), sets, wanted)
            start += size
        assert start == len(exs)
        return loss, total


@pytest.mark.parametrize("runs", [(4,), (1, 3), (2, 2), (3, 1), (1, 1, 1, 1)])
def test_a_runner_that_sums_in_example_order_gives_the_bytes_of_degree_1(runs):
    assert steps(1, runner=ChainedSums(runs)) == steps(1)


def page(pid, n, seed):
    from dxstudio.engine.page import Page, Word

    rng = np.random.default_rng(seed)
    vocab = ("TOTAL", "12.50", "03/01/2019", "Invoice", "No:", "#4471", "Cash", "RM", "Tax", "Date:")
    words = tuple(Word(str(rng.choice(vocab)), (40 * (i % 8), 30 * (i // 8), 40 * (i % 8) + 35, 30 * (i // 8) + 20))
                  for i in range(n))
    return Page(pid, 400, 1000, words, None)


def test_held_out_pages_side_by_side_predict_as_one_at_a_time():
    from dxstudio.engine.model import to_runtime
    from dxstudio.tuning.run import predict_pages

    pages = [page(f"p{k}", n, k) for k, n in enumerate((5, 30, 9, 17, 2))]
    cfg = CFG.with_fields(("total", "date"))
    params = to_runtime(new_params(cfg, 4))
    for decoding in ("span", "seed", "keyed_layout"):  # keyed_layout: the default, after the keys ("Date:")
        one = predict_pages(cfg, params, pages, "fast", decoding, 1)
        two = predict_pages(cfg, params, pages, "fast", decoding, 2)
        assert [p.page_id for p in two] == [p.id for p in pages]
        for a, b in zip(one, two):
            assert a.fields == b.fields
            assert a.tags.tobytes() == b.tags.tobytes() and a.tag_probs.tobytes() == b.tag_probs.tobytes()
