"""`dxstudio tune` and `dxstudio eval`. Their settings options come from the settings table
(dxstudio/tuning/settings.py); the run folder is a dxstudio.tuning.rundir.RunDir."""
from __future__ import annotations

import json
import signal
import threading
import time

from dxstudio.bundled import inside_package
from dxstudio.cli.common import INTERRUPTED, emit_json, fail, progress, warn
from dxstudio.cli.model import engine_ready
from dxstudio.project import Project, ProjectError
from dxstudio.scale import ScaleError


def configure(name, p):
    from dxstudio.tuning.settings import add_arguments  # light: the table is plain Python

    if name == "tune":
        p.add_argument("project", nargs="?", help="project folder (for the bundled sample: dxstudio sample DIR, then "
                                                  "dxstudio tune DIR)")
        p.add_argument("--model", help="starting model file (default: the project's, else as --start says: the "
                                       "shipped base model, or a new one)")
        p.add_argument("--stop-after", type=int, metavar="STEPS", help="stop (with a checkpoint) after this many steps in all")
        p.add_argument("--out", metavar="RUN", help="run folder (default: a new PROJECT/runs/<time>); "
                       "a folder that holds a run is refused unless --resume or --overwrite")
        again = p.add_mutually_exclusive_group()
        again.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
        again.add_argument("--overwrite", action="store_true", help="replace the run in --out (its files are removed)")
        p.add_argument("--ray", metavar="ADDRESS", help="each step's examples as tasks on the Ray cluster at "
                       "ADDRESS ('local': start one here); the same bytes as one process. Needs the "
                       'cluster extra: pip install "dxstudio[cluster]"')
    else:
        p.add_argument("model", help="model file")
        p.add_argument("project", help="project folder")
        p.add_argument("--out", help="report file (default: print only)")
        p.add_argument("--all", action="store_true", dest="all_pages",
                       help="score every usable page of PROJECT (a separate test project, no split), with "
                            "precision and coverage at the model's stored thresholds")
    add_arguments(p, name)
    if name == "tune":
        p.description = (f"{p.description}. The defaults shown are dxstudio's own: a project's settings "
                         f"(dxproject.json \"settings\"; the bundled sample sets size, epochs, batch, warmup, lr "
                         f"and backbone_scale) come before them, and an option given here before both (the run folder's "
                         f"settings.json holds those a run used).")


def _overrides(args) -> dict:
    from dxstudio.tuning.settings import overrides_from_args

    return overrides_from_args(args, args.command)


def _print_report(report: dict) -> None:
    """The one sentence a person can rely on first, then the scores table, the threshold and
    its bound in words, the verdicts of eval --all and the warnings, to stderr."""
    import sys

    from dxstudio.tuning.localfirst import promise_sentence

    if report.get("stored") is None:  # a tune report: what the thresholds it stores promise
        print(promise_sentence(report), file=sys.stderr)

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
        print(f"Pooled (reported only: a field without a threshold of its own is always asked): "
              f"{report['pooled']['bound_statement']}", file=sys.stderr)
    for name, f in report["fields"].items():
        if f.get("threshold") is not None:
            print(f"{name}: {f['bound_statement']}", file=sys.stderr)
        elif f.get("needed_right"):
            print(f"{name}: no threshold (always asked); about {f['needed_right']} more right values at the "
                  f"top would give it one.", file=sys.stderr)
    stored = report.get("stored")
    if stored is not None:
        print("At the model's stored thresholds, on these pages:", file=sys.stderr)
        for name, f in list(stored["fields"].items()) + [("pooled", stored["pooled"])]:
            print(f"  {name}: {f['bound_statement']} Coverage {fmt(f['coverage'])}, value precision "
                  f"{fmt(f['value_precision'])}.", file=sys.stderr)
        if stored.get("verdicts"):
            print("Does the model's promise hold on these pages?", file=sys.stderr)
            for name, v in stored["verdicts"].items():
                print(f"  {name}: {v['text']}", file=sys.stderr)
    if report.get("warning"):
        print(f"Warning: {report['warning']}", file=sys.stderr)


