"""The Runs tab: every run of the project, its status, settings and scores.

RunsPanel(project_root, parent=None)
    A table of the project's runs (dxstudio.tuning.rundir.RunDir.list, newest first): status,
    steps, the settings that differ from the defaults, the mean held-out agreement, and which
    run's model is the project's model. Select a run and press Open results (or Enter, or
    double-click) to show it in Results; select two finished runs and press Compare to see
    them field by field; Use this model makes a finished run's model the project's model
    (dxproject.json "model", written atomically through dxstudio.project.Project.save): the
    project's model to use, and the one the next Fine-tune starts from.
    Signals: open_results(report: dict, run_dir: str); model_chosen(path: str).
    Public: refresh(), runs (the RunInfo rows shown), select_runs(names), open_selected(),
    compare_selected() -> bool, use_selected_model() -> Path | None.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QMessageBox, QPushButton,
                               QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from dxstudio.project import Project
from dxstudio.tuning.rundir import FINISHED, RunDir, RunInfo
from dxstudio.tuning.scoring import mean_agreement
from dxstudio.tuning.settings import BY_NAME, DEFAULTS, TuneError
from dxstudio.ui.extract_panel import newest_model
from dxstudio.ui.results_tab import format_threshold
from dxstudio.ui.train_tab import run_start_text

STATUS_TEXT = {"finished": "finished", "stopped": "stopped (can resume)", "running": "running", "empty": "no step yet"}
MACHINE_SETTINGS = tuple(n for n, row in BY_NAME.items() if not row.fingerprinted or not row.saved)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def settings_text(settings: dict) -> str:
    """The settings of a run that differ from the defaults (what sets it apart), in short."""
    parts = []
    for k, v in settings.items():
        if k in MACHINE_SETTINGS or k not in DEFAULTS or v == DEFAULTS[k]:
            continue
        parts.append(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}")
    return ", ".join(parts) or "defaults"


class RunsPanel(QWidget):
    open_results = Signal(object, str)  # (report, run_dir); object: the report keeps its field order
    model_chosen = Signal(str)

    COLUMNS = ("Run", "Status", "Steps", "Starts from; settings (not the defaults)", "Mean agreement",
               "Model in use")
    COMPARE = ("Field", "Recall A", "Recall B", "Agreement A", "Agreement B", "Threshold A", "Threshold B")

    def __init__(self, project_root, parent=None):
        super().__init__(parent)
        self.project_root = Path(project_root)
        self.show_dialogs = True
        self.last_error: str | None = None
        self.runs: list[RunInfo] = []
        self.settings: dict[str, dict] = {}  # run name -> its settings
        self._build()
        self.refresh()

    def _build(self) -> None:
        self.intro = QLabel("")
        self.intro.setWordWrap(True)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setObjectName("runs_table")
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeaderItem(4).setToolTip("The mean over the fields of the held-out agreement "
                                                      "(the Results tab explains agreement)")
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.cellDoubleClicked.connect(lambda *_: self.open_selected())
        self.table.installEventFilter(self)  # Enter opens the selected run's results

        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.open_button = QPushButton("Open results")
        self.open_button.setObjectName("open_results")
        self.open_button.clicked.connect(self.open_selected)
        self.compare_button = QPushButton("Compare two runs")
        self.compare_button.setObjectName("compare")
        self.compare_button.setToolTip("select two finished runs (Ctrl+click) to compare them field by field")
        self.compare_button.clicked.connect(self.compare_selected)
        self.use_button = QPushButton("Use this model")
        self.use_button.setObjectName("use_model")
        self.use_button.setToolTip("make this run's model the project's model (dxproject.json \"model\"): "
                                   "the model to use, and the one the next Fine-tune starts from")
        self.use_button.clicked.connect(self.use_selected_model)
        buttons = QHBoxLayout()
        for b in (self.open_button, self.compare_button, self.use_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.refresh_button)

        self.compare_title = QLabel("Select two finished runs and press Compare to see them field by field.")
        self.compare_title.setWordWrap(True)
        self.compare_table = QTableWidget(0, len(self.COMPARE))
        self.compare_table.setObjectName("compare_table")
        self.compare_table.setHorizontalHeaderLabels(self.COMPARE)
        self.compare_table.verticalHeader().setVisible(False)
        self.compare_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.compare_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(self.intro)
        tl.addWidget(self.table, 1)
        tl.addLayout(buttons)
        tl.addWidget(self.status)
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addWidget(self.compare_title)
        bl.addWidget(self.compare_table, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(split)
        self.setFocusProxy(self.table)

    # -- the list ------------------------------------------------------------------------
    def _project(self):
        return Project.open(self.project_root)

    def _model_in_use(self) -> tuple[Path | None, bool]:
        """(the model Review and Extract use: the project's, else the newest run's; whether it
        was chosen with Use this model)."""
        try:
            project = self._project()
        except (ValueError, OSError):
            return None, False
        m = newest_model(project)
        return (m.resolve() if m is not None else None), project.model is not None and m == project.model

    def refresh(self) -> None:
        """Read the run folders again (a run may have started, stopped or finished)."""
        selected = set(self.selected_names())
        try:
            self.runs = RunDir.list(self._project().runs_dir)
        except (ValueError, OSError) as e:
            self.runs = []
            self.status.setText(str(e))
        in_use, chosen = self._model_in_use()
        self.settings = {}
        self.table.setRowCount(len(self.runs))
        for r, info in enumerate(self.runs):
            try:
                settings = RunDir(info.path).read_settings()["settings"]
            except TuneError:
                settings = {}
            self.settings[info.name] = settings
            try:
                started = RunDir(info.path).read_settings().get("starting_model")
            except TuneError:
                started = None
            steps = f"{info.step if info.step is not None else 0} of {info.total_steps or '?'}"
            used = in_use is not None and RunDir(info.path).model_path.resolve() == in_use
            in_use_text = ("yes" if chosen else "yes (newest run: none chosen)") if used else ""
            cells = (info.name, STATUS_TEXT.get(info.status, info.status), steps,
                     f"from {run_start_text(started, self.project_root)}; {settings_text(settings)}",
                     _fmt(mean_agreement(info.scores)), in_use_text)
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 3:
                    item.setToolTip(", ".join(f"{k} {v}" for k, v in settings.items()))
                if c == 4 and info.scores:
                    item.setToolTip("; ".join(f"{f}: agreement {_fmt(v.get('agreement'))}"
                                              for f, v in info.scores["fields"].items()))
                if used:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(r, c, item)
        n = len(self.runs)
        self.intro.setText(f"{n} run{'s' if n != 1 else ''} of this project (its runs folder), newest first. "
                           f"Select one to open its results or use its model; select two (Ctrl+click) to compare."
                           if n else "No runs yet: fine-tune a model in the Train tab.")
        if selected:
            self.select_runs([i.name for i in self.runs if i.name in selected])
        elif self.runs:
            self.table.selectRow(0)
        self._selection_changed()

    def eventFilter(self, obj, event):
        if obj is self.table and event.type() == QEvent.Type.KeyPress \
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.open_selected()
            return True
        return super().eventFilter(obj, event)

    def showEvent(self, event):
        super().showEvent(event)
        self.refresh()  # runs started, stopped or finished since

    def selected_names(self) -> list[str]:
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        return [self.runs[r].name for r in rows if r < len(self.runs)]

    def select_runs(self, names) -> None:
        self.table.clearSelection()
        mode = self.table.selectionMode()
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.MultiSelection)
        for r, info in enumerate(self.runs):
            if info.name in names:
                self.table.selectRow(r)
        self.table.setSelectionMode(mode)

    def _selected_infos(self) -> list[RunInfo]:
        names = self.selected_names()
        return [i for i in self.runs if i.name in names]

    def _selection_changed(self) -> None:
        infos = self._selected_infos()
        one_done = len(infos) == 1 and infos[0].status == FINISHED
        self.open_button.setEnabled(one_done)
        self.use_button.setEnabled(one_done)
        self.compare_button.setEnabled(len(infos) == 2 and all(i.status == FINISHED for i in infos))

    # -- actions -------------------------------------------------------------------------
    def open_selected(self) -> bool:
        infos = self._selected_infos()
        if len(infos) != 1 or infos[0].status != FINISHED:
            self._error("Select one finished run to open its results.")
            return False
        try:
            report = RunDir(infos[0].path).read_report()
        except TuneError as e:
            self._error(str(e))
            return False
        self.open_results.emit(report, str(infos[0].path))
        return True

    def compare_selected(self) -> bool:
        infos = self._selected_infos()
        if len(infos) != 2 or not all(i.status == FINISHED for i in infos):
            self._error("Select two finished runs (Ctrl+click) to compare them.")
            return False
        a, b = sorted(infos, key=lambda i: i.modified)  # A: the older run, B: the newer
        try:
            ra, rb = RunDir(a.path).read_report(), RunDir(b.path).read_report()
        except TuneError as e:
            self._error(str(e))
            return False
        fields = list(ra["fields"]) + [f for f in rb["fields"] if f not in ra["fields"]]
        rows = [(f, ra["fields"].get(f, {}), rb["fields"].get(f, {})) for f in fields]
        if ra.get("overall") or rb.get("overall"):
            rows.append(("all fields", ra.get("overall") or {}, rb.get("overall") or {}))
        self.compare_table.setRowCount(len(rows))
        for r, (name, fa, fb) in enumerate(rows):
            self.compare_table.setItem(r, 0, QTableWidgetItem(name))
            for k, m in enumerate(("recall", "agreement", "threshold")):
                va, vb = fa.get(m), fb.get(m)
                fmt = format_threshold if m == "threshold" else _fmt  # a threshold is never rounded up to 1
                ia, ib = QTableWidgetItem(fmt(va)), QTableWidgetItem(fmt(vb))
                if m != "threshold" and va is not None and vb is not None and abs(vb - va) > 1e-9:
                    # B better or worse than A, in colour and in words
                    ib.setText(f"{_fmt(vb)} ({vb - va:+.3f})")
                    ib.setForeground(Qt.GlobalColor.darkGreen if vb > va else Qt.GlobalColor.red)
                for c, item in ((1 + 2 * k, ia), (2 + 2 * k, ib)):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                    self.compare_table.setItem(r, c, item)
        self.compare_table.resizeRowsToContents()
        sa, sb = self.settings.get(a.name, {}), self.settings.get(b.name, {})
        differ = [f"{k} {sa.get(k)} → {sb.get(k)}" for k in sorted(set(sa) | set(sb))
                  if k not in MACHINE_SETTINGS and sa.get(k) != sb.get(k)]
        ha = ra.get("run", {}).get("heldout_pages")
        hb = rb.get("run", {}).get("heldout_pages")
        self.compare_title.setText(
            f"A: {a.name} ({ha} held-out pages) against B: {b.name} ({hb} held-out pages). "
            f"Settings that differ: {', '.join(differ) or 'none'}."
            + (" The held-out pages differ, so the scores are not of the same pages."
               if ra.get("run", {}).get("heldout_pages") != rb.get("run", {}).get("heldout_pages")
               or sa.get("seed") != sb.get("seed") or sa.get("heldout_fraction") != sb.get("heldout_fraction")
               else ""))
        return True

    def use_selected_model(self) -> Path | None:
        infos = self._selected_infos()
        if len(infos) != 1 or infos[0].status != FINISHED:
            self._error("Select one finished run to use its model.")
            return None
        rd = RunDir(infos[0].path)
        try:
            from dxstudio.engine.container import ModelFileError, load_model

            project = self._project()
            cfg = load_model(rd.model_path).cfg
            if project.model_field_names(cfg.fields) != project.field_names:
                raise TuneError(f"{rd.model_path}: the model's fields {list(cfg.fields)} are not the project's "
                                f"schema {project.field_names}")
            project.model = rd.model_path
            project.save()  # atomic (write_json_atomic)
        except (TuneError, ModelFileError, ValueError, OSError) as e:
            self._error(f"Cannot use this model: {e}")
            return None
        self.status.setText(f"The project's model is now {rd.model_path} (run {rd.name}).")
        self.refresh()
        self.model_chosen.emit(str(rd.model_path))
        return rd.model_path

    def _error(self, message: str) -> None:
        self.last_error = message
        self.status.setText(message)
        if self.show_dialogs:
            box = QMessageBox(QMessageBox.Icon.Warning, "Runs", message, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
