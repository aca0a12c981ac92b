"""The LocalFirst figures of docs/tuning.md "Measured: LocalFirst that never over-promises"
(issue 21): for tuning runs and their `eval --all` reports on pages outside the project, the
thresholds each field gets by a rule and share, and on the new pages the share right among the
values routed local (per field and pooled) and the coverage.

    python bench/localfirst_table.py RUN/report.json EVAL.json [RUN2/report.json EVAL2.json ...]
                                     [--share 0.99,0.95,0.9] [--rule bound|seed]

RUN/report.json: a `dxstudio tune` report (with folds: the pooled held-out predictions);
EVAL.json: `dxstudio eval RUN/model.safetensors TEST --all --out EVAL.json`. Both keep every
value's [confidence, exactly right, value right], so the thresholds a run would store with
`--share S --threshold-rule R` are recomputed here with the package's own rule
(scoring.rule_threshold); the weights do not depend on those settings. Routing as extract
does it now: a field's own threshold, never the pooled one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxstudio.tuning.scoring import clopper_pearson_lower, rule_threshold  # noqa: E402


def figures(run_report: dict, eval_report: dict, share: float, rule: str) -> dict:
    col = 2 if run_report.get("threshold_by", "value") == "value" else 1
    min_values = run_report.get("min_values", 5)
    out, n_all, n_values, right_all = {"fields": {}}, 0, 0, 0
    for name, f in run_report["fields"].items():
        t = rule_threshold([(c[0], c[col]) for c in f["confidences"]], share, min_values, rule)
        rows = eval_report["fields"][name]["confidences"]
        above = [r for r in rows if t is not None and r[0] >= t]
        right = sum(r[col] for r in above)
        out["fields"][name] = {"threshold": t, "values": len(above), "right": right, "n_values": len(rows),
                               "precision": right / len(above) if above else None,
                               "coverage": len(above) / len(rows) if rows else None}
        n_all += len(above)
        n_values += len(rows)
        right_all += right
    out["pooled"] = {"values": n_all, "right": right_all, "precision": right_all / n_all if n_all else None,
                     "precision_lower": clopper_pearson_lower(right_all, n_all) if n_all else None,
                     "coverage": n_all / n_values if n_values else None}
    return out


def row(label: str, share: float, fig: dict) -> str:
    def pct(x):
        return "-" if x is None else f"{x * 100:.1f}%"

    per = "; ".join(
        f"{n} " + ("none" if f["threshold"] is None else
                   f"{f['threshold']:.4g}: {f['right']}/{f['values']} ({pct(f['precision'])}, cov {f['coverage']:.2f})")
        for n, f in fig["fields"].items())
    p = fig["pooled"]
    low = "-" if p["precision_lower"] is None else f"{p['precision_lower']:.3f}"
    cov = "-" if p["coverage"] is None else f"{p['coverage']:.3f}"
    return f"| {label} | {share:g} | {per} | {p['right']}/{p['values']} ({pct(p['precision'])}) | {low} | {cov} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="pairs: RUN/report.json EVAL.json")
    ap.add_argument("--share", default="0.99")
    ap.add_argument("--rule", choices=["bound", "seed"], default="bound")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of table rows")
    a = ap.parse_args(argv)
    if len(a.reports) % 2:
        ap.error("give pairs of RUN/report.json EVAL.json")
    results = []
    for i in range(0, len(a.reports), 2):
        run, ev = (json.loads(Path(p).read_text(encoding="utf-8")) for p in a.reports[i:i + 2])
        label = Path(a.reports[i]).parent.name
        for share in (float(s) for s in a.share.split(",")):
            fig = figures(run, ev, share, a.rule)
            results.append({"run": label, "share": share, "rule": a.rule, **fig})
            if not a.json:
                print(row(label, share, fig))
    if a.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
