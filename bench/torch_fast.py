"""docextract-v0 in PyTorch as a speed-minded engineer would write it (issue 13's honest anchor).

    model = FastTorchModel(cfg, params)           # the same tensors as the engine's model
    out = model(*TorchBatch.of(inputs).args())    # tensors only, so torch.compile can trace it
    opt = make_adamw(cfg, model, lr, "foreach")   # or "fused" (PyTorch's fused CPU kernel)

Not the parity mirror (training/parity/docextract_backward.py, operation by operation the
engine's): here the character CNN runs over every word in one batched Conv1d with a mask
(padding positions at -inf before the max), attention with the pair bias goes through
torch.nn.functional.scaled_dot_product_attention (all heads in one call, the bias as its float
mask), the heads are fused where PyTorch allows, and AdamW runs with foreach=True or
fused=True. The same module under torch.compile is the third variant. bench/train_step.py
checks each variant's loss against the mirror's on the same page and weights.

An independent mirror for measuring and checking, written again on purpose: the engine's own
forward exists once (model.py and the block types of dxstudio/engine/blocks/); this file knows
only the transformer block (docs/model.md, "Where the code is").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from dxstudio.engine.config import ModelConfig
from dxstudio.engine.params import decays, param_spec


@dataclass
class TorchBatch:
    """One window's inputs as tensors, built once (untimed)."""
    char_ids: torch.Tensor  # (n, max_chars) int64, 0 = padding
    char_mask: torch.Tensor  # (n, 1, max_chars) bool: True at padding positions
    buckets: torch.Tensor  # (n, 4) int64
    feats: torch.Tensor  # (n, 16) fp32
    pair_feats: torch.Tensor  # (n*n, 8) fp32
    n: int

    @classmethod
    def of(cls, inp) -> "TorchBatch":
        n, width = inp.char_ids.shape
        pos = np.arange(width)[None, :]
        pad = pos >= np.asarray(inp.char_len)[:, None]
        return cls(torch.as_tensor(inp.char_ids.astype(np.int64)), torch.as_tensor(pad[:, None, :]),
                   torch.as_tensor(inp.buckets.astype(np.int64)), torch.as_tensor(inp.word_feats.astype(np.float32)),
                   torch.as_tensor(inp.pair_feats.astype(np.float32)), n)

    def args(self) -> tuple:
        return self.char_ids, self.char_mask, self.buckets, self.feats, self.pair_feats


class FastTorchModel(torch.nn.Module):
    """The engine's model (same parameter names, container layout) in batched PyTorch fp32."""

    def __init__(self, cfg: ModelConfig, params: dict):
        super().__init__()
        self.cfg = cfg
        self.names = list(params)
        # nn.Parameter per tensor, stored under names without dots (ParameterDict forbids them)
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(
            torch.tensor(np.asarray(v, np.float32))) for k, v in params.items()})

    def t(self, name: str) -> torch.Tensor:
        return self.p[name.replace(".", "__")]

    def named_tensors(self):
        return [(name, self.t(name)) for name in self.names]

    def forward(self, char_ids, char_mask, buckets, feats, pair_feats) -> dict:
        cfg, t = self.cfg, self.t
        n, d, heads = char_ids.shape[0], cfg.d_model, cfg.heads
        dh = d // heads
        # 1. characters: one Conv1d over every word (zero embedding at padding), masked max
        emb = F.embedding(char_ids, t("char_emb"), padding_idx=0)  # (n, W, Dc)
        emb = emb.masked_fill(char_mask.transpose(1, 2), 0.0)  # zeros past the word (row 0 is not zero)
        h = F.relu(F.conv1d(emb.transpose(1, 2), t("char_conv.weight"), t("char_conv.bias"), padding=1))
        pooled = h.masked_fill(char_mask, float("-inf")).amax(dim=2)  # (n, C)
        # 2. embedding
        e = F.linear(pooled, t("char_proj.weight"), t("char_proj.bias"))
        e = e + (t("pos_x0")[buckets[:, 0]] + t("pos_y0")[buckets[:, 1]]
                 + t("pos_x1")[buckets[:, 2]] + t("pos_y1")[buckets[:, 3]])
        e = e + F.linear(feats, t("feat_proj.weight"), t("feat_proj.bias"))
        x = F.layer_norm(e, (d,), t("emb_ln.weight"), t("emb_ln.bias"), eps=cfg.ln_eps)
        # 3. pair bias -> (layers, heads, n, n)
        pb = F.linear(F.relu(F.linear(pair_feats, t("pair1.weight"), t("pair1.bias"))),
                      t("pair2.weight"), t("pair2.bias"))
        pb = pb.T.reshape(cfg.layers, heads, n, n)
        # 4. blocks, attention through SDPA with the pair bias as its float mask
        for l in range(cfg.layers):
            q = f"blocks.{l}."
            hh = F.layer_norm(x, (d,), t(q + "ln1.weight"), t(q + "ln1.bias"), eps=cfg.ln_eps)
            qkv = F.linear(hh, t(q + "qkv.weight"), t(q + "qkv.bias")).reshape(n, 3, heads, dh).permute(1, 2, 0, 3)
            a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=pb[l])  # (heads, n, dh)
            x = x + F.linear(a.transpose(0, 1).reshape(n, d), t(q + "proj.weight"), t(q + "proj.bias"))
            h2 = F.layer_norm(x, (d,), t(q + "ln2.weight"), t(q + "ln2.bias"), eps=cfg.ln_eps)
            x = x + F.linear(F.gelu(F.linear(h2, t(q + "fc1.weight"), t(q + "fc1.bias")), approximate="tanh"),
                             t(q + "fc2.weight"), t(q + "fc2.bias"))
        # 5. heads
        f = F.layer_norm(x, (d,), t("final_ln.weight"), t("final_ln.bias"), eps=cfg.ln_eps)
        r = cfg.rel_dim
        rq = F.linear(f, t("rel_q.weight"), t("rel_q.bias"))
        rk = F.linear(f, t("rel_k.weight"), t("rel_k.bias"))
        return {
            "tag_logits": F.linear(f, t("tag_head.weight"), t("tag_head.bias")),
            "role_logits": F.linear(f, t("role_head.weight"), t("role_head.bias")),
            "doc_logits": F.linear(f.mean(dim=0), t("doc_head.weight"), t("doc_head.bias")),
            "item_scores": (rq[:, :r] @ rk[:, :r].T) * (r ** -0.5),
            "kv_scores": (rq[:, r:] @ rk[:, r:].T) * (r ** -0.5),
        }


def make_adamw(cfg: ModelConfig, model: FastTorchModel, trained: set, lr: float, settings: dict, impl: str):
    """torch.optim.AdamW over the trained tensors, decay on weights and tables only, with
    impl "foreach" or "fused" (PyTorch's fused CPU kernel)."""
    kinds = {name: kind for name, _, kind in param_spec(cfg)}
    named = [(n, p) for n, p in model.named_tensors() if n in trained]
    for n, p in model.named_tensors():
        p.requires_grad_(n in trained)
    groups = [{"params": [p for n, p in named if decays(kinds[n])], "weight_decay": settings["weight_decay"]},
              {"params": [p for n, p in named if not decays(kinds[n])], "weight_decay": 0.0}]
    kw = {"foreach": True} if impl == "foreach" else {"fused": True}
    return torch.optim.AdamW(groups, lr=lr, betas=(settings["beta1"], settings["beta2"]), eps=settings["eps"], **kw)
