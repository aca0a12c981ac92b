"""The fine-tuning rules against values computed independently here (hashlib, Python-int SplitMix64)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from dxstudio.tuning.schedule import (
    batch_for_step,
    class_weights,
    class_weights_for,
    epoch_of_position,
    epoch_permutation,
    epoch_seed,
    hash_order,
    heldout_count,
    learning_rate,
    learning_rates,
    page_hash_key,
    split_pages,
    step_positions,
    total_steps,
)

M64 = (1 << 64) - 1
SAMPLE_PAGES = Path(__file__).resolve().parents[1] / "resources" / "sample" / "pages"


def ref_splitmix64(state: int):
    """The published SplitMix64 (Steele, Lea, Flood 2014; Vigna's splitmix64.c) with Python ints."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        yield z ^ (z >> 31)


def ref_fisher_yates(n: int, state: int) -> list[int]:
    order = list(range(n))
    gen = ref_splitmix64(state)
    for i in range(n - 1, 0, -1):
        j = next(gen) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


# ---------------------------------------------------------------------------------- split
def test_reference_splitmix64_matches_published_value_and_engine():
    gen = ref_splitmix64(0)
    assert next(gen) == 0xE220A8397B1DCDAF  # first output for seed 0, as published
    assert next(gen) == 0x6E789E6AA1B965F4
    from dxstudio.engine.kernels.rng import SplitMix64

    engine = SplitMix64(1234567)
    gen = ref_splitmix64(1234567)
    assert [engine.next_u64() for _ in range(50)] == [next(gen) for _ in range(50)]


def test_hash_key_is_first_8_bytes_little_endian_of_sha256():
    digest = hashlib.sha256(b"42:invoice-007").digest()
    assert page_hash_key("invoice-007", 42) == int.from_bytes(digest[:8], "little")
    # a non-ASCII id hashes its UTF-8 bytes
    digest = hashlib.sha256("7:reçu-été".encode("utf-8")).digest()
    assert page_hash_key("reçu-été", 7) == sum(b << (8 * i) for i, b in enumerate(digest[:8]))


def test_split_orders_by_hash_then_holds_out_the_first():
    ids = [f"page-{i:03d}" for i in range(20)]
    seed = 31
    keyed = []
    for page_id in ids:
        d = hashlib.sha256(f"{seed}:{page_id}".encode()).digest()
        keyed.append((int.from_bytes(d[:8], "little"), page_id))
    expected = [page_id for _, page_id in sorted(keyed)]
    assert hash_order(reversed(ids), seed) == expected
    train, held = split_pages(ids, seed, 0.2)
    assert held == expected[:4] and train == expected[4:]
    # a different seed gives a different order
    assert hash_order(ids, seed + 1) != expected


def test_split_ties_in_hash_are_broken_by_id(monkeypatch):
    import dxstudio.tuning.schedule as sched

    monkeypatch.setattr(sched, "page_hash_key", lambda page_id, seed: 5)
    assert sched.hash_order(["b", "a", "B", "c"], 1) == ["B", "a", "b", "c"]


def test_heldout_count_rounds_half_up_and_clamps():
    assert heldout_count(10, 0.25) == 3  # 2.5 -> 3, where Python's round(2.5) gives 2
    assert heldout_count(10, 0.15) == 2  # 1.5 -> 2 although the binary64 0.15 * 10 is 1.4999...
    assert heldout_count(30, 0.05) == 2  # 1.5 -> 2
    assert heldout_count(10, 0.24) == 2  # 2.4 -> 2
    assert heldout_count(100, 0.2) == 20
    assert heldout_count(10, 0.01) == 1  # at least one
    assert heldout_count(10, 0.0) == 1
    assert heldout_count(3, 0.9) == 2  # at most n - 1
    assert heldout_count(2, 1.0) == 1
    assert heldout_count(2, 0.5) == 1


def test_split_needs_two_pages_and_sane_input():
    with pytest.raises(ValueError, match="at least 2 usable pages"):
        split_pages(["only"], 1, 0.2)
    with pytest.raises(ValueError, match="at least 2 usable pages"):
        split_pages([], 1, 0.2)
    with pytest.raises(ValueError, match="appears twice"):
        split_pages(["a", "b", "a"], 1, 0.2)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        split_pages(["a", "b"], 1, 1.5)
    with pytest.raises(ValueError, match="finite"):
        split_pages(["a", "b"], 1, float("nan"))
    with pytest.raises(ValueError, match="seed"):
        split_pages(["a", "b"], -1, 0.2)
    with pytest.raises(ValueError, match="page id"):
        split_pages(["a", ""], 1, 0.2)


def test_split_on_real_page_ids():
    ids = sorted(f.stem for f in SAMPLE_PAGES.glob("*.json"))[:40]  # receipt_00000, receipt_00004, ...
    assert len(ids) == 40
    train, held = split_pages(ids, 2024, 0.2)
    assert len(held) == 8 and sorted(train + held) == sorted(ids)
    keys = [int.from_bytes(hashlib.sha256(f"2024:{i}".encode()).digest()[:8], "little") for i in held + train]
    assert keys == sorted(keys)


# ---------------------------------------------------------------------------------- batches
def test_epoch_seed_and_permutation_equal_reference_fisher_yates():
    assert epoch_seed(3, 5) == (3 << 32) ^ 5
    assert epoch_seed(0xFFFFFFFF_00000001, 2) == ((0xFFFFFFFF_00000001 << 32) ^ 2) & M64 == (1 << 32) | 2
    for n, seed, epoch in [(1, 0, 0), (2, 0, 0), (7, 31, 0), (7, 31, 1), (50, 2024, 3), (257, 9, 12)]:
        perm = epoch_permutation(n, seed, epoch)
        assert sorted(perm) == list(range(n))
        assert perm == ref_fisher_yates(n, ((seed << 32) ^ epoch) & M64)
    assert epoch_permutation(0, 1, 0) == []
    assert epoch_permutation(20, 5, 0) != epoch_permutation(20, 5, 1)


def test_literal_permutation_seed0_epoch0():
    # the first draws of SplitMix64(0): 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4
    a, b = 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4
    order = [0, 1, 2]
    j = a % 3
    order[2], order[j] = order[j], order[2]
    j = b % 2
    order[1], order[j] = order[j], order[1]
    assert epoch_permutation(3, 0, 0) == order


def test_stream_steps_and_straddling_batches():
    n, seed, batch, epochs = 5, 11, 3, 3
    stream = []
    for e in range(epochs):
        stream += ref_fisher_yates(n, (seed << 32) ^ e)
    steps = total_steps(n, batch, epochs)
    assert steps == 5  # ceil(15 / 3)
    got = [batch_for_step(n, seed, batch, epochs, s) for s in range(steps)]
    assert got == [stream[s * batch:(s + 1) * batch] for s in range(steps)]
    # step 1 holds positions 3, 4 (end of epoch 0) and 5 (start of epoch 1)
    assert list(step_positions(n, batch, epochs, 1)) == [3, 4, 5]
    assert [epoch_of_position(p, n) for p in (3, 4, 5)] == [0, 0, 1]
    assert got[1] == stream[3:5] + stream[5:6]
    # a short last step
    assert total_steps(n, 4, epochs) == 4
    assert batch_for_step(n, seed, 4, epochs, 3) == stream[12:15]
    # batch larger than an epoch: one step spans three epochs
    assert batch_for_step(n, seed, 12, epochs, 0) == stream[:12]
    assert batch_for_step(n, seed, 12, epochs, 1) == stream[12:15]
    with pytest.raises(ValueError, match="past the run's last step"):
        batch_for_step(n, seed, batch, epochs, steps)
    with pytest.raises(ValueError, match="batch size"):
        total_steps(n, 0, epochs)


# ---------------------------------------------------------------------------------- lr
def test_learning_rate_by_hand():
    peak = 1e-3
    # total 10, warm-up 2: 0.5e-3, 1e-3, then down to 1e-4 at step 9
    assert learning_rate(0, 10, 2, peak) == 0.0005
    assert learning_rate(1, 10, 2, peak) == peak
    assert learning_rate(2, 10, 2, peak) == pytest.approx(peak * (0.1 + 0.9 * 7 / 8), rel=0, abs=1e-18)
    assert learning_rate(2, 10, 2, peak) == pytest.approx(8.875e-4, rel=1e-15)
    assert learning_rate(5, 10, 2, peak) == pytest.approx(5.5e-4, rel=1e-15)  # 0.1 + 0.9 * 4/8
    assert learning_rate(9, 10, 2, peak) == peak * 0.1  # exactly 10% at the last step
    rates = learning_rates(10, 2, peak)
    assert all(a > b for a, b in zip(rates[1:], rates[2:]))  # strictly falling after the peak
    # every value is the pinned binary64 expression
    for s in range(10):
        want = peak * (s + 1) / 2 if s < 2 else peak * (0.1 + 0.9 * (9 - s) / 8)
        assert rates[s] == want


def test_learning_rate_edge_cases():
    peak = 2e-3
    # no warm-up: decays from the first step, 1 - 0.9/4 of the peak, to 10%
    assert learning_rate(0, 4, 0, peak) == pytest.approx(peak * 0.775, rel=1e-15)
    assert learning_rate(3, 4, 0, peak) == peak * 0.1
    # a single step with no warm-up is already the last step
    assert learning_rate(0, 1, 0, peak) == peak * 0.1
    # warm-up as long as the run: peak at the last step, no decay
    assert learning_rates(4, 4, peak) == [peak * 1 / 4, peak * 2 / 4, peak * 3 / 4, peak]
    # warm-up longer than the run: never reaches the peak
    assert learning_rates(2, 4, peak)[-1] == peak * 2 / 4
    # warm-up of 1: the first step is the peak
    assert learning_rate(0, 5, 1, peak) == peak
    assert learning_rate(4, 5, 1, peak) == peak * 0.1
    for bad in [dict(step=4, total=4), dict(step=-1), dict(total=0, step=0), dict(warmup=-1)]:
        kw = dict(step=0, total=4, warmup=1, peak=peak) | bad
        with pytest.raises(ValueError):
            learning_rate(**kw)
    for bad_peak in (0.0, -1e-3, float("inf"), float("nan"), "1e-3"):
        with pytest.raises(ValueError, match="peak"):
            learning_rate(0, 4, 1, bad_peak)


# ---------------------------------------------------------------------------------- weights
def test_class_weights():
    w = class_weights(3)
    assert w.dtype == np.float64
    assert w.tolist() == [1.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
    assert class_weights(1, 2.5).tolist() == [1.0, 2.5, 2.5]
    assert class_weights_for([3, 1.5, 10]).tolist() == [1.0, 3.0, 3.0, 1.5, 1.5, 10.0, 10.0]
    # the order matches the tag names O, B-f, I-f, ...
    from dxstudio.engine.config import tag_names

    names = tag_names(["vendor", "total"])
    weights = class_weights_for([2.0, 5.0])
    assert dict(zip(names, weights.tolist())) == {"O": 1.0, "B-vendor": 2.0, "I-vendor": 2.0, "B-total": 5.0, "I-total": 5.0}
    json.dumps(weights.tolist())
    with pytest.raises(ValueError, match="at least one field"):
        class_weights_for([])
    with pytest.raises(ValueError, match="field 1"):
        class_weights_for([3, 0])
    with pytest.raises(ValueError, match="field 0"):
        class_weights_for([float("nan")])
    with pytest.raises(ValueError, match="number of fields"):
        class_weights(0)
