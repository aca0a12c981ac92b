"""`dxstudio tune` and `dxstudio eval`."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def configure(name, p):
    if name == "tune":
        p.add_argument("project", help="project folder")
        p.add_argument("--epochs", type=int)
        p.add_argument("--batch", type=int)
        p.add_argument("--lr", type=float, help="peak learning rate")
        p.add_argument("--warmup", type=int, help="warm-up steps")
        p.add_argument("--backbone-scale", type=float, help="0 trains the tag head only")
        p.add_argument("--field-weight", type=float, help="weight of every B-/I- tag (default: the schema's)")
        p.add_argument("--heldout-fraction", type=float)
        p.add_argument("--seed", type=int)
        p.add_argument("--size", choices=["tiny", "base"], help="size of a new model when the project names none")
        p.add_argument("--model", help="starting model file (default: the project's, else a new model)")
        p.add_argument("--degree", type=int, help="examples in parallel (the bytes do not depend on it)")
        p.add_argument("--kernels", choices=["reference", "fast"])
        p.add_argument("--checkpoint-every", type=int)
        p.add_argument("--folds", type=int, metavar="K",
                       help="cross-validated threshold: K runs each holding out every K-th page, then the "
                            "final model on all usable pages (default: the seed's single split)")
        p.add_argument("--threshold-by", choices=["value", "words"],
                       help="what right means for the threshold: the label's value (default) or "
                            "exactly its words (the seed's rule)")
        p.add_argument("--repeats", choices=["o", "ignore"],
                       help="other printings of a grounded value: o (the seed's rule) or ignore (target -1)")
        p.add_argument("--stop-after", type=int, metavar="STEPS", help="stop (with a checkpoint) after this many steps in all")
        p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
        p.add_argument("--out", help="run folder (default: PROJECT/runs/<time>)")
    else:
        p.add_argument("model", help="model file")
        p.add_argument("project", help="project folder")
        p.add_argument("--out", help="report file (default: print only)")
        p.add_argument("--kernels", choices=["reference", "fast"])
        p.add_argument("--all", action="store_true", dest="all_pages",
                       help="score every usable page of PROJECT (a separate test project, no split), with "
                            "precision and coverage at the model's stored thresholds")


def _overrides(args) -> dict:
    keys = ["epochs", "batch", "lr", "warmup", "backbone_scale", "field_weight", "heldout_fraction",
            "seed", "size", "degree", "kernels", "checkpoint_every", "folds", "repeats", "threshold_by"]
    return {k: getattr(args, k, None) for k in keys if getattr(args, k, None) is not None}


def _print_report(report: dict) -> None:
    """The scores table, the threshold and its bound in words, and the warnings, to stderr."""
    head = ("field", "recall", "agreement", "value recall", "value agreement", "threshold", "values",
            "precision", "95% lower", "coverage", "AUC")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    thr = lambda v: "-" if v is None else f"{v:.6g}"
    rows = [head]
    named = list(report["fields"].items()) + [("pooled", report.get("overall", {}))]
    for name, f in named:
        rows.append((name, fmt(f.get("recall")), fmt(f.get("agreement")), fmt(f.get("value_recall")),
                     fmt(f.get("value_agreement")), thr(f.get("threshold")), str(f.get("values", "-")),
                     fmt(f.get("precision")), fmt(f.get("precision_lower")), fmt(f.get("coverage")),
                     fmt(f.get("confidence_auc"))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), file=sys.stderr)
    print(report.get("threshold_statement") or f"LocalFirst threshold: {report['threshold']}", file=sys.stderr)
    if report.get("pooled"):
        print(f"Pooled: {report['pooled']['bound_statement']}", file=sys.stderr)
    for name, f in report["fields"].items():
        if f.get("threshold") is not None:
            print(f"{name}: {f['bound_statement']}", file=sys.stderr)
    stored = report.get("stored")
    if stored is not None:
        print("At the model's stored thresholds, on these pages:", file=sys.stderr)
        for name, f in list(stored["fields"].items()) + [("pooled", stored["pooled"])]:
            print(f"  {name}: {f['bound_statement']} Coverage {fmt(f['coverage'])}, value precision "
                  f"{fmt(f['value_precision'])}.", file=sys.stderr)
    if report.get("warning"):
        print(f"Warning: {report['warning']}", file=sys.stderr)


def run(name, args) -> int:
    from dxstudio.project import Project, ProjectError
    from dxstudio.tuning import TuneError

    try:
        project = Project.open(args.project)
    except (ProjectError, OSError) as e:
        print(f"dxstudio {name}: {e}", file=sys.stderr)
        return 2
    if name == "eval":
        from dxstudio.tuning import evaluate_model

        try:
            report = evaluate_model(args.model, project, args.out, _overrides(args), all_pages=args.all_pages)
        except (TuneError, ValueError) as e:
            print(f"dxstudio eval: {e}", file=sys.stderr)
            return 2
        _print_report(report)
        print(json.dumps(report))
        return 0
    return _tune(project, args)


def _tune(project, args) -> int:
    from dxstudio.progress import ProgressBar
    from dxstudio.tuning import TuneError, prepare_run, score_summary

    if args.resume and not args.out:
        print("dxstudio tune: --resume needs --out RUN_DIR (the run to continue)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else project.runs_dir / time.strftime("%Y%m%d-%H%M%S")
    t0 = time.monotonic()
    try:
        run = prepare_run(project, out, _overrides(args), model_path=args.model)
    except (TuneError, ValueError) as e:
        print(f"dxstudio tune: {e}", file=sys.stderr)
        return 2
    for pid, err in run.errors:
        print(f"dxstudio tune: skipped {err}", file=sys.stderr)
    folds = run.settings.get("folds")
    split = (f"{folds} folds of {len(run.train_pages)} usable pages (each held out once), then the final model "
             f"on all of them" if folds else
             f"{len(run.train_pages)} training and {len(run.heldout_pages)} held-out pages")
    print(f"dxstudio tune: {split}, {len(run.excluded)} excluded, {run.total_steps} steps, from {run.start_source}",
          file=sys.stderr)
    bar = ProgressBar(run.total_steps, "tune")

    def on_event(ev):
        if ev.kind == "step":
            bar.show(ev.step, suffix=f"loss {ev.loss:.4f}")
        elif ev.kind == "epoch" and not bar.enabled:
            agree = {k: v["agreement"] for k, v in ev.scores["fields"].items()}
            print(f"epoch {ev.epoch}: step {ev.step}/{ev.total} agreement {json.dumps(agree)}", file=sys.stderr)

    try:
        finished = run.train(on_event, stop_after=args.stop_after, resume=args.resume)
    except (TuneError, ValueError) as e:
        bar.close()
        print(f"dxstudio tune: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        run.save_checkpoint()
        bar.close()
        print(f"dxstudio tune: interrupted; checkpoint kept, continue with --resume --out {out}", file=sys.stderr)
        return 130
    bar.close()
    if not finished:
        print(f"dxstudio tune: stopped at step {run.step}; continue with --resume --out {out}", file=sys.stderr)
        print(json.dumps({"run": str(out), "step": run.step, "total_steps": run.total_steps, "finished": False}))
        return 0
    report = run.finish(started=t0)
    _print_report(report)
    print(json.dumps({"run": str(out), "model": str(out / "model.safetensors"), "report": str(out / "report.json"),
                      **score_summary(report)}))
    return 0