def _print_documents(report: dict) -> None:
    """Per document beside per page (issue 28): agreement of each field both ways, and the
    stored thresholds' check on documents. Nothing when every held-out document is one page."""
    import sys

    from dxstudio.tuning.scoring import document_summary

    s = document_summary(report)
    if not s or not s["multi_page"]:
        return
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"Per document ({s['documents']} documents, {s['multi_page']} of several pages; {s['pages']} pages): "
          f"agreement {fmt(s['per_document']['agreement'])} per document, {fmt(s['per_page']['agreement'])} per page",
          file=sys.stderr)
    for name, f in s["fields"].items():
        print(f"  {name}: {fmt(f['document_agreement'])} per document, {fmt(f['page_agreement'])} per page",
              file=sys.stderr)
    stored = report["documents"].get("stored")
    if stored is not None:
        print(f"  At the stored thresholds, per document: {stored['pooled']['bound_statement']} "
              f"Coverage {fmt(stored['pooled']['coverage'])}.", file=sys.stderr)


def run(name, args) -> int:
    from dxstudio.tuning import TuneError

    if args.project is None:
        fail("no project given: dxstudio tune PROJECT (a folder with dxproject.json); to try the bundled "
             "sample, copy it first: dxstudio sample DIR, then dxstudio tune DIR")
    try:
        project = Project.open(args.project)
    except (ProjectError, OSError) as e:
        fail(e)
    if name == "tune":
        _refuse_installed(project, args)
    if name == "eval":
        from dxstudio.tuning import evaluate_model

        try:
            report = evaluate_model(args.model, project, args.out, _overrides(args), all_pages=args.all_pages)
        except (TuneError, ValueError) as e:
            fail(e)
        except OSError as e:
            fail(f"{args.out}: cannot write the report ({e.strerror or e})")
        _print_report(report)
        _print_documents(report)
        emit_json(report)
        return 0
    return _tune(project, args)


def _refuse_installed(project, args) -> None:
    """A project inside the installed package is read-only: a run would be written into
    site-packages (PROJECT/runs/...)."""
    if inside_package(project.root) and (not args.out or inside_package(args.out)):
        fail(f"{project.root}: this project is inside the installed dxstudio package, which is read-only; "
             f"copy it first (dxstudio sample DIR, then dxstudio tune DIR), or give --out RUN outside it")


class _FirstInterruptCancels:
    """Ctrl-C once: stop after the current step with a checkpoint; twice: stop at once."""

    def __init__(self):
        self.cancel = threading.Event()
        self._old = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.cancel.is_set():
            raise KeyboardInterrupt
        self.cancel.set()
        warn("stopping after this step (Ctrl-C again to stop at once, without a checkpoint)")

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _tune(project, args) -> int:
    from dxstudio.tuning import TuneError
    from dxstudio.tuning.rundir import RunDir

    if args.resume and not args.out:
        fail("--resume needs --out RUN (the run to continue)")
    if args.model and getattr(args, "start", None) == "new":
        fail("--start new and --model exclude each other")
    if args.out:
        rundir = RunDir(args.out)
        try:  # before reading the project: a wrong --out is said at once, and nothing is made
            rundir.check_resumable() if args.resume else rundir.check_new(args.overwrite)
        except TuneError as e:
            fail(e)
        if rundir.never_started():
            warn(f"{rundir.path}: the run there stopped before its first checkpoint; it starts again from step 0")
    runner, close = _ray_runner(args)  # before anything is made: a wrong --ray is said at once
    try:
        return _prepare_and_train(project, args, runner)
    finally:
        close(runner)


