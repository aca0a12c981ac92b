"""Synthetic model inputs for the engine tests (and tests/cpu_subprocess_check.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np


def fake_window(cfg, n, seed):
    """Random inputs with the fields of WindowInputs (char ids, buckets, word and pair features)."""
    rng = np.random.default_rng(seed)
    char_len = rng.integers(0, cfg.max_chars + 1, n).astype(np.int32)
    char_ids = np.zeros((n, cfg.max_chars), np.int32)
    for i in range(n):
        char_ids[i, : char_len[i]] = rng.integers(1, cfg.vocab, char_len[i])
    return SimpleNamespace(
        n=n, char_ids=char_ids, char_len=char_len,
        buckets=rng.integers(0, cfg.pos_buckets, (n, 4)).astype(np.int32),
        word_feats=rng.random((n, cfg.word_features)).astype(np.float32),
        pair_feats=rng.standard_normal((n * n, cfg.pair_features)).astype(np.float32))
