"""Learning curves of fine-tuning on projects of growing size (issue 11 item 6,
docs/base-model.md "Transfer"): for each training project and each start, `dxstudio tune`
then `dxstudio eval --all` on a separate scoring project, and a table of held-out agreement.

    python bench/transfer_curves.py EVAL_PROJECT TRAIN_PROJECT... --out DIR
        [--starts base,head,new] [--base MODEL] [--degree N] [--gbdt] [--tune "OPTIONS"] [--tag SUFFIX]

Starts: base = the shipped base (or --base MODEL) with the default fine-tuning settings;
head = the same with --backbone-scale 0 (the tag head alone trains); new = a new random
model (--start new). With --gbdt the LightGBM word classifier (bench/gbdt_baseline.py, the
`baseline` extra) is trained on the same pages and scored on the same pages beside them.
Every run is a subprocess with its own folder under DIR (kept: DIR/NAME/model.safetensors,
DIR/NAME.eval.json); a run whose eval report exists is not repeated. Prints a markdown table
(one row per project and start, each row's command beside it) and ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _agreements(report: dict) -> dict:
    return {f: float(v["agreement"]) for f, v in report["fields"].items()}


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env).returncode
    if rc != 0:
        raise SystemExit(f"transfer_curves: {' '.join(cmd)} failed (exit {rc}); see {log}")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("eval_project")
    ap.add_argument("train_projects", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--starts", default="base,head,new")
    ap.add_argument("--base", help="starting model for the base and head starts (default: the shipped base)")
    ap.add_argument("--degree", type=int, default=1)
    ap.add_argument("--gbdt", action="store_true")
    ap.add_argument("--tune", default="", help='more dxstudio tune options, in one string ("--epochs 8")')
    ap.add_argument("--tag", default="", help="a suffix for the run names (runs with other --tune options)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    extra = shlex.split(a.tune)
    py = [sys.executable, "-m", "dxstudio.cli"]
    rows = []
    for proj in a.train_projects:
        pname = Path(proj).name
        for start in [s for s in a.starts.split(",") if s]:
            opts = {"base": [], "head": ["--backbone-scale", "0"], "new": ["--start", "new"]}[start]
            if start != "new" and a.base:
                opts = ["--model", a.base] + opts
            name = f"{pname}_{start}{a.tag}"
            report_path = out / f"{name}.eval.json"
            tune_cmd = py + ["tune", proj, *opts, *extra, "--degree", str(a.degree), "--out", str(out / name),
                             "--overwrite"]
            eval_cmd = py + ["eval", str(out / name / "model.safetensors"), a.eval_project, "--all",
                             "--out", str(report_path)]
            wall = None
            if not report_path.exists():
                wall = _run(tune_cmd, out / f"{name}.tune.log")
                _run(eval_cmd, out / f"{name}.eval.log")
            report = json.loads(report_path.read_text())
            shown = ["dxstudio"] + tune_cmd[len(py):]
            rows.append({"project": pname, "start": start, "fields": _agreements(report),
                         "pages": report["run"]["heldout_pages"], "tune_s": wall, "command": " ".join(shown)})
            print(json.dumps(rows[-1]), flush=True)
        if a.gbdt:
            report_path = out / f"{pname}_gbdt.eval.json"
            cmd = [sys.executable, str(REPO / "bench" / "gbdt_baseline.py"), proj, a.eval_project, "--all",
                   "--out", str(report_path)]
            wall = None
            if not report_path.exists():
                wall = _run(cmd, out / f"{pname}_gbdt.log")
            report = json.loads(report_path.read_text())
            rows.append({"project": pname, "start": "gbdt", "fields": _agreements(report),
                         "pages": report["run"]["heldout_pages"], "tune_s": wall,
                         "command": "python bench/gbdt_baseline.py " + " ".join(cmd[2:])})
            print(json.dumps(rows[-1]), flush=True)
    fields = list(rows[0]["fields"]) if rows else []
    print("| project | start | " + " | ".join(fields) + " | mean | scored pages | tune s |")
    print("|---" * (len(fields) + 5) + "|")
    for r in rows:
        vals = [r["fields"][f] for f in fields]
        mean = sum(vals) / len(vals)
        r["mean"] = mean
        wall = "-" if r["tune_s"] is None else f"{r['tune_s']:.0f}"
        print(f"| {r['project']} | {r['start']} | " + " | ".join(f"{v:.3f}" for v in vals)
              + f" | **{mean:.3f}** | {r['pages']} | {wall} |")
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
