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
import json
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dxstudio.tuning import schedule
from dxstudio.engine.config import size_config
from dxstudio.engine.container import ModelFileError, canonical_json, load_model, model_bytes, save_model
from dxstudio.engine.extract import DEFAULT_DECODING, model_decoding, predict_page
from dxstudio.engine.inputs import window_inputs
from dxstudio.tuning.augment import AUGMENT_SETTINGS, augment_page, enabled as augment_enabled
from dxstudio.tuning import early_stop
from dxstudio.bundled import models_dir
from dxstudio.engine.params import new_params, new_tag_head
from dxstudio.engine.training import Example, Targets, TrainSettings, TrainState, train_step
from dxstudio.fsutil import (JSONInputError, disk_full, is_disk_full, loads_json, write_bytes_atomic,
                             write_json_atomic)
from dxstudio.grounding import project_targets, value_key
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.scoring import HeldOutPage, score_documents, score_pages
from dxstudio.tuning.settings import (  # noqa: F401  (DEFAULTS, TuneError: the run's names too)
    DEFAULTS, NOT_FINGERPRINTED, TuneError, effective_backbone_scale, fingerprinted, resolve_settings)

# The pretrained base (docs/base-model.md); a run with no model named starts from it when it is there.
BASE_MODEL = models_dir() / "docextract-v0-base.safetensors"  # resources/models/, or the installed wheel's


