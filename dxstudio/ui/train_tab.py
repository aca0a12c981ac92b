"""The Train tab: one front end of dxstudio.tuning, not a copy of it.

TrainingPanel(project_root, parent=None)
    The settings form (defaults: dxstudio.tuning.DEFAULTS, then the project's saved settings),
    one "Fine-tune" button, live pyqtgraph plots of the loss per step and of each field's
    held-out agreement per epoch, a progress bar with the time left, Cancel and Resume.
    Signals: finished(report: dict, run_dir: str) when a run ends with its model written;
    stopped(run_dir: str, step: int, total: int) when a run stops early with its checkpoint;
    failed(message: str) when a run cannot start or go on.
    Public: fine_tune(extra_overrides=None) -> Path, cancel(), resume(run_dir=None) -> Path,
    shutdown(timeout=120.0) -> bool, wait(timeout) -> bool, is_running, settings_values() -> dict,
    set_settings(values), restore_defaults(), save_settings() -> dict.

The Results tab (a finished run's scores) is dxstudio/ui/results_tab.py.

Threads: prepare_run (a TuneRun, or a FoldedRun with folds) then .train/.finish run as a dxstudio.ui.jobs.Job (the Schema tab's
labelling uses the same): the work never touches a widget, every event crosses to the GUI
thread as a queued Qt signal. Cancel sets the job's threading.Event; the trainer sees it
before its next step, writes the checkpoint and returns, so Resume (TuneRun.train(resume=True) on the same run
folder) ends with the bytes of an uninterrupted run.
"""
from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRect, Qt, QTimer, Signal
from PySide6 import QtGui
from PySide6.QtGui import QTextDocument, QTextOption
from PySide6.QtWidgets import (QApplication, QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox,
                               QHBoxLayout, QLabel, QMessageBox, QProgressBar, QPushButton, QSpinBox, QVBoxLayout,
                               QWidget)

from dxstudio.engine import readiness
from dxstudio.grounding import left_out_note
from dxstudio.project import PROJECT_FILE, Project
from dxstudio.review import flush_label_writes
from dxstudio.tuning import DEFAULTS, FORM_SETTINGS, TuneError, prepare_run, resolve_settings
from dxstudio.tuning.localfirst import folds_plan
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.pages import training_breakdown
from dxstudio.tuning.run import BASE_MODEL
from dxstudio.tuning.settings import BY_NAME
from dxstudio.ui.jobs import Job
from dxstudio.ui.page_view import field_colours
from dxstudio.ui.worker_process import PROCESS, training_breakdown_at
pg.setConfigOptions(antialias=True, background="w", foreground="k")

# The settings a person may change in the form: the rows of dxstudio.tuning.settings with a
# label. The others (share, min_values, clip, weight decay, kernels, checkpoint_every) stay as
# the project says.

class CachedAxis(pg.AxisItem):
    """An axis drawn once into a pixmap of its own and blitted on every paint until it changes.

    pyqtgraph keeps an axis's drawing as a QPicture (its ticks, numbers and grid lines) and
    replays it on every paint: 5-12 ms an axis at 1920x1080, four axes on the Train tab, every
    time the tab is shown. Qt's DeviceCoordinateCache, tried before, did not survive the tab
    being hidden (the tab's shows still replayed all four). Here the replayed pixels are kept
    on the item, keyed by the picture (pyqtgraph makes a new one when the range, the ticks or
    the size change) and where the item lands on the screen (its scale and its offset within
    a pixel, the screen's pixel ratio): a show with nothing changed only draws four pixmaps.
    `renders` counts the times the picture was replayed into the pixmap, `paints` the paints
    (the tests read them)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pixmap = None
        self._pixmap_key = None
        self._pixmap_picture = None
        self.renders = 0
        self.paints = 0

    def paint(self, p, opt, widget):
        from PySide6.QtGui import QPainter, QPixmap, QTransform

        self.paints += 1
        t = p.worldTransform()
        if t.type().value > QTransform.TransformationType.TxScale.value:  # (rotated: never here) no cache
            self.renders += 1
            return super().paint(p, opt, widget)
        dev = t.mapRect(self.boundingRect())
        x0, y0 = math.floor(dev.left()), math.floor(dev.top())
        w, h = math.ceil(dev.right()) - x0 + 1, math.ceil(dev.bottom()) - y0 + 1
        if w <= 0 or h <= 0 or w * h > 16_000_000:
            self.renders += 1
            return super().paint(p, opt, widget)
        # (the widget's ratio: p.device()'s wrapper, once collected, took the viewport with it)
        ratio = widget.devicePixelRatioF() if widget is not None else 1.0
        key = (w, h, round(t.m11(), 6), round(t.m22(), 6), round(t.dx() - x0, 4), round(t.dy() - y0, 4), ratio)
        if self._pixmap is None or self.picture is None or self.picture is not self._pixmap_picture \
                or key != self._pixmap_key:
            pix = QPixmap(max(1, round(w * ratio)), max(1, round(h * ratio)))
            pix.setDevicePixelRatio(ratio)
            pix.fill(Qt.GlobalColor.transparent)
            q = QPainter(pix)
            q.setRenderHints(p.renderHints())
            q.setTransform(t * QTransform.fromTranslate(-x0, -y0))
            super().paint(q, opt, widget)  # (makes the picture when pyqtgraph dropped it)
            q.end()
            self.renders += 1
            self._pixmap, self._pixmap_key, self._pixmap_picture = pix, key, self.picture
        p.save()
        p.resetTransform()
        p.drawPixmap(x0, y0, self._pixmap)
        p.restore()


class WholeNumberAxis(CachedAxis):
    """An axis of steps or epochs: ticks only at whole numbers (no "epoch 1.5")."""

    def tickSpacing(self, minVal, maxVal, size):
        levels = [(max(1.0, spacing), offset) for spacing, offset in super().tickSpacing(minVal, maxVal, size)]
        kept = []
        for level in levels:  # the minor levels below 1 all became 1: keep one of them
            if level[0] not in (k[0] for k in kept):
                kept.append(level)
        return kept


ROOM_WIDTHS = 8  # the widths a RoomyLabel keeps its measures for: a window is laid out at a few


def _keep_room(rooms: dict, width: int, height: int) -> None:
    """rooms[width] = height, the most recently set ROOM_WIDTHS widths kept (the oldest goes)."""
    rooms.pop(width, None)
    if len(rooms) >= ROOM_WIDTHS:
        rooms.pop(next(iter(rooms)))
    rooms[width] = height


class RoomyLabel(QLabel):
    """A word-wrapped label whose room never shrinks while its width stays: the Train tab's
    lines above the plots change with every count (a page reviewed, a field added), and a
    line more or less resized both plots, whose axes are then drawn anew (their cache is per
    size): 20-40 ms of the GUI thread for a new number. `lines` are reserved from the start."""

    def __init__(self, text: str = "", lines: int = 1, parent=None):
        super().__init__(text, parent)
        self.setWordWrap(True)
        self._lines = lines
        # width -> the tallest height a text needed there: kept per width, since a layout asks at
        # other widths in between (a hidden tab's, a measure's), and one kept room lost its height
        # to them: the lines above the plots shrank 3 px at a show, every axis drawn anew (50-60 ms)
        self._rooms: dict = {}
        self._alternatives: tuple = ()  # texts it may show next (set_alternatives): their room is kept too
        self._alt_room: dict = {}  # width -> the tallest of them there
        self._alt_docs: tuple | None = None  # (font, the rich alternatives laid out as QLabel lays them out)
        self._measure: QLabel | None = None

    def set_alternatives(self, texts) -> None:
        """Texts the label may show next (the Folds line for every choice of Folds): its room
        is the tallest of them at its width, so choosing another never moves what is below."""
        texts = tuple(texts)
        if texts != self._alternatives:
            self._alternatives, self._alt_room, self._alt_docs = texts, {}, None
            self.updateGeometry()

    def _alternatives_height(self, width: int) -> int:
        if not self._alternatives:
            return 0
        if width not in self._alt_room and self._fast_measure_applies():
            _keep_room(self._alt_room, width, self._rich_alternatives_height(width))
        if width not in self._alt_room:
            if self._measure is None:  # a label never shown, laid out as this one is (its child:
                self._measure = QLabel(self)  # it goes with it, never collected on its own)
                self._measure.setWordWrap(True)
                self._measure.hide()
            m = self._measure
            m.setFont(self.font())
            m.setTextFormat(self.textFormat())
            m.setContentsMargins(self.contentsMargins())
            m.setMargin(self.margin())
            m.setIndent(self.indent())
            heights = []
            for text in self._alternatives:
                m.setText(text)
                heights.append(m.heightForWidth(width))
            # (a layout asks at a few widths in one pass: one kept measured all 14 texts 2-3 times a show)
            _keep_room(self._alt_room, width, max(heights))
        return self._alt_room[width]

    def _fast_measure_applies(self) -> bool:
        """The alternatives are rich text and the label has none of what QLabel adds to a rich
        text's height beside its margins (an indent, a frame, a minimum width)."""
        rich = self.textFormat() == Qt.TextFormat.RichText or (
            self.textFormat() == Qt.TextFormat.AutoText and all(QtGui.Qt.mightBeRichText(t) for t in self._alternatives))
        return rich and self.indent() <= 0 and self.frameWidth() == 0 and self.minimumWidth() == 0

    def _rich_alternatives_height(self, width: int) -> int:
        """The tallest alternative at this width, as QLabel.heightForWidth gives it (its rich text
        is a QTextDocument with no margin, wrapped at words, at the width less the label's
        margins, its height rounded up), from documents parsed once per set of texts and only
        laid out again per width: 0.75 ms a width for the 14 Folds lines, where setting each
        text on a measuring QLabel and asking it took 5.5 ms (and the Train tab's label was
        asked at 4-6 new widths after each count, inside the show of the Review tab too, as
        a QStackedLayout asks every tab's height: 33 ms of one show at 1920x1080)."""
        font = self.font()
        if self._alt_docs is None or self._alt_docs[0] != font:
            option = QTextOption()
            option.setWrapMode(QTextOption.WrapMode.WordWrap)
            docs = []
            for text in self._alternatives:
                doc = QTextDocument()
                doc.setDefaultFont(font)
                doc.setDocumentMargin(0)
                doc.setDefaultTextOption(option)
                doc.setHtml(text)
                docs.append(doc)
            self._alt_docs = (font, docs)
        m = self.contentsMargins()
        inner = max(width - 2 * self.margin() - m.left() - m.right(), 0)
        tallest = 0
        for doc in self._alt_docs[1]:
            doc.setTextWidth(inner)
            tallest = max(tallest, math.ceil(doc.size().height()))
        return tallest + 2 * self.margin() + m.top() + m.bottom()

    def heightForWidth(self, width: int) -> int:
        h = max(super().heightForWidth(width), self.fontMetrics().lineSpacing() * self._lines,
                self._alternatives_height(width))
        h = max(h, self._rooms.get(width, 0))
        _keep_room(self._rooms, width, h)
        return h

    def minimumSizeHint(self):
        size = super().minimumSizeHint()
        size.setHeight(max(size.height(), self.fontMetrics().lineSpacing() * self._lines))
        return size


