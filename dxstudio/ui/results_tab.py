"""The Results tab: a finished run's scores, one front end of dxstudio.tuning's report.

ResultsPanel(parent=None)
    show_run(report, run_dir, project_root): the table of recall, agreement, value recall and
    value agreement, threshold and coverage per field, the suggested LocalFirst threshold and how
    sure it is (the 95% lower bound) in plain words with the too-few-pages warning, a
    precision-versus-coverage plot per field with the threshold marked, "Export model"
    (export_model(dest) -> Path) and the tuned model's answers over each held-out page beside
    its labels, right and wrong marked (show_heldout_page(page_id)).

The Train tab (the settings form and a run's progress) is dxstudio/ui/train_tab.py.
"""
from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFileDialog, QHBoxLayout, QHeaderView, QLabel,
                               QMessageBox, QPushButton, QSizePolicy, QSplitter, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from dxstudio.fsutil import write_bytes_atomic
from dxstudio.project import Project
from dxstudio.tuning import DEFAULTS, TuneError
from dxstudio.tuning.heldout import HeldOutAnswers, heldout_answers, load_run_model
from dxstudio.tuning.localfirst import promise_sentence
from dxstudio.tuning.rundir import RunDir
from dxstudio.tuning.scoring import document_summary
from dxstudio.ui.page_view import PageView, field_colours

pg.setConfigOptions(antialias=True, background="w", foreground="k")


