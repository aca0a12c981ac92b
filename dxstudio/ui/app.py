"""The main window and `run_app`, what `dxstudio [PROJECT]` opens.

    run_app(path=None) -> int        opens PROJECT, or the bundled sample (dxstudio.bundled)
                                     copied on first use to $DXSTUDIO_HOME/sample
                                     (default ~/.local/share/dxstudio/sample)
    MainWindow(project_path)         tabs: Review, Schema & labels, Train, Results, Runs, Extract;
                                     File: New project, Open, Import pages, Export reviewed labels

The window is a view of dxstudio.review.ReviewSession (the data model, no Qt): the page list,
the page view and the field panel subscribe to it, and the keys below call its operations,
each of which saves the label file at once.

Keys (also in the menus and the buttons' tooltips; ? or F1 lists them all). The review keys
act only while the Review tab is shown:
    A accept (and go to the next page)   X exclude (and go to the next page)   Shift+X exclude
    with a reason   1-9 make the selected words the value of field 1-9   Ctrl+1-9 field 1-9 has
    no value   Delete remove the selected words from their fields   J / K next / previous page
    N next unreviewed page   C next page with conflicts   Q next page of the model's queue
    M take the model's answer for the current field   U mark unreviewed   Ctrl+Z undo
    Ctrl+Shift+Z / Ctrl+Y redo   + / - zoom   0 fit the page   Esc clear the selection
    Ctrl+F search pages (Enter opens the first match, Down goes to the list, Esc clears)
    H hide / show the field fills   [ / ] fill lighter / stronger
Everywhere: Ctrl+N new project, Ctrl+I import pages, Ctrl+E export reviewed labels, Ctrl+O open,
F5 reload, Ctrl+Q quit, ? / F1 keyboard help.

The window remembers the page shown per project (.cache/app-state.json, written atomically)
and opens on it next time.
"""
from __future__ import annotations

import gc
import os
import shutil
import sys
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QFileDialog, QInputDialog, QLabel, QMainWindow, QMessageBox,
                               QScrollArea, QSplitter, QTabWidget, QVBoxLayout, QWidget)

from dxstudio.bundled import sample_dir
from dxstudio.engine.page import PageError
from dxstudio.fsutil import read_json, write_json_atomic
from dxstudio.project import LabelError, ProjectError, ProjectLayout
from dxstudio.review import LabelWriter, ReviewError, ReviewSession, export_reviewed, flush_label_writes
from dxstudio.ui.extract_panel import ExtractPanel
from dxstudio.ui.field_panel import FieldPanel, same_value_pairs
from dxstudio.ui.import_dialog import ImportDialog, NewProjectDialog
from dxstudio.ui.keys_dialog import KeysDialog
from dxstudio.ui.layout_stop import LayoutStop
from dxstudio.ui.model_answers import ModelAnswers, ModelBar
from dxstudio.ui.page_list import COUNT_WORDS, PageList
from dxstudio.ui.page_view import FillBar, PageView, prefetch_images, tag_name
from dxstudio.ui.reloader import SessionReloader
from dxstudio.ui.schema_panel import SchemaPanel

KEY_HINT = ("A accept · X exclude · 1–9 set field · Ctrl+1–9 no value · J / K next / previous · "
            "N next unreviewed · Q model's queue · M model's answer · ? all keys")
MIN_WIDTH, MIN_HEIGHT = 1000, 580
SAMPLE = sample_dir()  # resources/sample of the checkout, or the installed wheel's copy

STYLE = """
QMainWindow, QWidget { font-size: 13px; }
QTabBar::tab { padding: 6px 16px; }
QTabBar::tab:selected { font-weight: bold; }
QListWidget::item { padding: 3px 2px; }
QListWidget::item:selected { background: #CFE2FF; color: #212529; }
QPushButton { padding: 4px 10px; }
QGroupBox { font-weight: bold; margin-top: 10px; }
QGroupBox::title { subcontrol-origin: margin; left: 8px; padding: 0 4px; }
"""


