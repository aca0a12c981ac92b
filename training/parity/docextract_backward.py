"""PyTorch reference for docextract-v0's training step: fixtures the tests read without PyTorch.

    pip install -e .[parity]
    python training/parity/docextract_backward.py [--model FILE] [--out FILE]

Builds the SAME model in PyTorch from a docextract-v0 container (default: the "random-7"
model, size "tiny", seed 7), mirroring dxstudio/engine/model.py and layers.py operation by
operation, and runs it in float32 and float64 on three fixed pages drawn from SplitMix64(31)
with every loss term on. One batch of the three pages, then one torch.optim.AdamW step.
It writes tests/fixtures/parity/random7_seed31.npz (docs/parity.md lists every key):

* the pages (JSON), their model inputs and targets, the settings and the model tensors;
* for fp32 and fp64: the batch loss, every parameter gradient, every forward output of
  every page and the weights after the AdamW step;
* for the optimizer alone: the AdamW step in fp32 and fp64 from the same fp32 gradients.

Tensors are stored in the container layout (char_conv.weight is (out, channel, tap), which
is also PyTorch's Conv1d layout). PyTorch is a development extra: the engine never imports it.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dxstudio.engine.config import ModelConfig, size_config  # noqa: E402
from dxstudio.engine.container import ModelFileError, load_model, save_model  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.layers import Ops  # noqa: E402
from dxstudio.engine.model import forward as engine_forward, to_runtime  # noqa: E402
from dxstudio.engine.kernels.rng import SplitMix64  # noqa: E402
from dxstudio.engine.page import page_from_dict  # noqa: E402
from dxstudio.engine.params import decays, new_params, param_spec  # noqa: E402
from dxstudio.fsutil import write_bytes_atomic  # noqa: E402

DEFAULT_OUT = REPO / "tests" / "fixtures" / "parity" / "random7_seed31.npz"
MODEL_SEED = 7
PAGE_SEED = 31
PAGE_SIZES = (9, 23, 40)  # words per page

# The training step the fixture pins (the test runs the engine with the same values).
SETTINGS = {
    "lr": 1e-3,
    "weight_decay": 0.01,
    "beta1": 0.9,
    "beta2": 0.999,
    "eps": 1e-8,
    "backbone_scale": 1.0,
    "loss_weights": {"tag": 1.0, "role": 0.5, "doc": 0.3, "items": 0.7, "kv": 0.4},
    "field_weight": 3.0,  # tag class weights: O 1, every B-/I- tag 3
}
OUTPUT_NAMES = ("tag_logits", "role_logits", "doc_logits", "item_scores", "kv_scores")

# Words the page generator draws from: amounts, dates, codes, a word longer than max_chars,
# characters outside the alphabet (unknown id 1), one-character words, and repeated
# characters ("aaaa", "0000") whose equal convolution windows make exact ties in the max pooling.
VOCAB = ("TOTAL", "Total:", "RM12.50", "$1,234.56", "03/01/2019", "2019-03-01", "Invoice", "No:",
         "#4471", "Tax", "6%", "Café", "€5,00", "Qty", "x", "-", "aaaa", "0000", "SUBTOTAL",
         "Supercalifragilisticexpialidocious", "日本語", "Thank", "you!", "Date", "12", "(3.00)",
         "Bhd.", "SDN", "Kuala", "Lumpur", "ITEM", "Price", "RM", "05-Mar-18", "100EUR", "ok")


# ----------------------------------------------------------------------------------------
# Fixed pages and targets from SplitMix64(31)
# ----------------------------------------------------------------------------------------
class Draw:
    """Small integers from SplitMix64 (the modulo bias is irrelevant for test data)."""

    def __init__(self, seed: int):
        self.rng = SplitMix64(seed)

    def below(self, k: int) -> int:
        return self.rng.next_u64() % k

    def target(self, k: int, ignore_per_mille: int = 150) -> int:
        """A class in 0..k-1, or -1 (ignored by the loss) with the given frequency."""
        return -1 if self.below(1000) < ignore_per_mille else self.below(k)


def make_pages(seed: int = PAGE_SEED, sizes=PAGE_SIZES) -> list[dict]:
    """Page JSON objects: words on lines, left to right, with boxes from their length."""
    draw = Draw(seed)
    pages = []
    for p, n in enumerate(sizes):
        width, height = 600.0 + 50 * p, 800.0
        words, x, y = [], 20.0, 30.0
        for _ in range(n):
            text = VOCAB[draw.below(len(VOCAB))]
            w = 9.0 * len(text) + draw.below(7)
            if x + w > width - 20:
                x, y = 20.0, y + 18.0 + draw.below(9)
            words.append({"text": text, "box": [x, y, x + w, y + 12.0 + draw.below(4)]})
            x += w + 6.0 + draw.below(12)
        pages.append({"id": f"seed{seed}-page{p}", "width": width, "height": height, "words": words})
    return pages


def make_targets(cfg: ModelConfig, pages: list[dict], seed: int = PAGE_SEED + 1000) -> list[dict]:
    """Random targets with some -1; every term of every page keeps at least one counted word,
    except the document type of page 1, which is -1 (the term then adds nothing)."""
    draw = Draw(seed)
    out = []
    for p, page in enumerate(pages):
        n = len(page["words"])
        t = {
            "tags": [draw.target(cfg.n_tags) for _ in range(n)],
            "roles": [draw.target(len(cfg.roles)) for _ in range(n)],
            "doc": -1 if p == 1 else draw.below(len(cfg.doc_types)),
            "items": [draw.target(n, 300) for _ in range(n)],
            "kv": [draw.target(n, 300) for _ in range(n)],
        }
        for key in ("tags", "roles", "items", "kv"):
            if all(v < 0 for v in t[key]):
                t[key][0] = 0
        out.append({k: (np.array(v, np.int64) if isinstance(v, list) else v) for k, v in t.items()})
    return out


def tag_class_weights(cfg: ModelConfig) -> np.ndarray:
    return np.array([1.0] + [SETTINGS["field_weight"]] * (cfg.n_tags - 1), np.float64)


# ----------------------------------------------------------------------------------------
# The model in PyTorch
# ----------------------------------------------------------------------------------------
def first_max_positions(cfg: ModelConfig, params, inputs) -> list[np.ndarray]:
    """Per page, (n, C) position within the word of the first maximum of every channel,
    from the engine's own forward pass (binary32): the pooling PyTorch mirrors with gather."""
    out = []
    for inp in inputs:
        res = engine_forward(cfg, to_runtime(params), inp, Ops("reference"), keep=True)
        arg = res.cache.conv.arg  # (n, C): index into the flattened real positions
        starts = np.concatenate([[0], np.cumsum(inp.char_len)[:-1]]).astype(np.int64)
        out.append(arg - starts[:, None])
    return out