def breakdown_text(c: dict, accepted_only: bool, heldout_fraction=None) -> str:
    """The Train tab's sentence of what trains and what is left out."""
    def n(k, word):
        return f"{c[k]} {word}"
    if accepted_only:
        trains = f"<b>Trains on {c['usable']} page{'s' if c['usable'] != 1 else ''}</b>: the {n('accepted', 'accepted in Review')} only"
    else:
        trains = (f"<b>Trains on {c['usable']} page{'s' if c['usable'] != 1 else ''}</b>: "
                  f"{n('accepted', 'accepted')}, {n('fixed', 'fixed but not accepted')}, "
                  f"{n('unreviewed', 'unreviewed')} whose values the labelling model's answers found on the page")
    out = [f"{n('excluded', 'excluded')} in Review", f"{n('conflicts', 'with conflicts')}",
           f"{n('not_labelled', 'not labelled yet')}"]
    if accepted_only:
        out.append(n("not_accepted", "not accepted"))
    if c.get("unreadable"):
        out.append(n("unreadable", "unreadable"))
    held = f" A share of {heldout_fraction:g} of them is held out to score the model." if heldout_fraction else ""
    text = f"{trains}.{held} Left out: {', '.join(out)}."
    if c.get("left_out"):
        text += f" <span style='color:#9a3412'>{left_out_note(c['left_out'])}</span>"
    return text


def starting_model_text(project, values: dict) -> str:
    """What a run started now starts from, as TuneRun.prepare picks it: the project's model
    (Runs > Use this model), else the shipped base model or a new one, as Start from says."""
    m = project.model
    if m is not None:
        try:
            shown = m.resolve().relative_to(project.root.resolve())
        except (ValueError, OSError):
            shown = m
        if not m.is_file():
            return (f"<b>Starts from</b>: the project's model {shown}, which is missing: the run will not start "
                    f"(choose another in Runs)")
        return (f"<b>Starts from</b>: the project's model, {shown} (chosen in Runs); Start from applies only "
                f"when the project has no model")
    if values.get("start", "base") == "base" and values.get("size", "base") == "base":
        if not BASE_MODEL.is_file():
            return (f"<b>Starts from</b>: the shipped base model, which is missing ({BASE_MODEL}): the run "
                    f"will not start (reinstall dxstudio, or set Start from to new)")
        return "<b>Starts from</b>: the shipped base model (docs/base-model.md)"
    size = values.get("size", "base")
    if values.get("start", "base") == "base":  # the shipped base is of the base size alone
        return (f"<b>Starts from</b>: a new {size} model (random weights): the shipped base model is of the base "
                f"size, so Start from base applies only with New model size base")
    return f"<b>Starts from</b>: a new {size} model (random weights)"


def run_start_text(starting_model: str | None, project_root=None) -> str:
    """A run's starting model (settings.json "starting_model") in short, for Runs."""
    if not starting_model:
        return "?"
    if starting_model.startswith("new "):
        return starting_model.split(",")[0]
    p = Path(starting_model)
    try:
        if p.resolve() == BASE_MODEL.resolve():
            return "base model"
    except OSError:
        pass
    if project_root is not None:
        try:
            rel = p.resolve().relative_to(Path(project_root).resolve())
            return f"run {rel.parent.name}" if rel.name == "model.safetensors" and len(rel.parts) == 3 else str(rel)
        except (ValueError, OSError):
            pass
    return p.name