@dataclass
class Event:
    """A progress event: kind "step" (step, total, loss, lr, seconds) or "epoch" (epoch, scores)
    or "checkpoint" / "done" / "cancelled"."""
    kind: str
    step: int
    total: int
    loss: float | None = None
    lr: float | None = None
    seconds: float | None = None
    epoch: int | None = None
    scores: dict | None = None


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of bytes, in hex: what fingerprints and model cards record."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class TuneRun:
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
                resume: bool | None = None, fold: tuple | None = None) -> "TuneRun":
        """resume: True reads the label targets from the run folder's snapshot (targets.json,
        written when the run started), so labels reviewed since do not change the run; False
        reads the project's label files; None (the default) uses the snapshot when the folder
        has one and a checkpoint to resume from. A run resumed from its snapshot also starts
        from the model file it was started from, when the project names another one since.
        fold: None for the seed's single split; (k, K) for fold k (0-based) of K, holding out
        every K-th page of the hash order from position k; (None, K) trains on every usable
        page (the final model of a cross-validated run, folds.py)."""
        settings = resolve_settings(project.settings, overrides)
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
        if model_path is None and settings["start"] == "base" and settings["size"] == "base" and BASE_MODEL.is_file():
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
        if model_fields != list(fields):
            # a custom schema: a new tag head of 1 + 2K rows drawn from the run's seed
            params["tag_head.weight"], params["tag_head.bias"] = new_tag_head(cfg, settings["seed"])
            if not (isinstance(base_summary, dict) and base_summary.get("base") is True):
                # the project's earlier model: the fields it has keep their rows (O too)
                params["tag_head.weight"], params["tag_head.bias"] = _keep_head_rows(
                    model_fields, base_params, list(fields), params["tag_head.weight"], params["tag_head.bias"])
            if isinstance(base_summary, dict) and base_summary.get("base") is True:
                # a pretrained base: fields naming its generic classes start from their rows
                from dxstudio.corpus.generic import transfer_tag_head

                params["tag_head.weight"], params["tag_head.bias"], _ = transfer_tag_head(
                    base_cfg, base_params, project.schema, params["tag_head.weight"], params["tag_head.bias"])
        run = cls(project, Path(run_dir), settings, cfg, params, start_bytes, source)
        run.start_model_path = str(model_path) if model_path is not None else None
        run.from_base = isinstance(base_summary, dict) and base_summary.get("base") is True
        run.weights = weights
        run.snapshot = snapshot
        run.fold = fold
        run._load_targets(weights)
        run._fingerprint(weights)
        return run

    def _load_targets(self, weights) -> None:
        pt = None
        if self.snapshot is not None:
            pt = snapshot_targets(self.project, self.snapshot, self.cfg.max_words, self.rundir.snapshot_path,
                                  self.settings.get("repeats", "o"))
        pt, self.train_pages, self.heldout_pages = usable_split(
            self.project, self.settings, self.cfg.max_words, "tuning", self.fold, pt)
        self.train_pages, self.stop_pages = early_stop.carve(self.train_pages, self.settings, f"{self.project.root}: ")
        self.excluded, self.errors, self.sources = pt.excluded, pt.errors, pt.sources
        self.left_out = dict(pt.left_out)  # fields not asked yet on some page: not trained, not scored
        self.class_weights = tuple(float(w) for w in schedule.class_weights_for(weights))
        self.examples = []
        for pid, page, t in self.train_pages:  # one window per page: the first max_words words
            stop = min(len(page.words), self.cfg.max_words)
            inp = window_inputs(page, self.cfg, 0, stop)
            self.examples.append(Example(inp, Targets(tags=np.asarray(t.tags[:stop], np.int64))))
        self.total_steps = schedule.total_steps(len(self.train_pages), self.settings["batch"], self.settings["epochs"])

    def example(self, i: int, step: int) -> Example:
        """Training page i as it enters `step`: itself, or with augmentation on its variant for
        this step (augment.py: keyed by the seed, the step and the page id alone)."""
        if not augment_enabled(self.settings):
            return self.examples[i]
        pid, page, t = self.train_pages[i]
        page, tags = augment_page(page, t.tags, self.settings, self.settings["seed"], step)
        stop = min(len(page.words), self.cfg.max_words)
        return Example(window_inputs(page, self.cfg, 0, stop), Targets(tags=np.asarray(tags[:stop], np.int64)))

    def _fingerprint(self, weights) -> None:
        s = early_stop.unfingerprinted(fingerprinted(self.settings))
        if not s.get("accepted_only"):  # the default: a run's fingerprint stays what it was before the setting
            s.pop("accepted_only", None)
        if s.get("threshold_rule") == "bound":  # likewise (the rule never changes the weights)
            s.pop("threshold_rule", None)
        if s.get("decoding") == DEFAULT_DECODING:  # likewise
            s.pop("decoding", None)
        for name in AUGMENT_SETTINGS:  # likewise: off
            if not s.get(name):
                s.pop(name, None)
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
            "starting model": sha256_hex(self.start_bytes),
            "schema": sha256_hex(canonical_json(schema).encode()),
            "settings": sha256_hex(canonical_json(s).encode()),
            "label files": labels.hexdigest(),
            "pages": pages.hexdigest(),
        }
        self.fingerprint = sha256_hex(canonical_json(self.components).encode())

    @property
    def backbone_scale(self) -> float:
        return effective_backbone_scale(self.settings, self.from_base)

    def train_settings(self) -> TrainSettings:
        s = self.settings
        return TrainSettings(backbone_scale=self.backbone_scale, loss_tag=1.0,
                             tag_class_weights=self.class_weights, weight_decay=float(s["weight_decay"]),
                             clip=s["clip"], degree=s["degree"], kernels=s["kernels"])

    # -- checkpoints ---------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path:
        return self.rundir.checkpoint_path

    def save_checkpoint(self) -> None:
        from safetensors.numpy import save

        st = self.state
        tensors = {}
        for name, v in st.params.items():
            tensors["param/" + name] = np.ascontiguousarray(v)
        for name in st.m:
            tensors["adam_m/" + name] = np.ascontiguousarray(st.m[name])
            tensors["adam_v/" + name] = np.ascontiguousarray(st.v[name])
        meta = {"checkpoint": canonical_json({"step": st.step, "fingerprint": self.fingerprint,
                                              "components": self.components})}
        write_bytes_atomic(self.checkpoint_path, save(tensors, metadata=meta))

    def load_checkpoint(self) -> int:
        path = self.checkpoint_path
        meta, tensors = read_checkpoint(path)
        if meta.get("fingerprint") != self.fingerprint:
            old = meta.get("components", {})
            changed = [k for k, v in self.components.items() if old.get(k) != v]
            raise TuneError(f"{path}: the checkpoint belongs to another run: "
                            f"{', '.join(changed) or 'fingerprint'} changed since it was written")
        st = self.state
        if meta["step"] > self.total_steps:
            raise TuneError(f"{path}: the checkpoint is at step {meta['step']}, beyond the run's {self.total_steps} steps")
        expected = {"param/" + n: st.params[n] for n in st.params}
        expected.update({"adam_m/" + n: st.m[n] for n in st.m})
        expected.update({"adam_v/" + n: st.v[n] for n in st.v})
        _check_checkpoint_tensors(path, tensors, expected)
        for name in st.params:
            st.params[name] = tensors["param/" + name].copy()
        for name in st.m:
            st.m[name] = tensors["adam_m/" + name].copy()
            st.v[name] = tensors["adam_v/" + name].copy()
        st.step = meta["step"]
        return st.step

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
        self._trim_metrics(metrics, start)
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
            self._log(metrics, ev)
            emit(ev)
            done_positions = min((step + 1) * s["batch"], n * s["epochs"])
            prev_positions = step * s["batch"]
            epoch_end = done_positions // n > prev_positions // n or step + 1 == self.total_steps
            if self.heldout_pages and epoch_end:
                epoch = done_positions // n  # epochs completed
                scores = self.evaluate()
                ev = Event("epoch", step + 1, self.total_steps, epoch=epoch, scores=scores,
                           seconds=time.monotonic() - t0)
                self._log(metrics, ev)
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

    def _log(self, path: Path, ev: Event) -> None:
        row = {k: v for k, v in ev.__dict__.items() if v is not None}
        if ev.scores is not None:
            row["scores"] = score_summary(ev.scores)
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as e:
            raise (disk_full(path, e) if is_disk_full(e) else e) from None

    @staticmethod
    def _trim_metrics(path: Path, start: int) -> None:
        """On resume keep the lines of the steps already taken; a fresh run starts a new file."""
        if not path.exists():
            return
        keep = [row for row in metrics_rows(path)
                if start > 0 and row.get("step", 0) <= start and row.get("kind") in ("step", "epoch")]
        write_bytes_atomic(path, "".join(json.dumps(row) + "\n" for row in keep).encode())

    # -- scores ----------------------------------------------------------------------------
    def predictions(self, params_rt=None):
        """(page id, Page, PageTargets, PagePrediction) for every held-out page."""
        params_rt = params_rt if params_rt is not None else self.state.params
        out = []
        for pid, page, t in self.heldout_pages:
            out.append((pid, page, t, predict_page(self.cfg, params_rt, page, self.settings["kernels"],
                                                   self.settings["decoding"])))
        return out

    def evaluate(self, params_rt=None) -> dict:
        return score_predictions(list(self.cfg.fields), self.predictions(params_rt),
                                 self.settings["share"], self.settings["min_values"], self.settings["threshold_by"],
                                 self.settings["threshold_rule"])

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
        }
        summary = {"fingerprint": self.fingerprint, **score_summary(report),
                   "steps": self.state.step, "share": report["share"]}
        if started is not None:
            report["run"]["wall_seconds"] = round(time.monotonic() - started, 3)
        rd = self.rundir
        rd.acquire()  # held since train() in the usual order; taken here when finish() comes alone
        try:
            save_model(rd.model_path, self.cfg, self.state.container_params(), summary,
                       thresholds=stored_thresholds(report))
            write_json_atomic(rd.report_path, report)  # last: a report means a finished run
        finally:
            rd.release()
        return report


