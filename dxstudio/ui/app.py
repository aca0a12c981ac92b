"""The main window and `run_app`, what `dxstudio [PROJECT]` opens.

    run_app(path=None) -> int        opens PROJECT, or the bundled sample (dxstudio.bundled)
                                     copied on first use to $DXSTUDIO_HOME/sample
                                     (default ~/.local/share/dxstudio/sample)
    MainWindow(project_path)         tabs: Review, Schema & labels, Train, Results, Runs

The window is a view of dxstudio.review.ReviewSession (the data model, no Qt): the page list,
the page view and the field panel subscribe to it, and the keys below call its operations,
each of which saves the label file at once.

Keys (also in the Review menu and the buttons' tooltips):
    A accept (and go to the next page)   X exclude   Shift+X exclude with a reason
    1-9 make the selected words the value of field 1-9   Delete remove the selected words from
    their fields   J next page   K previous page   Ctrl+Z undo   Ctrl+Shift+Z / Ctrl+Y redo
    + / - zoom   0 fit the page   Esc clear the selection   Ctrl+F search pages
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QFileDialog, QInputDialog, QLabel, QMainWindow, QMessageBox,
                               QSplitter, QTabWidget, QVBoxLayout, QWidget)

from dxstudio.bundled import sample_dir
from dxstudio.engine.page import PageError
from dxstudio.project import LabelError, ProjectError
from dxstudio.review import ReviewError, ReviewSession
from dxstudio.ui.field_panel import FieldPanel
from dxstudio.ui.page_list import STATUS_LABELS, PageList
from dxstudio.ui.page_view import PageView
from dxstudio.ui.schema_panel import SchemaPanel

KEY_HINT = "A accept · X exclude · 1–9 set field from selection · Del remove words · J / K next / previous · Ctrl+Z undo"
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
    if (target / "dxproject.json").is_file():
        return target
    if not (source / "dxproject.json").is_file():
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
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns("runs", ".cache"), dirs_exist_ok=True)
    (partial / "runs").mkdir(exist_ok=True)
    (partial / _COPY_MARK).unlink()
    if target.exists():  # an empty folder: nothing in it to lose
        target.rmdir()
    partial.rename(target)  # the copy appears whole or not at all
    return target


_COPY_MARK = ".dxstudio-sample-copy"


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _training_panels():
    """(TrainingPanel, ResultsPanel, None) or (None, None, why) while the training side is
    not available, so the review side keeps working."""
    try:
        from dxstudio.ui.training_panel import ResultsPanel, TrainingPanel
    except Exception as e:  # the module is missing or broken: say so in its tab
        return None, None, f"{type(e).__name__}: {e}"
    return TrainingPanel, ResultsPanel, None


def _placeholder(text: str) -> QWidget:
    w = QWidget()
    label = QLabel(text)
    label.setAlignment(Qt.AlignCenter)
    label.setWordWrap(True)
    label.setStyleSheet("color: #6C757D; font-size: 14px;")
    QVBoxLayout(w).addWidget(label)
    return w


class MainWindow(QMainWindow):
    def __init__(self, project_path, parent=None):
        super().__init__(parent)
        self.session = ReviewSession(project_path)
        self.project_root = Path(self.session.project.root)
        self.setWindowTitle(f"dxstudio — {self.session.project.name}")
        self.resize(1400, 880)
        self.setStyleSheet(STYLE)
        self.actions: dict[str, QAction] = {}
        self._build_actions()

        # -- review tab ----------------------------------------------------------------------
        self.page_list = PageList(self.session)
        self.view = PageView()
        self.view.setToolTip("")
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.banner.hide()
        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.banner)
        cl.addWidget(self.view, 1)
        self.field_panel = FieldPanel(self.session, self.actions)
        self.splitter = QSplitter()
        self.splitter.addWidget(self.page_list)
        self.splitter.addWidget(centre)
        self.splitter.addWidget(self.field_panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([240, 780, 380])

        self.schema_panel = SchemaPanel(self.session)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.splitter, "Review")
        self.tabs.addTab(self.schema_panel, "Schema && labels")
        TrainingPanel, ResultsPanel, why = _training_panels()
        if TrainingPanel is not None:
            self.training_panel = TrainingPanel(self.project_root, self)
            self.results_panel = ResultsPanel(self)
            self.training_panel.finished.connect(
                lambda report, run_dir: self._show_results(report, run_dir))
            self.tabs.addTab(self.training_panel, "Train")
            self.tabs.addTab(self.results_panel, "Results")
            self.results_panel.show_latest(self.project_root)  # results survive a restart
            from dxstudio.ui.runs_panel import RunsPanel

            self.runs_panel = RunsPanel(self.project_root, self)
            self.runs_panel.open_results.connect(self._show_results)
            self.tabs.addTab(self.runs_panel, "Runs")
        else:
            self.training_panel = self.results_panel = self.runs_panel = None
            self.tabs.addTab(_placeholder(f"The training panel is not available.\n({why})"), "Train")
            self.tabs.addTab(_placeholder("Results appear here after a fine-tuning run."), "Results")
        self.setCentralWidget(self.tabs)
        self._build_menus()

        self.counts_label = QLabel()
        self.statusBar().addPermanentWidget(self.counts_label)
        self.hover_label = QLabel(KEY_HINT)
        self.hover_label.setStyleSheet("color: #495057;")
        self.statusBar().addWidget(self.hover_label, 1)

        self.session.subscribe(self._on_session)
        self.page_list.pageActivated.connect(self.goto)
        self.view.selectionChanged.connect(self._on_selection)
        self.view.wordHovered.connect(self._on_hover)
        self.field_panel.setFieldRequested.connect(self.set_field)
        self.field_panel.clearFieldRequested.connect(lambda name: self._do(self.session.clear_field, name))
        self.field_panel.revertFieldRequested.connect(lambda name: self._do(self.session.revert_field, name))
        self.tabs.currentChanged.connect(self._on_tab)
        self._show_current()
        self._update_counts()
        errors = [pid for pid, st in self.session.statuses.items() if st.status == "error"]
        if errors:
            self.statusBar().showMessage(
                f"{len(errors)} page(s) cannot be read ({', '.join(errors[:3])}{'…' if len(errors) > 3 else ''}); "
                f"filter the list by “Cannot be read” to see why", 15000)

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
        self._action("exclude", "E&xclude page", "X", lambda: self.exclude_page(), "Leave this page out of training")
        self._action("exclude_reason", "Exclude with a &reason…", "Shift+X", lambda: self.exclude_page(ask=True),
                     "Leave this page out of training and note why")
        self._action("unreview", "Mark &unreviewed", "U", lambda: self._do(self.session.mark_unreviewed),
                     "Back to unreviewed")
        self._action("next", "&Next page", "J", self.next_page, "Next page in the list")
        self._action("prev", "&Previous page", "K", self.prev_page, "Previous page in the list")
        self._action("undo", "&Undo", ["Ctrl+Z"], self.undo, "Undo the last decision (on any page)")
        self._action("redo", "&Redo", ["Ctrl+Shift+Z", "Ctrl+Y"], self.redo, "Redo the decision just undone")
        self._action("remove_words", "Remove selected words from their fields", ["Delete", "Backspace"],
                     self.remove_selected_words, "The selected words belong to no field")
        self._action("zoom_in", "Zoom &in", ["+", "="], lambda: self.view.zoom_in(), "Zoom in")
        self._action("zoom_out", "Zoom &out", "-", lambda: self.view.zoom_out(), "Zoom out")
        self._action("fit", "&Fit page", "0", lambda: self.view.fit_page(), "Show the whole page")
        self._action("search", "&Search pages", "Ctrl+F", self._focus_search, "Search pages by id or text")
        self._action("open", "&Open project…", "Ctrl+O", self.open_project_dialog, "Open another project folder")
        self._action("reload", "&Reload from disk", "F5", self.reload, "Re-read the pages and label files")
        self._action("quit", "&Quit", "Ctrl+Q", self.close, "Close dxstudio")
        for k in range(1, 10):
            self._action(f"field_{k}", f"Set field {k} from the selection", str(k),
                         lambda checked=False, k=k: self.set_field_number(k), f"Selected words -> field {k}")

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        for n in ("open", "reload", "quit"):
            file_menu.addAction(self.actions[n])
        review = bar.addMenu("&Review")
        for n in ("accept", "exclude", "exclude_reason", "unreview", None, "next", "prev", None, "undo", "redo",
                  None, "remove_words"):
            review.addSeparator() if n is None else review.addAction(self.actions[n])
        fields = review.addMenu("Set &field")
        self._fields_menu = fields
        self._fill_fields_menu()
        view = bar.addMenu("&View")
        for n in ("zoom_in", "zoom_out", "fit", "search"):
            view.addAction(self.actions[n])

    def _fill_fields_menu(self) -> None:
        self._fields_menu.clear()
        for k, name in enumerate(self.session.field_names[:9], 1):
            a = self.actions[f"field_{k}"]
            a.setText(f"{name}  (selected words)")
            self._fields_menu.addAction(a)

    # -- operations ------------------------------------------------------------------------
    def _do(self, fn, *args) -> bool:
        """Run a session operation; a problem goes to the status bar and the banner, never a crash.
        Decisions wait while "Label pages" runs: its worker rewrites label files, and a decision
        saved between its read and its write of the same file would be lost."""
        if fn is not self.session.goto and fn is not self.session.reload and self.schema_panel.running:
            self.statusBar().showMessage("Labelling is running: decisions are paused until it ends "
                                         "(Schema & labels tab, Cancel to stop it)", 6000)
            return False
        try:
            fn(*args)
            return True
        except (ReviewError, ProjectError, LabelError, PageError, OSError) as e:
            self.statusBar().showMessage(str(e), 10000)
            self._show_banner(str(e), "error")
            return False

    def goto(self, page_id: str) -> None:
        self._do(self.session.goto, page_id)

    def next_page(self) -> None:
        if not self.session.next(self.page_list.visible_ids()):
            self.statusBar().showMessage("Last page of the list", 3000)

    def prev_page(self) -> None:
        if not self.session.prev(self.page_list.visible_ids()):
            self.statusBar().showMessage("First page of the list", 3000)

    def accept_page(self) -> None:
        if self._do(self.session.accept):
            page_id = self.session.current
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
            self.statusBar().showMessage(f"Excluded {self.session.current}: {reason}", 4000)

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

    def set_field(self, name: str) -> None:
        words = self.view.selected_words()
        if not words:
            self.statusBar().showMessage(f"Select the words of {name} first (click, shift-click or drag)", 4000)
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

    def reload(self) -> None:
        self._do(self.session.reload)

    def open_project_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a dxstudio project", str(self.project_root.parent))
        if path:
            try:
                w = MainWindow(path)
            except (ProjectError, OSError) as e:
                QMessageBox.warning(self, "Cannot open project", str(e))
                return
            w.show()
            self._others = getattr(self, "_others", []) + [w]

    def _focus_search(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.page_list.search.setFocus()
        self.page_list.search.selectAll()

    def _show_results(self, report: dict, run_dir: str) -> None:
        self.results_panel.show_run(report, run_dir, self.project_root)
        self.tabs.setCurrentWidget(self.results_panel)

    # -- observing the session -------------------------------------------------------------
    def _words_text(self, words) -> str:
        page = self.session.page
        return " ".join(page.words[i].text for i in words) if page is not None else ""

    def _field_statuses(self) -> dict:
        return {row.name: row.status for row in self.session.field_rows()}

    def _show_banner(self, text: str, kind: str) -> None:
        colours = {"error": ("#F8D7DA", "#842029"), "warn": ("#FFF3CD", "#664D03"), "info": ("#E2E3E5", "#41464B")}
        bg, fg = colours[kind]
        self.banner.setStyleSheet(f"background: {bg}; color: {fg}; padding: 6px 10px; font-size: 13px;")
        self.banner.setText(text)
        self.banner.show()

    def _show_current(self) -> None:
        s = self.session
        if s.current is None:
            self.view.clear_page("This project has no pages yet: import some (dxstudio import).")
            self._show_banner("No pages in this project.", "info")
            return
        if s.page is None:
            self.view.clear_page(f"{s.current} cannot be shown")
            self._show_banner(f"This page cannot be reviewed: {s.error}", "error")
            return
        self.view.show_page(s.page, s.tags, self._field_statuses(), field_names=s.field_names,
                            image_root=s.project.pages_dir)
        self._update_banner()

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
        if notes:
            self._show_banner(" · ".join(notes), kind)
        else:
            self.banner.hide()

    def _on_session(self, kind: str, pid) -> None:
        if kind == "page" or (kind == "statuses" and pid is None):
            if kind == "statuses":
                self._fill_fields_menu()
            self._show_current()
        elif kind == "labels" and pid == self.session.current and self.session.page is not None:
            self.view.update_tags(self.session.tags, self._field_statuses())
            self._update_banner()
        elif kind == "statuses" and pid == self.session.current:
            self._update_banner()
        self._update_counts()

    def _update_counts(self) -> None:
        s = self.session
        c = s.counts()
        pos = f"page {s.page_ids.index(s.current) + 1}/{len(s.page_ids)}" if s.current else "no pages"
        parts = [f"{c[k]} {STATUS_LABELS[k].lower()}" for k in ("accepted", "excluded", "conflicts", "error") if c[k]]
        self.counts_label.setText(f"{pos}   ·   " + (", ".join(parts) if parts else "nothing reviewed yet"))

    def _on_selection(self, words: list) -> None:
        self.field_panel.show_selection(words, self.session.page)

    def _on_hover(self, i: int) -> None:
        s = self.session
        if i < 0 or s.page is None:
            self.hover_label.setText(KEY_HINT)
            return
        tag = int(s.tags[i])
        from dxstudio.ui.page_view import tag_name
        field = s.field_of_word(i)
        status = self._field_statuses().get(field, "") if field else ""
        self.hover_label.setText(f"“{s.page.words[i].text}”  ·  word {i}  ·  {tag_name(tag, s.field_names)}"
                                 + (f"  ·  {field}: {status}" if field else ""))

    def _on_tab(self, index: int) -> None:
        if self.tabs.widget(index) is self.splitter:
            self.view.setFocus()

    # -- closing ---------------------------------------------------------------------------
    def closeEvent(self, event):
        """Stop background work cleanly: a training run keeps its checkpoint."""
        if self.training_panel is not None and hasattr(self.training_panel, "shutdown"):
            self.training_panel.shutdown()
        self.schema_panel.shutdown()
        super().closeEvent(event)


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