def torch_forward(cfg: ModelConfig, P: dict, inp, arg_local: np.ndarray, dtype) -> dict:
    """docextract-v0's forward pass with PyTorch operations, in `dtype`."""
    n, d, heads = inp.n, cfg.d_model, cfg.heads
    dh = d // heads

    # 1. characters: Conv1d over each word's real positions (zero outside the word; the
    #    container layout (out, channel, tap) is Conv1d's), ReLU, max via the first-max index.
    pooled = []
    for w in range(n):
        length = int(inp.char_len[w])
        ids = torch.as_tensor(inp.char_ids[w, :length].astype(np.int64))
        seq = F.embedding(ids, P["char_emb"], padding_idx=0)  # (len, Dc)
        h = F.relu(F.conv1d(seq.T[None], P["char_conv.weight"], P["char_conv.bias"], padding=1))[0]
        idx = torch.as_tensor(arg_local[w][:, None])  # (C, 1)
        chosen = torch.gather(h, 1, idx)[:, 0]
        if not torch.equal(chosen, h.max(dim=1).values):  # the engine's maximum is PyTorch's too
            raise RuntimeError(f"word {w}: the engine's first-max position is not a maximum in {dtype}")
        pooled.append(chosen)
    pooled = torch.stack(pooled)

    # 2. embedding sum, left to right, and its layer norm
    b = torch.as_tensor(inp.buckets.astype(np.int64))
    feats = torch.as_tensor(inp.word_feats).to(dtype)
    e = F.linear(pooled, P["char_proj.weight"], P["char_proj.bias"])
    e = e + F.embedding(b[:, 0], P["pos_x0"])
    e = e + F.embedding(b[:, 1], P["pos_y0"])
    e = e + F.embedding(b[:, 2], P["pos_x1"])
    e = e + F.embedding(b[:, 3], P["pos_y1"])
    e = e + F.linear(feats, P["feat_proj.weight"], P["feat_proj.bias"])
    x = F.layer_norm(e, (d,), P["emb_ln.weight"], P["emb_ln.bias"], eps=cfg.ln_eps)

    # 3. pair bias: (n*n, L*heads), pairs row-major (i, j); block l, head h uses column l*heads + h
    pf = torch.as_tensor(inp.pair_feats).to(dtype)
    pbias = F.linear(F.relu(F.linear(pf, P["pair1.weight"], P["pair1.bias"])), P["pair2.weight"], P["pair2.bias"])

    # 4. pre-LN blocks
    scale = math.sqrt(dh)
    for l in range(cfg.layers):
        q = f"blocks.{l}."
        h = F.layer_norm(x, (d,), P[q + "ln1.weight"], P[q + "ln1.bias"], eps=cfg.ln_eps)
        qkv = F.linear(h, P[q + "qkv.weight"], P[q + "qkv.bias"])
        outs = []
        for hd in range(heads):
            qh = qkv[:, hd * dh:(hd + 1) * dh]
            kh = qkv[:, d + hd * dh:d + (hd + 1) * dh]
            vh = qkv[:, 2 * d + hd * dh:2 * d + (hd + 1) * dh]
            s = (qh @ kh.T) / scale + pbias[:, l * heads + hd].reshape(n, n)
            outs.append(torch.softmax(s, dim=1) @ vh)
        x = x + F.linear(torch.cat(outs, dim=1), P[q + "proj.weight"], P[q + "proj.bias"])
        h2 = F.layer_norm(x, (d,), P[q + "ln2.weight"], P[q + "ln2.bias"], eps=cfg.ln_eps)
        g = F.gelu(F.linear(h2, P[q + "fc1.weight"], P[q + "fc1.bias"]), approximate="tanh")
        x = x + F.linear(g, P[q + "fc2.weight"], P[q + "fc2.bias"])

    # 5. heads
    f = F.layer_norm(x, (d,), P["final_ln.weight"], P["final_ln.bias"], eps=cfg.ln_eps)
    r = cfg.rel_dim
    rq = F.linear(f, P["rel_q.weight"], P["rel_q.bias"])
    rk = F.linear(f, P["rel_k.weight"], P["rel_k.bias"])
    return {
        "tag_logits": F.linear(f, P["tag_head.weight"], P["tag_head.bias"]),
        "role_logits": F.linear(f, P["role_head.weight"], P["role_head.bias"]),
        "doc_logits": F.linear(f.mean(dim=0), P["doc_head.weight"], P["doc_head.bias"]),
        "item_scores": (rq[:, :r] @ rk[:, :r].T) / math.sqrt(r),
        "kv_scores": (rq[:, r:] @ rk[:, r:].T) / math.sqrt(r),
    }