def _keep_head_rows(model_fields, base_params, fields, weight, bias):
    """A new tag head whose O row and the B-/I- rows of every field the starting model has
    (by its name in the schema now) are the starting model's: adding or removing a field keeps
    what the model learnt of the others. Fields it lacks keep their freshly drawn rows."""
    w = np.array(weight, np.float32, copy=True)
    b = np.array(bias, np.float32, copy=True)
    bw = np.asarray(base_params["tag_head.weight"], np.float32)
    bb = np.asarray(base_params["tag_head.bias"], np.float32)
    if bw.shape[1] != w.shape[1] or not any(f in model_fields for f in fields):
        return w, b
    w[0], b[0] = bw[0], bb[0]
    for c, name in enumerate(fields):
        if name in model_fields:
            g = model_fields.index(name)
            for off in (1, 2):
                w[off + 2 * c], b[off + 2 * c] = bw[off + 2 * g], bb[off + 2 * g]
    return w, b


def score_predictions(fields, preds, share, min_values, by: str = "words", rule: str = "seed") -> dict:
    """score_pages of the held-out pages, with "documents": score_documents of their documents."""
    pages = []
    for pid, page, t, pred in preds:
        prediction = {f: ((v.words, v.confidence) if v is not None else None) for f, v in pred.fields.items()}
        label = {f: tuple(t.field_words.get(f, ())) for f in fields}
        pages.append(HeldOutPage(pid, label, prediction, frozenset(t.unscored), value_matches(page, label, pred)))
    decodings = sorted({pred.decoding for _, _, _, pred in preds})
    if len(decodings) > 1:
        raise TuneError(f"predictions read with different decodings ({', '.join(decodings)}) cannot be scored together")
    report = score_pages(fields, pages, share, min_values, by, rule)
    report["decoding"] = decodings[0] if decodings else None  # how the values were read off the tags
    report["documents"] = score_documents(fields, held_out_documents(fields, preds, pages), share, min_values, by)
    return report


