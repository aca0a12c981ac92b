"""Does a base model's backbone know forms? Its role and key-value heads on FUNSD, untuned.

    python bench/funsd_roles.py MODEL [MODEL ...] [--split testing_data]

FUNSD (research data, never trained on) entities map to roles as the data README says
(question = key, answer = value, header, other); a linked answer's words should point (the
key-value head) at the first word of their question. For each model: role accuracy and
per-role recall over every word of the first 512 of each form, and the share of linked
answer words whose highest key-value score is the question's first word. Prints a table and
ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dxstudio.engine.container import load_model  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.layers import Ops  # noqa: E402
from dxstudio.engine.model import forward, to_runtime  # noqa: E402
from dxstudio.engine.page import Page, Word  # noqa: E402
from dxstudio.importers import reading_order  # noqa: E402

ROLE = {"question": "key", "answer": "value", "header": "header", "other": "other"}


def funsd_form(path: Path):
    """(Page, roles per word, key-value target per word or -1) in reading order."""
    d = json.loads(path.read_text(encoding="utf-8"))
    ents = []
    for ent in d["form"]:
        ws = [Word(" ".join(w["text"].split()), tuple(float(v) for v in w["box"]))
              for w in ent["words"] if w["text"].strip()]
        if ws:
            xs0, ys0, xs1, ys1 = zip(*(w.box for w in ws))
            ents.append(((min(xs0), min(ys0), max(xs1), max(ys1)), ent, ws))
    ents = [ents[i] for i in reading_order([e[0] for e in ents])]
    words, roles, owner = [], [], []
    for _, ent, ws in ents:
        for w in ws:
            words.append(w)
            roles.append(ROLE.get(ent["label"], "other"))
            owner.append(ent["id"])
    first = {}
    for i, eid in enumerate(owner):
        first.setdefault(eid, i)
    key_of = {}
    for _, ent, _ in ents:
        for a, b in ent.get("linking") or []:
            if b == ent["id"] and ent["label"] == "answer":
                key_of[ent["id"]] = a
    kv = [first.get(key_of.get(eid), -1) for eid in owner]
    w = max(x.box[2] for x in words)
    h = max(x.box[3] for x in words)
    return Page(path.stem, w, h, tuple(words)), roles, kv


def score(model_path: Path, forms) -> dict:
    m = load_model(model_path)
    params = to_runtime(m.params)
    ops = Ops("fast")
    roles = list(m.cfg.roles)
    hit = {r: [0, 0] for r in roles}
    kv_hit = kv_n = 0
    for page, want, kv in forms:
        n = min(len(page.words), m.cfg.max_words)
        out = forward(m.cfg, params, window_inputs(page, m.cfg, 0, n), ops)
        pred = np.argmax(np.asarray(out.role_logits), axis=1)
        ptr = np.argmax(np.asarray(out.kv_scores), axis=1)
        for i in range(n):
            hit[want[i]][1] += 1
            hit[want[i]][0] += int(roles[pred[i]] == want[i])
            if 0 <= kv[i] < n:
                kv_n += 1
                kv_hit += int(ptr[i] == kv[i])
    total = sum(v[1] for v in hit.values())
    return {"model": str(model_path), "words": total,
            "role_accuracy": round(sum(v[0] for v in hit.values()) / total, 4),
            "role_recall": {r: round(v[0] / v[1], 4) if v[1] else None for r, v in hit.items()},
            "kv_links": kv_n, "kv_accuracy": round(kv_hit / kv_n, 4) if kv_n else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--split", default="testing_data")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "funsd"))
    a = ap.parse_args()
    root = Path(a.data) / a.split / "annotations"
    if not root.is_dir():
        print(f"funsd_roles: {root} is not here", file=sys.stderr)
        return 2
    forms = [funsd_form(p) for p in sorted(root.glob("*.json"))]
    results = [score(Path(mp), forms) for mp in a.models]
    for r in results:
        rec = " ".join(f"{k} {v:.3f}" for k, v in r["role_recall"].items() if v is not None)
        print(f"{r['model']}: {len(forms)} forms, {r['words']} words; role accuracy {r['role_accuracy']:.3f} "
              f"({rec}); key-value pointer {r['kv_accuracy']} over {r['kv_links']} linked answer words")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