def app_home() -> Path:
    """Where the app keeps its writable copy of the sample: $DXSTUDIO_HOME, else the XDG data folder."""
    if os.environ.get("DXSTUDIO_HOME"):
        return Path(os.environ["DXSTUDIO_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dxstudio"


def sample_project(home: Path | None = None, source: Path = SAMPLE) -> Path:
    """The writable copy of the bundled sample project; copied on first use (and again only
    if the copy was deleted), so a person's review of the sample survives restarts."""
    target = (home or app_home()) / "sample"
    if ProjectLayout(target).project_file.is_file():
        return target
    if not ProjectLayout(source).project_file.is_file():
        raise ProjectError(f"{source}: the bundled sample project is missing")
    if target.is_symlink() or (target.exists() and not _is_empty_dir(target)):
        # Not ours: the copy below appears whole (with dxproject.json) or not at all, so a
        # folder without dxproject.json was made by someone else. Never delete it.
        raise ProjectError(f"{target}: exists but is not a dxstudio project (no dxproject.json); dxstudio did not "
                           f"make it and leaves it alone: move it away, or set DXSTUDIO_HOME to another folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / ".sample-copying"
    if partial.exists() or partial.is_symlink():
        # left by a copy that was interrupted; removed only if it carries our mark
        if partial.is_symlink() or not (partial / _COPY_MARK).is_file():
            raise ProjectError(f"{partial}: exists and was not made by dxstudio; move it away")
        shutil.rmtree(partial)
    partial.mkdir()
    (partial / _COPY_MARK).write_text("a copy of the sample project in progress; safe to delete\n")
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns(*ProjectLayout.NOT_COPIED), dirs_exist_ok=True)
    ProjectLayout(partial).runs_dir.mkdir(exist_ok=True)
    (partial / _COPY_MARK).unlink()
    if target.exists():  # an empty folder: nothing in it to lose
        target.rmdir()
    partial.rename(target)  # the copy appears whole or not at all
    return target


_COPY_MARK = ".dxstudio-sample-copy"


def _page_image(project, page_id: str, known: dict) -> str:
    """The image named by the page's file, read again only when that file changed (its size or
    time): the prefetch thread read the list's next and previous pages and the queue's next on
    every J, two of them read on the J before, 1.5-2 ms of Python a J holding Python's lock
    while the GUI thread painted. known: {page file: ((time, size), image)}."""
    path = project.page_path(page_id)
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    seen = known.get(str(path))
    if seen is None or seen[0] != stamp:
        seen = known[str(path)] = (stamp, project.load_page(page_id).image)
    return seen[1]


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _training_panels():
    """(TrainingPanel, ResultsPanel, None) or (None, None, why) while the training side is
    not available, so the review side keeps working."""
    try:
        from dxstudio.ui.results_tab import ResultsPanel
        from dxstudio.ui.train_tab import TrainingPanel
    except Exception as e:  # the module is missing or broken: say so in its tab
        return None, None, f"{type(e).__name__}: {e}"
    return TrainingPanel, ResultsPanel, None


def _scrolled(widget: QWidget) -> QScrollArea:
    """A tab page that scrolls instead of forcing the window wider than MIN_WIDTH."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.NoFrame)
    area.setWidget(widget)
    return area


def _placeholder(text: str) -> QWidget:
    w = QWidget()
    label = QLabel(text)
    label.setAlignment(Qt.AlignCenter)
    label.setWordWrap(True)
    label.setStyleSheet("color: #6C757D; font-size: 14px;")
    QVBoxLayout(w).addWidget(label)
    return w


REVIEW_ACTIONS = ("accept", "exclude", "exclude_reason", "unreview", "next", "prev", "next_unreviewed",
                  "next_conflict", "next_queue", "use_model", "use_model_all", "undo", "redo", "remove_words", "zoom_in",
                  "zoom_out", "fit", "toggle_fill", "fill_lighter", "fill_stronger") \
    + tuple(f"field_{k}" for k in range(1, 10)) + tuple(f"no_value_{k}" for k in range(1, 10))


def fitted_size(avail_width: int | None, avail_height: int | None) -> tuple[int, int]:
    """The window's first size: 1400x880, or what a smaller screen has room for (a frame and a
    task bar aside), never below the minimum: 1264x880 on a 1280x1024 screen."""
    w, h = 1400, 880
    if avail_width and avail_height and avail_width >= MIN_WIDTH and avail_height >= MIN_HEIGHT:
        w, h = min(w, avail_width - 16), min(h, avail_height - 40)
    return max(w, MIN_WIDTH), max(h, MIN_HEIGHT)


def accept_note(page_id: str, status) -> str:
    """What to say after accepting a page that the trainer still cannot use as it stands."""
    msg = status.message
    if status.status == "conflicts":
        out = "absent" in msg or "is not on the page" in msg or "not on the page" in msg
        what = ("stays out of training and scoring" if out else
                "is used, but the fields below are ignored by the loss")
        return (f"Accepted {page_id}, but it {what}: {msg}. To use it: select the right words and press the "
                f"field's key (1–9), or Ctrl+1–9 for “no value”; or exclude the page (X).")
    if status.status == "unreviewed" and "not asked yet" in msg:
        return (f"Accepted {page_id}, but it stays out of training: {msg}. Press Label pages (Schema & labels), "
                f"or set the field here (select words and press its key, or Ctrl+1–9 for “no value”).")
    return ""


HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc")  # no one at a screen to answer a question


class _ElidedLabel(QLabel):
    """A one-line label that ends in "…" where its room ends (the status bar's key hint at
    1024 px was cut in the middle of a word); the whole text in its tooltip."""

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)

    def minimumSizeHint(self):
        size = super().minimumSizeHint()
        size.setWidth(0)
        return size

    def sizeHint(self):  # (its room is the status bar's stretch: no new size with each text)
        size = super().sizeHint()
        size.setWidth(0)
        return size

    def paintEvent(self, event):
        from PySide6.QtGui import QPainter

        painter = QPainter(self)
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.ElideRight, rect.width())
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(Qt.AlignLeft | Qt.AlignVCenter), text)


class _WriteFailures(QObject):
    """Carries the label writer's failures (its thread) to the GUI thread (a queued signal)."""
    failed = Signal(str, str, str)  # page id, file, problem


class MainWindow(QMainWindow):
    # Ask before closing during a fine-tuning run: True always, False never (the tests' fixture),
    # None (the default) when a person can answer, i.e. not on a headless platform (offscreen,
    # minimal), where a modal question would wait forever: there the run is stopped and closed.
    confirm_close: bool | None = None

    def __init__(self, project_path, parent=None, remember: bool = True):
        """remember: open on the page shown last and write it back (the screenshot command,
        which must leave the project as it was, turns it off)."""
        super().__init__(parent)
        self.remember = remember
        self.session = ReviewSession(project_path)
        # each decision's label file is written (and synced) on the writer's thread: the GUI
        # thread does not wait on the disk; the close waits for what is still pending
        self._write_failures = _WriteFailures(self)
        self._write_failures.failed.connect(self._label_write_failed)
        self.session.label_writer = LabelWriter(
            on_error=lambda pid, path, e: self._write_failures.failed.emit(pid, path, str(e)))
        self.project_root = Path(self.session.project.root)
        self.setWindowTitle(f"dxstudio — {self.session.project.name}")
        self.setStyleSheet(STYLE)
        self.actions: dict[str, QAction] = {}
        self._jobs = []  # import dialogs and other windows kept alive
        self._page_images: dict = {}  # _page_image's memory, kept by the prefetch thread
        self._build_actions()

        # -- review tab ----------------------------------------------------------------------
        self.page_list = PageList(self.session)
        self.view = PageView()
        self.view.setToolTip("")
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.banner.setAlignment(Qt.AlignLeft | Qt.AlignVCenter)
        # the banner's room is kept whether it says something or not: the page never moves
        # under the mouse when a note comes or goes (two lines; the whole note in its tooltip)
        self.banner.setFixedHeight(self.banner.fontMetrics().lineSpacing() * 2 + 14)
        self._clear_banner()
        self.fill_bar = FillBar(self.view)
        self.model_answers = ModelAnswers(self.session, self)
        self.model_bar = ModelBar(self.model_answers)
        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(LayoutStop(self.banner, self.banner.maximumHeight()))
        cl.addWidget(self.model_bar)
        cl.addWidget(self.fill_bar)
        cl.addWidget(self.view, 1)
        self.field_panel = FieldPanel(self.session, self.actions)
        self.field_panel.answers = self.model_answers
        self.splitter = QSplitter()
        self.splitter.addWidget(self.page_list)
        self.splitter.addWidget(centre)
        self.splitter.addWidget(self.field_panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([240, 780, 380])

        self.reloader = SessionReloader(self.session, self)  # F5 and the others: the files read off the GUI thread
        self.reloader.failed.connect(self._reload_failed)
        self.schema_panel = SchemaPanel(self.session)
        self.schema_panel.reloader = self.reloader
        self.tabs = QTabWidget()
        self.review_page = LayoutStop(self.splitter, least_only=True)  # (a page switch repaints what it changes, not the tab)
        self.tabs.addTab(self.review_page, "Review")
        self.tabs.addTab(_scrolled(self.schema_panel), "Schema && labels")
        TrainingPanel, ResultsPanel, why = _training_panels()
        if TrainingPanel is not None:
            self.training_panel = TrainingPanel(self.project_root, self)
            self.results_panel = ResultsPanel(self)
            self.training_panel.finished.connect(self._run_finished)
            self.tabs.addTab(self.training_panel, "Train")
            self.results_area = _scrolled(self.results_panel)  # a small screen scrolls, never squeezes
            self.tabs.addTab(self.results_area, "Results")
            self.results_panel.show_latest(self.project_root)  # results survive a restart
            from dxstudio.ui.runs_panel import RunsPanel

            self.runs_panel = RunsPanel(self.project_root, self)
            self.runs_panel.open_results.connect(self._show_results)
            self.runs_panel.model_chosen.connect(self._on_model_chosen)
            self.training_panel.finished.connect(lambda *_: self.model_answers.start())
            self.training_panel.finished.connect(lambda *_: self.extract_panel.follow_project())
            self.training_panel.finished.connect(lambda *_: self.runs_panel.refresh())
            self.results_panel.openInReview.connect(self.open_in_review)
            self.tabs.addTab(self.runs_panel, "Runs")
        else:
            self.training_panel = self.results_panel = self.runs_panel = None
            self.tabs.addTab(_placeholder(f"The training panel is not available.\n({why})"), "Train")
            self.tabs.addTab(_placeholder("Results appear here after a fine-tuning run."), "Results")
        self.extract_panel = ExtractPanel(self.session.project)
        self.extract_panel.pageAdded.connect(self._extract_page_added)
        self.tabs.addTab(_scrolled(self.extract_panel), "Extract")
        self.setCentralWidget(self.tabs)
        self._build_menus()

        self.counts_label = QLabel()
        # (each in a LayoutStop: a new text asks for the window's layout only when its size changes)
        self.statusBar().addPermanentWidget(LayoutStop(self.counts_label))
        self.hover_label = _ElidedLabel(KEY_HINT)
        self.hover_label.setToolTip(KEY_HINT)
        self.hover_label.setStyleSheet("color: #495057;")
        self.statusBar().addWidget(LayoutStop(self.hover_label), 1)
        from PySide6.QtWidgets import QPushButton
        self.show_results_button = QPushButton("")
        self.show_results_button.setToolTip("A run ended: open the Results tab")
        self.show_results_button.clicked.connect(self._open_offered_results)
        self.show_results_button.hide()
        self.statusBar().addPermanentWidget(self.show_results_button)

        self.session.subscribe(self._on_session)
        self.page_list.pageActivated.connect(self.goto)
        self.page_list.leaveRequested.connect(self.view.setFocus)
        self.view.selectionChanged.connect(self._on_selection)
        self.view.wordHovered.connect(self._on_hover)
        self.field_panel.setFieldRequested.connect(self.set_field)
        self.field_panel.clearFieldRequested.connect(lambda name: self._do(self.session.clear_field, name))
        self.field_panel.revertFieldRequested.connect(lambda name: self._do(self.session.revert_field, name))
        self.field_panel.useModelRequested.connect(self.use_model_answer)
        self.field_panel.pageRequested.connect(self.goto)
        self.model_answers.changed.connect(self._on_answers)
        self.model_bar.toggled.connect(lambda _: self._draw_answers())
        self.schema_panel.endpointMissing.connect(lambda: self.tabs.setCurrentIndex(1))
        self.schema_panel.schemaChanged.connect(self._after_schema_edit)
        self.page_list.queue_source = self.model_answers.queue
        self.page_list.searchChanged.connect(lambda _: self._draw_search())
        self.model_answers.changed.connect(self.page_list.update_queue)
        self._last_tab = self.tabs.currentIndex()
        self._queue_walk = False  # the page shown was opened by Q: A goes on down the queue
        self.tabs.currentChanged.connect(self._on_tab)
        self._restore_page()
        self._show_current()
        self._update_counts()
        self._fit_to_screen()
        self._on_tab(self.tabs.currentIndex())
        self.model_answers.start()  # the project's model, if any, in the background (cached per model SHA)
        # what the window holds once open (and a model's answers once read) is kept out of the
        # garbage collector's full passes: see freeze_long_lived
        QTimer.singleShot(0, lambda: freeze_long_lived(collect=True))
        self._answers_frozen = None  # the answers job (its last_run) whose objects were frozen
        self.model_answers.changed.connect(self._freeze_answers)
        errors = [pid for pid, st in self.session.statuses.items() if st.status == "error"]
        if errors:
            self.statusBar().showMessage(
                f"{len(errors)} page(s) cannot be read ({', '.join(errors[:3])}{'…' if len(errors) > 3 else ''}); "
                f"filter the list by “Cannot be read” to see why", 15000)

    def _freeze_answers(self) -> None:
        """A model's answers, read by a job that has ended, frozen with the rest (freeze_long_lived;
        without a collection first: a full pass over the 60 000 objects a job leaves on the
        sample took 16-25 ms of the GUI thread's turn, and a job's objects are answers, not cycles)."""
        a = self.model_answers
        if not a.running and a.last_run is not None and a.last_run is not self._answers_frozen:
            self._answers_frozen = a.last_run
            freeze_long_lived()

    def _fit_to_screen(self) -> None:
        self.setMinimumSize(MIN_WIDTH, MIN_HEIGHT)
        screen = self.screen() or QApplication.primaryScreen()
        avail = screen.availableGeometry() if screen is not None else None
        self.resize(*fitted_size(avail.width() if avail else None, avail.height() if avail else None))

    # -- actions ---------------------------------------------------------------------------
    def _action(self, name: str, text: str, keys, slot, tip: str) -> QAction:
        a = QAction(text, self)
        keys = keys if isinstance(keys, list) else [keys]
        a.setShortcuts([QKeySequence(k) for k in keys])
        a.setShortcutContext(Qt.WindowShortcut)
        a.setToolTip(tip)
        a.setStatusTip(f"{tip}  [{' / '.join(QKeySequence(k).toString() for k in keys)}]")
        a.triggered.connect(slot)
        self.addAction(a)
        self.actions[name] = a
        return a

    def _build_actions(self) -> None:
        self._action("accept", "&Accept page", "A", self.accept_page, "Accept the page's labels and go to the next page")
        self._action("exclude", "E&xclude page", "X", lambda: self.exclude_page(),
                     "Leave this page out of training and go to the next page")
        self._action("exclude_reason", "Exclude with a &reason…", "Shift+X", lambda: self.exclude_page(ask=True),
                     "Leave this page out of training and note why")
        self._action("unreview", "Mark &unreviewed", "U", lambda: self._do(self.session.mark_unreviewed),
                     "Back to unreviewed")
        self._action("next", "&Next page", "J", self.next_page, "Next page in the list")
        self._action("prev", "&Previous page", "K", self.prev_page, "Previous page in the list")
        self._action("next_unreviewed", "Next &unreviewed page", "N", lambda: self.next_with("unreviewed"),
                     "The next page in the list that nobody has reviewed")
        self._action("next_conflict", "Next page with &conflicts", "C", lambda: self.next_with("conflicts"),
                     "The next page in the list whose labels the trainer cannot use as they stand")
        self._action("next_queue", "Next page of the model's &queue", "Q", self.next_in_queue,
                     "The next page to review where the model differs from the labels, then the one it is least "
                     "sure of")
        self._action("use_model", "Take the &model's answer", "M", lambda: self.use_model_answer(),
                     "The model's answer becomes the label of the current field (framed in the field panel)")
        self._action("use_model_all", "Take &all the model's answers", "Shift+M", self.use_all_model_answers,
                     "Every field of the page takes the model's answer (one decision: Ctrl+Z undoes it); "
                     "then A accepts the page")
        self._action("undo", "&Undo", ["Ctrl+Z"], self.undo, "Undo the last decision (on any page)")
        self._action("redo", "&Redo", ["Ctrl+Shift+Z", "Ctrl+Y"], self.redo, "Redo the decision just undone")
        self._action("remove_words", "Remove selected words from their fields", ["Delete", "Backspace"],
                     self.remove_selected_words, "The selected words belong to no field")
        self._action("zoom_in", "Zoom &in", ["+", "="], lambda: self.view.zoom_in(), "Zoom in")
        self._action("zoom_out", "Zoom &out", "-", lambda: self.view.zoom_out(), "Zoom out")
        self._action("fit", "&Fit page", "0", lambda: self.view.fit_page(), "Show the whole page")
        self._action("toggle_fill", "&Hide field fills", "H", lambda: self.fill_bar.toggle(),
                     "Hide or show the fields' fills over the words (the frames and names stay)")
        self._action("fill_lighter", "Fills &lighter", "[", lambda: self.fill_bar.step(-1), "Lighter field fills")
        self._action("fill_stronger", "Fills &stronger", "]", lambda: self.fill_bar.step(1), "Stronger field fills")
        self._action("search", "&Search pages", "Ctrl+F", self._focus_search, "Search pages by id or text")
        self._action("new_project", "&New project…", "Ctrl+N", self.new_project_dialog,
                     "Create a project folder: a name and the fields to read")
        self._action("import", "&Import pages…", "Ctrl+I", self.import_dialog,
                     "Import pages (page JSON, FUNSD, SROIE, CORD, PDF) into this project")
        self._action("export_labels", "&Export reviewed labels…", "Ctrl+E", self.export_labels_dialog,
                     "Save the accepted pages' labels as JSON lines or CSV")
        self._action("open", "&Open project…", "Ctrl+O", self.open_project_dialog, "Open another project folder")
        self._action("reload", "&Reload from disk", "F5", self.reload, "Re-read the pages and label files")
        self._action("quit", "&Quit", "Ctrl+Q", self.close, "Close dxstudio")
        self._action("help", "&Keyboard help", ["?", "F1"], self.show_keys, "Every key of the app")
        for k in range(1, 10):
            self._action(f"field_{k}", f"Set field {k} from the selection", str(k),
                         lambda checked=False, k=k: self.set_field_number(k), f"Selected words -> field {k}")
            self._action(f"no_value_{k}", f"Field {k} has no value", f"Ctrl+{k}",
                         lambda checked=False, k=k: self.no_value_number(k), f"Field {k} has no value on this page")

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        for n in ("new_project", "open", "import", "export_labels", None, "reload", "quit"):
            file_menu.addSeparator() if n is None else file_menu.addAction(self.actions[n])
        review = bar.addMenu("&Review")
        for n in ("accept", "exclude", "exclude_reason", "unreview", None, "next", "prev", "next_unreviewed",
                  "next_conflict", "next_queue", "use_model", "use_model_all", None, "undo", "redo", None,
                  "remove_words"):
            review.addSeparator() if n is None else review.addAction(self.actions[n])
        fields = review.addMenu("Set &field")
        self._fields_menu = fields
        self._no_value_menu = review.addMenu("Field has &no value")
        self._fill_fields_menu()
        view = bar.addMenu("&View")
        for n in ("zoom_in", "zoom_out", "fit", None, "toggle_fill", "fill_lighter", "fill_stronger", None, "search"):
            view.addSeparator() if n is None else view.addAction(self.actions[n])
        bar.addMenu("&Help").addAction(self.actions["help"])

    def _fill_fields_menu(self) -> None:
        self._fields_menu.clear()
        self._no_value_menu.clear()
        for k, name in enumerate(self.session.field_names[:9], 1):
            a = self.actions[f"field_{k}"]
            a.setText(f"{name}  (selected words)")
            self._fields_menu.addAction(a)
            a = self.actions[f"no_value_{k}"]
            a.setText(f"{name} has no value")
            self._no_value_menu.addAction(a)

    def key_table(self) -> list[tuple[str, str]]:
        """(keys, what) for every key of the window: the actions, then the page view's mouse."""
        rows = []
        seen = set()
        for name, a in self.actions.items():
            if name.startswith(("field_", "no_value_")):
                continue
            keys = " / ".join(k.toString(QKeySequence.NativeText) for k in a.shortcuts())
            rows.append((keys, a.text().replace("&", "").rstrip("…") +
                         ("  (Review tab)" if name in REVIEW_ACTIONS else "")))
            seen.add(name)
        rows.append(("1 – 9", "Make the selected words the value of field 1–9 (Review tab)"))
        rows.append(("Ctrl+1 – Ctrl+9", "Field 1–9 has no value on this page (Review tab)"))
        rows += [("Esc", "Clear the selection (page view); clear the search (search box)"),
                 ("Enter / Down", "In the search box: open the first match / go to the list"),
                 ("Click, Shift+click, Ctrl+click, drag", "Select words on the page"),
                 ("Wheel; right or middle drag", "Zoom; pan")]
        return rows

    def show_keys(self) -> None:
        self.keys_dialog = KeysDialog(self.key_table(), self)
        self.keys_dialog.show()

    # -- operations ------------------------------------------------------------------------
    def _do(self, fn, *args) -> bool:
        """Run a session operation; a problem goes to the status bar and the banner, never a crash.
        Decisions wait while "Label pages" runs: its worker rewrites label files, and a decision
        saved between its read and its write of the same file would be lost."""
        if fn is not self.session.goto and fn is not self.session.reload and self.schema_panel.schema_busy:
            self.statusBar().showMessage("The schema is being saved: decisions wait a moment", 4000)
            return False
        if fn is not self.session.goto and fn is not self.session.reload and self.schema_panel.running:
            self.statusBar().showMessage("Labelling is running: decisions are paused until it ends "
                                         "(Schema & labels tab, Cancel to stop it)", 6000)
            return False
        if fn is not self.session.goto and fn is not self.session.reload:
            self._write_problem = ""  # a new decision: the note of a failed write goes
        try:
            fn(*args)
            return True
        except (ReviewError, ProjectError, LabelError, PageError, OSError) as e:
            self.statusBar().showMessage(str(e), 10000)
            self._show_banner(str(e), "error")
            return False

    def goto(self, page_id: str) -> None:
        self._queue_walk = False  # Q sets it again after its goto
        self._do(self.session.goto, page_id)

    def next_page(self) -> None:
        self._queue_walk = False
        if not self.session.next(self.page_list.visible_ids()):
            self.statusBar().showMessage("Last page of the list", 3000)

    def prev_page(self) -> None:
        self._queue_walk = False
        if not self.session.prev(self.page_list.visible_ids()):
            self.statusBar().showMessage("First page of the list", 3000)

    def next_with(self, status: str) -> bool:
        """Go to the next page of the list (after the current one, wrapping) with this status."""
        ids = self.page_list.visible_ids() or self.session.page_ids
        if self.session.current in ids:
            k = ids.index(self.session.current)
            ids = ids[k + 1:] + ids[:k]
        for pid in ids:
            if self.session.statuses[pid].status == status:
                self.goto(pid)
                return True
        what = {"unreviewed": "unreviewed page", "conflicts": "page with conflicts"}.get(status, f"{status} page")
        self.statusBar().showMessage(f"No other {what} in the list", 4000)
        return False

    def next_in_queue(self) -> bool:
        """Q: the next page of the model's review queue (disagreements first, then the least sure)."""
        a = self.model_answers
        if not a.answers:
            self.statusBar().showMessage(
                "The model is still reading the pages" if a.running else
                "No model answers yet: fine-tune a model (Train tab) or press “Read again”", 5000)
            return False
        pid = a.next_in_queue(self.session.current)
        if pid is None:
            self.statusBar().showMessage("The queue is empty: every page with the model's answers is reviewed", 5000)
            return False
        self.goto(pid)
        self._queue_walk = True
        differ = a.disagreements(pid)
        self.statusBar().showMessage(
            f"Queue: {pid}, the model differs on {', '.join(differ)}" if differ else
            f"Queue: {pid}, the model agrees with the labels (least sure first)", 5000)
        return True

    def use_model_answer(self, name: str | None = None) -> bool:
        """M (or a row's Use model button): the model's answer becomes the field's label, an
        ordinary undoable fix."""
        s = self.session
        comp = self.model_answers.comparison(s.current) if s.current else {}
        if not comp:
            self.statusBar().showMessage("No model answer for this page yet", 4000)
            return False
        name = name or self.field_panel.current_field
        if name is None:
            self.statusBar().showMessage("The model agrees with the labels on every field of this page", 4000)
            return False
        if name not in comp:
            self.statusBar().showMessage(f"The model does not read {name}", 4000)
            return False
        a = comp[name].answer
        words = list(a.words) if a is not None else []
        if self._do(self.session.set_field, name, words):
            said = f"“{a.text}” ({a.confidence:.2f})" if a is not None else "no value"
            self.statusBar().showMessage(f"{name} = {said}: the model's answer (Ctrl+Z undoes it)", 5000)
            return True
        return False

    def use_all_model_answers(self) -> bool:
        """Shift+M: every field the model reads takes its answer, as one decision (Ctrl+Z undoes
        all of it): Prodigy's accept of a suggestion, one key. A then accepts the page."""
        s = self.session
        comp = self.model_answers.comparison(s.current) if s.current else {}
        if not comp:
            self.statusBar().showMessage("No model answer for this page yet", 4000)
            return False
        values = {name: list(c.answer.words) if c.answer is not None else [] for name, c in comp.items()
                  if not c.agrees}
        if not values:
            self.statusBar().showMessage("The model already agrees with the labels on every field", 4000)
            return True
        if self._do(s.set_fields, values, "take model answers"):
            self.statusBar().showMessage(f"Took the model's answers for {', '.join(values)} (Ctrl+Z undoes them; "
                                         f"A accepts the page)", 6000)
            return True
        return False

    def accept_page(self) -> None:
        if self._do(self.session.accept):
            page_id = self.session.current
            note = accept_note(page_id, self.session.statuses[page_id])
            if note:  # stay: the person must see why the page is still not used
                self.statusBar().showMessage(note, 15000)
                self._show_banner(note, "warn")
                return
            if self._queue_walk and self.model_answers.answers:
                if self.next_in_queue():
                    self.statusBar().showMessage(f"Accepted {page_id}; the queue's next page", 4000)
                    return
            moved = self.session.next(self.page_list.visible_ids())
            self.statusBar().showMessage(f"Accepted {page_id}" + ("" if moved else " (last page)"), 4000)

    def exclude_page(self, ask: bool = False) -> None:
        reason = "excluded in review"
        if ask:
            text, ok = QInputDialog.getText(self, "Exclude page", "Why is this page left out?")
            if not ok:
                return
            reason = text.strip() or reason
        if self._do(self.session.exclude, reason):
            page_id = self.session.current
            moved = self.session.next(self.page_list.visible_ids())
            self.statusBar().showMessage(f"Excluded {page_id}: {reason}" + ("" if moved else " (last page)"), 4000)

    def undo(self) -> None:
        if self.schema_panel.running:
            self.statusBar().showMessage("Labelling is running: undo waits until it ends", 6000)
            return
        try:
            pid = self.session.undo()
        except (ReviewError, ProjectError, LabelError, PageError, OSError) as e:
            self.statusBar().showMessage(f"Cannot undo: {e}", 10000)
            return
        self.statusBar().showMessage(f"Undone on {pid}" if pid else "Nothing to undo", 3000)

    def redo(self) -> None:
        if self.schema_panel.running:
            self.statusBar().showMessage("Labelling is running: redo waits until it ends", 6000)
            return
        try:
            pid = self.session.redo()
        except (ReviewError, ProjectError, LabelError, PageError, OSError) as e:
            self.statusBar().showMessage(f"Cannot redo: {e}", 10000)
            return
        self.statusBar().showMessage(f"Redone on {pid}" if pid else "Nothing to redo", 3000)

    def set_field_number(self, k: int) -> None:
        names = self.session.field_names
        if not 1 <= k <= len(names):
            self.statusBar().showMessage(f"The schema has {len(names)} field(s); no field {k}", 4000)
            return
        self.set_field(names[k - 1])

    def no_value_number(self, k: int) -> None:
        names = self.session.field_names
        if not 1 <= k <= len(names):
            self.statusBar().showMessage(f"The schema has {len(names)} field(s); no field {k}", 4000)
            return
        if self._do(self.session.clear_field, names[k - 1]):
            self.statusBar().showMessage(f"{names[k - 1]}: no value on this page", 4000)

    def set_field(self, name: str) -> None:
        words = self.view.selected_words()
        if not words:
            text = (f"No words selected for {name}: select its words first (click, shift-click, drag, or the "
                    f"arrow keys with Shift), then press its key; Ctrl+key means “no value”")
            self.statusBar().showMessage(text, 6000)
            self._show_banner(text, "warn")
            QApplication.beep()
            return
        if self._do(self.session.set_field, name, words):
            self.view.clear_selection()
            self.statusBar().showMessage(f"{name} = “{self._words_text(words)}”", 4000)

    def remove_selected_words(self) -> None:
        words = set(self.view.selected_words())
        if not words or self.session.targets is None:
            return
        for name, fw in self.session.targets.field_words.items():
            if words & set(fw):
                if not self._do(self.session.set_field, name, sorted(set(fw) - words)):
                    return
        self.view.clear_selection()

    def reload(self, then=None) -> None:
        """F5: re-read the project from disk. The files are read on a background job
        (SessionReloader) and the result shown when it arrives: then() after that, and
        reloader.reloaded is emitted."""
        self.reloader.request(then if callable(then) else None)  # (an action's trigger passes its checked flag)

    def _label_write_failed(self, page_id: str, path: str, problem: str) -> None:
        """A decision's label file could not be written (a full disk): the file is as it was;
        say so, and show the page as it is on disk."""
        text = (f"Not saved: {problem} ({path}). The page {page_id} shows what is on disk: decide again "
                f"once the problem is fixed")
        try:
            self.session.write_failed(page_id)
        except (ReviewError, ProjectError, LabelError, PageError, OSError) as e:
            text += f"; it cannot be read again: {e}"
        self._write_problem = text  # kept in the banner (a reload redraws it) until the next decision
        self.statusBar().showMessage(text, 20000)
        self._show_banner(text, "error")
        self.reload()  # its status in the list too

    def _reload_failed(self, message: str) -> None:
        self.statusBar().showMessage(message, 10000)
        self._show_banner(message, "error")

    def _open_window(self, path) -> "MainWindow | None":
        try:
            w = MainWindow(path)
        except (ProjectError, OSError) as e:
            QMessageBox.warning(self, "Cannot open project", str(e))
            return None
        w.show()
        self._jobs.append(w)
        return w

    def open_project_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a dxstudio project", str(self.project_root.parent))
        if path:
            self._open_window(path)

    def new_project_dialog(self) -> None:
        dialog = NewProjectDialog(self.project_root.parent, self)
        dialog.created.connect(self._open_window)
        self._jobs.append(dialog)
        dialog.show()

    def import_dialog(self) -> None:
        flush_label_writes()  # (a re-import rewrites label files)
        dialog = ImportDialog(self.project_root, self)
        dialog.imported.connect(lambda report: self.after_import())
        self._jobs.append(dialog)
        dialog.show()

    def after_import(self) -> None:
        """Pages (and maybe fields) were added: re-read the project, the schema table too."""
        def then():
            self.schema_panel.load()
            self.extract_panel.project = self.session.project
            self.model_answers.start()  # the new pages too (the others come from the cache)
        self.reloader.request(then, reopen=True)

    def export_labels_dialog(self, path=None) -> int | None:
        if not path:
            path, _ = QFileDialog.getSaveFileName(self, "Export reviewed labels",
                                                  str(ProjectLayout(self.project_root).reviewed_export),
                                                  "JSON lines (*.jsonl);;CSV (*.csv)")
            if not path:
                return None
        try:
            self.session.flush_writes()
            n = export_reviewed(self.session.project, path, max_words=self.session.max_words)
        except (ReviewError, OSError) as e:
            QMessageBox.warning(self, "Not exported", str(e))
            return None
        self.statusBar().showMessage(f"Exported the labels of {n} accepted page(s) to {path}", 8000)
        return n

    def _focus_search(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.page_list.search.setFocus()
        self.page_list.search.selectAll()

    def open_in_review(self, page_id: str, field: str = "") -> None:
        """Results' "Open in Review": that held-out page in the Review tab, its field current."""
        if page_id not in self.session.statuses:
            self.statusBar().showMessage(f"{page_id} is no longer in the project", 5000)
            return
        self.tabs.setCurrentIndex(0)
        self.goto(page_id)
        if field:
            self.field_panel.set_current_field(field)
        self.view.setFocus()

    def _show_results(self, report: dict, run_dir: str) -> None:
        self.results_panel.show_run(report, run_dir, self.project_root)
        self.tabs.setCurrentIndex(self.tabs.indexOf(self.results_area))

    def _run_finished(self, report: dict, run_dir: str) -> None:
        """A run ended: its results go into the Results tab, which is offered, not switched to
        (the person may be in the middle of a page)."""
        self.results_panel.show_run(report, run_dir, self.project_root)
        k = self.tabs.indexOf(self.results_area)
        if self.tabs.currentIndex() != k:
            self.tabs.setTabText(k, "Results •")
            self.show_results_button.setText(f"Run {Path(run_dir).name} finished: show its results")
            self.show_results_button.show()

    def _open_offered_results(self) -> None:
        self.show_results_button.hide()
        self.tabs.setCurrentIndex(self.tabs.indexOf(self.results_area))

    def _on_model_chosen(self, path: str) -> None:
        """Runs' Use this model: Review reads with it, and Extract follows it at once."""
        self.model_answers.start(path)
        self.extract_panel.follow_project()

    def _extract_page_added(self, page_id: str) -> None:
        """Extract added a corrected page to the project: Review shows it with the others."""
        def then():
            if self.training_panel is not None:
                self.training_panel.update_breakdown_later()  # (every page: in the worker process)
            self.model_answers.start()
            self.statusBar().showMessage(f"{page_id} joined the project as a reviewed page", 8000)
        self.reload(then)

    def _after_schema_edit(self) -> None:
        """A schema edit was saved or undone: the keys, the fields and the Train tab's counts."""
        self._fill_fields_menu()
        self.extract_panel.project = self.session.project
        if self.training_panel is not None:  # every page and label file: counted on a background job
            self.training_panel.update_breakdown_later()
        self._on_answers()  # (the field panel was refreshed when the session went to its page)

    # -- remembering the page ---------------------------------------------------------------
    def _restore_page(self) -> None:
        if not self.remember:
            return
        try:
            state = read_json(ProjectLayout(self.project_root).app_state_file)
            pid = state.get("page") if isinstance(state, dict) else None
        except (OSError, ValueError):
            return
        if isinstance(pid, str) and pid in self.session.statuses and pid != self.session.current:
            self.session.goto(pid, notify=False)
            self.page_list._select_current()
            self.field_panel.refresh()

    def _save_page(self) -> None:
        if self.session.current is None or not self.remember:
            return
        try:
            write_json_atomic(ProjectLayout(self.project_root).app_state_file, {"page": self.session.current})
        except OSError:
            pass  # a read-only project still works; it only forgets the page

    # -- observing the session -------------------------------------------------------------
    def _words_text(self, words) -> str:
        page = self.session.page
        return " ".join(page.words[i].text for i in words) if page is not None else ""

    def _field_statuses(self) -> dict:
        return {row.name: row.status for row in self.session.field_rows()}

    def _show_banner(self, text: str, kind: str) -> None:
        colours = {"error": ("#F8D7DA", "#842029"), "warn": ("#FFF3CD", "#664D03"), "info": ("#E2E3E5", "#41464B")}
        bg, fg = colours[kind]
        sheet = f"background: {bg}; color: {fg}; padding: 4px 10px; font-size: 13px;"
        if self.banner.styleSheet() != sheet:  # a re-polish costs milliseconds: only on a change
            self.banner.setStyleSheet(sheet)
        self.banner.setText(text)
        self.banner.setToolTip(text)
        self.banner.show()

    def _clear_banner(self) -> None:
        if self.banner.styleSheet() != "background: transparent; padding: 4px 10px;":
            self.banner.setStyleSheet("background: transparent; padding: 4px 10px;")
        self.banner.setText("")
        self.banner.setToolTip("")

    def _show_current(self) -> None:
        s = self.session
        if s.current is None:
            self.view.clear_page("This project has no pages yet: File > Import pages (Ctrl+I).")
            self._show_banner("No pages in this project: File > Import pages (Ctrl+I).", "info")
            return
        if s.page is None:
            self.view.clear_page(f"{s.current} cannot be shown")
            self._show_banner(f"This page cannot be reviewed: {s.error}", "error")
            return
        self.view.show_page(s.page, s.tags, self._field_statuses(), field_names=s.field_names,
                            image_root=s.project.pages_dir, predictions=self._page_answers())
        self._draw_search()
        self._update_banner()
        self._prefetch_neighbours()

    def _prefetch_neighbours(self) -> None:
        """The images of the list's next and previous pages (J / K) and of the queue's next
        page (Q, and A in a walk down the queue) decoded in the background."""
        s = self.session
        ids = self.page_list.visible_ids()
        near = []
        if s.current in ids:
            k = ids.index(s.current)
            near = [ids[j] for j in (k + 1, k - 1) if 0 <= j < len(ids)]
        if self.model_answers.answers:
            queued = self.model_answers.peek_next_in_queue(s.current)
            if queued is not None and queued not in near and queued != s.current:
                near.append(queued)
        if not near:
            return
        project = s.project
        known = self._page_images

        def paths():  # (on the prefetch thread)
            out = []
            for pid in near:
                try:
                    image = _page_image(project, pid, known)
                except (PageError, ProjectError, OSError, ValueError):
                    continue
                if image:
                    out.append(Path(image) if Path(image).is_absolute() else Path(project.pages_dir) / image)
            return out
        prefetch_images(paths)

    def _page_answers(self) -> dict | None:
        """The model's answers for the page shown, as the page view draws them (None: off or none)."""
        if not self.model_bar.show_box.isChecked() or self.session.current is None:
            return None
        answers = self.model_answers.for_page(self.session.current)
        if answers is None:
            return None
        return {n: (a.words if a is not None else ()) for n, a in answers.items() if n in self.session.field_names}

    def _draw_search(self) -> None:
        if self.session.page is not None and self.view.page is not None:
            self.view.set_highlight(self.page_list.word_hits(self.session.page))

    def _draw_answers(self) -> None:
        if self.session.page is not None and self.view.page is not None:
            self.view.set_predictions(self._page_answers())

    def _on_answers(self) -> None:
        """The model's answers changed (arrived, another model): the page's frames and the rows."""
        self._draw_answers()
        self.field_panel.show_model()

    def _update_banner(self) -> None:
        s = self.session
        st = s.statuses.get(s.current)
        notes = []
        kind = "info"
        if st is not None and st.status == "excluded":
            notes.append(f"Excluded from training: {st.message}")
        elif st is not None and st.status == "conflicts":
            notes.append(f"Conflicts: {st.message}")
            kind = "warn"
        elif st is not None and st.message:
            notes.append(st.message)
        if self.view.notice:
            notes.append(self.view.notice)
            kind = "warn"
        same = self._same_values()
        if same:
            notes.append(same)
            kind = "warn"
        if getattr(self, "_write_problem", ""):
            notes.insert(0, self._write_problem)
            kind = "error"
        if notes:
            self._show_banner(" · ".join(notes), kind)
        else:
            self._clear_banner()

    def _same_values(self) -> str:
        """Two fields with the same value on the page (total and subtotal): easily swapped, so
        flagged for a look, whatever their grounding says."""
        pairs = same_value_pairs(self.session.field_rows())
        if not pairs:
            return ""
        return "Same value in two fields: " + ", ".join(f"{a} and {b} ({v})" for a, b, v in pairs) + \
            " — check they are not swapped"

    def _on_session(self, kind: str, pid) -> None:
        if kind == "statuses" and pid is None:
            self._fill_fields_menu()
            if self.session.page_ids:
                # the session goes to its current page next (ReviewSession.reload,
                # commit_schema), and that notice draws it: drawing the page here too, with the
                # targets of before the reload, would cost a second redraw in the same turn
                return
        if kind == "history" or (kind == "statuses" and pid is not None):
            # "history" follows a "labels" notice (only can_undo changed: the field panel's
            # buttons), and a page's "statuses" notice is followed by its "labels" or "page"
            # notice, which draws the banner and the counts: once a decision, not three times
            return
        if kind == "page" or kind == "statuses":
            self._show_current()
            self._save_page()
        elif kind == "labels" and pid == self.session.current and self.session.page is not None:
            self.view.update_tags(self.session.tags, self._field_statuses())
            self._draw_answers()
            self._update_banner()
        self._update_counts()

    def _update_counts(self) -> None:
        s = self.session
        c = s.counts()
        pos = f"page {s.page_ids.index(s.current) + 1}/{len(s.page_ids)}" if s.current else "no pages"
        parts = [f"{c[k]} {COUNT_WORDS[k]}" for k in ("accepted", "excluded", "conflicts", "error") if c[k]]
        self.counts_label.setText(f"{pos}   ·   " + (", ".join(parts) if parts else "nothing reviewed yet"))
        self.model_bar.refresh()  # the queue follows every decision
        self.page_list.update_queue()

    def _on_selection(self, words: list) -> None:
        self.field_panel.show_selection(words, self.session.page)

    def _on_hover(self, i: int) -> None:
        s = self.session
        if i < 0 or s.page is None:
            self.hover_label.setText(KEY_HINT)
            return
        tag = int(s.tags[i])
        field = s.field_of_word(i)
        status = self._field_statuses().get(field, "") if field else ""
        self.hover_label.setText(f"“{s.page.words[i].text}”  ·  word {i}  ·  {tag_name(tag, s.field_names)}"
                                 + (f"  ·  {field}: {status}" if field else ""))

    def _on_tab(self, index: int) -> None:
        """Review keys act only on the Review tab: elsewhere they are disabled, so A on the
        Schema tab or Ctrl+Z on the Train tab cannot change a page that is not on screen."""
        schema_tab = self.tabs.indexOf(self.schema_panel.parentWidget().parentWidget()) \
            if self.schema_panel.parentWidget() is not None else -1
        previous, self._last_tab = getattr(self, "_last_tab", index), index
        if previous == schema_tab and index != schema_tab and self.schema_panel.is_dirty():
            if not self._leave_schema():
                self._last_tab = schema_tab
                QTimer.singleShot(0, lambda: self.tabs.setCurrentIndex(schema_tab))
                return
        if self.results_panel is not None and self.tabs.widget(index) is self.results_area:
            self.tabs.setTabText(index, "Results")
            self.show_results_button.hide()
        if self.tabs.widget(index) is self.extract_panel.parentWidget().parentWidget():
            self.extract_panel.follow_project()
        review = self.tabs.widget(index) is self.review_page
        for name in REVIEW_ACTIONS:
            self.actions[name].setEnabled(review)
        if review:
            self.field_panel.refresh()  # the buttons follow can_undo / can_redo again
            self.view.setFocus()

    def _leave_schema(self) -> bool:
        """Leaving the Schema tab with edits not saved: Save, Discard or stay (False)."""
        box = QMessageBox(QMessageBox.Warning, "Unsaved schema edits",
                          "The schema table has edits that are not saved. Save them now?",
                          QMessageBox.Save | QMessageBox.Discard | QMessageBox.Cancel, self)
        box.setDefaultButton(QMessageBox.Save)
        box.button(QMessageBox.Cancel).setText("Stay")
        answer = box.exec()
        if answer == QMessageBox.Save:
            return self.schema_panel.save_schema()  # (finishes in the background)
        if answer == QMessageBox.Discard:
            self.schema_panel.load()
            return True
        return False

    # -- closing ---------------------------------------------------------------------------
    def closeEvent(self, event):
        """Stop background work cleanly: a training run keeps its checkpoint. During a run,
        ask first."""
        panel = self.training_panel
        ask = self.confirm_close
        if ask is None:
            ask = QApplication.platformName() not in HEADLESS_PLATFORMS
        if ask and panel is not None and getattr(panel, "is_running", False):
            answer = QMessageBox.question(
                self, "A fine-tuning run is going on",
                "Fine-tuning is still running. Stop it and close? It stops after the current step and "
                "keeps its checkpoint: Resume continues it next time.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
        self._save_page()
        # nothing decided is lost: the decisions still on their way to disk are written first
        self.session.flush_writes()
        if panel is not None and hasattr(panel, "shutdown"):
            panel.shutdown()
        self.schema_panel.shutdown()
        self.page_list.shutdown()
        self.extract_panel.shutdown()
        self.model_answers.shutdown()
        self.reloader.shutdown()
        super().closeEvent(event)


def freeze_long_lived(collect: bool = False) -> None:
    """Move every object the app holds now into Python's permanent generation (gc.freeze), so
    that a full collection (generation 2) no longer walks them. The imports (NumPy, Numba,
    PySide), the window's widgets and a model's answers are a heap that a full collection
    walked in 70-100 ms, started by whichever thread happened to allocate: bench/ui_latency
    saw 73 ms of the GUI thread's CPU inside one event, and 100 ms on the model-answers thread,
    which holds Python's lock meanwhile. After the freeze a full pass walks only what was made
    since. A frozen object is never collected, so collect=True first collects the garbage that
    may sit in cycles (a full pass: 45-55 ms on the window's opening, where it is no input's)."""
    if collect:
        gc.collect()
    gc.freeze()


def run_app(path=None) -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("dxstudio")
    try:
        project = Path(path) if path else sample_project()
        window = MainWindow(project)
    except (ProjectError, OSError) as e:
        QMessageBox.critical(None, "dxstudio", f"Cannot open the project:\n{e}")
        print(f"dxstudio: {e}", file=sys.stderr)
        return 2
    window.show()
    QTimer.singleShot(0, window.view.setFocus)
    return app.exec()