def held_out_documents(fields, preds, held_pages) -> list:
    """HeldOutDocument of the held-out pages grouped by document (documents in the order their
    first page comes, pages in page order), with the document value's value match: the most
    confident page's value against the label's words' text on the page that holds them."""
    from dxstudio.tuning.scoring import HeldOutDocument, document_label, document_value

    by_doc: dict = {}
    for (pid, page, t, pred), hp in zip(preds, held_pages):
        by_doc.setdefault(page.document_id, []).append((page, pred, hp))
    out = []
    for doc_id, members in by_doc.items():
        members.sort(key=lambda m: (m[0].number, m[0].id))
        doc = HeldOutDocument(doc_id, tuple(hp for _, _, hp in members))
        pages_by_id = {page.id: (page, pred) for page, pred, _ in members}
        match = set()
        for f in fields:
            label, value = document_label(doc, f), document_value(doc, f)
            if not label or value is None:
                continue
            lpage = pages_by_id[label[0][0]][0]
            want = value_key(" ".join(lpage.words[i].text for i in sorted(label[0][1])))
            vpage, vpred = pages_by_id[value[0]]
            if want and value_key(vpred.fields[f].text) == want:
                match.add(f)
        out.append(HeldOutDocument(doc_id, doc.pages, frozenset(match)))
    return out


def value_matches(page, label: dict, pred) -> frozenset:
    """Fields whose predicted value equals the label's value after the grounding normalizer
    (grounding.value_key of the words' texts): the same amount read where it is printed again."""
    out = set()
    for f, words in label.items():
        v = pred.fields.get(f)
        if v is None or not words:
            continue
        want = value_key(" ".join(page.words[i].text for i in words))
        if want and value_key(v.text) == want:
            out.add(f)
    return frozenset(out)


def read_checkpoint(path, tensors: bool = True) -> tuple[dict, dict]:
    """(metadata {step, fingerprint, components}, tensors by name) of a run's checkpoint.
    Validated like a model file: a regular file of bounded size, a header read by the
    hardened JSON reader, metadata of the right shape (TuneError otherwise)."""
    from safetensors.numpy import load

    from dxstudio.engine.container import read_model_bytes, _read_header

    path = Path(path)
    if not path.exists():
        raise TuneError(f"{path}: no checkpoint to resume from")
    try:
        data = read_model_bytes(path) if tensors else _header_bytes(path)
        header, _ = _read_header(path, data)
    except ModelFileError as e:
        raise TuneError(f"{path}: not a readable checkpoint ({e.problem})") from None
    meta = header.get("__metadata__")
    try:
        meta = loads_json(meta["checkpoint"])
    except (TypeError, KeyError, JSONInputError) as e:
        raise TuneError(f"{path}: not a readable checkpoint (no valid 'checkpoint' metadata: {e})") from None
    if not isinstance(meta, dict):
        raise TuneError(f"{path}: the checkpoint metadata must be an object, not {type(meta).__name__}")
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TuneError(f"{path}: the checkpoint has no valid step ({str(step)[:40]})")
    if not isinstance(meta.get("fingerprint"), str) or not isinstance(meta.get("components", {}), dict):
        raise TuneError(f"{path}: the checkpoint has no valid fingerprint")
    if not tensors:
        return meta, {}
    try:
        arrays = load(data)
    except Exception as e:  # the library's errors are not one family
        raise TuneError(f"{path}: not a readable checkpoint ({' '.join(str(e).split())[:200]})") from None
    return meta, arrays