def _ray_runner(args):
    """With --ray: (the gradient runner on the cluster, its closer); else (None, a no-op)."""
    if not getattr(args, "ray", None):
        return None, lambda runner: None

    try:
        from dxstudio.scale import cluster

        started = cluster.connect(args.ray)
    except ScaleError as e:
        fail(f"--ray: {e}")
    warn(f"--ray {args.ray}: each step's examples as tasks on {cluster.cluster_cpus()} Ray CPUs")

    def close(runner):
        if runner.bytes_back:
            where = ("between processes (one partial sum a task, in example order)" if runner.sums
                     else "back to this process (one set an example)")
            warn(f"--ray: {runner.steps} steps on the cluster; per step {runner.bytes_back} bytes of gradient sets {where}, "
                 f"{runner.bytes_out} bytes of weights out (the last step)")
        if started:
            cluster.shutdown()
    return cluster.RayGradients(), close


def _prepare_and_train(project, args, runner) -> int:
    from dxstudio.tuning import TuneError, prepare_run, score_summary
    from dxstudio.tuning.rundir import RunDir

    t0 = time.monotonic()
    try:
        run = prepare_run(project, args.out or project.runs_dir / "_new", _overrides(args), model_path=args.model,
                          resume=bool(args.resume))
    except (TuneError, ValueError) as e:
        fail(e)
    if not args.out:  # a new folder with a unique name, claimed only once the run can start
        try:
            run.use_rundir(RunDir.create(project.runs_dir))
        except TuneError as e:
            fail(e)
    out = run.rundir.path
    for part in getattr(run, "parts", [run]):  # a cross-validated run: every fold and the final
        part.runner = runner
    for pid, err in run.errors:
        warn(f"skipped {err}")
    folds = run.settings.get("folds")
    from dxstudio.tuning import resolve_settings
    from dxstudio.tuning.localfirst import auto_folds_below

    auto = ""
    if folds and resolve_settings(project.settings, _overrides(args), source=project.project_file)["folds"] is None:
        auto = (f" (the default below {auto_folds_below(run.settings)} usable pages, so that every page is "
                f"held out once; --folds K or --auto-folds 0 to change)")
    split = (f"{folds} folds of {len(run.train_pages)} usable pages{auto}, then the final model "
             f"on all of them" if folds else
             f"{len(run.train_pages)} training and {len(run.heldout_pages)} held-out pages")
    warn(f"{split}, {len(run.excluded)} excluded, {run.total_steps} steps, from {run.start_source}, into {out}")
    if run.settings.get("kernels", "fast") == "fast":
        engine_ready("fast", None)  # on a first use: prepare the compiled kernels, saying so, with progress
    with progress(run.total_steps, "tune") as bar, _FirstInterruptCancels() as interrupt:
        def on_event(ev):
            if ev.kind == "step":
                bar.show(ev.step, suffix=f"loss {ev.loss:.4f}")
            elif ev.kind == "epoch" and not bar.enabled:
                agree = {k: v["agreement"] for k, v in ev.scores["fields"].items()}
                warn(f"epoch {ev.epoch}: step {ev.step}/{ev.total} agreement {json.dumps(agree)}")

        try:
            finished = run.train(on_event, cancel=interrupt.cancel, stop_after=args.stop_after,
                                 resume=args.resume, overwrite=args.overwrite)
        except (TuneError, ValueError, ScaleError) as e:
            fail(e)
        except OSError as e:
            fail(f"{e.filename or out}: {e.strerror or e}")
        except KeyboardInterrupt:
            fail(f"interrupted; continue from the last checkpoint with --resume --out {out}", INTERRUPTED)
    if not finished:
        how = "interrupted" if interrupt.cancel.is_set() else "stopped"
        warn(f"{how} at step {run.step}; continue with --resume --out {out}")
        emit_json({"run": str(out), "step": run.step, "total_steps": run.total_steps, "finished": False})
        return INTERRUPTED if interrupt.cancel.is_set() else 0
    try:
        report = run.finish(started=t0)
    except OSError as e:
        fail(f"{e.filename or out}: {e.strerror or e}")
    _print_report(report)
    from dxstudio.tuning.localfirst import promise_sentence

    emit_json({"run": str(out), "model": str(run.rundir.model_path), "report": str(run.rundir.report_path),
               **score_summary(report), "promise": promise_sentence(report)})
    return 0
