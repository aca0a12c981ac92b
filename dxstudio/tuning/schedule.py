"""The deterministic rules of a fine-tuning run: split, batch stream, learning rate, class weights.

Each rule is the seed's sentence ("Fine-tuning a custom schema") with every open choice pinned;
docs/tuning.md states the choices. Nothing here depends on the machine: integers are Python
ints, hashes are SHA-256, random numbers are SplitMix64 and learning rates are binary64 values
computed by a fixed sequence of operations.
"""
from __future__ import annotations

import hashlib
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dxstudio.engine.kernels.constants import MASK64 as _MASK64
from dxstudio.engine.kernels.rng import SplitMix64

DECAY_FLOOR = 0.1  # the learning rate ends at 10% of the peak
DEFAULT_FIELD_WEIGHT = 3.0


def _check_seed(seed) -> int:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= int(seed) <= _MASK64:
        raise ValueError(f"seed must be an integer in [0, 2^64), not {seed!r}")
    return int(seed)


def _check_count(value, what: str, minimum: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or int(value) < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, not {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------
# Split
# --------------------------------------------------------------------------------------
def page_hash_key(page_id: str, seed: int) -> int:
    """First 8 bytes of SHA-256("<seed>:<id>") (UTF-8), read little endian."""
    if not isinstance(page_id, str) or not page_id:
        raise ValueError(f"page id must be a non-empty string, not {page_id!r}")
    digest = hashlib.sha256(f"{_check_seed(seed)}:{page_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def hash_order(page_ids, seed: int) -> list[str]:
    """The page ids ordered by (hash key, id); ids compare by Unicode code points."""
    ids = list(page_ids)
    seen = set()
    for page_id in ids:
        if page_id in seen:
            raise ValueError(f"page id {page_id!r} appears twice")
        seen.add(page_id)
    return sorted(ids, key=lambda page_id: (page_hash_key(page_id, seed), page_id))


def _exact_decimal(value, what: str) -> Fraction:
    """A setting such as 0.15 read as the decimal it is written as (3/20), not its binary64 value.

    repr() is the shortest decimal that reads back to the same float, so this is the number a
    settings file shows, and the same in every implementation that prints floats round-trip.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{what} must be a number, not {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    return Fraction(repr(value))


def heldout_count(n: int, fraction: float) -> int:
    """max(1, round(n * fraction)), at most n - 1; round is half up on the exact decimal product.

    Needs n >= 2: with one usable page nothing can be held out and nothing trained on both.
    """
    n = _check_count(n, "the number of usable pages", 0)
    exact = _exact_decimal(fraction, "the held-out fraction")
    if not 0 <= exact <= 1:
        raise ValueError(f"the held-out fraction must be in [0, 1], not {fraction!r}")
    if n < 2:
        raise ValueError(f"a project needs at least 2 usable pages to hold one out, it has {n}")
    product = n * exact
    rounded = math.floor(product + Fraction(1, 2))  # half up: 2.5 -> 3 (Python's round gives 2)
    return min(max(1, rounded), n - 1)


def split_pages(page_ids, seed: int, fraction: float) -> tuple[list[str], list[str]]:
    """(train_ids, heldout_ids), each in hash order; the first heldout_count pages are held out."""
    ordered = hash_order(page_ids, seed)
    k = heldout_count(len(ordered), fraction)
    return ordered[k:], ordered[:k]


def fold_split(page_ids, seed: int, n_folds: int, fold: int) -> tuple[list[str], list[str]]:
    """(train_ids, heldout_ids) of fold `fold` (0-based) of `n_folds`, each in hash order: the
    held-out pages are those at positions fold, fold + K, fold + 2K, ... of the hash order, so
    every page is held out by exactly one fold."""
    ordered = hash_order(page_ids, seed)
    n_folds = _check_count(n_folds, "the number of folds", 2)
    fold = _check_count(fold, "fold", 0)
    if fold >= n_folds:
        raise ValueError(f"fold {fold} is past the last fold {n_folds - 1}")
    if n_folds > len(ordered):
        raise ValueError(f"{n_folds} folds need at least {n_folds} usable pages, there are {len(ordered)}")
    return ([p for i, p in enumerate(ordered) if i % n_folds != fold], ordered[fold::n_folds])


def document_pages_order(documents: dict, seed: int) -> list[str]:
    """Page ids of `documents` ({document id: [page ids in page order]}): the documents in the
    hash order of their ids, each document's pages together in page order. A document of one
    page has its page's id, so for one-page documents this is hash_order of the pages."""
    return [pid for d in hash_order(list(documents), seed) for pid in documents[d]]


def split_documents(documents: dict, seed: int, fraction: float) -> tuple[list[str], list[str]]:
    """split_pages over documents: the first heldout_count(documents) documents of the hash
    order of document ids are held out, with all their pages, so no document is both trained
    on and scored. One-page documents give split_pages exactly."""
    ordered = hash_order(list(documents), seed)
    k = heldout_count(len(ordered), fraction)
    return ([p for d in ordered[k:] for p in documents[d]], [p for d in ordered[:k] for p in documents[d]])


def fold_split_documents(documents: dict, seed: int, n_folds: int, fold: int) -> tuple[list[str], list[str]]:
    """fold_split over documents (every document held out by exactly one fold, all its pages)."""
    train, held = fold_split(list(documents), seed, n_folds, fold)
    return [p for d in train for p in documents[d]], [p for d in held for p in documents[d]]


# --------------------------------------------------------------------------------------
# Batch stream
# --------------------------------------------------------------------------------------
def epoch_seed(seed: int, epoch: int) -> int:
    """((seed << 32) xor epoch) mod 2^64: only the seed's low 32 bits reach the batch stream."""
    seed = _check_seed(seed)
    epoch = _check_count(epoch, "epoch", 0)
    if epoch >= 1 << 32:
        raise ValueError(f"epoch must be below 2^32, not {epoch}")
    return ((seed << 32) ^ epoch) & _MASK64


@lru_cache(maxsize=16)
def _permutation(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    if n < 2:
        return tuple(order)
    draws = SplitMix64(epoch_seed(seed, epoch)).block(n - 1)
    # Fisher-Yates from the end: draw k serves i = n - 1 - k. The modulo bias is at most
    # (i + 1) / 2^64 per draw, far below anything a page order could show.
    for k, i in enumerate(range(n - 1, 0, -1)):
        j = int(draws[k]) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return tuple(order)


def epoch_permutation(n: int, seed: int, epoch: int) -> list[int]:
    """The order of the n training pages (indices into the hash-ordered train list) in one epoch."""
    n = _check_count(n, "the number of training pages", 0)
    return list(_permutation(n, _check_seed(seed), _check_count(epoch, "epoch", 0)))


def epoch_of_position(position: int, n: int) -> int:
    """The epoch a stream position belongs to: the stream is epoch 0's permutation, then epoch 1's, ..."""
    n = _check_count(n, "the number of training pages", 1)
    return _check_count(position, "stream position", 0) // n


def total_positions(n: int, epochs: int) -> int:
    return _check_count(epochs, "epochs", 1) * _check_count(n, "the number of training pages", 1)


def total_steps(n: int, batch: int, epochs: int) -> int:
    """ceil(epochs * n / batch): the last step may be short."""
    batch = _check_count(batch, "batch size", 1)
    return -(-total_positions(n, epochs) // batch)


def step_positions(n: int, batch: int, epochs: int, step: int) -> range:
    """Stream positions [step * batch, min((step + 1) * batch, epochs * n)) of one step."""
    steps = total_steps(n, batch, epochs)
    step = _check_count(step, "step", 0)
    if step >= steps:
        raise ValueError(f"step {step} is past the run's last step {steps - 1}")
    return range(step * batch, min((step + 1) * batch, total_positions(n, epochs)))


def batch_for_step(n: int, seed: int, batch: int, epochs: int, step: int) -> list[int]:
    """The training-page indices of one step, in stream order.

    A batch may straddle two (or more, if batch > n) epochs: its first pages end one epoch's
    permutation and the rest begin the next. Only the epochs the step touches are computed.
    """
    seed = _check_seed(seed)
    pages = []
    for position in step_positions(n, batch, epochs, step):
        epoch, offset = divmod(position, n)
        pages.append(_permutation(n, seed, epoch)[offset])
    return pages


# --------------------------------------------------------------------------------------
# Learning rate
# --------------------------------------------------------------------------------------
def learning_rate(step: int, total: int, warmup: int, peak: float) -> float:
    """The binary64 learning rate of 0-based `step` of a run of `total` steps.

    Warm-up (step < warmup):  peak * (step + 1) / warmup           -> step warmup-1 is the peak.
    Decay   (step >= warmup): peak * (0.1 + 0.9 * (total - 1 - step) / (total - warmup))
                              -> falls linearly, the last step is exactly peak * 0.1.
    Each operation is one binary64 rounding in the order written (integers are exact).
    warmup = 0 decays from the first step; warmup >= total never decays (and with
    warmup > total never reaches the peak).
    """
    total = _check_count(total, "total steps", 1)
    warmup = _check_count(warmup, "warm-up steps", 0)
    step = _check_count(step, "step", 0)
    if step >= total:
        raise ValueError(f"step {step} is past the run's last step {total - 1}")
    if isinstance(peak, bool) or not isinstance(peak, (int, float, np.floating, np.integer)):
        raise ValueError(f"peak learning rate must be a number, not {peak!r}")
    peak = float(peak)
    if not (math.isfinite(peak) and peak > 0):
        raise ValueError(f"peak learning rate must be positive and finite, not {peak!r}")
    if step < warmup:
        return peak * (step + 1) / warmup
    remaining = total - 1 - step
    return peak * (DECAY_FLOOR + 0.9 * remaining / (total - warmup))


def learning_rates(total: int, warmup: int, peak: float) -> list[float]:
    """The learning rate of every step of a run (for plots and checks)."""
    return [learning_rate(s, total, warmup, peak) for s in range(_check_count(total, "total steps", 1))]


# --------------------------------------------------------------------------------------
# Class weights
# --------------------------------------------------------------------------------------
def _check_weight(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{what} must be a number, not {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be positive and finite, not {value!r}")
    return value


def class_weights_for(field_weights) -> np.ndarray:
    """Tag weights [1, w0, w0, w1, w1, ...] (O, then B- and I- of each field in schema order), float64."""
    weights = [_check_weight(w, f"the weight of field {i}") for i, w in enumerate(field_weights)]
    if not weights:
        raise ValueError("a schema needs at least one field")
    out = np.empty(1 + 2 * len(weights), np.float64)
    out[0] = 1.0
    out[1::2] = weights
    out[2::2] = weights
    return out


def class_weights(n_fields: int, field_weight: float = DEFAULT_FIELD_WEIGHT) -> np.ndarray:
    """Tag weights when every field has the same weight (default 3)."""
    n_fields = _check_count(n_fields, "the number of fields", 1)
    return class_weights_for([field_weight] * n_fields)
