"""Pretraining the docextract-v0 base: every head the seed names, on a corpus of labelled
documents whose fields are mapped onto the generic classes (dxstudio.corpus).

    run = PretrainRun.prepare(["../shared/data/cord-v1-train", "synthetic:2000"], run_dir, {"steps": 500})
    run.train(on_event=print)          # checkpoint every N steps and when stopped; resume=True continues
    summary = run.finish()             # model.safetensors (the base) + report.json

The training rules are fine-tuning's (dxstudio.engine.training.train_step): loss terms in
binary64, the batch gradient summed in example order whatever the degree, AdamW with
per-tensor scales, and a checkpoint tied by a SHA-256 fingerprint to the starting model, the
corpus (every converted document) and the settings, so a resumed run ends with the bytes of
an uninterrupted one. docs/base-model.md.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from dxstudio.corpus.document import CorpusError, corpus_digest, doc_targets, doc_windows
from dxstudio.corpus.generic import GENERIC_FIELDS
from dxstudio.corpus.sources import read_source
from dxstudio.engine.config import size_config
from dxstudio.engine.container import canonical_json, model_bytes, save_model
from dxstudio.engine.inputs import window_inputs
from dxstudio.engine.params import new_params
from dxstudio.engine.training import Example, TrainSettings, TrainState, train_step
from dxstudio.fsutil import write_json_atomic
from dxstudio.tuning import checkpoint, schedule
from dxstudio.tuning.metrics import Event, append_metric, trim_metrics
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.settings import TuneError, defaults, not_fingerprinted, resolve_settings

# The settings are the table's rows of the command pretrain (tuning/settings.py)
DEFAULTS = defaults("pretrain")
NOT_FINGERPRINTED = not_fingerprinted("pretrain")
LOSSES = ("loss_tag", "loss_role", "loss_doc", "loss_items", "loss_kv")


def resolve(overrides: dict | None) -> dict:
    """The pretraining settings: the defaults, then the overrides, each checked (TuneError)."""
    return resolve_settings(None, overrides, command="pretrain")


@dataclass
class PretrainRun(checkpoint.CheckpointedRun):
    run_dir: Path
    settings: dict
    cfg: object
    start_params: OrderedDict
    docs: list  # CorpusDocs in corpus order
    windows: list  # (doc index, start, stop) in corpus order: the schedule's "pages"
    sources: list  # SourceReport.to_dict() of each spec
    errors: list = field(default_factory=list)  # (file, message) of every file left out
    components: dict = field(default_factory=dict)
    fingerprint: str = ""
    state: TrainState | None = None
    total_steps: int = 0
    epochs: int = 1
    runner: object = None  # optional per-example gradient runner (TrainState.runner), e.g. on Ray

    @classmethod
    def prepare(cls, specs, run_dir, overrides: dict | None = None, progress=None) -> "PretrainRun":
        s = resolve(overrides)
        if not specs:
            raise TuneError("name at least one corpus source (a folder, or synthetic:COUNT)")
        cfg = size_config(s["size"], GENERIC_FIELDS, input_layout=s["input_layout"])
        if s["window"] > cfg.max_words:
            raise TuneError(f"setting window {s['window']} is more than the model's {cfg.max_words} words")
        docs, sources, errors = [], [], []
        for spec in specs:
            try:
                rep = read_source(str(spec), progress)
            except CorpusError as e:
                raise TuneError(str(e)) from None
            if s["limit"] is not None:
                rep.docs = rep.docs[: s["limit"]]
            docs.extend(rep.docs)
            errors.extend(rep.errors)
            sources.append(rep.to_dict())
        if not docs:
            raise TuneError("the corpus has no usable document")
        windows = [(k, a, b) for k, d in enumerate(docs) for a, b in doc_windows(d, s["window"])]
        params = new_params(cfg, s["seed"])
        run = cls(Path(run_dir), s, cfg, params, docs, windows, sources, errors)
        n = len(windows)
        if s["steps"] is not None:
            run.total_steps = s["steps"]
            run.epochs = max(1, -(-s["steps"] * s["batch"] // n))
        else:
            run.epochs = s["epochs"]
            run.total_steps = schedule.total_steps(n, s["batch"], s["epochs"])
        run._fingerprint()
        return run

    def _fingerprint(self) -> None:
        s = {k: v for k, v in self.settings.items() if k not in NOT_FINGERPRINTED}
        self.components = {
            "starting model": checkpoint.sha256_hex(model_bytes(self.cfg, self.start_params)),
            "corpus": corpus_digest(self.docs),
            "settings": checkpoint.sha256_hex(canonical_json(s).encode()),
        }
        self.fingerprint = checkpoint.fingerprint(self.components)

    def train_settings(self) -> TrainSettings:
        s = self.settings
        weights = tuple(float(w) for w in schedule.class_weights(len(self.cfg.fields), float(s["field_weight"])))
        return TrainSettings(backbone_scale=1.0, loss_tag=float(s["loss_tag"]), loss_role=float(s["loss_role"]),
                             loss_doc=float(s["loss_doc"]), loss_items=float(s["loss_items"]),
                             loss_kv=float(s["loss_kv"]), tag_class_weights=weights,
                             weight_decay=float(s["weight_decay"]), clip=s["clip"], degree=s["degree"],
                             kernels=s["kernels"])

    def example(self, w: int) -> Example:
        k, a, b = self.windows[w]
        doc = self.docs[k]
        return Example(window_inputs(doc.page, self.cfg, a, b), doc_targets(doc, self.cfg, a, b))

    # -- checkpoints (checkpoint.py) -------------------------------------------------------
    @property
    def rundir(self) -> RunDir:
        return RunDir(self.run_dir)

    # checkpoint_path, save_checkpoint, load_checkpoint: checkpoint.CheckpointedRun

    # -- training -------------------------------------------------------------------------
    def start_state(self, resume: bool = False) -> int:
        self.state = TrainState.start(self.cfg, self.start_params, self.train_settings())
        self.state.runner = self.runner
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.rundir.settings_path, {
            "settings": self.settings, "fingerprint": self.fingerprint, "components": self.components,
            "fields": list(self.cfg.fields), "sources": self.sources, "windows": len(self.windows),
            "total_steps": self.total_steps})
        return self.load_checkpoint() if resume else 0

    def train(self, on_event=None, cancel: threading.Event | None = None, stop_after: int | None = None,
              resume: bool = False) -> bool:
        """Steps until the end, a cancel or `stop_after` steps in all; True when finished."""
        emit = on_event or (lambda e: None)
        start = self.start_state(resume)
        s = self.settings
        n = len(self.windows)
        metrics = self.rundir.metrics_path
        trim_metrics(metrics, start)
        t0 = time.monotonic()
        for step in range(start, self.total_steps):
            if (cancel is not None and cancel.is_set()) or (stop_after is not None and step >= stop_after):
                self.save_checkpoint()
                emit(Event("cancelled", step, self.total_steps))
                return False
            idx = schedule.batch_for_step(n, s["seed"], s["batch"], self.epochs, step)
            lr = schedule.learning_rate(step, self.total_steps, s["warmup"], float(s["lr"]))
            res = train_step(self.state, [self.example(i) for i in idx], lr)
            ev = Event("step", step + 1, self.total_steps, loss=res.loss, lr=lr, seconds=time.monotonic() - t0)
            append_metric(metrics, ev)
            emit(ev)
            if (step + 1) % s["checkpoint_every"] == 0 and step + 1 < self.total_steps:
                self.save_checkpoint()
                emit(Event("checkpoint", step + 1, self.total_steps))
        self.save_checkpoint()
        emit(Event("done", self.total_steps, self.total_steps))
        return True

    def finish(self, started: float | None = None) -> dict:
        """Write model.safetensors (the base: generic fields, every head) and report.json."""
        rd = self.rundir
        rows = [r for r in rd.metrics() if r.get("kind") == "step"]
        tail = [r["loss"] for r in rows[-50:]]
        summary = {"base": True, "fingerprint": self.fingerprint, "steps": self.state.step,
                   "windows": len(self.windows), "documents": len(self.docs),
                   "final_loss": round(sum(tail) / len(tail), 6) if tail else None}
        save_model(rd.model_path, self.cfg, self.state.container_params(), summary)
        model_sha = checkpoint.sha256_hex(rd.model_path.read_bytes())
        report = {"model": str(rd.model_path), "sha256": model_sha, **summary,
                  "first_loss": rows[0]["loss"] if rows else None, "settings": self.settings,
                  "components": self.components, "sources": self.sources,
                  "errors": [{"file": f, "error": m} for f, m in self.errors]}
        if started is not None:
            report["wall_seconds"] = round(time.monotonic() - started, 3)
        write_json_atomic(rd.report_path, report)
        return report