def _fmt_rate(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def format_threshold(v) -> str:
    """A threshold with the digits it needs: never rounded up to 1 (0.99985 is not "1")."""
    if v is None:
        return "-"
    digits = 3
    text = f"{v:.{digits}g}"
    while float(text) >= 1 > v and digits < 12:
        digits += 1
        text = f"{v:.{digits}g}"
    return text


PREVIEW_MIN_HEIGHT = 320  # px of each held-out page view (65-90 px was unreadable)
FEW_HELDOUT_PAGES = 20  # below this many held-out pages the Results tab says the scores are rough

COLUMN_HELP = {
    "Recall": "Of the held-out pages whose label has a value for this field, the share where the model "
              "found exactly the label's words.",
    "Agreement": "Of the held-out pages where the label or the model has a value for this field, the share "
                 "where both have exactly the same words (a value the model invents counts against it).",
    "Threshold": "The LocalFirst threshold of this field: the lowest confidence from which at least the "
                 "required share of the model's values were exactly right (with enough values at or above "
                 "it). Values at or above it can be used without asking; '-': none can be suggested yet.",
    "Value recall": "As Recall, but a value counts as right when its text equals the label's value (after "
                    "normalizing), even when the model read it where it is printed a second time.",
    "Value agreement": "As Agreement, with values compared by their text as in Value recall.",
    "Coverage": "The share of the model's values at or above the threshold: what can be used without asking.",
    "Right / values": "Values the model got exactly right, out of the values on either side.",
    "Labelled pages": "Held-out pages whose label has a value for this field.",
    "This page": "The model's answer for this field on the held-out page shown below: right, wrong, missed "
                 "(the label has a value, the model none) or invented (the model has a value, the label none).",
}
OUTCOME_WORDS = {"correct": "right", "wrong": "wrong", "missed": "missed", "spurious": "invented",
                 "both_null": "no value", "unscored": "not scored"}


def documents_sentence(report: dict) -> str:
    """Per document beside per page (issue 28): "" when every held-out document is one page."""
    s = document_summary(report)
    if not s or not s["multi_page"]:
        return ""
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    per = ", ".join(f"{n} {fmt(f['document_agreement'])}" for n, f in s["fields"].items())
    return (f"Per document: {s['documents']} held-out documents ({s['multi_page']} of several pages, "
            f"{s['pages']} pages). Agreement {fmt(s['per_document']['agreement'])} per document against "
            f"{fmt(s['per_page']['agreement'])} per page; a document's field is right when its most confident "
            f"page's value is the label's ({per}).")


PROMISE_HELP = (
    "How sure: each field's threshold is the lowest confidence at which the one-sided 95% "
    "Clopper-Pearson lower bound of the precision of its held-out values reaches the share asked for "
    f"(the setting share, {DEFAULTS['share'] * 100:g}% unless changed). The sentence states that bound, rounded "
    "down, never more. "
    "A field without a threshold of its own is always asked; the pooled threshold of all fields is "
    "reported, never used. docs/tuning.md explains recall, agreement and the bound.")


def threshold_sentence(report: dict) -> str:
    """The suggested LocalFirst threshold and what it means, in plain words; never at odds with
    the table's per-field thresholds."""
    t = report.get("threshold")
    share = report.get("share", DEFAULTS["share"])
    if t is None:
        with_t = [f for f, v in report.get("fields", {}).items() if v.get("threshold") is not None]
        if with_t:
            rest = [f for f in report.get("fields", {}) if f not in with_t]
            return (f"No single threshold holds for all fields together, but {', '.join(with_t)} "
                    f"{'has' if len(with_t) == 1 else 'have'} one of {'its' if len(with_t) == 1 else 'their'} "
                    f"own (the Threshold column): at or above it the local model's values of that field were "
                    f"right at least {share * 100:g}% of the time on held-out pages"
                    + (" (with 95% confidence)." if report.get("threshold_rule") == "bound" else ".")
                    + (f" For {', '.join(rest)}, send the page to the labelling model or a person." if rest else ""))
        return ((report.get("threshold_statement") or "No LocalFirst threshold can be suggested.")
                + " Until one can, send every page to the labelling model or a person; more reviewed "
                  "pages or more epochs usually help.")
    right = "right (the label's value)" if report.get("threshold_by") == "value" else "exactly right"
    how = " (with 95% confidence)" if report.get("threshold_rule") == "bound" else ""
    return (f"Pooled LocalFirst threshold (reported, not used to route): {format_threshold(t)}. At or above "
            f"{format_threshold(t)} the local model's values of all fields together were {right} at least "
            f"{share * 100:g}% of the time on held-out pages{how}; a field routes by its own threshold only.")


def page_tally(outcomes: dict) -> str:
    """A held-out page's scorer outcomes {field: outcome} in words, counting the values (label's
    or model's) as the marks on the page do: "2 of 3 values right" (both empty and unscored
    fields are not values)."""
    values = [o for o in outcomes.values() if o in ("correct", "wrong", "missed", "spurious")]
    if not values:
        return "no values"
    return f"{values.count('correct')} of {len(values)} value{'s' if len(values) != 1 else ''} right"


class EvenSplitter(QSplitter):
    """A splitter whose panes keep equal widths until the person drags the handle (the labels
    and the answers are the same page: side by side at the same scale)."""

    def __init__(self, orientation, parent=None):
        super().__init__(orientation, parent)
        self.moved_by_person = False
        self.splitterMoved.connect(self._moved)

    def _moved(self, *_):
        self.moved_by_person = True

    def resizeEvent(self, event):
        super().resizeEvent(event)
        if not self.moved_by_person and self.count():
            share = (self.width() - self.handleWidth() * (self.count() - 1)) // self.count()
            self.setSizes([share] * self.count())


def bound_sentences(report: dict) -> str:
    """How sure the threshold is, in words: the pooled bound, each field's with a threshold of
    its own, and the warning when the held-out pages are too few."""
    lines = []
    pooled = report.get("pooled")
    if pooled:
        lines.append(f"All fields: {pooled['bound_statement']}")
    for name, f in report.get("fields", {}).items():
        if f.get("threshold") is not None and f.get("bound_statement"):
            lines.append(f"{name}: {f['bound_statement']}")
    if report.get("warning"):
        lines.append(f"Warning: {report['warning']}")
    return "\n".join(lines)


def app_words(text: str) -> str:
    """A sentence of the tuner (said on the command line too) in the app's terms: the Folds
    setting of the Train tab, not a command-line flag."""
    import re
    text = re.sub(r"\(with a single split, --folds (\d+) also holds every page out once\)",
                  r"(or set Folds to \1 in the Train tab: every page is then held out once)", text)
    return re.sub(r"`?--folds (\d+)`?", r"Folds \1 (Train tab)", text)


def bound_html(report: dict) -> str:
    """bound_sentences as rich text: the sentences plain, the warning alone in colour."""
    from html import escape
    lines = []
    for line in bound_sentences(report).split("\n"):
        if not line:
            continue
        line = escape(app_words(line))
        if line.startswith("Warning: "):
            line = f"<span style='color:#9a3412'><b>Warning</b>: {line[len('Warning: '):]}</span>"
        lines.append(line)
    return "<br>".join(lines)


class ResultsPanel(QWidget):
    """The Results tab. Its panes are linked: selecting a field (a row of the table, a click on its
    curve, a click on its words in a page view) selects it everywhere: the row, the curve
    (framed), its words on both page views, and a held-out page where it has a value (one where
    the model is wrong first) when the page shown has none. The "This page" column says each
    field's outcome on the held-out page shown. "Open in Review" (or a double-click on a page
    view) emits openInReview(page id, field) and the window shows that page in Review."""
    # five figures a field (issue 23: nine were too many); value recall and agreement, the
    # counts of values and of labelled pages are in each row's tooltip (and table_rows)
    COLUMNS = ("Field", "Recall", "Agreement", "Threshold", "Coverage", "This page")
    DETAILS = ("Value recall", "Value agreement", "Right / values", "Labelled pages")
    openInReview = Signal(str, str)  # (page id, selected field or "")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.selected_field: str | None = None
        self.current_page: str | None = None
        self._shown = None  # HeldOutAnswers of the page shown
        self._linking = False
        self.report: dict | None = None
        self.run_dir: Path | None = None
        self.project_root: Path | None = None
        self.show_dialogs = True
        self.last_error: str | None = None
        self.heldout_ids: list[str] = []
        self.page_outcomes: dict[str, dict] = {}  # page id -> {field: "right"|"wrong"|...}
        self._model = None  # (cfg, runtime params, kernels) of the shown run, loaded once
        self._build()

    def _build(self) -> None:
        self.title = QLabel("No results yet: fine-tune a model in the Train tab.")
        f = self.title.font()
        f.setPointSizeF(f.pointSizeF() * 1.2)
        f.setBold(True)
        self.title.setFont(f)
        self.export_label = QLabel("")  # where the model was exported (the title stays the run's)
        self.export_label.setObjectName("export_label")
        self.export_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.caveat_label = QLabel("")
        self.caveat_label.setObjectName("caveat")
        self.caveat_label.setWordWrap(True)
        self.caveat_label.setStyleSheet("color: #8a5a00;")
        self.caveat_label.hide()
        self.documents_label = QLabel("")
        self.documents_label.setObjectName("documents")
        self.documents_label.setWordWrap(True)
        self.help_label = QLabel(
            "<b>Recall</b>: labelled values found. <b>Agreement</b>: exact matches among values on either "
            "side. <b>Threshold</b>: the confidence from which values are used without asking. "
            "Hover a column title for more.")
        self.help_label.setWordWrap(True)
        self.threshold_label = QLabel("")
        self.threshold_label.setWordWrap(True)
        self.threshold_label.setMinimumHeight(self.threshold_label.fontMetrics().lineSpacing() * 2 + 6)
        self.threshold_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bound_label = QLabel("")
        self.bound_label.setWordWrap(True)
        self.bound_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # one precision-versus-coverage plot per field, the threshold marked (filled in show_run)
        self.curves_row = QHBoxLayout()
        self.curve_plots: dict[str, pg.PlotWidget] = {}
        self.curve_items: dict[str, pg.PlotDataItem] = {}
        self.threshold_marks: dict[str, tuple[float, float] | None] = {}
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        for c, name in enumerate(self.COLUMNS):
            if name in COLUMN_HELP:
                self.table.horizontalHeaderItem(c).setToolTip(COLUMN_HELP[name])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.itemSelectionChanged.connect(self._table_selected)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        # compact rows: the held-out pages below need the height more than the table does
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().lineSpacing() + 8)
        self.table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.export_button = QPushButton("Export model...")
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self._export_clicked)
        self.page_box = QComboBox()
        self.page_box.currentIndexChanged.connect(self._page_chosen)
        self.page_summary = QLabel("")
        self.labels_view = PageView()
        self.answers_view = PageView()
        self.open_button = QPushButton("Open in Review")
        self.open_button.setToolTip("Show this held-out page in the Review tab, to fix its labels "
                                    "(or double-click a page view)")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(self.open_in_review)
        for view in (self.labels_view, self.answers_view):
            view.setMinimumHeight(PREVIEW_MIN_HEIGHT)  # readable; the tab scrolls on a small screen
            view.selectionChanged.connect(lambda words, v=view: self._words_selected(v, words))
            view.viewport().installEventFilter(self)
        self.legend = QLabel("")
        self.legend.setWordWrap(True)

        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.export_label)
        top.addWidget(self.export_button)
        pages_row = QHBoxLayout()
        pages_row.addWidget(QLabel("Held-out page:"))
        pages_row.addWidget(self.page_box, 1)
        pages_row.addWidget(self.page_summary, 2)
        pages_row.addWidget(self.open_button)
        views = EvenSplitter(Qt.Orientation.Horizontal)
        for caption, view in (("Labels (what the model was scored against)", self.labels_view),
                              ("Tuned model's answers: green frame right, red dashed wrong",
                               self.answers_view)):
            box = QWidget()
            lay = QVBoxLayout(box)
            lay.setContentsMargins(0, 0, 0, 0)
            label = QLabel(caption)
            label.setWordWrap(True)  # so the longer caption does not make its view the wider one
            lay.addWidget(label)
            lay.addWidget(view, 1)
            views.addWidget(box)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.threshold_label)
        layout.addWidget(self.bound_label)
        layout.addWidget(self.caveat_label)
        layout.addWidget(self.documents_label)
        layout.addWidget(self.table)
        layout.addWidget(self.help_label)
        layout.addLayout(self.curves_row)
        layout.addLayout(pages_row)
        layout.addWidget(self.legend)
        layout.addWidget(views, 1)

    # -- the run -----------------------------------------------------------------------
    def show_latest(self, project_root) -> bool:
        """Show the newest finished run of the project (on opening: results survive a restart).
        False when there is none (or its report does not read)."""
        try:
            runs = RunDir.list(Project.open(project_root).runs_dir)
        except (ValueError, OSError):
            return False
        for info in runs:
            if info.status == "finished":
                try:
                    self.show_run(RunDir(info.path).read_report(), info.path, project_root)
                    return True
                except TuneError as e:
                    self.title.setText(f"Run {info.name}: {e}")
                    return False
        return False

    def show_run(self, report: dict, run_dir, project_root) -> None:
        self.report, self.run_dir, self.project_root = report, Path(run_dir), Path(project_root)
        self._model = None
        run = report.get("run", {})
        self.title.setText(f"Run {self.run_dir.name}: {run.get('steps', '?')} steps, "
                           f"{run.get('train_pages', '?')} training and {run.get('heldout_pages', '?')} held-out pages")

        self.threshold_label.setText(promise_sentence(report))  # the one sentence a person can rely on
        self.threshold_label.setToolTip(threshold_sentence(report) + "\n\n" + PROMISE_HELP)
        self.export_label.setText("")
        held = run.get("heldout_pages", len(report.get("pages", [])))
        if isinstance(held, int) and held < FEW_HELDOUT_PAGES:
            self.caveat_label.setText(
                f"Only {held} held-out page{'s' if held != 1 else ''}: one page more or less right moves a "
                f"rate by {100 / max(1, held):.0f} points, so read these scores as rough. Review more pages "
                f"(or raise the held-out fraction) for firmer ones.")
            self.caveat_label.show()
        else:
            self.caveat_label.hide()
        self.documents_label.setText(documents_sentence(report))
        self.documents_label.setVisible(bool(self.documents_label.text()))
        self.bound_label.setTextFormat(Qt.TextFormat.RichText)
        self.bound_label.setText(bound_html(report))  # only the warning in colour, not every line
        self._fill_table(report)
        self._draw_curves(report)
        self.export_button.setEnabled(RunDir(self.run_dir).model_path.exists())
        self.page_outcomes = {row["id"]: row["outcomes"] for row in report.get("pages", [])}
        def worst_first(row):  # the share of the page's values the model got right, then place
            values = [o for o in row["outcomes"].values() if o in ("correct", "wrong", "missed", "spurious")]
            return (values.count("correct") / len(values) if values else 2.0, -len(values))
        self.heldout_ids = [row["id"] for row in sorted(report.get("pages", []), key=worst_first)]
        fields = list(report.get("fields", {}))
        colours = field_colours(list(fields))  # the review view's: one colour per field across the app
        self.legend.setText("Fields: " + "  ".join(
            f'<span style="background:{colours[f].name()}; color:white">&nbsp;{f}&nbsp;</span>' for f in fields)
            + "  - the first word of a value is drawn stronger; hatched grey: ignored by the loss.")
        self.selected_field, self.current_page, self._shown = None, None, None
        self.open_button.setEnabled(bool(self.heldout_ids))
        self.page_box.blockSignals(True)
        self.page_box.clear()
        for pid in self.heldout_ids:
            self.page_box.addItem(f"{pid}  ({page_tally(self.page_outcomes[pid])})", pid)
        self.page_box.blockSignals(False)
        if self.heldout_ids:  # worst first (the share of values right), so mistakes are found first
            self.page_box.setCurrentIndex(0)
            self.show_heldout_page(self.heldout_ids[0])

    def _fill_table(self, report: dict) -> None:
        rows = list(report.get("fields", {}).items())
        if report.get("overall"):
            rows.append(("all fields", report["overall"]))
        self.table.setRowCount(len(rows))
        self.details = {}
        for r, (name, s) in enumerate(rows):
            cells = (name, _fmt_rate(s.get("recall")), _fmt_rate(s.get("agreement")),
                     format_threshold(s.get("threshold")), _fmt_rate(s.get("coverage")), "")
            details = {"Value recall": _fmt_rate(s.get("value_recall")),
                       "Value agreement": _fmt_rate(s.get("value_agreement")),
                       "Right / values": f"{s.get('n_correct', 0)} / {s.get('n_values', 0)}",
                       "Labelled pages": str(s.get("n_labelled", ""))}
            self.details[name] = details
            tip = (f"{name}: {details['Right / values']} values exactly right; labelled on "
                   f"{details['Labelled pages'] or '?'} held-out page(s); by value (the label's value wherever it "
                   f"is printed): recall {details['Value recall']}, agreement {details['Value agreement']}")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip if c != len(cells) - 1 else COLUMN_HELP.get("This page", ""))
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if name == "all fields":
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(r, c, item)
        height = self.table.horizontalHeader().height() + sum(self.table.rowHeight(r) for r in range(len(rows))) + 4
        self.table.setFixedHeight(height)

    def _draw_curves(self, report: dict) -> None:
        """Per field, precision against coverage as the confidence falls, from the report's curve
        points: right by value when the report's thresholds were chosen by value (the default),
        exactly right (the label's words) when by words, so the dot agrees with the threshold
        text; the threshold that routes the field (its own, else the pooled one, as `dxstudio
        extract` uses them) marked with a dot and a dashed line at the lowest point at or above it."""
        while self.curves_row.count():
            item = self.curves_row.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.curve_plots, self.curve_items, self.threshold_marks = {}, {}, {}
        colours = field_colours(list(report.get("fields", {})))
        # curve point: [confidence, coverage, precision (words), precision (value)]
        y_index = 3 if report.get("threshold_by", "value") == "value" else 2
        for name, f in report.get("fields", {}).items():
            plot = pg.PlotWidget(title=name)
            plot.setMenuEnabled(False)
            plot.setLabel("bottom", "coverage")
            plot.setLabel("left", "precision" + (" (value)" if y_index == 3 else " (words)"))
            plot.setXRange(0, 1.02, padding=0)
            plot.setYRange(0, 1.04, padding=0)
            plot.showGrid(x=True, y=True, alpha=0.25)
            plot.setMinimumHeight(150)
            plot.setMaximumHeight(200)
            plot.setToolTip(f"Click to select {name} in the table and on the pages")
            plot.scene().sigMouseClicked.connect(lambda _ev, n=name: self.select_field(n))
            points = f.get("curve") or []
            xs = [p[1] for p in points]
            ys = [p[y_index] if len(p) > y_index else p[2] for p in points]
            self.curve_items[name] = plot.plot(xs, ys, pen=pg.mkPen(colours[name], width=2),
                                               symbol="o", symbolSize=4, symbolBrush=colours[name])
            own = f.get("threshold")
            t = own  # a field without a threshold of its own routes ask: the pooled one is never marked
            at_or_above = [p for p in points if t is not None and p[0] >= t]
            mark = (at_or_above[-1][1], ys[len(at_or_above) - 1]) if at_or_above else None
            self.threshold_marks[name] = mark
            if mark is not None:
                which = "threshold"
                plot.addItem(pg.InfiniteLine(pos=mark[0], angle=90, pen=pg.mkPen("k", style=Qt.PenStyle.DashLine),
                                             label=f"{which} {t:.4g}", labelOpts={"position": 0.15}))
                plot.plot([mark[0]], [mark[1]], pen=None, symbol="o", symbolSize=10, symbolBrush="k")
            elif not points:
                plot.setTitle(f"{name}: no values on held-out pages")
            self.curve_plots[name] = plot
            self.curves_row.addWidget(plot, 1)

    def table_rows(self) -> dict:
        """{field: {column: text}} as shown (tests and the screenshot check read it)."""
        out = {}
        for r in range(self.table.rowCount()):
            name = self.table.item(r, 0).text()
            out[name] = {self.COLUMNS[c]: self.table.item(r, c).text() for c in range(1, len(self.COLUMNS))}
            out[name].update(getattr(self, "details", {}).get(name, {}))
        return out

    # -- export ------------------------------------------------------------------------
    def export_model(self, dest) -> Path:
        """Copy the run's model.safetensors to dest, atomically. Raises OSError naming the file."""
        if self.run_dir is None:
            raise OSError("no run is shown; fine-tune first")
        src = RunDir(self.run_dir).model_path
        dest = Path(dest)
        if dest.is_dir():
            dest = dest / f"docextract-{self.run_dir.name}.safetensors"
        write_bytes_atomic(dest, src.read_bytes())
        return dest

    def _export_clicked(self) -> None:
        default = str(Path.home() / f"docextract-{self.run_dir.name}.safetensors")
        dest, _ = QFileDialog.getSaveFileName(self, "Export model", default, "Model files (*.safetensors)")
        if not dest:
            return
        try:
            out = self.export_model(dest)
        except OSError as e:
            self._show_error(f"Cannot export the model: {e}")
            return
        self.export_label.setText(f"Exported to {out}")

    # -- held-out pages ----------------------------------------------------------------
    def _page_chosen(self, index: int) -> None:
        if 0 <= index < len(self.heldout_ids):
            self.show_heldout_page(self.heldout_ids[index])

    # -- linked panes ------------------------------------------------------------------
    def _table_selected(self) -> None:
        if self._linking:
            return
        rows = {i.row() for i in self.table.selectedItems()}
        if len(rows) == 1:
            name = self.table.item(rows.pop(), 0).text()
            self.select_field(None if name == "all fields" else name)

    def _words_selected(self, view, words) -> None:
        """A click on a word of a field (its label's words on the left, the model's on the
        right) selects that field."""
        if self._linking or not words or self._shown is None:
            return
        fields = list(self.report.get("fields", {})) if self.report else []
        i = words[-1]
        if view is self.labels_view:
            tag = self._shown.tags[i] if i < len(self._shown.tags) else 0
            name = fields[(tag - 1) // 2] if tag > 0 and (tag - 1) // 2 < len(fields) else None
        else:
            name = next((f for f, v in self._shown.answers.items() if v is not None and i in v.words), None)
        if name is not None:
            self.select_field(name)

    def select_field(self, name: str | None) -> None:
        """Select a field in every pane (None: no field)."""
        fields = list(self.report.get("fields", {})) if self.report else []
        name = name if name in fields else None
        self.selected_field = name
        self._linking = True
        try:
            self.table.clearSelection()
            if name is not None:
                self.table.selectRow(fields.index(name))
            for f, plot in self.curve_plots.items():
                vb = plot.getPlotItem().getViewBox()
                vb.setBorder(pg.mkPen("#1A1AFF", width=3) if f == name else None)
            if name is not None and self.current_page is not None:
                outcome = self.page_outcomes.get(self.current_page, {}).get(name)
                if outcome not in ("correct", "wrong", "missed", "spurious"):  # no value here: a page with one
                    target = self._page_with(name)
                    if target is not None and target != self.current_page:
                        self.page_box.setCurrentIndex(self.heldout_ids.index(target))  # shows it
            self._select_words()
        finally:
            self._linking = False

    def _page_with(self, name: str) -> str | None:
        """A held-out page where the field has a value: one where the model is wrong first."""
        for wanted in (("wrong", "missed", "spurious"), ("correct",)):
            for pid in self.heldout_ids:
                if self.page_outcomes.get(pid, {}).get(name) in wanted:
                    return pid
        return None

    def _select_words(self) -> None:
        shown, name = self._shown, self.selected_field
        was, self._linking = self._linking, True
        try:
            if shown is None or name is None:
                self.labels_view.clear_selection()
                self.answers_view.clear_selection()
                return
            fields = list(self.report.get("fields", {}))
            c = fields.index(name)
            self.labels_view.set_selection([i for i, t in enumerate(shown.tags) if t > 0 and (t - 1) // 2 == c])
            v = shown.answers.get(name)
            self.answers_view.set_selection(list(v.words) if v is not None else [])
        finally:
            self._linking = was

    def _fill_page_column(self) -> None:
        col = self.COLUMNS.index("This page")
        outcomes = self.page_outcomes.get(self.current_page, {}) if self.current_page else {}
        for r in range(self.table.rowCount()):
            name = self.table.item(r, 0).text()
            if name == "all fields":
                values = [o for o in outcomes.values() if o in ("correct", "wrong", "missed", "spurious")]
                text = f"{values.count('correct')} / {len(values)} right" if values else ""
            else:
                text = OUTCOME_WORDS.get(outcomes.get(name), "")
            item = self.table.item(r, col)
            item.setText(text)
            colour = {"right": "#1B9E3A", "wrong": "#D7191C", "missed": "#D7191C", "invented": "#D7191C"}.get(text)
            if colour:
                from PySide6.QtGui import QColor
                item.setForeground(QColor(colour))

    def open_in_review(self) -> None:
        if self.current_page is not None:
            self.openInReview.emit(self.current_page, self.selected_field or "")

    def eventFilter(self, obj, event):
        from PySide6.QtCore import QEvent
        if event.type() == QEvent.Type.MouseButtonDblClick and obj in (self.labels_view.viewport(),
                                                                        self.answers_view.viewport()):
            self.open_in_review()
            return True
        return super().eventFilter(obj, event)

    def _load_model(self):
        if self._model is None:
            settings = self.report.get("run", {}).get("settings", {})
            kernels = settings.get("kernels", DEFAULTS["kernels"])
            # the run's absent_value and repeats: its held-out pages built as the run built them
            self._model = load_run_model(RunDir(self.run_dir).model_path, kernels, settings)
        return self._model

    def heldout_answers(self, page_id: str) -> HeldOutAnswers:
        """One held-out page as the run's model answers it now, against its labels after review
        (dxstudio.tuning.heldout). Raises ValueError/OSError naming the file when broken."""
        return heldout_answers(Project.open(self.project_root), self._load_model(), page_id)

    def show_heldout_page(self, page_id: str) -> None:
        fields = list(self.report.get("fields", {}))
        self.current_page, self._shown = page_id, None
        self._fill_page_column()
        try:
            shown = self.heldout_answers(page_id)
        except (ValueError, OSError) as e:  # a page or label file broken since the run
            self.page_summary.setText(str(e))
            self.labels_view.clear_page(str(e))
            self.answers_view.clear_page(str(e))
            return

        try:
            image_root = Project.open(self.project_root).pages_dir
        except ValueError as e:
            self.page_summary.setText(str(e))
            return
        self.labels_view.show_page(shown.page, shown.tags, shown.statuses, field_names=fields, image_root=image_root)
        self.answers_view.show_page(shown.page, shown.tags, shown.statuses, predictions=shown.answers,
                                    field_names=fields, image_root=image_root)
        parts = []
        for f, ok in shown.marks.items():
            v = shown.answers.get(f)
            said = f'"{v.text}" ({v.confidence:.2f})' if v is not None else "nothing"
            parts.append(f"{'✓' if ok else '✗'} {f}: {said}")
        self.page_summary.setText("   ".join(parts) or "no field has a value on this page")
        self._shown = shown
        self._select_words()

    def _show_error(self, message: str) -> None:
        self.last_error = message
        if self.show_dialogs:
            box = QMessageBox(QMessageBox.Icon.Warning, "Results", message, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
