"""Fine-tuning a project's schema: the run, its checkpoints, resume and the report.

    run = TuneRun.prepare(project, run_dir, overrides)     # split, targets, starting model
    run.train(on_event=print, cancel=threading.Event())    # steps; checkpoint every N and on cancel
    report = run.finish()                                  # model.safetensors + report.json

Headless: the command line and the app both drive this class; events go to a callback.
Everything that decides the bytes of the model (the starting model, the schema, the settings
that matter, every training label file and page) is tied together by a SHA-256 fingerprint;
a run resumed from a checkpoint ends with the model bytes of an uninterrupted one.
"""
from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dxstudio.bundled import models_dir
from dxstudio.corpus.generic import transfer_tag_head
from dxstudio.engine.config import size_config
from dxstudio.engine.container import ModelFileError, canonical_json, load_model, model_bytes, save_model
from dxstudio.engine.extract import JOINT_DECODINGS, KEYWORD_DECODINGS, predict_page, reading_keywords
from dxstudio.engine.inputs import window_inputs
from dxstudio.engine.params import new_params, new_tag_head
from dxstudio.engine.training import Example, Targets, TrainSettings, TrainState, train_step
from dxstudio.fsutil import write_json_atomic
from dxstudio.grounding import project_targets
from dxstudio.tuning import checkpoint, early_stop, schedule
from dxstudio.tuning.augment import AUGMENT_SETTINGS, augment_page, enabled as augment_enabled, value_pool
from dxstudio.tuning.imprint import imprint_rows
from dxstudio.tuning.evaluation import score_predictions, stored_thresholds
from dxstudio.tuning.keywords import field_keywords, reading_record
from dxstudio.tuning.metrics import Event, append_metric, score_summary, trim_metrics
from dxstudio.tuning.pages import run_targets_settings, snapshot_targets, usable_split
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.settings import TuneError, effective_backbone_scale, fingerprinted, resolve_settings


# The pretrained base (docs/base-model.md); a run with no model named starts from it when it is there.
BASE_MODEL = models_dir() / "docextract-v0-base.safetensors"  # resources/models/, or the installed wheel's