def _header_bytes(path: Path) -> bytes:
    """The length field and header of a safetensors file, without reading the tensors (the
    run list asks every run for its step)."""
    import os
    import stat
    import struct

    from dxstudio.engine.container import MAX_HEADER_BYTES

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
        with open(fd, "rb", buffering=0) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ModelFileError(path, "not a regular file (a device, FIFO or socket is never read)")
            os.set_blocking(fd, True)
            head = f.read(8)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                if 0 < n <= MAX_HEADER_BYTES:
                    head += f.read(n)
            return head
    except OSError as e:
        raise ModelFileError(path, f"cannot read ({e.strerror or e})") from None


def _check_checkpoint_tensors(path, tensors: dict, expected: dict) -> None:
    """Every tensor the state needs, float32 of the right shape and finite; nothing else."""
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise TuneError(f"{path}: the checkpoint lacks tensor {missing[0]!r} ({len(missing)} missing)")
    extra = sorted(k for k in tensors if k not in expected)
    if extra:
        raise TuneError(f"{path}: the checkpoint has an unexpected tensor {extra[0]!r}")
    for k, want in expected.items():
        arr = tensors[k]
        if arr.dtype != np.float32:
            raise TuneError(f"{path}: checkpoint tensor {k!r} is {arr.dtype}, expected float32")
        if tuple(arr.shape) != tuple(np.shape(want)):
            raise TuneError(f"{path}: checkpoint tensor {k!r} has shape {tuple(arr.shape)}, "
                            f"expected {tuple(np.shape(want))}")
        if not np.isfinite(arr).all():
            raise TuneError(f"{path}: checkpoint tensor {k!r} has non-finite values")


def metrics_rows(path) -> list[dict]:
    """The rows of a run's metrics.jsonl (one JSON object a line); a line cut by a crash is skipped."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(loads_json(line))
        except JSONInputError:  # a line cut by a crash, or one nobody should trust
            continue
    return rows


def score_summary(report: dict) -> dict:
    """The headline of a scores report: {"fields": {NAME: {recall, agreement, value_recall,
    value_agreement, threshold}}, "threshold"}."""
    return {"fields": {k: {m: v.get(m) for m in ("recall", "agreement", "value_recall", "value_agreement", "threshold")}
                       for k, v in report["fields"].items()},
            "threshold": report.get("threshold")}


def review_state(label_raw: bytes) -> str:
    """The review state ("unreviewed", "accepted", "excluded") in a label file's bytes."""
    try:
        d = loads_json(label_raw) if label_raw else {}
    except JSONInputError:
        return "unreviewed"
    r = d.get("review") if isinstance(d, dict) else None
    return r.get("state", "unreviewed") if isinstance(r, dict) else "unreviewed"


NOT_ACCEPTED = "not accepted in review (the run trains on accepted pages only)"


def accepted_only_filter(pt):
    """The ProjectTargets with the pages a person has not accepted moved to `excluded`."""
    from dxstudio.grounding import ProjectTargets

    kept, excluded = [], list(pt.excluded)
    for row in pt.kept:
        if review_state(pt.sources[row[0]][1]) == "accepted":
            kept.append(row)
        else:
            excluded.append((row[0], NOT_ACCEPTED))
    return ProjectTargets(kept, excluded, pt.errors, {r[0]: pt.sources[r[0]] for r in kept}, pt.left_out)