def loss_term(logits, targets, weight=None):
    """cross_entropy(weight, ignore_index=-1, reduction='mean'); no counted word: 0 (the engine's
    rule; PyTorch itself would give 0/0)."""
    t = torch.as_tensor(np.asarray(targets, np.int64))
    if not bool((t >= 0).any()):
        return logits.sum() * 0
    w = None if weight is None else torch.as_tensor(weight).to(logits.dtype)
    return F.cross_entropy(logits, t, weight=w, ignore_index=-1, reduction="mean")


def example_loss(cfg, out: dict, t: dict):
    """The weighted sum of the example's terms."""
    lw = SETTINGS["loss_weights"]
    loss = lw["tag"] * loss_term(out["tag_logits"], t["tags"], tag_class_weights(cfg))
    loss = loss + lw["role"] * loss_term(out["role_logits"], t["roles"])
    loss = loss + lw["doc"] * loss_term(out["doc_logits"][None], [t["doc"]])
    loss = loss + lw["items"] * loss_term(out["item_scores"], t["items"])
    loss = loss + lw["kv"] * loss_term(out["kv_scores"], t["kv"])
    return loss


def adamw(cfg, P: dict, grads: dict) -> dict:
    """One torch.optim.AdamW step; weight decay on weight matrices and tables only."""
    kinds = {name: kind for name, _, kind in param_spec(cfg)}
    for name, g in grads.items():
        P[name].grad = g.clone()
    groups = [
        {"params": [P[n] for n in P if decays(kinds[n])], "weight_decay": SETTINGS["weight_decay"]},
        {"params": [P[n] for n in P if not decays(kinds[n])], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=SETTINGS["lr"], betas=(SETTINGS["beta1"], SETTINGS["beta2"]),
                            eps=SETTINGS["eps"], foreach=False)
    opt.step()
    return {name: p.detach().clone() for name, p in P.items()}


def leaf_params(params, dtype) -> dict:
    return {name: torch.tensor(np.asarray(v), dtype=dtype, requires_grad=True) for name, v in params.items()}


def run_precision(cfg, params, inputs, targets, args, dtype) -> dict:
    """Forward outputs, batch loss, gradients (mean over examples) and the AdamW step."""
    P = leaf_params(params, dtype)
    outs, total = [], None
    for inp, t, a in zip(inputs, targets, args):
        out = torch_forward(cfg, P, inp, a, dtype)
        outs.append({k: v.detach().numpy().copy() for k, v in out.items()})
        ex = example_loss(cfg, out, t)
        total = ex if total is None else total + ex
    loss = total / len(inputs)
    loss.backward()
    grads = {name: P[name].grad.detach().clone() for name in P}
    with torch.no_grad():
        updated = adamw(cfg, leaf_params(params, dtype), grads)
    return {"loss": float(loss.detach()), "grads": grads, "outputs": outs, "updated": updated}


# ----------------------------------------------------------------------------------------
# Fixture
# ----------------------------------------------------------------------------------------
def build_fixture(cfg: ModelConfig, params) -> dict:
    torch.set_num_threads(1)  # the same bytes on every run of this machine
    pages = make_pages()
    inputs = [window_inputs(page_from_dict(p, p["id"]), cfg, 0, len(p["words"])) for p in pages]
    targets = make_targets(cfg, pages)
    args = first_max_positions(cfg, params, inputs)

    runs = {"fp32": run_precision(cfg, params, inputs, targets, args, torch.float32),
            "fp64": run_precision(cfg, params, inputs, targets, args, torch.float64)}

    # The optimizer alone: AdamW in fp32 and in fp64 from the same (fp32) gradients.
    g32 = runs["fp32"]["grads"]
    with torch.no_grad():
        opt32 = adamw(cfg, leaf_params(params, torch.float32), g32)
        opt64 = adamw(cfg, leaf_params(params, torch.float64), {k: v.double() for k, v in g32.items()})

    meta = {"torch": torch.__version__, "model_seed": MODEL_SEED, "page_seed": PAGE_SEED,
            "config": cfg.to_dict(), "settings": SETTINGS, "pages": pages,
            "tag_class_weights": tag_class_weights(cfg).tolist(), "outputs": list(OUTPUT_NAMES),
            "params": [name for name, _, _ in param_spec(cfg)]}
    fx = {"meta": np.array(json.dumps(meta, ensure_ascii=True))}
    for name in meta["params"]:
        fx[f"params/{name}"] = np.asarray(params[name], np.float32)
    for i, (inp, t, a) in enumerate(zip(inputs, targets, args)):
        for field in ("char_ids", "char_len", "buckets", "word_feats", "pair_feats"):
            fx[f"inputs/{i}/{field}"] = getattr(inp, field)
        fx[f"inputs/{i}/first_max"] = a.astype(np.int32)
        for key in ("tags", "roles", "items", "kv"):
            fx[f"targets/{i}/{key}"] = t[key]
        fx[f"targets/{i}/doc"] = np.array(t["doc"], np.int64)
    for prec, run in runs.items():
        fx[f"{prec}/loss"] = np.array(run["loss"], np.float64)
        for name in meta["params"]:
            fx[f"{prec}/grad/{name}"] = run["grads"][name].numpy()
            fx[f"{prec}/updated/{name}"] = run["updated"][name].numpy()
        for i, out in enumerate(run["outputs"]):
            for k in OUTPUT_NAMES:
                fx[f"{prec}/out/{i}/{k}"] = out[k]
    for name in meta["params"]:
        fx[f"adamw32/updated/{name}"] = opt32[name].numpy()
        fx[f"adamw64/updated/{name}"] = opt64[name].numpy()
    return fx


def random7(model_path: Path | None):
    """The model: a container if given, else random-7 (size tiny, seed 7), written to
    `model_path` with save_model when a path is given but no file is there yet."""
    if model_path is not None and model_path.exists():
        m = load_model(model_path)
        return m.cfg, m.params
    cfg = size_config("tiny")
    params = new_params(cfg, MODEL_SEED)
    if model_path is not None:
        save_model(model_path, cfg, params)
    return cfg, params


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="docextract-v0 container (default: random-7; "
                    "written here if the file does not exist)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"fixture to write (default {DEFAULT_OUT})")
    a = ap.parse_args(argv)
    try:
        cfg, params = random7(a.model)
    except ModelFileError as e:  # one line naming the file and the problem
        print(f"error: {e}", file=sys.stderr)
        return 2
    fx = build_fixture(cfg, params)
    buf = io.BytesIO()
    np.savez_compressed(buf, **fx)
    write_bytes_atomic(a.out, buf.getvalue())
    f32, f64 = float(fx["fp32/loss"]), float(fx["fp64/loss"])
    print(f"wrote {a.out} ({len(buf.getvalue()) / 1e6:.2f} MB): loss fp32 {f32!r}, fp64 {f64!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
