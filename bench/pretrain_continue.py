"""More pretraining from an existing base (issue 20 item 1: does a broader corpus help?).

    python bench/pretrain_continue.py BASE.safetensors CORPUS... --out RUN [pretrain options]

`dxstudio pretrain` always starts from a new model drawn from its seed (the shipped base's
command). This runs the same PretrainRun (the same schedule, loss, checkpoints and resume) but
starts from BASE's weights, so a candidate corpus can be tried for a few hundred steps on top
of the shipped base instead of a full run from scratch: run it twice with the same options,
once on the base's own corpus and once with the new source added, then fine-tune each
(`dxstudio tune PROJECT --model RUN/model.safetensors`) and score outside the projects
(bench/learning_curve.py --tune "--model ..."). The starting model's SHA-256 is the
fingerprint's "starting model" component, so a checkpoint of another start is refused and
--resume continues to the same bytes. The options are `dxstudio pretrain`'s (its settings
table); size and input layout are BASE's (checked).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dxstudio.engine.container import load_model  # noqa: E402
from dxstudio.fsutil import write_json_atomic  # noqa: E402
from dxstudio.tuning.pretrain import PretrainRun  # noqa: E402
from dxstudio.tuning.settings import add_arguments, overrides_from_args  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="the starting base model (a pretrain's model.safetensors)")
    ap.add_argument("corpus", nargs="+")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--resume", action="store_true")
    add_arguments(ap, "pretrain")
    a = ap.parse_args(argv)
    base = load_model(a.base)
    if not (isinstance(base.summary, dict) and base.summary.get("base") is True):
        print(f"pretrain_continue: {a.base}: not a pretrained base (its summary has no \"base\": true)", file=sys.stderr)
        return 2
    overrides = overrides_from_args(a, "pretrain")
    overrides["input_layout"] = base.cfg.input_layout
    t0 = time.monotonic()
    run = PretrainRun.prepare(a.corpus, a.out, overrides)
    if run.cfg != base.cfg:
        print(f"pretrain_continue: {a.base}: its configuration is not the run's (size {overrides.get('size', 'base')})",
              file=sys.stderr)
        return 2
    run.start_params = OrderedDict((k, base.params[k]) for k in run.start_params)
    run._fingerprint()
    for src in run.sources:
        print(f"{src['spec']}: {src['kind']}, {src['documents']} documents, {src['words']} words", file=sys.stderr)
    print(f"{len(run.windows)} windows, {run.total_steps} steps from {a.base}, fingerprint {run.fingerprint[:12]}",
          file=sys.stderr, flush=True)

    def on_event(ev):
        if ev.kind == "step" and (ev.step % 25 == 0 or ev.step == run.total_steps):
            print(f"step {ev.step}/{run.total_steps} loss {ev.loss:.4f} ({ev.seconds:.0f} s)", file=sys.stderr, flush=True)

    run.train(on_event, resume=a.resume)
    report = run.finish(started=t0)
    report["started_from"] = {"model": str(a.base), "sha256": run.components["starting model"]}
    write_json_atomic(run.rundir.report_path, report)
    print(json.dumps({k: report[k] for k in ("model", "sha256", "steps", "final_loss", "first_loss", "wall_seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