def snapshot_targets(project, snapshot: dict, max_words: int, source, repeats: str = "o") -> "ProjectTargets":
    """The targets of a run's snapshot (targets.json): its label bytes over the project's pages."""
    from dxstudio.engine.page import PageError
    from dxstudio.fsutil import parse_json
    from dxstudio.grounding import Excluded, ProjectTargets, page_targets
    from dxstudio.project import LabelError, label_from_dict

    from dxstudio.grounding import left_out_fields

    kept, excluded, errors, sources = [], [], [], {}
    read = []
    for pid, text in snapshot["labels"].items():
        raw = text.encode("utf-8")
        try:
            page, page_raw = project.read_page(pid)
            labels = label_from_dict(parse_json(raw, f"{source} ({pid})", LabelError), f"{source} ({pid})", pid)
        except (PageError, LabelError, ValueError) as e:
            errors.append((pid, str(e)))
            continue
        read.append((pid, raw, page, page_raw, labels))
    left_out = left_out_fields([r[4] for r in read], project.field_names)
    for pid, raw, page, page_raw, labels in read:
        try:
            t = page_targets(page, labels, project.field_names, max_words, repeats, leave_out=left_out)
        except (PageError, LabelError, ValueError) as e:
            errors.append((pid, str(e)))
            continue
        if isinstance(t, Excluded):
            excluded.append((pid, t.reason))
        else:
            kept.append((pid, page, t))
            sources[pid] = (page_raw, raw)
    excluded += [tuple(e) for e in snapshot.get("excluded", [])]
    errors += [tuple(e) for e in snapshot.get("unreadable", [])]
    return ProjectTargets(kept, excluded, errors, sources, left_out)


def usable_split(project, settings: dict, max_words: int, purpose: str, fold: tuple | None = None, pt=None):
    """(ProjectTargets, training rows, held-out rows) of the project's usable pages, each row
    (id, Page, PageTargets), split by the settings' seed and held-out fraction; with fold
    (k, K) the held-out rows are every K-th page of the hash order from position k
    (schedule.fold_split), with (None, K) every page trains and none is held out. With the
    setting accepted_only, only the pages a person accepted are usable. `pt`: targets already
    read (a run's snapshot); default: the project's label files now."""
    pt = pt if pt is not None else project_targets(project, max_words=max_words, repeats=settings.get("repeats", "o"))
    if settings.get("accepted_only"):
        pt = accepted_only_filter(pt)
    pt = _document_problems(pt)
    by_id = {pid: (pid, page, t) for pid, page, t in pt.kept}
    if len(by_id) < 2:
        accepted = " with accepted_only (accept pages in Review, or turn the setting off)" \
            if settings.get("accepted_only") else ""
        raise TuneError(
            f"{project.root}: {len(by_id)} usable page(s){accepted}; {purpose} needs at least 2 "
            f"(one to train on, one held out). Excluded: {len(pt.excluded)}, unreadable: {len(pt.errors)}")
    # a document's pages stay together: the split hashes document ids (a page of its own: its id)
    documents = {}
    for pid, page, _ in sorted(pt.kept, key=lambda r: (r[1].document_id, r[1].number, r[0])):
        documents.setdefault(page.document_id, []).append(pid)
    if len(documents) < 2:
        raise TuneError(f"{project.root}: the {len(by_id)} usable pages are all of document "
                        f"{next(iter(documents))}; {purpose} needs at least 2 documents (one to train on, "
                        f"one held out: a document's pages are never split between the two)")
    if fold is None:
        train_ids, held_ids = schedule.split_documents(documents, settings["seed"], settings["heldout_fraction"])
    else:
        k, n_folds = fold
        check_folds(n_folds, len(documents), project)
        if k is None:
            train_ids, held_ids = schedule.document_pages_order(documents, settings["seed"]), []
        else:
            train_ids, held_ids = schedule.fold_split_documents(documents, settings["seed"], n_folds, k)
    return pt, [by_id[i] for i in train_ids], [by_id[i] for i in held_ids]


