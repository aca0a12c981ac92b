"""Re-derive a tuning run's LocalFirst thresholds under either rule and check them on a test
project: the figures of docs/tuning.md "Measured: thresholds on new pages".

    python bench/threshold_table.py RUN/report.json EVAL.json [--by words|value]

RUN/report.json: a `dxstudio tune` report (held-out or, with --folds, pooled predictions);
EVAL.json: `dxstudio eval RUN/model.safetensors TEST --all --out EVAL.json` on a test project.
Both reports keep every value's [confidence, exactly right, value right] (`confidences`), so
the thresholds a run would have stored with `--threshold-by` words or value are recomputed
here with the package's own rule (scoring.threshold); the weights do not depend on that
setting. Per field the field's own threshold routes, else the pooled one (as extract does).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxstudio.tuning.scoring import clopper_pearson_lower, threshold  # noqa: E402


def table(run_report: dict, eval_report: dict, by: str) -> dict:
    col = 1 if by == "words" else 2
    share, min_values = run_report["share"], run_report["min_values"]
    own, pooled_pairs = {}, []
    for name, f in run_report["fields"].items():
        pairs = [(c[0], c[col]) for c in f["confidences"]]
        pooled_pairs += pairs
        own[name] = threshold(pairs, share, min_values)
    pooled = threshold(pooled_pairs, share, min_values)
    out = {"by": by, "pooled_threshold": pooled, "fields": {}}
    n_all = n_all_values = right_all = vright_all = 0
    for name, f in eval_report["fields"].items():
        t = own[name] if own[name] is not None else pooled
        rows = f["confidences"]
        above = [r for r in rows if t is not None and r[0] >= t]
        right, vright = sum(r[col] for r in above), sum(r[2] for r in above)
        out["fields"][name] = {"threshold": t, "values": len(above), "right": right,
                               "precision": right / len(above) if above else None,
                               "value_precision": vright / len(above) if above else None,
                               "coverage": len(above) / len(rows) if rows else None}
        n_all += len(above)
        n_all_values += len(rows)
        right_all += right
        vright_all += vright
    out["pooled"] = {"values": n_all, "right": right_all, "precision": right_all / n_all if n_all else None,
                     "precision_lower": clopper_pearson_lower(right_all, n_all) if n_all else None,
                     "value_precision": vright_all / n_all if n_all else None,
                     "coverage": n_all / n_all_values if n_all_values else None}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_report")
    ap.add_argument("eval_report")
    ap.add_argument("--by", choices=["words", "value"], default="value")
    args = ap.parse_args(argv)
    res = table(json.loads(Path(args.run_report).read_text()), json.loads(Path(args.eval_report).read_text()), args.by)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
