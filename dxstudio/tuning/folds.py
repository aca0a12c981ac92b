"""A cross-validated LocalFirst threshold: `dxstudio tune --folds K` (setting `folds`).

    run = FoldedRun.prepare(project, run_dir, overrides)   # K fold runs and the final run
    run.train(on_event, cancel, stop_after, resume)        # each part in turn, resumable
    report = run.finish()                                  # model.safetensors + report.json

Fold k (0-based) trains on every usable page but those at positions k, k + K, k + 2K, ... of the
seed's SHA-256 order (schedule.fold_split) and predicts those, so every usable page is held out
exactly once. The held-out predictions of all folds are pooled (in hash order) and scored like
one held-out set: the threshold rule sees K times as many values as one split's. Then the final
model trains on every usable page with the same settings; it is the model written, and it carries
the pooled report's thresholds. Each part is an ordinary TuneRun in its own folder
(RUN/folds/<k+1>, RUN/final) with its own fingerprint and checkpoint, so the bytes do not depend
on the degree and a stopped run resumes where it stopped. Steps and events count across parts.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from dxstudio.engine.container import save_model
from dxstudio.engine.extract import FieldValue, PagePrediction
from dxstudio.fsutil import write_json_atomic
from dxstudio.tuning import schedule
from dxstudio.tuning.checkpoint import fingerprint
from dxstudio.tuning.evaluation import score_predictions, stored_thresholds
from dxstudio.tuning.keywords import reading_record
from dxstudio.tuning.localfirst import auto_folds
from dxstudio.tuning.metrics import Event, score_summary
from dxstudio.tuning.pages import check_folds
from dxstudio.tuning.run import TuneRun
from dxstudio.tuning.rundir import RunDir, folded_step  # noqa: F401  (folded_step: a name of this module before)
from dxstudio.tuning.settings import TuneError, resolve_settings



class FoldedRun:
    def __init__(self, project, run_dir: Path, settings: dict, folds: list, final: TuneRun):
        self.project = project
        self.run_dir = Path(run_dir)
        self.rundir = RunDir(self.run_dir)
        self.settings = settings
        self.folds = folds
        self.final = final
        self.parts = folds + [final]
        self.cfg = final.cfg
        self.start_source = final.start_source
        self.train_pages = final.train_pages  # every usable page trains the final model
        self.heldout_pages = [r for f in folds for r in f.heldout_pages]  # each page once
        self.excluded, self.errors = final.excluded, final.errors
        self.left_out = dict(final.left_out)  # fields not asked yet on some page: not trained, not scored
        self.total_steps = sum(p.total_steps for p in self.parts)
        self.fingerprint = fingerprint([p.fingerprint for p in self.parts])

    @classmethod
    def prepare(cls, project, run_dir, overrides: dict | None = None, model_path=None) -> "FoldedRun":
        settings = resolve_settings(project.settings, overrides, source=project.project_file)
        n_folds = settings["folds"]
        if n_folds is None:
            raise TuneError("a cross-validated run needs the setting folds (K >= 2)")
        run_dir = Path(run_dir)
        rd = RunDir(run_dir)
        # the final run first: it reads every page once and says how many are usable; the folds
        # take the same pages and model inputs from it (shared: read and built once)
        shared = {}
        final = TuneRun.prepare(project, rd.final_part().path, overrides, model_path, fold=(None, n_folds),
                                shared=shared)
        check_folds(n_folds, len(final.train_pages), project)
        folds = [TuneRun.prepare(project, rd.fold_part(k).path, overrides, model_path, fold=(k, n_folds),
                                 shared=shared)
                 for k in range(n_folds)]
        return cls(project, run_dir, settings, folds, final)

    def use_rundir(self, rundir: RunDir) -> None:
        """Write into this run folder instead (one made after prepare, e.g. RunDir.create);
        the parts move with it."""
        for part in self.parts:
            rel = part.run_dir.relative_to(self.run_dir)
            part.use_rundir(RunDir(rundir.path / rel))
        self.run_dir, self.rundir = rundir.path, rundir

    # -- the state the command line and the app read ------------------------------------
    @property
    def state(self):
        """The current part's training state (its step is that part's); see `step`."""
        for p in self.parts:
            if p.state is not None and p.state.step < p.total_steps:
                return p.state
        return self.final.state

    @property
    def step(self) -> int:
        """Steps done across all parts."""
        done = 0
        for p in self.parts:
            if self._part_done(p):
                done += p.total_steps
            elif p.state is not None:
                done += p.state.step
        return done

    def save_checkpoint(self) -> None:
        for p in self.parts:
            if p.state is not None and not self._part_done(p):
                p.save_checkpoint()

    def _part_done(self, part: TuneRun) -> bool:
        if part is self.final:
            return part.state is not None and part.state.step >= part.total_steps
        path = part.rundir.heldout_path
        if not path.exists():
            return False
        try:
            return json.loads(path.read_text(encoding="utf-8")).get("fingerprint") == part.fingerprint
        except (OSError, ValueError):
            return False

    # -- training ------------------------------------------------------------------------
    def train(self, on_event=None, cancel: threading.Event | None = None, stop_after: int | None = None,
              resume: bool = False, overwrite: bool = False) -> bool:
        """Train every part not yet done, in order (folds, then the final model). stop_after
        counts steps across parts. True when every part is done. The run folder is refused
        when it holds a run, unless resume or overwrite, and locked while training."""
        rd = self.rundir
        if resume:
            if folded_step(rd.path) is None:
                raise TuneError(f"{rd.path}: no cross-validated run to resume from")
        else:
            rd.check_new(overwrite)
        rd.acquire()
        try:
            if not resume:
                rd.check_new(overwrite)
                rd.clear()
            return self._train_parts(on_event, cancel, stop_after, resume)
        finally:
            rd.release()

    def _train_parts(self, on_event, cancel, stop_after, resume) -> bool:
        emit = on_event or (lambda e: None)
        write_json_atomic(self.rundir.settings_path, {
            "settings": self.settings, "fingerprint": self.fingerprint, "folds": self.settings["folds"],
            "parts": [str(p.run_dir.relative_to(self.run_dir)) for p in self.parts],
            "starting_model": self.start_source, "fields": list(self.cfg.fields),
            "total_steps": self.total_steps, **({"left_out": self.left_out} if self.left_out else {})})
        if self._side_by_side(stop_after):
            return self._train_side_by_side(emit, cancel, resume)
        offset = 0
        for index, part in enumerate(self.parts):
            if self._already_trained(part, resume):
                offset += part.total_steps
                continue
            has_checkpoint = part.checkpoint_path.exists()

            def relay(ev, offset=offset, index=index):  # epochs count on across the folds too
                epoch = None if ev.epoch is None else ev.epoch + index * self.settings["epochs"]
                emit(Event(ev.kind, ev.step + offset, self.total_steps, loss=ev.loss, lr=ev.lr,
                           seconds=ev.seconds, epoch=epoch, scores=ev.scores))

            local_stop = None if stop_after is None else max(0, stop_after - offset)
            # a part not resumed starts afresh (its folder is ours: the run folder was checked)
            finished = part.train(relay, cancel, local_stop, resume=resume and has_checkpoint,
                                  overwrite=not (resume and has_checkpoint))
            if not finished:
                return False
            if part is not self.final:
                self._save_heldout(part)
            offset += part.total_steps
        return True

    def _already_trained(self, part, resume) -> bool:
        """Whether `part` has nothing left to train: a fold whose held-out predictions are saved,
        or (resuming) the final model whose checkpoint is at its last step, trained but stopped
        before finish(); that checkpoint is loaded into the part's state either way."""
        if part is not self.final:
            return self._part_done(part)
        if not (resume and part.checkpoint_path.exists()):
            return False
        part.start_state(resume=True)
        part.rundir.release()
        return part.state.step >= part.total_steps

    def _side_by_side(self, stop_after) -> bool:
        """Parts run side by side at degree > 1 in one process (not with --stop-after, which
        counts steps across the parts in turn, nor with a gradient runner such as Ray's)."""
        return (int(self.settings["degree"]) > 1 and stop_after is None
                and all(p.runner is None for p in self.parts) and len(self.parts) > 1)

    def _train_side_by_side(self, emit, cancel, resume) -> bool:
        """Every part not done, `degree` at a time, one thread each: the compiled kernels and
        the page inputs are the process's, shared; each part is the run it is one at a time
        (its own state, folder, checkpoints and held-out predictions: the same bytes). The
        longest part (the final model: every page) goes first. A free thread takes the next
        part. Events count steps across all parts (the parts' steps done so far, added up).
        A part that fails stops the others (each writes its checkpoint) and its error is
        raised once they have stopped; a cancel stops them all the same way."""
        from dxstudio.tuning.rundir import checkpoint_step

        degree = int(self.settings["degree"])
        todo, done_steps, local = [], 0, {}
        for index, part in enumerate(self.parts):
            if self._already_trained(part, resume):
                done_steps += part.total_steps
                continue
            has_checkpoint = part.checkpoint_path.exists()
            start = (checkpoint_step(part.checkpoint_path) or 0) if resume and has_checkpoint else 0
            local[index] = start
            todo.append((index, part, resume and has_checkpoint))
        if not todo:
            return True
        todo.sort(key=lambda r: (-r[1].total_steps, r[0]))  # the longest first
        threads = min(degree, len(todo))
        per_part = max(1, degree // threads)  # cores left over go to each part's examples
        stop = threading.Event()  # a part failed or was cancelled: the others stop too
        lock = threading.Lock()
        errors, stopped = {}, []
        queue = iter(todo)

        class Either:  # the caller's cancel or ours
            def is_set(self_):
                return stop.is_set() or (cancel is not None and cancel.is_set())

        either = Either()

        def relay_for(index):
            def relay(ev):
                with lock:
                    local[index] = ev.step
                    epoch = None if ev.epoch is None else ev.epoch + index * self.settings["epochs"]
                    emit(Event(ev.kind, done_steps + sum(local.values()), self.total_steps, loss=ev.loss,
                               lr=ev.lr, seconds=ev.seconds, epoch=epoch, scores=ev.scores))
            return relay

        def worker():
            from dxstudio.engine.kernels import runtime

            # serial kernels on this thread (its examples' threads take them too): two parts never
            # call Numba's thread pool at once
            with runtime.serial_kernels():
                while not either.is_set():
                    with lock:
                        item = next(queue, None)
                    if item is None:
                        return
                    index, part, resumed = item
                    part.degree_override = per_part
                    try:
                        finished = part.train(relay_for(index), either, None, resume=resumed, overwrite=not resumed)
                        if finished and part is not self.final:
                            self._save_heldout(part)
                    except BaseException as e:  # raised by the caller once every part has stopped
                        errors[index] = e
                        stop.set()
                        return
                    finally:
                        part.degree_override = None
                    if not finished:
                        stopped.append(index)
                        return

        pool = [threading.Thread(target=worker, name=f"dx-fold-{k}", daemon=True) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        if errors:
            raise errors[min(errors)]
        return not stopped and next(queue, None) is None

    def _save_heldout(self, part: TuneRun) -> None:
        rows = []
        for pid, _, _, pred in part.predictions():
            rows.append({"id": pid, "fields": {
                f: (None if v is None else {"words": list(v.words), "text": v.text, "confidence": v.confidence})
                for f, v in pred.fields.items()}})
        write_json_atomic(part.rundir.heldout_path, {"fingerprint": part.fingerprint, "pages": rows})

    def pooled_predictions(self) -> list:
        """(id, Page, PageTargets, PagePrediction) of every usable page, predicted by the fold
        that held it out, in hash order."""
        rows = {}
        for part in self.folds:
            data = json.loads(part.rundir.heldout_path.read_text(encoding="utf-8"))
            if data.get("fingerprint") != part.fingerprint:
                raise TuneError(f"{part.rundir.heldout_path}: belongs to another run; tune again")
            by_id = {r[0]: r for r in part.heldout_pages}
            for rec in data["pages"]:
                pid, page, t = by_id[rec["id"]]
                fields = {f: (None if v is None else FieldValue(tuple(v["words"]), v["text"], float(v["confidence"])))
                          for f, v in rec["fields"].items()}
                rows[pid] = (pid, page, t, PagePrediction(pid, fields, None, None, decoding=self.settings["decoding"]))
        order = schedule.hash_order(list(rows), self.settings["seed"])
        return [rows[pid] for pid in order]

    def finish(self, started: float | None = None) -> dict:
        """Score the pooled held-out predictions, write the final model with their thresholds
        (model.safetensors) and report.json in the run folder; return the report."""
        report = score_predictions(list(self.cfg.fields), self.pooled_predictions(),
                                   self.settings["share"], self.settings["min_values"], self.settings["threshold_by"],
                                   self.settings["threshold_rule"])
        # each fold read its pages with its own training pages' keywords; the model keeps the final's
        report["keywords"] = reading_record(self.settings["decoding"], self.final.keywords, self.cfg.fields)
        report["run"] = {
            "fingerprint": self.fingerprint, "starting_model": self.start_source, "folds": self.settings["folds"],
            "steps": self.total_steps, "train_pages": len(self.train_pages),
            "heldout_pages": len(self.heldout_pages), "heldout": "each usable page once, by the fold that left it out",
            "excluded_pages": len(self.excluded), "unreadable_pages": len(self.errors),
            "excluded": [{"id": i, "reason": r} for i, r in self.excluded],
            "unreadable": [{"id": i, "error": e} for i, e in self.errors],
            "settings": self.settings,
        }
        summary = {"fingerprint": self.fingerprint, **score_summary(report), "steps": self.total_steps,
                   "share": report["share"], "folds": self.settings["folds"]}
        if started is not None:
            report["run"]["wall_seconds"] = round(time.monotonic() - started, 3)
        with self.rundir.writing():
            save_model(self.rundir.model_path, self.cfg, self.final.state.container_params(), summary,
                       thresholds=stored_thresholds(report), keywords=self.final.keywords)
            write_json_atomic(self.rundir.report_path, report)  # last: a report means a finished run
        return report


def prepare_run(project, run_dir, overrides: dict | None = None, model_path=None, resume: bool | None = None):
    """A TuneRun (the seed's single split) or, when the setting folds is K >= 2, a FoldedRun.
    With folds unset (auto), localfirst.auto_folds decides from the usable pages: K folds while
    a single split could not hold enough values for any threshold, else the single split; the
    folded run is then the same run (the same bytes) as one with --folds K. A run folder being
    resumed keeps the kind it was started as. resume: as TuneRun.prepare's (a folded run's
    parts read their own label snapshots)."""
    settings = resolve_settings(project.settings, overrides, source=project.project_file)
    if settings["folds"] is None:
        kind = RunDir(run_dir).started_as() if resume is not False else None
        if kind is None:  # a new run: decide by the usable pages
            single = TuneRun.prepare(project, run_dir, overrides, model_path, resume=resume)
            k = auto_folds(len(single.train_pages) + len(single.heldout_pages), settings)
            if k is None:
                return single
        elif kind == "single":
            return TuneRun.prepare(project, run_dir, overrides, model_path, resume=resume)
        else:
            k = kind
        overrides = {**(overrides or {}), "folds": k}
    return FoldedRun.prepare(project, run_dir, overrides, model_path)
