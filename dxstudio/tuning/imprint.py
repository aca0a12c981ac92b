"""Imprinted tag-head rows for fields the starting model knows nothing of (setting head_init).

A field that matches none of the base's generic classes (or is new to the project's earlier
model) starts from the run's random draw: with 50 labelled pages such a field is barely
learnt (docs/base-model.md, "Where the model still loses"). Weight imprinting (Qi et al.
2018, "Low-shot learning with imprinted weights") starts it from what the starting model
already sees instead: before the first step, the starting model's forward runs over the
run's **training pages only** (never the held-out pages of the split or of a fold, nor the
early-stopping pages), and each drawn field's B- (resp. I-) row becomes the direction of its
B (resp. I) words' mean final hidden state (after final_ln), taken from the mean over every
training word (centred: the states share a large common component that would otherwise make
every word look like the field), normalised and scaled to the mean norm of the starting
model's own B-/I- rows. Its bias is set so that the field's own words score, on average, the
starting model's typical margin above O (the median of (best non-O logit - O logit) over the
training words the starting model does tag as a field; 0 where it tags none). A row whose
field has no such word in the training pages keeps its drawn values.

Everything is a function of the starting model's bytes, the training pages, the schema and the
seed (all in the run's fingerprint) and of the engine's forward, whose bytes do not depend on
the degree or the kernel path: the same rows at any degree and after resume. The sums run in
float64 in page order, word order.
"""
from __future__ import annotations

import numpy as np

from dxstudio.engine.kernels.registry import Ops
from dxstudio.engine.model import forward, to_runtime

def final_states(cfg, params, examples, kernels: str) -> list:
    """The final hidden state (final_ln output, (n, d) float64) of each example's window under
    `params` (container layout), in order."""
    rt = to_runtime(params)
    ops = Ops(kernels)
    return [np.asarray(forward(cfg, rt, ex.inputs, ops, keep=True).cache.f, np.float64) for ex in examples]


def imprint_rows(cfg, params, examples, drawn: list, kernels: str, base_weight, base_bias):
    """(weight, bias, {field: {"B": words, "I": words}}) of the project's tag head with the rows
    of the fields in `drawn` (schema indices) imprinted from `examples` (the training pages'
    Examples: inputs and tag targets). base_weight/base_bias: the starting model's own tag head
    (its rows set the scale and, with `params`' head, the margin). Rows of a field with no
    word of its tag keep params' values."""
    w = np.array(params["tag_head.weight"], np.float32, copy=True)
    b = np.array(params["tag_head.bias"], np.float32, copy=True)
    if not drawn or not examples:
        return w, b, {}
    bw = np.asarray(base_weight, np.float64)
    bb = np.asarray(base_bias, np.float64)
    d = w.shape[1]
    if bw.ndim != 2 or bw.shape[1] != d or bw.shape[0] < 3:
        return w, b, {}
    # the backbone is the starting model's: only the head differs, and the final states do not
    # depend on it; the starting model's own head reads them for the margin
    states = [(f, f @ bw.T + bb) for f in final_states(cfg, params, examples, kernels)]

    row_norm = float(np.mean(np.sqrt(np.sum(bw[1:] ** 2, axis=1))))
    total = np.zeros(d, np.float64)
    count = 0
    sums = {}  # tag row -> (sum of unit states, sum of states, count)
    margins = []
    for (f, logits), ex in zip(states, examples):
        tags = np.asarray(ex.targets.tags, np.int64)
        unit = f / np.maximum(np.sqrt(np.sum(f * f, axis=1, keepdims=True)), 1e-12)
        total += unit.sum(axis=0)
        count += unit.shape[0]
        for row in [1 + 2 * c + off for c in drawn for off in (0, 1)]:
            sel = tags == row
            if sel.any():
                s, raw, k = sums.get(row, (np.zeros(d, np.float64), np.zeros(d, np.float64), 0))
                sums[row] = (s + unit[sel].sum(axis=0), raw + f[sel].sum(axis=0), k + int(sel.sum()))
        best = logits[:, 1:].max(axis=1)
        tagged = best > logits[:, 0]
        margins.extend((best - logits[:, 0])[tagged].tolist())
    margin = float(np.median(margins)) if margins else 0.0
    centre = total / max(count, 1)
    w0 = np.asarray(w[0], np.float64)
    b0 = float(b[0])
    counts = {}
    for row, (s, raw, k) in sorted(sums.items()):
        proto = s / k - centre
        norm = float(np.sqrt(np.sum(proto * proto)))
        if not norm > 1e-12:
            continue
        row_w = proto / norm * row_norm
        # the field's own words (their unnormalised states) score `margin` above O on average
        mean_f = raw / k
        w[row] = row_w.astype(np.float32)
        b[row] = np.float32(b0 + float(mean_f @ w0) - float(mean_f @ row_w) + margin)
        c, off = divmod(row - 1, 2)
        counts.setdefault(cfg.fields[c], {})["BI"[off]] = k
    return w, b, counts