def format_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "estimating..."
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {(seconds % 3600) // 60:02d} min"


def unfinished_run(runs_dir: Path) -> Path | None:
    """The newest run folder with a checkpoint but no report: a run that can be resumed."""
    rd = RunDir.unfinished(runs_dir)
    return rd.path if rd is not None else None


def checkpoint_step(run_dir: Path) -> int | None:
    """The step a run's checkpoint holds, or None when it has no readable one."""
    return RunDir(run_dir).checkpoint_step()


def read_metrics(run_dir: Path, up_to_step: int | None = None):
    """(steps, losses, epochs) from a run's metrics.jsonl; epochs: [(epoch, {field: agreement})].
    A cross-validated run's rows are in its parts' folders: read in turn and numbered as the
    run reports them live (steps on across the parts, fold k's epoch e as k * epochs + e)."""
    rd = RunDir(run_dir)
    try:
        info = rd.read_settings()
    except TuneError:
        info = {}
    parts = info.get("parts") if isinstance(info.get("parts"), list) else None
    if not parts:
        return _metric_lists([(rd, 0, 0)], up_to_step)
    per_fold = int((info.get("settings") or {}).get("epochs") or 0)
    sources, offset = [], 0
    for index, rel in enumerate(parts):
        part = RunDir(rd.path / rel)
        sources.append((part, offset, index * per_fold))
        try:
            offset += int(part.read_settings().get("total_steps") or 0)
        except (TuneError, ValueError):
            pass
    return _metric_lists(sources, None)  # (parts side by side stop at steps of their own: all rows kept)


def _metric_lists(sources, up_to_step):
    steps, losses, epochs = [], [], []
    for rd, step_offset, epoch_offset in sources:
        for row in rd.metrics():
            step = row.get("step", 0) + step_offset
            if up_to_step is not None and step > up_to_step:
                continue
            if row.get("kind") == "step" and row.get("loss") is not None:
                steps.append(step)
                losses.append(row["loss"])
            elif row.get("kind") == "epoch" and row.get("scores"):
                epoch = row.get("epoch")
                epochs.append((None if epoch is None else epoch + epoch_offset,
                               {k: v.get("agreement") for k, v in row["scores"]["fields"].items()}))
    return steps, losses, epochs


# ---------------------------------------------------------------------------------------
# The work (on the job's thread; never touches a widget)

@dataclass
class Prepared:
    """What the run will do, reported before its first step."""
    run_dir: str
    total: int
    start: int
    train: int
    heldout: int
    excluded: int
    unreadable: list
    fields: list
    source: str
    folds: int | None = None  # a cross-validated run's K
    epochs: int | None = None  # the epochs of each fold (a folded run counts its epochs on across the folds)
    left_out: dict | None = None  # fields not asked yet on some page: not trained, not scored {name: pages}


@dataclass
class CountsAtFailure:
    """What a run started now trains on (training_breakdown), counted by a run that failed, just
    before it says so: its error is about these counts, and goes as stale once they change.
    counts is None when they could not be counted."""
    counts: dict | None
    accepted_only: bool


@dataclass(frozen=True)
class EnginePreparing:
    """The engine's compiled kernels are being prepared (first run on this machine): done of
    total stages, the one finished last ('' at the start), about how many CPU seconds in all."""
    done: int
    total: int
    label: str
    seconds: float


def prepare_engine(report, kernels: str = "fast") -> None:
    """Before a run's first step: on the first use on this machine, compile the engine's kernels
    with progress (EnginePreparing events) instead of a silent wait at step 0."""
    if kernels != "fast" or readiness.is_prepared():
        return
    total = len(readiness.STAGES)
    report(EnginePreparing(0, total, "", readiness.PREPARE_CPU_SECONDS))
    readiness.prepare(lambda d, t, label: report(EnginePreparing(d, t, label, readiness.PREPARE_CPU_SECONDS)))


def tune_work(project_root: Path, run_dir: Path, overrides: dict, resume: bool, accepted_only: bool = False):
    """The Train tab's job: prepare, train, finish. Returns ("finished", report, run_dir) or
    ("stopped", run_dir, step, total); reports a Prepared, then every dxstudio.tuning.Event.
    If it fails, it reports CountsAtFailure (the Train tab's counts for accepted_only) first."""
    def work(job):
        try:
            return prepare_and_train(job)
        except Exception:
            try:  # (in the worker process, as the Train tab's own counts are)
                counts = PROCESS.call(training_breakdown_at, str(project_root), accepted_only)
            except Exception:
                counts = None
            job.report(CountsAtFailure(counts, accepted_only))
            raise

    def prepare_and_train(job):
        flush_label_writes()  # the decisions the review window is still writing count
        project = Project.open(project_root)
        run = prepare_run(project, run_dir, overrides, resume=resume)  # a TuneRun, or a FoldedRun with folds
        job.report(Prepared(str(run_dir), run.total_steps, (checkpoint_step(run_dir) or 0) if resume else 0,
                            len(run.train_pages), len(run.heldout_pages), len(run.excluded),
                            [e for _, e in run.errors], list(run.cfg.fields), run.start_source,
                            run.settings.get("folds"), run.settings.get("epochs"),
                            dict(getattr(run, "left_out", None) or {})))
        prepare_engine(job.report, run.settings.get("kernels", "fast"))
        if not run.train(job.report, cancel=job.cancelled, resume=resume):
            return ("stopped", str(run_dir), run.step, run.total_steps)
        return ("finished", run.finish(), str(run_dir))
    return work


# ---------------------------------------------------------------------------------------
# The Train tab

class TrainingPanel(QWidget):
    # object, not dict: a dict would cross as a QVariantMap and lose its field order
    finished = Signal(object, str)
    stopped = Signal(str, int, int)
    failed = Signal(str)

    NO_RUN_TEXT = "no run yet: press Fine-tune"
    AGREEMENT_TITLE = "Held-out agreement per field, per epoch"

    def __init__(self, project_root, parent=None):
        super().__init__(parent)
        self.project_root = Path(project_root)
        self._opened: tuple | None = None  # (dxproject.json's stamp, the Project read from it): _project
        self.show_dialogs = True  # error message boxes (non-modal); tests may turn them off
        self.last_error: str | None = None
        self.run_dir: Path | None = None
        self.fields: list[str] = []
        self.total_steps = 0
        self.loss_steps: list[int] = []
        self.loss_values: list[float] = []
        self.agreement: dict[str, tuple[list, list]] = {}
        self.n_folds: int | None = None  # a cross-validated run's K (its epochs count on across the folds)
        self.fold_epochs: int | None = None  # the epochs of each of its folds
        self.left_out: dict = {}  # fields the run leaves out (not asked yet on some page): not drawn
        self._job: Job | None = None
        self._session_start: tuple[float, int] | None = None  # (monotonic time, step) of this stretch
        self._first_step: tuple[float, int] | None = None  # (time, step) of this stretch's first step event
        self._build()
        self.load_settings()
        try:
            self.reopen_latest()
        except ValueError:  # ProjectError: already shown by load_settings
            pass
        if "accepted_only" in self.inputs:  # a recount of every page: in the worker process
            self.inputs["accepted_only"].toggled.connect(lambda _: self.update_breakdown_later())
        for name in ("start", "size"):
            if isinstance(self.inputs.get(name), QComboBox):
                self.inputs[name].currentTextChanged.connect(lambda _: self.update_start())
        self._error_counts = None  # the counts when the last error was shown (a stale error goes)
        if "folds" in self.inputs:  # the folds line under the count says what they cost
            self.inputs["folds"].valueChanged.connect(lambda _: self.show_breakdown_again())
        self.update_breakdown()
        self._prepare_timer = QTimer(self)
        self._prepare_timer.setSingleShot(True)
        self._prepare_timer.timeout.connect(self._prepare_step)
        self._prepare_queue: list = []
        self._prepare_rounds = 0
        self._prepare_renders = 0
        self.prepare_plots_later()

    # -- layout ------------------------------------------------------------------------
    def _build(self) -> None:
        self.inputs: dict[str, QWidget] = {}
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        for row in FORM_SETTINGS:
            w = self._input_for(row)
            w.setToolTip(row.help + (f"; '{row.form['null_text']}': {row.null_means}" if row.nullable else ""))
            w.setObjectName(f"setting_{row.name}")
            self.inputs[row.name] = w
            form.addRow(row.label, w)
        settings_box = QGroupBox("Settings")
        sb = QVBoxLayout(settings_box)
        sb.addLayout(form)
        self.defaults_button = QPushButton("Restore defaults")
        self.defaults_button.clicked.connect(self.restore_defaults)
        sb.addWidget(self.defaults_button)
        sb.addStretch(1)

        self.fine_tune_button = QPushButton("Fine-tune")
        self.fine_tune_button.setObjectName("fine_tune")
        font = self.fine_tune_button.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        font.setBold(True)
        self.fine_tune_button.setFont(font)
        self.fine_tune_button.setMinimumHeight(40)
        self.fine_tune_button.clicked.connect(lambda: self.fine_tune())
        # opening the tab focuses the button, not the first setting (a caret in "Epochs")
        self.setFocusProxy(self.fine_tune_button)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("stop after the current step; the checkpoint is kept for Resume")
        self.cancel_button.clicked.connect(self.cancel)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("continue the stopped run from its checkpoint (same final model bytes)")
        self.resume_button.clicked.connect(lambda: self.resume())
        self.cancel_button.setEnabled(False)
        self.resume_button.setEnabled(False)

        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat(self.NO_RUN_TEXT)  # not "step 0 of 1": there is no run yet
        self.time_label = QLabel("")
        self.start_label = RoomyLabel("", 1)
        self.start_label.setObjectName("starts_from")
        self.start_label.setTextFormat(Qt.TextFormat.RichText)
        # the lines above the plots keep their room: a new count or model does not resize them
        self.breakdown_label = RoomyLabel("Counting the pages…", 3)
        self.breakdown_label.setObjectName("breakdown")
        self.breakdown_label.setTextFormat(Qt.TextFormat.RichText)
        self.status_label = QLabel("Press Fine-tune to train a model on the pages counted above.")
        self.status_label.setWordWrap(True)
        self.status_label.setMinimumHeight(self.status_label.fontMetrics().lineSpacing() * 2 + 6)
        self.error_label = QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #b2182b;")
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.hide()

        buttons = QHBoxLayout()
        buttons.addWidget(self.fine_tune_button, 2)
        buttons.addWidget(self.cancel_button, 1)
        buttons.addWidget(self.resume_button, 1)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.time_label)

        self.loss_plot = pg.PlotWidget(title="Training loss per step",
                                       axisItems={"bottom": WholeNumberAxis("bottom"), "left": CachedAxis("left")})
        self.loss_plot.setLabel("bottom", "step")
        self.loss_plot.setLabel("left", "loss")
        self.loss_plot.showGrid(x=True, y=True, alpha=0.25)
        self.loss_curve = self.loss_plot.plot([], [], pen=pg.mkPen("#0072B2", width=2), name="loss")
        self.agreement_plot = pg.PlotWidget(title=self.AGREEMENT_TITLE,
                                            axisItems={"bottom": WholeNumberAxis("bottom"), "left": CachedAxis("left")})
        self.agreement_plot.setLabel("bottom", "epoch")
        self.agreement_plot.setLabel("left", "agreement")
        # a little below 0, so that fields still at 0 show as lines above the axis, not in it
        self.agreement_plot.setYRange(-0.04, 1.04, padding=0)
        self.agreement_plot.showGrid(x=True, y=True, alpha=0.25)
        # the legend is a line under the plot, never over the curves
        self.agreement_legend = QLabel("")
        self.agreement_legend.setObjectName("agreement_legend")
        self.agreement_legend.setWordWrap(True)
        self.agreement_legend.setTextFormat(Qt.TextFormat.RichText)
        self.agreement_curves: dict[str, pg.PlotDataItem] = {}
        self._curve_pool: dict[str, pg.PlotDataItem] = {}  # curves of fields no longer shown, kept for reuse
        # the loss of a long run: only what is in view is drawn, at most a few points per pixel
        # (the peaks kept, so the curve looks the same), its data in one buffer set in place
        self.loss_curve.setClipToView(True)
        self.loss_curve.setDownsampling(auto=True, method="peak")
        self._loss_buffer = np.zeros((2, 0))
        self._loss_drawn = 0  # points of loss_steps already in the buffer
        for plot in (self.loss_plot, self.agreement_plot):
            plot.setMinimumHeight(180)
            plot.setMenuEnabled(False)
            for side in ("left", "bottom"):  # "loss", not "loss (x0.001)": the ticks carry the scale
                plot.getPlotItem().getAxis(side).enableAutoSIPrefix(False)

        right = QVBoxLayout()
        right.addWidget(self.breakdown_label)
        right.addWidget(self.start_label)
        right.addLayout(buttons)
        right.addLayout(progress_row)
        right.addWidget(self.status_label)
        right.addWidget(self.error_label)
        right.addWidget(self.loss_plot, 1)
        right.addWidget(self.agreement_plot, 1)
        right.addWidget(self.agreement_legend)
        outer = QHBoxLayout(self)
        outer.addWidget(settings_box, 0)
        outer.addLayout(right, 1)
        # Tab order (and the focus the tab gets when opened): the buttons, then the settings
        chain = [self.fine_tune_button, self.cancel_button, self.resume_button,
                 *(self.inputs[row.name] for row in FORM_SETTINGS), self.defaults_button]
        for first, second in zip(chain, chain[1:]):
            QWidget.setTabOrder(first, second)

    @staticmethod
    def _input_for(row) -> QWidget:
        """The widget of one settings row: a list for a choice, a check box for true/false, a
        spin box for a number, bounded by the row's range and form hints (a nullable number
        shows its lowest value as the row's null_text and stores null there)."""
        hints = row.form
        if row.kind == "choice":
            w = QComboBox()
            w.addItems(list(row.choices))
            return w
        if row.kind == "bool":
            return QCheckBox()
        if row.kind == "int":
            w = QSpinBox()
            w.setRange(int(hints.get("bottom", row.low if row.low is not None else 0)),
                       int(min(hints.get("top", 2**31 - 1), 2**31 - 1)))
        else:
            w = QDoubleSpinBox()
            w.setDecimals(hints.get("decimals", 3))
            w.setRange(hints.get("bottom", row.low if row.low is not None else 0.0), hints.get("top", 1e6))
            if "step" in hints:
                w.setSingleStep(hints["step"])
        if row.nullable:
            w.setSpecialValueText(hints.get("null_text", "default"))
        return w

    # -- settings ----------------------------------------------------------------------
    def _project(self):
        """The project, opened again only when dxproject.json changed (another file, size or
        time: an atomic save is a new file). The tab's show asked for it three times, and each
        Project.open read the file and swept pages/, labels/ and the label cache for orphan
        temp files (3-5 ms of the tab's show at 1920x1080, load 5, cProfile). For reading only:
        save_settings opens the file afresh."""
        try:
            st = (Path(self.project_root) / PROJECT_FILE).stat()
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = None
        if stamp is None or self._opened is None or self._opened[0] != stamp:
            self._opened = None
            self._opened = (stamp, Project.open(self.project_root))  # (raises as before)
        return self._opened[1]

    def load_settings(self) -> None:
        """Fill the form: DEFAULTS, then the project's saved settings."""
        try:
            saved = self._project().settings
        except ValueError as e:  # ProjectError: the form keeps the defaults, the message says why
            self._show_error(str(e))
            saved = {}
        values = dict(DEFAULTS)
        values.update({k: v for k, v in saved.items() if k in DEFAULTS and v is not None})
        self._set_form(values)

    def restore_defaults(self) -> None:
        self._set_form(DEFAULTS)

    def set_settings(self, values: dict) -> None:
        """Put these settings into the form (others keep their values); saved at Fine-tune."""
        current = self.settings_values()
        current.update({k: v for k, v in values.items() if k in current})
        self._set_form(current)

    def _set_form(self, values: dict) -> None:
        for row in FORM_SETTINGS:
            w, v = self.inputs[row.name], values.get(row.name, DEFAULTS[row.name])
            if isinstance(w, QComboBox):
                w.setCurrentText(str(v))
            elif isinstance(w, QCheckBox):
                w.setChecked(bool(v))
            elif v is None:  # a nullable number's null: the widget's lowest value, shown as its text
                w.setValue(w.minimum())
            elif isinstance(w, QSpinBox):
                w.setValue(int(v))
            else:
                w.setValue(float(v))

    def settings_values(self) -> dict:
        """The form's settings as dxproject.json stores them."""
        out = {}
        for row in FORM_SETTINGS:
            w = self.inputs[row.name]
            if isinstance(w, QComboBox):
                out[row.name] = w.currentText()
            elif isinstance(w, QCheckBox):
                out[row.name] = w.isChecked()
            elif row.nullable and w.value() == w.minimum():
                out[row.name] = None
            elif isinstance(w, QSpinBox):
                out[row.name] = int(w.value())
            else:
                out[row.name] = float(w.value())
        return out

    def save_settings(self) -> dict:
        """Check the form's settings and save them into dxproject.json; returns them.
        The project file is read afresh so that what others saved meanwhile is kept."""
        values = self.settings_values()
        project = Project.open(self.project_root)
        resolve_settings(project.settings, values, source=project.project_file)  # raises TuneError naming a bad setting
        # settings of this machine (Threads) are the run's, not the project's: a project
        # opened on another machine starts at that machine's default
        project.settings.update({k: v for k, v in values.items() if BY_NAME[k].saved})
        for k in values:
            if not BY_NAME[k].saved:
                project.settings.pop(k, None)
        project.save()
        return values

    def _show_progress(self, step: int | None, total: int | None, idle_text: str | None = None) -> None:
        """The bar: "step S of T" for a run; with no run (step None) a text instead of "step 0
        of 1": idle_text, "preparing the run..." before a new run's total is known (total 0),
        else NO_RUN_TEXT."""
        if step is None or not total:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            if step is None:
                text = idle_text or ("preparing the run..." if total == 0 else self.NO_RUN_TEXT)
            else:
                text = f"step {int(step)}"  # (a run folder that does not say its total)
            self.progress.setFormat(text)
            return
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(min(step, total))
        self.progress.setFormat("step %v of %m")

    # -- running -----------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._job is not None and self._job.running

    def fine_tune(self, extra_overrides: dict | None = None) -> Path | None:
        """Save the settings and start a new run in runs/<time>. extra_overrides (not saved)
        are for callers such as the screenshot command. Returns the run folder, None if it
        could not start (the message is shown)."""
        if self.is_running:
            return None
        try:
            self.save_settings()
        except (TuneError, ValueError, OSError) as e:
            self._show_error(f"Cannot start fine-tuning: {e}")
            return None
        try:
            run_dir = RunDir.create(self._project().runs_dir).path
        except (TuneError, ValueError) as e:
            self._show_error(f"Cannot start fine-tuning: {e}")
            return None
        self._clear_plots()
        machine = {k: v for k, v in self.settings_values().items() if not BY_NAME[k].saved}
        self._start(run_dir, {**machine, **dict(extra_overrides or {})}, resume=False)
        return run_dir

    def resume(self, run_dir=None) -> Path | None:
        """Continue a stopped run from its checkpoint, with the settings it was started with."""
        if self.is_running:
            return None
        run_dir = Path(run_dir) if run_dir is not None else self.run_dir
        if run_dir is None:
            self._show_error("There is no stopped run to resume.")
            return None
        rd = RunDir(run_dir)
        step = rd.checkpoint_step()
        if step is None:
            self._show_error(f"{rd.checkpoint_path}: no readable checkpoint to resume from")
            return None
        try:
            info = rd.read_settings()
            saved = info["settings"]
        except TuneError as e:
            self._show_error(f"Cannot resume: {e}")
            return None
        # The plots restart from what the run had logged up to its checkpoint.
        self._clear_plots()
        self._use_run_info(info)
        steps, losses, epochs = read_metrics(run_dir, up_to_step=step)
        self.loss_steps, self.loss_values = steps, losses
        for epoch, scores in epochs:
            self._add_agreement(epoch, scores)
        self._redraw_loss()
        self._start(run_dir, saved, resume=True)
        return run_dir

    def _start(self, run_dir: Path, overrides: dict, resume: bool) -> None:
        self.run_dir = run_dir
        self._hide_error()
        self._session_start = None
        self.status_label.setText(f"{'Resuming' if resume else 'Preparing'} run {run_dir.name}...")
        self.time_label.setText("")
        if not resume:
            self._show_progress(None, 0)
        if self._job is not None:  # the last run's job has ended (is_running was checked)
            self._job.deleteLater()
        self._counts_at_failure = None
        accepted_only = bool(self.settings_values().get("accepted_only"))
        self._job = Job(tune_work(self.project_root, run_dir, overrides, resume, accepted_only),
                        f"dxstudio-tune-{run_dir.name}", parent=self)
        self._job.connect(self._on_job_event, self._on_job_done, self._on_failed)
        self._set_running(True)
        self._job.start()

    def cancel(self) -> None:
        """Ask the run to stop before its next step; it writes its checkpoint first."""
        if self.is_running:
            self._job.cancel()
            self.cancel_button.setEnabled(False)
            self.status_label.setText("Stopping after the current step; the checkpoint is kept...")

    def shutdown(self, timeout: float = 120.0) -> bool:
        """For closing the window: cancel, wait for the worker (it writes the checkpoint).
        True when no worker is left running."""
        counting = getattr(self, "_count_job", None)
        if counting is not None:
            counting.wait(30)
        job = self._job
        if job is None:
            return True
        job.cancel()
        return job.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker ends (tests and the screenshot command); True if it did."""
        if self._job is not None:
            self._job.wait(timeout)
        return not self.is_running

    def _worker_done(self) -> None:
        # The worker's last act was to emit the signal being handled; wait for its thread to
        # return so that is_running is False from here on (Resume may be pressed at once).
        if self._job is not None:
            self._job.join()
        self._set_running(False)

    def _set_running(self, running: bool) -> None:
        focus = QApplication.focusWidget()
        focus_here = focus is not None and (focus is self or self.isAncestorOf(focus))
        self.fine_tune_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.resume_button.setEnabled(False if running else self._can_resume())
        for w in self.inputs.values():
            w.setEnabled(not running)
        self.defaults_button.setEnabled(not running)
        if focus_here:  # disabling the focused button would pass focus on to a settings field
            (self.cancel_button if running else self.fine_tune_button).setFocus()

    def _can_resume(self) -> bool:
        """Resume is offered only when it can work (RunDir.resume_problem); the button's tip
        says why not otherwise."""
        problem = "no stopped run" if self.run_dir is None else RunDir(self.run_dir).resume_problem()
        if problem is None:
            try:
                fields = RunDir(self.run_dir).read_settings().get("fields")
                if fields is not None and fields != self._project().field_names:
                    problem = "the schema's fields changed since the run started"
            except (TuneError, ValueError, OSError):
                pass  # (a folded run keeps its fields in its parts; the run itself says what is wrong)
        self.resume_button.setToolTip(
            "continue the stopped run from its checkpoint, on the labels it started with "
            "(same final model bytes)" if problem is None else f"Nothing to resume: {problem}")
        return problem is None

    def _offer_resume(self, run_dir: Path | None) -> None:
        if run_dir is None:
            return
        self.show_run_history(run_dir)
        step = checkpoint_step(run_dir)
        self.status_label.setText(f"Run {run_dir.name} stopped at step {step} of {self.total_steps or '?'}; "
                                  f"Resume continues it (on the labels it started with), Fine-tune starts a new one.")
        self.resume_button.setEnabled(self._can_resume())

    def reopen_latest(self) -> None:
        """On opening: the newest stopped run (offered for Resume), else the newest finished
        run, with its real step count and plots from its metrics.jsonl."""
        runs = RunDir.list(self._project().runs_dir)
        stopped = unfinished_run(self._project().runs_dir)
        if stopped is not None:
            self._offer_resume(stopped)
            return
        done = next((r for r in runs if r.status == "finished"), None)
        if done is not None:
            self.show_run_history(done.path)
            self.status_label.setText(f"Run {done.name} finished ({done.step or self.total_steps} steps); "
                                      f"its scores are in Results. Fine-tune starts a new run.")
            self.time_label.setText("done")

    def show_run_history(self, run_dir) -> None:
        """Show a run that is not running: its progress (step of total) and its plots, read
        from its folder."""
        run_dir = Path(run_dir)
        rd = RunDir(run_dir)
        self.run_dir = run_dir
        try:
            info = rd.read_settings()
        except TuneError:
            info = {}
        self.total_steps = int(info.get("total_steps") or 0)
        step = rd.checkpoint_step() or 0
        self._clear_plots()
        self._use_run_info(info)
        steps, losses, epochs = read_metrics(run_dir, up_to_step=step or None)
        self.loss_steps, self.loss_values = steps, losses
        if info.get("fields"):
            self._ensure_agreement_curves(info["fields"])
        for epoch, scores in epochs:
            self._add_agreement(epoch, scores)
        self._redraw_loss()
        self._show_progress(step, self.total_steps)
        self.resume_button.setEnabled(not self.is_running and self._can_resume())

    # -- what trains -----------------------------------------------------------------------
    def update_breakdown(self) -> dict | None:
        """Count what a run started now trains on (dxstudio.tuning.pages.training_breakdown) and
        say it above the Fine-tune button; returns the counts."""
        accepted_only = bool(self.settings_values().get("accepted_only"))
        self.folds_text = ""
        try:
            c = training_breakdown(self._project(), accepted_only)
        except (ValueError, OSError) as e:
            self.breakdown_label.setText(f"Cannot count the pages: {e}")
            return None
        self._show_breakdown(c, accepted_only)
        return c

    def show_breakdown_again(self) -> None:
        """The count's sentence again from the counts at hand (Folds changes what the folds line
        says, not what trains): no page is read. While a recount is on its way its result says it;
        without counts for today's Accepted only, count (in the worker process)."""
        c = self._counts_at_hand()
        if c is not None:
            self._show_breakdown(c, bool(self.settings_values().get("accepted_only")))
        elif not self.counting():
            self.update_breakdown_later()

    def _counts_at_hand(self) -> dict | None:
        """The counts shown, where they are for today's Accepted only and no recount is on its way; else None."""
        accepted_only = bool(self.settings_values().get("accepted_only"))
        if not self.counting() and getattr(self, "_breakdown_accepted_only", None) == accepted_only:
            return getattr(self, "breakdown", None)
        return None

    def update_breakdown_later(self) -> None:
        """update_breakdown with the counting (every page and label file: a quarter of a second
        on 200 pages) on a background job, so showing the tab never waits for it, and in the
        worker process (dxstudio.ui.worker_process), so its Python never holds up the GUI thread's."""
        if getattr(self, "_count_job", None) is not None:
            self._count_again = True
            return
        accepted_only = bool(self.settings_values().get("accepted_only"))
        root = self.project_root

        def work(job):
            flush_label_writes()  # (an accept just made counts)
            # counted in the worker process: its Python would hold the interpreter's lock in turns
            # with the GUI thread (issue 23: up to 133 ms of an event's wall time, at load 20)
            return PROCESS.call(training_breakdown_at, str(root), accepted_only), accepted_only

        self._count_again = False
        self._count_job = Job(work, "dxstudio-count", parent=self, pooled=True)
        self._count_job.connect(None, self._on_counted, self._on_count_failed)
        self._count_job.start()

    def _end_count_job(self) -> None:
        job, self._count_job = self._count_job, None
        if job is not None:
            job.join()
            job.deleteLater()
        if self._count_again:
            self.update_breakdown_later()

    def _on_counted(self, result) -> None:
        self._end_count_job()
        c, accepted_only = result
        if accepted_only == bool(self.settings_values().get("accepted_only")) and not self.is_running:
            self._show_breakdown(c, accepted_only)

    def _on_count_failed(self, message: str) -> None:
        self._end_count_job()
        self.breakdown_label.setText(f"Cannot count the pages: {message}")

    def counting(self) -> bool:
        return getattr(self, "_count_job", None) is not None

    def _show_breakdown(self, c: dict, accepted_only: bool) -> None:
        self.breakdown = c
        self._breakdown_accepted_only = accepted_only
        text = breakdown_text(c, accepted_only, self.settings_values().get("heldout_fraction"))
        self.folds_text, others = self._folds_texts(c.get("usable", 0))
        # the room of the line with any choice of Folds is kept: choosing another never moves Fine-tune
        self.breakdown_label.set_alternatives([text + (f" {o}" if o else "") for o in others])
        self.breakdown_label.setText(text + (f" {self.folds_text}" if self.folds_text else ""))
        self.update_start()
        if not self.isVisible() and hasattr(self, "_prepare_timer"):
            self.prepare_plots_later()  # (new lines may have moved the plots: drawn again at idle)
        if self.last_error is not None and not self.is_running and self._error_counts is not None \
                and self._error_counts != c:
            # what the error was about has changed (pages reviewed, a field asked): it is stale
            self._hide_error()
            self.status_label.setText("The pages changed since the last error: press Fine-tune to try again.")
        return c

    def update_start(self) -> str:
        """Say what a run started now starts from (the project's model, the base, a new model)."""
        try:
            text = starting_model_text(self._project(), self.settings_values())
        except (ValueError, OSError) as e:
            text = f"Cannot tell the starting model: {e}"
        self.start_label.setText(text)
        return text

    FOLDS_ALTERNATIVES = (None, *range(2, 13), 99, 100)  # the Folds choices whose line's room is kept

    def _folds_text(self, usable: int) -> str:
        """The folds a run started now uses, and what they cost (issue 21: folds by default
        on small projects): tuning.localfirst.folds_plan, timed by the newest finished run's
        seconds per step when there is one."""
        return self._folds_texts(usable)[0]

    def _folds_texts(self, usable: int) -> tuple[str, list]:
        """_folds_text, and the same line for the other choices of Folds (FOLDS_ALTERNATIVES:
        auto and K of each number of digits), whose room the line keeps."""
        try:
            form = self.settings_values()
            project = self._project()
            settings = resolve_settings(project.settings, {k: v for k, v in form.items() if v is not None},
                                        source=project.project_file)
            if form.get("folds") is None:
                settings["folds"] = None  # the form's "auto" wins over a saved K
        except (TuneError, ValueError, OSError):
            return "", []
        per_step = self._seconds_per_step()
        key = (usable, per_step, repr(sorted((k, v) for k, v in settings.items() if k != "folds")))
        if getattr(self, "_folds_others", (None,))[0] != key:  # (kept while the count and settings stay)
            self._folds_others = (key, [folds_plan(usable, {**settings, "folds": k}, per_step).text
                                        for k in self.FOLDS_ALTERNATIVES])
        return folds_plan(usable, settings, per_step).text, self._folds_others[1]

    def _seconds_per_step(self) -> float | None:
        try:
            for info in RunDir.list(self._project().runs_dir):
                if info.status == "finished":
                    run = RunDir(info.path).read_report().get("run", {})
                    if run.get("wall_seconds") and run.get("steps"):
                        return float(run["wall_seconds"]) / int(run["steps"])
                    return None
        except (ValueError, OSError, TuneError):
            return None
        return None

    def showEvent(self, event):
        super().showEvent(event)
        if not self.is_running:
            self.update_start()  # Runs may have chosen another model (one small file read)
            self.update_breakdown_later()  # review may have changed the counts meanwhile

    # -- the plots drawn while the tab is hidden ------------------------------------------
    def prepare_plots_later(self, delay_ms: int = 400) -> None:
        """Draw the two plots' axes while the tab is hidden, at idle, at the size they will
        be shown at: the tab's first show (and a show after its lines changed its layout)
        drew all four axes anew, 40-55 ms of the GUI thread at 1920x1080 on an AVX2 (Zen 2)
        machine. One axis per turn of the event loop, again until no axis is drawn anew (an
        axis widens once its numbers are drawn). A whole plot per turn (grab) was 10-32 ms of
        CPU at 1920x1080 on AVX-512 (Xeon), load 10, and landed in the turn of a key press: A
        took 73 ms (issue 23's 50 ms rule); one axis is at most half of that."""
        self._prepare_queue = []
        self._prepare_rounds = 0
        self._prepare_timer.start(delay_ms)

    def _axes(self) -> list:
        return [plot.getPlotItem().getAxis(name) for plot in (self.loss_plot, self.agreement_plot)
                for name in ("left", "bottom")]

    def _prepare_step(self) -> None:
        stack = self.parentWidget()
        if self.isVisible() or stack is None or self.isWindow():
            return  # shown: its paint draws them; alone (a test's panel): nothing to prepare for
        if not self.window().isVisible():
            self._prepare_timer.start(400)  # (the window is not shown yet)
            return
        if self.geometry() != stack.contentsRect():
            self.setGeometry(stack.contentsRect())
        self.layout().activate()
        renders = sum(getattr(a, "renders", 0) for a in self._axes())
        if not self._prepare_queue:
            if self._prepare_rounds and renders == self._prepare_renders:
                return  # a round drew nothing anew: ready
            if self._prepare_rounds >= 4:
                return
            self._prepare_rounds += 1
            self._prepare_renders = renders
            self._prepare_queue = [(self.loss_plot, None), (self.agreement_plot, None)]
        plot, side = self._prepare_queue.pop(0)
        if side is None:
            # the plot's pending resize and its layout, nothing drawn (one pixel of its title),
            # then each axis on a turn of its own
            plot.grab(QRect(0, 0, 1, 1))
            self._prepare_queue[0:0] = [(plot, "left"), (plot, "bottom")]
        else:
            rect = self._axis_rect(plot, side)
            if rect is not None:  # a few pixels amid the axis's ticks: its paint draws all of it (grid too)
                plot.grab(QRect(rect.center().x() - 1, rect.center().y() - 1, 2, 2))
        self._prepare_timer.start(20)

    @staticmethod
    def _axis_rect(plot, side):
        """The strip of the plot widget an axis's ticks take (without its grid), or None."""
        axis = plot.getPlotItem().getAxis(side)
        parent = axis.parentItem()
        if parent is None:
            return None
        strip = plot.mapFromScene(parent.mapRectToScene(axis.geometry())).boundingRect()
        strip = strip.intersected(plot.rect())
        return strip if strip.width() > 0 and strip.height() > 0 else None

    # -- events from the job (GUI thread) ------------------------------------------------
    def _on_job_event(self, obj) -> None:
        if isinstance(obj, CountsAtFailure):
            self._counts_at_failure = obj  # (the failed signal comes next)
        elif isinstance(obj, Prepared):
            self._on_prepared(obj)
        elif isinstance(obj, EnginePreparing):
            self.status_label.setText(
                f"Preparing the engine (first run on this machine, once: about {obj.seconds:.0f} s of CPU): "
                f"{obj.done} of {obj.total} parts compiled" + (f", the last {obj.label}." if obj.label else "."))
        else:
            self._on_event(obj)

    def _on_job_done(self, result: tuple) -> None:
        if result[0] == "finished":
            self._on_finished(result[1], result[2])
        else:
            self._on_stopped(*result[1:])

    def _on_prepared(self, info: Prepared) -> None:
        self.total_steps = info.total
        self.fields = info.fields
        self._use_run_shape(info.folds, info.epochs, info.left_out)
        self._show_progress(info.start, self.total_steps)
        self._session_start = (time.monotonic(), info.start)
        self._first_step = None
        self._ensure_agreement_curves(self.fields)
        split = (f"{info.folds} folds over {info.train} pages (each held out once), then the final model"
                 if info.folds else f"{info.train} training and {info.heldout} held-out pages")
        text = (f"Run {Path(info.run_dir).name}: {split}, "
                f"{info.excluded} excluded, {self.total_steps} steps, from {info.source}.")
        if info.unreadable:
            text += f" Skipped {len(info.unreadable)} unreadable: " + "; ".join(info.unreadable[:3])
        self.status_label.setText(text)

    def _on_event(self, ev) -> None:
        if ev.kind == "step":
            self.loss_steps.append(ev.step)
            self.loss_values.append(ev.loss)
            self._redraw_loss()
            self.progress.setValue(ev.step)
            self.time_label.setText(self._time_left(ev.step))
        elif ev.kind == "epoch":
            self._add_agreement(ev.epoch, {k: v.get("agreement") for k, v in ev.scores["fields"].items()})

    ESTIMATE_AFTER_STEPS = 3

    def _time_left(self, step: int, now: float | None = None) -> str:
        """The time left from measured steps only: the time between step events after the first
        one of this stretch (the preparing, the kernels' compiling and the first step are not
        steps the rest will take), once ESTIMATE_AFTER_STEPS steps have been measured."""
        if self._session_start is None:
            return ""
        now = time.monotonic() if now is None else now
        if self._first_step is None:
            self._first_step = (now, step)
            return "estimating..."
        t1, s1 = self._first_step
        measured = step - s1
        elapsed = now - t1
        if measured < self.ESTIMATE_AFTER_STEPS or elapsed <= 0:
            return "estimating..."
        per_step = elapsed / measured
        return f"{format_duration(per_step * (self.total_steps - step))} left"

    def _on_finished(self, report: dict, run_dir: str) -> None:
        self._worker_done()
        self.update_breakdown_later()  # (a count that came during the run was not shown)
        self.progress.setValue(self.progress.maximum())
        self.time_label.setText("done")
        statement = report.get("threshold_statement") or ""
        self.status_label.setText(f"Run {Path(run_dir).name} finished: model written to "
                                  f"{RunDir(run_dir).model_path}. {statement}")
        self.finished.emit(report, run_dir)

    def _on_stopped(self, run_dir: str, step: int, total: int) -> None:
        self._worker_done()
        self.update_breakdown_later()  # (a count that came during the run was not shown)
        self.time_label.setText("stopped")
        self.status_label.setText(f"Stopped at step {step} of {total}; the checkpoint is kept in "
                                  f"{run_dir}. Resume continues to the same model.")
        self.stopped.emit(run_dir, step, total)

    def _on_failed(self, message: str) -> None:
        self._worker_done()
        self.time_label.setText("")
        removed = self._drop_empty_run()
        self.status_label.setText("Fine-tuning did not start: nothing was trained, and no run was kept."
                                  if removed else "Fine-tuning stopped with an error.")
        # the error is about the pages as the failed run counted them: not the counts shown, which
        # may be from before Accepted only changed (a recount on its way, or one that came during the
        # run and was not shown): so no recount can make it look stale, and a change after it does
        at_failure, self._counts_at_failure = getattr(self, "_counts_at_failure", None), None
        if at_failure is not None and at_failure.counts is not None:
            self._show_error(message, at_failure.counts)
            if at_failure.accepted_only == bool(self.settings_values().get("accepted_only")):
                self._show_breakdown(at_failure.counts, at_failure.accepted_only)  # (what it saw)
        else:
            self._show_error(message)
        self.failed.emit(message)

    def _drop_empty_run(self) -> bool:
        """A run that failed before its first step (too few pages, a bad model file) leaves no
        "no step yet" folder in Runs: remove it when it holds no checkpoint, model or step."""
        import shutil
        run_dir = self.run_dir
        if run_dir is None or not Path(run_dir).is_dir():
            return False
        rd = RunDir(run_dir)
        try:
            if rd.status() != "empty" or rd.checkpoint_path.exists() or rd.model_path.exists() \
                    or any(r.get("kind") == "step" for r in rd.metrics()):
                return False
        except (TuneError, ValueError, OSError):
            return False
        shutil.rmtree(run_dir, ignore_errors=True)
        self.run_dir = None
        self._show_progress(None, None, "no run: nothing was trained")  # (not the failed start's "step 0 of ?")
        self.resume_button.setEnabled(False)
        return not Path(run_dir).exists()

    # -- plots -------------------------------------------------------------------------
    def _use_run_shape(self, folds, epochs, left_out) -> None:
        """What the plots need to know of a run: its folds (K and the epochs of each: a folded
        run numbers its epochs on across the folds, fold k's epoch e as k*E + e) and the fields
        it leaves out of training and scoring (not drawn, named under the plot)."""
        self.n_folds = int(folds) if folds else None
        self.fold_epochs = int(epochs) if folds and epochs else None
        self.left_out = dict(left_out or {})
        axis = self.agreement_plot.getPlotItem().getAxis("bottom")
        text = (f"epoch of each fold ({self.n_folds} folds, drawn over each other)" if self.fold_epochs
                else "epoch")
        if axis.labelText != text:
            self.agreement_plot.setLabel("bottom", text)
        if not self.fold_epochs and self.agreement_plot.getPlotItem().titleLabel.text != self.AGREEMENT_TITLE:
            self.agreement_plot.setTitle(self.AGREEMENT_TITLE)

    def _use_run_info(self, info: dict) -> None:
        """_use_run_shape from a run folder's settings.json."""
        settings = info.get("settings") if isinstance(info.get("settings"), dict) else {}
        self._use_run_shape(info.get("folds") or settings.get("folds"), settings.get("epochs"), info.get("left_out"))

    def fold_of(self, epoch) -> tuple[int | None, int]:
        """(fold from 1, its own epoch) of an epoch as the run numbers it; (None, epoch) for a
        single split."""
        if not self.fold_epochs or epoch is None:
            return None, epoch
        return (int(epoch) - 1) // self.fold_epochs + 1, (int(epoch) - 1) % self.fold_epochs + 1

    def _drawn_points(self, xs, ys):
        """The x and y a field's curve draws: its epochs as they are for a single split; for a
        folded run each fold's own epochs (1 to E), one line per fold (a gap between folds)."""
        if not self.fold_epochs:
            return np.asarray(xs, float), np.asarray(ys, float)
        px, py, last = [], [], None
        for x, y in sorted(zip(xs, ys), key=lambda p: p[0]):  # (folds side by side interleave)
            fold, local = self.fold_of(x)
            if last is not None and fold != last:
                px.append(local)
                py.append(np.nan)  # the line stops at the fold's end (connect="finite")
            px.append(local)
            py.append(y)
            last = fold
        return np.asarray(px, float), np.asarray(py, float)

    def _clear_plots(self) -> None:
        """Empty plots for another run: the curves are kept (hidden, their data emptied) and
        used again, not removed from the plot and made anew."""
        self.loss_steps, self.loss_values = [], []
        self._loss_drawn = 0
        self.loss_curve.setData([], [])
        self.agreement = {}
        for name, curve in self.agreement_curves.items():
            curve.setData([], [])
            curve.hide()
            self._curve_pool[name] = curve
        self.agreement_legend.setText("")
        self.agreement_curves = {}

    def _redraw_loss(self) -> None:
        """The loss curve's data set from one buffer that grows by doubling (a step adds a
        point: the lists are not turned into new arrays of the whole run every step)."""
        n = len(self.loss_steps)
        buf = self._loss_buffer
        start = self._loss_drawn if self._loss_drawn <= n else 0  # (_clear_plots starts it again)
        if buf.shape[1] < n:
            grown = np.zeros((2, max(64, 2 * n)))
            grown[:, :start] = buf[:, :start]
            buf = self._loss_buffer = grown
        buf[0, start:n] = self.loss_steps[start:n]
        buf[1, start:n] = self.loss_values[start:n]
        self._loss_drawn = n
        self.loss_curve.setData(buf[0, :n], buf[1, :n])

    SYMBOLS = ("o", "s", "t", "d", "+", "x", "star", "p", "h", "t1")
    DODGE = 0.012  # the drawn offset between fields of the same value (the data stay as they are)

    def _ensure_agreement_curves(self, fields) -> None:
        colours = field_colours(list(fields))  # the review view's: one colour per field across the app
        for name in fields:
            if name in self.left_out:
                continue  # not trained, not scored: no curve, no legend entry (named after them)
            if name not in self.agreement_curves:
                colour = colours[name]
                symbol = self.SYMBOLS[len(self.agreement_curves) % len(self.SYMBOLS)]
                style = dict(pen=pg.mkPen(colour, width=2), symbol=symbol, symbolSize=7, symbolBrush=colour,
                             symbolPen=colour, connect="finite")
                curve = self._curve_pool.pop(name, None)
                if curve is None:
                    curve = self.agreement_plot.plot([], [], name=name, **style)
                else:  # a curve of an earlier run: the same item, shown again in this field's style now
                    curve.setData([], [], **style)
                    curve.show()
                self.agreement_curves[name] = curve
        self.agreement_legend.setText("  ".join(
            f'<span style="color:{colours[n].name()}; font-weight:bold">&#9644; {n}</span>'
            for n in self.agreement_curves if n in colours)
            + "  <span style='color:#666'>(fields with the same value are drawn a hair apart)</span>"
            + (f"  <span style='color:#666'>Not drawn, not asked yet: {html.escape(', '.join(self.left_out))}</span>"
               if self.left_out else ""))

    def _dodge(self, name: str, value: float, epoch=None) -> float:
        """A field's drawn offset at an epoch: fields at the same value there (often all at 0
        early on) are drawn a little apart instead of on top of each other, towards the middle of
        the plot (nothing below 0 or above 1); a field alone at its value is drawn exactly."""
        if value is None or not math.isfinite(value):
            return 0.0
        same = [n for n, (xs, ys) in self.agreement.items()
                if any(x == epoch and y == value for x, y in zip(xs, ys))] if epoch is not None else [name]
        if name not in same or len(same) < 2:
            return 0.0
        step = same.index(name) * min(self.DODGE, 0.06 / (len(same) - 1))  # at most 0.06 apart in all
        return step if value < 0.5 else -step

    def _add_agreement(self, epoch: int, scores: dict) -> None:
        scores = {k: v for k, v in scores.items() if k not in self.left_out}
        self._ensure_agreement_curves(list(scores))
        for name, value in scores.items():
            xs, ys = self.agreement.setdefault(name, ([], []))
            xs.append(epoch)
            ys.append(np.nan if value is None else value)  # None: no values either side yet
        for name, (xs, ys) in self.agreement.items():
            drawn = [y + self._dodge(name, y, x) for x, y in zip(xs, ys)]  # NaN stays NaN
            px, py = self._drawn_points(xs, drawn)
            curve = self.agreement_curves[name]
            old_x, old_y = curve.getData()
            if old_x is not None and len(old_x) == len(px) and np.array_equal(old_x, px, equal_nan=True) and \
                    np.array_equal(old_y, py, equal_nan=True):
                continue  # drawn as it is: no new path, no repaint
            curve.setData(px, py)
        if self.fold_epochs and epoch is not None:  # (folds run side by side score in turn: count them)
            seen = {self.fold_of(x)[0] for xs, _ in self.agreement.values() for x in xs}
            title = f"Held-out agreement per field, per epoch of each fold ({len(seen)} of {self.n_folds} folds scored)"
            if self.agreement_plot.getPlotItem().titleLabel.text != title:
                self.agreement_plot.setTitle(title)

    # -- messages ----------------------------------------------------------------------
    def _show_error(self, message: str, counts: dict | None = None) -> None:
        """Show message; it goes as stale when the Train tab's counts differ from counts (by default
        those at hand; none while a recount is on its way: then it stays until the next start)."""
        self.last_error = message
        self._error_counts = counts if counts is not None else self._counts_at_hand()
        self.error_label.setText(message)
        self.error_label.show()
        if self.show_dialogs:
            box = QMessageBox(QMessageBox.Icon.Warning, "Fine-tuning", message, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()  # not exec(): the event loop (and a running worker's events) keep going

    def _hide_error(self) -> None:
        self.last_error = None
        self.error_label.hide()