@dataclass
class TuneRun(checkpoint.CheckpointedRun):
    project: object
    run_dir: Path
    settings: dict
    cfg: object
    start_params: OrderedDict  # container layout, tag head already replaced for the schema
    start_bytes: bytes  # the starting model file's bytes (what the fingerprint covers)
    start_source: str
    train_pages: list = field(default_factory=list)  # [(id, Page, PageTargets)] in hash order
    heldout_pages: list = field(default_factory=list)
    excluded: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    components: dict = field(default_factory=dict)  # name -> sha256
    state: TrainState | None = None
    total_steps: int = 0
    examples: list = field(default_factory=list)
    history: list = field(default_factory=list)  # events of this run (steps and epochs)
    sources: dict = field(default_factory=dict)  # {page id: (page bytes, label bytes)} as read
    runner: object = None  # optional per-example gradient runner (TrainState.runner), e.g. on Ray
    fold: tuple | None = None  # see prepare
    from_base: bool = False  # the starting model is a pretrained base (a null backbone_scale means 0.3)
    degree_override: int | None = None  # threads of this run's steps and scoring instead of the setting's (folds.py)

    def __post_init__(self):
        self.rundir = RunDir(self.run_dir)  # the folder's file names and its lock

    def use_rundir(self, rundir: RunDir) -> None:
        """Write into this run folder instead (one made after prepare, e.g. RunDir.create)."""
        self.run_dir, self.rundir = rundir.path, rundir

    @property
    def step(self) -> int:
        """Steps done (0 before the state exists)."""
        return self.state.step if self.state is not None else 0

    # -- preparing ----------------------------------------------------------------------
    @classmethod
    def prepare(cls, project, run_dir, overrides: dict | None = None, model_path=None,
                resume: bool | None = None, fold: tuple | None = None, shared: dict | None = None) -> "TuneRun":
        """resume: True reads the label targets from the run folder's snapshot (targets.json,
        written when the run started), so labels reviewed since do not change the run; False
        reads the project's label files; None (the default) uses the snapshot when the folder
        has one and a checkpoint to resume from. A run resumed from its snapshot also starts
        from the model file it was started from, when the project names another one since.
        fold: None for the seed's single split; (k, K) for fold k (0-based) of K, holding out
        every K-th page of the hash order from position k; (None, K) trains on every usable
        page (the final model of a cross-validated run, folds.py).
        shared: a dict handed to every part of one cross-validated run (folds.py): the project's
        label files and pages are read once and each page's model inputs built once for all of
        them (a part resumed from its own snapshot reads that instead)."""
        settings = resolve_settings(project.settings, overrides, source=project.project_file)
        snapshot = None
        rd = RunDir(run_dir)
        if rd.snapshot_path.is_file() and (resume or (resume is None and rd.checkpoint_path.is_file())):
            snapshot = rd.read_snapshot()  # (a run from before snapshots resumes from the project's labels)
            if model_path is None and snapshot.get("starting_model_path"):
                model_path = snapshot["starting_model_path"]
        fields = project.field_names
        if not fields:
            raise TuneError(f"{project.project_file}: the schema has no fields; add fields before tuning")
        weights = [settings["field_weight"] if settings["field_weight"] is not None else f.weight
                   for f in project.schema]
        model_path = model_path or project.model
        if model_path is None and settings["start"] == "base" and settings["size"] == "base":
            # never a silent random start where the shipped base was asked for (a tree without
            # resources/models would otherwise tune from scratch and score far lower, unsaid)
            if not BASE_MODEL.is_file():
                raise TuneError(f"{BASE_MODEL}: the shipped base model is missing (start = base); "
                                "reinstall dxstudio, name a model with --model, or use --start new "
                                "for a new random model")
            model_path = BASE_MODEL
        base_summary = None
        if model_path is not None:
            model_path = Path(model_path)
            try:
                loaded = load_model(model_path)
            except ModelFileError as e:
                raise TuneError(str(e)) from None
            base_cfg, base_params, base_summary = loaded.cfg, loaded.params, loaded.summary
            start_bytes = model_path.read_bytes()
            source = str(model_path)
        else:
            base_cfg = size_config(settings["size"], input_layout=settings["input_layout"])
            base_params = new_params(base_cfg, settings["seed"])
            start_bytes = model_bytes(base_cfg, base_params)
            source = f"new {settings['size']} model, seed {settings['seed']}"
        cfg = base_cfg.with_fields(fields)
        params = OrderedDict(base_params)
        # a model from before a field was renamed reads it under the new name (the head mapping)
        model_fields = project.model_field_names(base_cfg.fields)
        drawn = []  # schema indices of the fields whose tag rows are the run's random draw
        if model_fields != list(fields):
            # a custom schema: a new tag head of 1 + 2K rows drawn from the run's seed
            params["tag_head.weight"], params["tag_head.bias"] = new_tag_head(cfg, settings["seed"])
            if not (isinstance(base_summary, dict) and base_summary.get("base") is True):
                # the project's earlier model: the fields it has keep their rows (O too)
                params["tag_head.weight"], params["tag_head.bias"], kept = _keep_head_rows(
                    model_fields, base_params, list(fields), params["tag_head.weight"], params["tag_head.bias"])
            if isinstance(base_summary, dict) and base_summary.get("base") is True:
                # a pretrained base: fields naming its generic classes start from their rows
                params["tag_head.weight"], params["tag_head.bias"], kept = transfer_tag_head(
                    base_cfg, base_params, project.schema, params["tag_head.weight"], params["tag_head.bias"])
            drawn = [c for c, name in enumerate(fields) if name not in kept]
        run = cls(project, Path(run_dir), settings, cfg, params, start_bytes, source)
        run.drawn_fields = drawn
        run.base_head = (base_params["tag_head.weight"], base_params["tag_head.bias"])
        run.matched_head = (params["tag_head.weight"], params["tag_head.bias"])  # before head_init
        run.start_model_path = str(model_path) if model_path is not None else None
        run.from_base = isinstance(base_summary, dict) and base_summary.get("base") is True
        run.weights = weights
        run.snapshot = snapshot
        run.fold = fold
        run.shared = shared
        run.from_new = model_path is None  # a new random model: nothing learnt to imprint from
        run._load_targets(weights)
        run._init_head()
        run._fingerprint(weights)
        return run

    def _init_head(self) -> None:
        """Setting head_init: "imprint" sets the drawn fields' tag rows from the starting model's
        final states over this run's training pages (imprint.py); "match" keeps the drawn rows,
        and so does a start from a new random model (its states carry nothing learnt). Called
        again whenever the training pages are read again (start_state), before the fingerprint,
        which covers the setting only where a row was imprinted (else the bytes are match's)."""
        w, b = self.matched_head
        self.imprinted = {}
        if self.settings["head_init"] == "imprint" and self.drawn_fields and not self.from_new:
            w, b, self.imprinted = imprint_rows(self.cfg, self.start_params, self.examples, self.drawn_fields,
                                                self.settings["kernels"], *self.base_head)
        self.start_params["tag_head.weight"], self.start_params["tag_head.bias"] = w, b

    def _load_targets(self, weights) -> None:
        pt = None
        absent, repeats = run_targets_settings(self.settings)
        if self.snapshot is not None:
            pt = snapshot_targets(self.project, self.snapshot, self.cfg.max_words, self.rundir.snapshot_path,
                                  repeats, absent)
        shared = getattr(self, "shared", None)
        if pt is None and shared is not None:  # read once for every part of a cross-validated run
            key = ("targets", self.cfg.max_words, repeats, absent)
            if key not in shared:
                shared[key] = project_targets(self.project, max_words=self.cfg.max_words, repeats=repeats,
                                              absent=absent)
            pt = shared[key]
        pt, self.train_pages, self.heldout_pages = usable_split(
            self.project, self.settings, self.cfg.max_words, "tuning", self.fold, pt)
        self.train_pages, self.stop_pages = early_stop.carve(self.train_pages, self.settings, f"{self.project.root}: ")
        # the printing reading's keywords: from the schema and these training pages only (keywords.py)
        self.keywords = field_keywords(self.project.schema, self.train_pages, self.settings["keywords"])
        self.reading_keywords = reading_keywords(self.keywords, self.cfg.fields)
        self.excluded, self.errors, self.sources = pt.excluded, pt.errors, pt.sources
        self.left_out = dict(pt.left_out)  # fields not asked yet on some page: not trained, not scored
        self.class_weights = tuple(float(w) for w in schedule.class_weights_for(weights))
        self.examples = []
        inputs = shared.setdefault("inputs", {}) if shared is not None else {}
        for pid, page, t in self.train_pages:  # one window per page: the first max_words words
            stop = min(len(page.words), self.cfg.max_words)
            key = (pid, id(page), stop)  # the page object is kept with its inputs: its id stays its own
            if key not in inputs:
                inputs[key] = (page, window_inputs(page, self.cfg, 0, stop))
            inp = inputs[key][1]
            self.examples.append(Example(inp, Targets(tags=np.asarray(t.tags[:stop], np.int64))))
        # what augment_swap draws a value's replacement from: these training pages' values only
        self.value_pool = (value_pool((page, t.tags) for _, page, t in self.train_pages)
                           if self.settings.get("augment_swap") else None)
        self.total_steps = schedule.total_steps(len(self.train_pages), self.settings["batch"], self.settings["epochs"])

    def example(self, i: int, step: int) -> Example:
        """Training page i as it enters `step`: itself, or with augmentation on its variant for
        this step (augment.py: keyed by the seed, the step and the page id alone)."""
        if not augment_enabled(self.settings):
            return self.examples[i]
        pid, page, t = self.train_pages[i]
        page, tags = augment_page(page, t.tags, self.settings, self.settings["seed"], step, self.value_pool)
        stop = min(len(page.words), self.cfg.max_words)
        return Example(window_inputs(page, self.cfg, 0, stop), Targets(tags=np.asarray(tags[:stop], np.int64)))

    def _fingerprint(self, weights) -> None:
        s = early_stop.unfingerprinted(fingerprinted(self.settings))
        if not s.get("accepted_only"):  # the default: a run's fingerprint stays what it was before the setting
            s.pop("accepted_only", None)
        if s.get("threshold_rule") == "bound":  # likewise (the rule never changes the weights)
            s.pop("threshold_rule", None)
        # likewise: a reading of spans never changes the weights (span was the default before
        # joint and printing; the seed's reading stays fingerprinted, as it always was); with early
        # stopping the reading scores the epochs, so joint and printing count there
        if s.get("decoding") == "span" or (s.get("decoding") in JOINT_DECODINGS and not s.get("early_stop")):
            s.pop("decoding", None)
        # likewise the keywords, but where early stopping scores the epochs with the printing reading
        if not (s.get("early_stop") and s.get("decoding") in KEYWORD_DECODINGS):
            s.pop("keywords", None)
        if not getattr(self, "imprinted", None):  # likewise: no row imprinted, the head the seed's
            s.pop("head_init", None)
        for name in AUGMENT_SETTINGS:  # likewise: off
            if not s.get(name):
                s.pop(name, None)
        if s.get("layer_decay") == 1:  # likewise: off
            s.pop("layer_decay", None)
        if self.fold is not None:
            s["fold"] = "all" if self.fold[0] is None else self.fold[0]
        labels = hashlib.sha256()
        pages = hashlib.sha256()
        # the bytes that were read and parsed (not read again: a file edited meanwhile must not
        # give a fingerprint of labels the run did not train on)
        for pid, _, _ in sorted(self.train_pages + self.heldout_pages + self.stop_pages, key=lambda r: r[0]):
            page_raw, label_raw = self.sources[pid]
            labels.update(pid.encode() + b"\0" + label_raw + b"\0")
            pages.update(pid.encode() + b"\0" + page_raw + b"\0")
        schema = [{"name": f.name, "weight": w} for f, w in zip(self.project.schema, weights)]
        self.components = {
            "starting model": checkpoint.sha256_hex(self.start_bytes),
            "schema": checkpoint.sha256_hex(canonical_json(schema).encode()),
            "settings": checkpoint.sha256_hex(canonical_json(s).encode()),
            "label files": labels.hexdigest(),
            "pages": pages.hexdigest(),
        }
        self.fingerprint = checkpoint.fingerprint(self.components)

    @property
    def backbone_scale(self) -> float:
        return effective_backbone_scale(self.settings, self.from_base)

    def train_settings(self) -> TrainSettings:
        s = self.settings
        return TrainSettings(backbone_scale=self.backbone_scale, layer_decay=float(s["layer_decay"]), loss_tag=1.0,
                             tag_class_weights=self.class_weights, weight_decay=float(s["weight_decay"]),
                             clip=s["clip"], degree=self.degree_override or s["degree"], kernels=s["kernels"])

    # -- checkpoints (checkpoint.py) -------------------------------------------------------
    # checkpoint_path, save_checkpoint, load_checkpoint: checkpoint.CheckpointedRun

    # -- training ------------------------------------------------------------------------
    def start_state(self, resume: bool = False, overwrite: bool = False) -> int:
        """Take the run folder's lock and write settings.json; with resume, load the checkpoint.
        A folder that holds a run is refused unless resume or overwrite; nothing is created
        when resume finds no checkpoint."""
        rd = self.rundir
        if resume and rd.never_started():  # killed before its first checkpoint: start again from step 0
            resume, overwrite = False, True
        rd.check_resumable() if resume else rd.check_new(overwrite)
        if not resume and self.snapshot is not None:  # a fresh run reads the project's labels, not an old snapshot
            self.snapshot = None
            self._load_targets(self.weights)
            self._init_head()
            self._fingerprint(self.weights)
        rd.acquire()
        try:
            if not resume:  # checked again under the lock: another process may have started
                rd.check_new(overwrite)
                rd.clear()
            self.state = TrainState.start(self.cfg, self.start_params, self.train_settings())
            self.state.runner = self.runner
            step = self.load_checkpoint() if resume else 0  # refused before anything is written
            if not resume or not rd.snapshot_path.is_file():
                self._write_snapshot()
            self._write_settings()
            return step
        except BaseException:
            rd.release()
            raise

    def _write_snapshot(self) -> None:
        """targets.json: the label file bytes of every page the run trains on or holds out, as
        they were read (the fingerprint's "label files" are these bytes), so that the labels
        may be reviewed on while the run stops and resumes."""
        labels = {}
        for pid, _, _ in sorted(self.train_pages + self.heldout_pages + self.stop_pages, key=lambda r: r[0]):
            labels[pid] = self.sources[pid][1].decode("utf-8")
        write_json_atomic(self.rundir.snapshot_path, {
            "format": 1, "fingerprint": self.fingerprint, "starting_model_path": self.start_model_path,
            "labels": labels, "excluded": [list(e) for e in self.excluded],
            "unreadable": [list(e) for e in self.errors]}, indent=None)

    def _write_settings(self) -> None:
        write_json_atomic(self.rundir.settings_path, {
            "settings": self.settings, "fingerprint": self.fingerprint, "components": self.components,
            "starting_model": self.start_source, "fields": list(self.cfg.fields),
            "train_pages": [r[0] for r in self.train_pages], "heldout_pages": [r[0] for r in self.heldout_pages],
            "total_steps": self.total_steps, **({"left_out": self.left_out} if self.left_out else {})})

    def train(self, on_event=None, cancel: threading.Event | None = None, stop_after: int | None = None,
              resume: bool = False, overwrite: bool = False) -> bool:
        """Run steps until the end, a cancel or `stop_after` steps in total. A checkpoint is
        written every checkpoint_every steps and when stopping early. True when finished.

        The run folder is locked from here to the end of finish() (or until this returns False
        or raises): a second process writing the same folder gets RunLockedError."""
        start = self.start_state(resume, overwrite)
        try:
            finished = self._steps(on_event or (lambda e: None), cancel, stop_after, start)
        except BaseException:
            self.rundir.release()
            raise
        if not finished:
            self.rundir.release()
        return finished

    def _steps(self, emit, cancel, stop_after, start) -> bool:
        s = self.settings
        n = len(self.train_pages)
        metrics = self.rundir.metrics_path
        trim_metrics(metrics, start)
        t0 = time.monotonic()
        self.selection = early_stop.Selection(self, start)
        for step in range(start, self.total_steps):
            if (cancel is not None and cancel.is_set()) or (stop_after is not None and step >= stop_after):
                self.save_checkpoint()
                emit(Event("cancelled", step, self.total_steps))
                return False
            idx = schedule.batch_for_step(n, s["seed"], s["batch"], s["epochs"], step)
            lr = schedule.learning_rate(step, self.total_steps, s["warmup"], float(s["lr"]))
            res = train_step(self.state, [self.example(i, step) for i in idx], lr)
            self._check_finite(step + 1, res.loss, lr)
            ev = Event("step", step + 1, self.total_steps, loss=res.loss, lr=lr, seconds=time.monotonic() - t0)
            append_metric(metrics, ev)
            emit(ev)
            done_positions = min((step + 1) * s["batch"], n * s["epochs"])
            prev_positions = step * s["batch"]
            epoch_end = done_positions // n > prev_positions // n or step + 1 == self.total_steps
            if self.heldout_pages and epoch_end:
                epoch = done_positions // n  # epochs completed
                scores = self.evaluate()
                ev = Event("epoch", step + 1, self.total_steps, epoch=epoch, scores=scores,
                           seconds=time.monotonic() - t0)
                append_metric(metrics, ev)
                emit(ev)
            if epoch_end and self.selection.epoch_end(done_positions // n, step + 1):
                break  # early stopping (early_stop.py)
            if (step + 1) % s["checkpoint_every"] == 0 and step + 1 < self.total_steps:
                self.save_checkpoint()
                emit(Event("checkpoint", step + 1, self.total_steps))
        self.selection.finish()  # the kept / averaged weights (early_stop.py)
        self.save_checkpoint()
        emit(Event("done", self.total_steps, self.total_steps))
        return True

    def _check_finite(self, step: int, loss: float, lr: float) -> None:
        """Stop at the first non-finite loss or weight: nothing after it is saved, so the last
        checkpoint on disk is the last good state."""
        bad = None
        if not math.isfinite(loss):
            bad = f"the loss is {loss}"
        else:
            name = next((n for n, v in self.state.params.items() if not np.isfinite(v).all()), None)
            if name is not None:
                bad = f"weight {name!r} is no longer finite"
        if bad is None:
            return
        s = self.settings
        kept = (f"the last good checkpoint ({self.checkpoint_path}) is kept"
                if self.checkpoint_path.exists() else "no checkpoint was written")
        raise TuneError(f"step {step}: {bad}: training diverged (lr {s['lr']:g}, now {lr:g}; weight_decay "
                        f"{s['weight_decay']:g}; backbone_scale {self.backbone_scale:g}); lower them and start "
                        f"again; {kept}")

    # -- scores ----------------------------------------------------------------------------
    def predictions(self, params_rt=None):
        """(page id, Page, PageTargets, PagePrediction) for every held-out page."""
        params_rt = params_rt if params_rt is not None else self.state.params
        preds = predict_pages(self.cfg, params_rt, [r[1] for r in self.heldout_pages], self.settings["kernels"],
                              self.settings["decoding"], self.predict_degree(), self.reading_keywords)
        return [(pid, page, t, pred) for (pid, page, t), pred in zip(self.heldout_pages, preds)]

    def predict_degree(self) -> int:
        """Pages predicted side by side when scoring: the run's degree (1 inside a fold run
        side by side with others, folds.py, where the cores are the folds')."""
        return self.degree_override or int(self.settings["degree"])

    def evaluate(self, params_rt=None) -> dict:
        report = score_predictions(list(self.cfg.fields), self.predictions(params_rt),
                                   self.settings["share"], self.settings["min_values"], self.settings["threshold_by"],
                                   self.settings["threshold_rule"])
        report["keywords"] = reading_record(self.settings["decoding"], self.keywords, self.cfg.fields)
        return report

    def finish(self, started: float | None = None) -> dict:
        """Write model.safetensors (with the training summary) and report.json; return the report.
        `started` (time.monotonic() at the start) adds the wall time to the report."""
        report = self.evaluate()
        report["run"] = {
            "fingerprint": self.fingerprint, "starting_model": self.start_source, "steps": self.state.step,
            "train_pages": len(self.train_pages), "heldout_pages": len(self.heldout_pages),
            "excluded_pages": len(self.excluded), "unreadable_pages": len(self.errors),
            "excluded": [{"id": i, "reason": r} for i, r in self.excluded],
            "unreadable": [{"id": i, "error": e} for i, e in self.errors],
            "settings": self.settings, **(self.selection.report() if hasattr(self, "selection") else {}),
            **({"imprinted": self.imprinted} if getattr(self, "imprinted", None) else {}),
        }
        summary = {"fingerprint": self.fingerprint, **score_summary(report),
                   "steps": self.state.step, "share": report["share"]}
        if started is not None:
            report["run"]["wall_seconds"] = round(time.monotonic() - started, 3)
        rd = self.rundir
        rd.acquire()  # held since train() in the usual order; taken here when finish() comes alone
        try:
            save_model(rd.model_path, self.cfg, self.state.container_params(), summary,
                       thresholds=stored_thresholds(report), keywords=self.keywords)
            write_json_atomic(rd.report_path, report)  # last: a report means a finished run
        finally:
            rd.release()
        return report


def predict_pages(cfg, params_rt, pages, kernels: str, decoding: str, degree: int = 1, keywords=None) -> list:
    """predict_page of each page, in order. With degree > 1 the pages run side by side on that
    many threads with the single-threaded kernels (a page's prediction never depends on the
    threads: the same bytes)."""
    from dxstudio.engine.kernels import runtime

    if degree <= 1 or len(pages) <= 1:
        return [predict_page(cfg, params_rt, page, kernels, decoding, keywords) for page in pages]

    def one(page):
        with runtime.serial_kernels():
            return predict_page(cfg, params_rt, page, kernels, decoding, keywords)

    with ThreadPoolExecutor(max_workers=degree, thread_name_prefix="dx-score") as pool:
        return list(pool.map(one, pages))


def _keep_head_rows(model_fields, base_params, fields, weight, bias):
    """A new tag head whose O row and the B-/I- rows of every field the starting model has
    (by its name in the schema now) are the starting model's: adding or removing a field keeps
    what the model learnt of the others. Fields it lacks keep their freshly drawn rows.
    Returns (weight, bias, the names whose rows were kept)."""
    w = np.array(weight, np.float32, copy=True)
    b = np.array(bias, np.float32, copy=True)
    bw = np.asarray(base_params["tag_head.weight"], np.float32)
    bb = np.asarray(base_params["tag_head.bias"], np.float32)
    if bw.shape[1] != w.shape[1] or not any(f in model_fields for f in fields):
        return w, b, set()
    w[0], b[0] = bw[0], bb[0]
    kept = set()
    for c, name in enumerate(fields):
        if name in model_fields:
            g = model_fields.index(name)
            for off in (1, 2):
                w[off + 2 * c], b[off + 2 * c] = bw[off + 2 * g], bb[off + 2 * g]
            kept.add(name)
    return w, b, kept

