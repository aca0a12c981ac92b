"""`dxstudio pretrain`: train the docextract-v0 base model on a corpus (docs/base-model.md)."""
from __future__ import annotations

import time
from pathlib import Path

from dxstudio.cli.common import INTERRUPTED, OK, PARTIAL, emit_json, fail, progress, warn
from dxstudio.cli.tune import _ray_runner  # Ray itself is imported only when --ray is given
from dxstudio.scale import ScaleError
from dxstudio.tuning.pretrain import PretrainRun
from dxstudio.tuning.settings import TuneError, add_arguments, overrides_from_args


def configure(name, p):
    p.add_argument("corpus", nargs="+", metavar="CORPUS",
                   help="a source folder (CORD v1, NAF, DocBank samples, invoice2data samples; the kind is "
                        "found from its files), synthetic:COUNT[:SEED] for generated documents, or "
                        "synthetic-wide:COUNT[:SEED] for the broader generator with OCR-like noise, "
                        "synthetic-memo:COUNT[:SEED] for memos, fax cover sheets and routing slips")
    p.add_argument("--out", required=True, help="run folder (model.safetensors, report.json, checkpoint)")
    add_arguments(p, "pretrain")  # the settings: the table's rows of pretrain (tuning/settings.py)
    p.add_argument("--stop-after", type=int, metavar="STEPS", help="stop (with a checkpoint) after this many steps in all")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--ray", metavar="ADDRESS", help="each step's examples as tasks on the Ray cluster at "
                   "ADDRESS ('local': start one here); the same bytes as one process (docs/scale.md). "
                   'Needs the cluster extra: pip install "dxstudio[cluster]"')


def run(name, args) -> int:
    runner, close = _ray_runner(args)  # before anything is made: a wrong --ray is said at once
    try:
        return _pretrain(args, runner)
    finally:
        close(runner)


def _pretrain(args, runner) -> int:
    overrides = overrides_from_args(args, "pretrain")
    out = Path(args.out)
    t0 = time.monotonic()
    try:
        run_ = PretrainRun.prepare(args.corpus, out, overrides)
    except (TuneError, ValueError, OSError) as e:
        fail(e)
    run_.runner = runner
    for f, err in run_.errors:
        warn(f"skipped {err}")
    for src in run_.sources:
        warn(f"{src['spec']}: {src['kind']}, {src['documents']} documents, {src['words']} words, "
             f"{len(src['errors'])} skipped")
    warn(f"{len(run_.windows)} windows, {run_.total_steps} steps, {run_.cfg.d_model}-wide model, "
         f"fingerprint {run_.fingerprint[:12]}")
    with progress(run_.total_steps, "pretrain") as bar:
        def on_event(ev):
            if ev.kind == "step":
                bar.show(ev.step, suffix=f"loss {ev.loss:.4f}")

        try:
            finished = run_.train(on_event, stop_after=args.stop_after, resume=args.resume)
        except (TuneError, ValueError, OSError, ScaleError) as e:
            fail(e)
        except KeyboardInterrupt:
            if run_.state is not None:
                run_.save_checkpoint()
            warn("interrupted; checkpoint kept, continue with the same command and --resume")
            return INTERRUPTED
    if not finished:
        warn(f"stopped at step {run_.state.step}; continue with the same command and --resume")
        emit_json({"run": str(out), "step": run_.state.step, "total_steps": run_.total_steps, "finished": False})
        return OK
    report = run_.finish(started=t0)
    emit_json({"run": str(out), "model": report["model"], "sha256": report["sha256"], "steps": report["steps"],
               "final_loss": report["final_loss"], "wall_seconds": report.get("wall_seconds"),
               "skipped_files": len(run_.errors)})
    return PARTIAL if run_.errors else OK