def _document_problems(pt):
    """The targets without the pages of documents that have a problem (two pages with one
    number, an id that is also a page's own): those pages move to `excluded` with the problem."""
    from dxstudio.documents import group_documents
    from dxstudio.grounding import ProjectTargets

    docs = group_documents([page for _, page, _ in pt.kept])
    if not docs.problems:
        return pt
    why = dict(docs.problems)
    kept = [r for r in pt.kept if r[0] in docs.of_page]
    moved = [(pid, why.get(page.document_id) or why.get(pid, "document problem")) for pid, page, _ in pt.kept
             if pid not in docs.of_page]
    return ProjectTargets(kept, pt.excluded + moved, pt.errors, {k: v for k, v in pt.sources.items()
                                                                  if k in docs.of_page})


def check_folds(n_folds, n_usable: int, project=None) -> int:
    """K folds need 2 <= K <= the usable pages (each fold holds out at least one page)."""
    where = f"{project.root}: " if project is not None else ""
    if isinstance(n_folds, bool) or not isinstance(n_folds, int) or n_folds < 2:
        raise TuneError(f"{where}--folds must be an integer >= 2, not {n_folds!r}")
    if n_folds > n_usable:
        raise TuneError(f"{where}--folds {n_folds} is more than the {n_usable} usable pages "
                        f"(each fold holds out at least one page)")
    return n_folds


def stored_thresholds(report: dict) -> dict:
    """The thresholds a tuned model file carries (container.py "thresholds"): the pooled one
    and each field's, with the share and min_values they were found with."""
    return {"pooled": report.get("threshold"),
            "fields": {name: f.get("threshold") for name, f in report["fields"].items()},
            "share": report.get("share"), "min_values": report.get("min_values"),
            "by": report.get("threshold_by", "words"), "rule": report.get("threshold_rule", "seed"),
            "decoding": report.get("decoding") or DEFAULT_DECODING}


def evaluate_model(model_path, project, out_path=None, overrides: dict | None = None,
                   all_pages: bool = False) -> dict:
    """`dxstudio eval`: the same report for any model, on the project's held-out pages, or with
    all_pages on every usable page (a separate test project, no split). The report's `stored`
    says how the model's stored thresholds do on these pages (at_stored_thresholds)."""
    try:
        loaded = load_model(model_path)
    except ModelFileError as e:
        raise TuneError(str(e)) from None
    if project.model_field_names(loaded.cfg.fields) != project.field_names:
        raise TuneError(f"{model_path}: the model's fields {list(loaded.cfg.fields)} are not the "
                        f"project's schema {project.field_names} ({project.project_file})")
    settings = resolve_settings(project.settings, overrides)
    cfg = loaded.cfg.with_fields(project.field_names)  # renamed fields under their names now
    _, train, held = usable_split(project, settings, cfg.max_words, "evaluation")
    if all_pages:
        rows = {r[0]: r for r in train + held}
        held = [rows[i] for i in schedule.hash_order(list(rows), settings["seed"])]
    from dxstudio.engine.model import to_runtime

    params = to_runtime(loaded.params)
    # the model's own reading (the one its thresholds were found with) unless --decoding says otherwise
    decoding = (overrides or {}).get("decoding") or model_decoding(loaded.thresholds)
    preds = [(pid, page, t, predict_page(cfg, params, page, settings["kernels"], decoding))
             for pid, page, t in held]
    by = (loaded.thresholds or {}).get("by") or settings["threshold_by"]  # the model's own rule
    report = score_predictions(list(cfg.fields), preds, settings["share"], settings["min_values"], by,
                               settings["threshold_rule"])
    report["stored"] = at_stored_thresholds(report, loaded.thresholds)
    report["documents"]["stored"] = at_stored_thresholds(report["documents"], loaded.thresholds)
    from dxstudio.tuning.localfirst import verdicts

    # does the model's promise hold on these pages (eval --all on pages of a person's own)?
    report["stored"]["verdicts"] = {k: {"holds": v.holds, "text": v.text} for k, v in verdicts(report).items()}
    report["run"] = {"model": str(model_path), "heldout_pages": len(held),
                     "pages": "all usable pages" if all_pages else "the held-out pages of the split"}
    if out_path is not None:
        write_json_atomic(out_path, report)
    return report


def training_breakdown(project, accepted_only: bool = False) -> dict:
    """What a run would train on, in the words of the Train tab: counts of the pages that train
    (accepted; fixed but not accepted; unreviewed whose values were found on the page) and of
    those left out (excluded by a person; with conflicts; not labelled yet; not accepted, with
    accepted_only; unreadable). "usable": the pages split into training and held-out pages."""
    pt = project_targets(project)
    c = dict.fromkeys(("accepted", "fixed", "unreviewed", "excluded", "conflicts", "not_labelled",
                       "not_accepted", "unreadable"), 0)
    for pid, _, _ in pt.kept:
        raw = pt.sources[pid][1]
        state = review_state(raw)
        if state == "accepted":
            c["accepted"] += 1
            continue
        try:
            d = loads_json(raw)
            fixed = bool(d.get("review", {}).get("fixes"))
        except (JSONInputError, AttributeError):
            fixed = False
        if accepted_only:
            c["not_accepted"] += 1
        else:
            c["fixed" if fixed else "unreviewed"] += 1
    for pid, reason in pt.excluded:
        if reason == "not labelled yet":
            c["not_labelled"] += 1
        else:
            raw = b""
            try:
                raw = project.label_path(pid).read_bytes()
            except OSError:
                pass
            c["excluded" if review_state(raw) == "excluded" else "conflicts"] += 1
    c["unreadable"] = len(pt.errors)
    c["usable"] = c["accepted"] + c["fixed"] + c["unreviewed"]
    c["left_out"] = dict(pt.left_out)  # {field: pages where not asked}: left out of training and scoring
    return c


def at_stored_thresholds(report: dict, thresholds: dict | None) -> dict:
    """Precision and coverage at a model's stored thresholds on the pages of `report`: per field
    (its own threshold; a field without one routes every value ask, the pooled threshold is never
    used for it) and pooled (every value routed by its field's threshold, as `dxstudio extract`
    does). {"thresholds", "fields": {NAME: {...}}, "pooled": {...}}
    with values, right, precision, precision_lower, value_precision, value_precision_lower,
    coverage, threshold, bound_statement; a model without thresholds answers nothing locally."""
    from dxstudio.engine.extract import field_threshold
    from dxstudio.tuning.scoring import bound_statement, clopper_pearson_lower

    by = (thresholds or {}).get("by") or "words"

    def figures(rows, t, where=None):
        above = [r for r in rows if r[3] is not None and r[0] >= r[3]]
        n, vright = len(above), sum(r[2] for r in above)
        right = vright if by == "value" else sum(r[1] for r in above)
        lower = clopper_pearson_lower(right, n) if n else None
        return {"threshold": t, "values": n, "right": right,
                "precision": right / n if n else None, "precision_lower": lower,
                "value_precision": vright / n if n else None,
                "value_precision_lower": clopper_pearson_lower(vright, n) if n else None,
                "coverage": n / len(rows) if rows else None,
                "bound_statement": bound_statement(n, right, t or 0.0, lower, where=where) if n else
                "The model stores no LocalFirst threshold, so no values are answered locally." if not thresholds
                else "No threshold of its own, so every value is asked." if t is None and where is None
                else "No field has a threshold of its own, so every value is asked."
                if where is not None and not any(v is not None for v in (thresholds.get("fields") or {}).values())
                else "No value on these pages clears the stored threshold."}

    out, pooled_rows = {"thresholds": thresholds, "by": by, "fields": {}}, []
    for name, f in report["fields"].items():
        t = field_threshold(name, thresholds)
        rows = [(c, ok, vok, t) for c, ok, vok in f["confidences"]]
        pooled_rows += rows
        out["fields"][name] = figures(rows, t)
    out["pooled"] = figures(pooled_rows, thresholds.get("pooled") if thresholds else None,
                            "at or above their field's threshold")
    return out
