"""Schema & labels: the schema editor, the labelling model's settings, and "Label pages", which
asks the labelling model (dxstudio.labelling) for every page as a background job
(dxstudio.ui.jobs.Job, as the Train tab's fine-tuning) with progress and cancel, and
"Import answers…" from a JSONL file.

SchemaPanel(session) edits session.project. Saving re-reads dxproject.json first and changes
only the schema or the labelling settings, so settings another panel saved meanwhile (the
training panel writes "settings") are kept.
"""
from __future__ import annotations

import os
import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (QAbstractItemView, QApplication, QCheckBox, QDoubleSpinBox, QFileDialog, QFormLayout,
                               QGroupBox, QHBoxLayout, QHeaderView, QLabel, QLineEdit, QMessageBox,
                               QProgressBar, QPushButton, QSpinBox, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from dxstudio.labelling import LabelClient, LabellingError, import_answers_jsonl, label_project
from dxstudio.project import DEFAULT_API_KEY_ENV, DEFAULT_WEIGHT, LabelError, Project, ProjectError, parse_schema
from dxstudio.review import ReviewError, _SchemaEdit, flush_label_writes, schema_change
from dxstudio.ui.jobs import Job, process_events_while
from dxstudio.ui.worker_process import PROCESS


class LabellingCancelled(Exception):
    """Raised from the progress callback to stop label_project between two pages."""


def label_work(project_root, limit=None, force=False, client_factory=None):
    """The "Label pages" job (dxstudio.ui.jobs.Job): dxstudio.labelling.label_project on the
    job's thread, reporting (done, total) per page; returns the LabelReport as a dict plus
    "cancelled". A cancel stops between two pages (the pages labelled so far are saved)."""
    def work(job):
        def progress(done, total):
            job.report((done, total))
            if job.cancelled.is_set() and done < total:
                raise LabellingCancelled()

        flush_label_writes()  # it rewrites label files: the review's pending decisions first
        project = Project.open(project_root)
        client = (client_factory or LabelClient.from_project)(project)
        try:
            result = label_project(project, client, limit=limit, progress=progress, force=force).to_dict()
            result["cancelled"] = False
        except LabellingCancelled:
            result = {"labelled": None, "errors": [], "stopped": "cancelled", "cancelled": True}
        return result
    return work


class SchemaPanel(QWidget):
    labellingFinished = Signal(dict)
    endpointMissing = Signal()  # Label pages without an endpoint: the window shows this tab
    schemaChanged = Signal()  # a schema edit was saved or undone: the Train tab's counts follow

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self.client_factory = None  # tests may inject a LabelClient factory
        self.reloader = None  # the window's SessionReloader (reads the files off the GUI thread); None: at once
        self._job: Job | None = None

        # -- schema ------------------------------------------------------------------------
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Field", "Description for the labelling model", "Weight"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeToContents)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.verticalHeader().setVisible(False)
        add = QPushButton("Add field")
        remove = QPushButton("Remove field")
        up = QPushButton("Move up")
        self.add_button, self.remove_button = add, remove
        self.save_schema_button = QPushButton("Save schema")
        self.save_schema_button.setToolTip("Write the schema into dxproject.json (a renamed field keeps its "
                                           "labels; removing a field asks first)")
        self.undo_schema_button = QPushButton("Undo schema edit")
        self.undo_schema_button.setToolTip("Put the schema (and the labels of a renamed field) back as they were "
                                           "before the last saved schema edit  [Ctrl+Z]")
        self.undo_schema_button.setEnabled(False)
        # Ctrl+Z on this tab (the window's Undo acts on Review only): a shortcut of this panel
        from PySide6.QtGui import QShortcut
        self._undo_key = QShortcut(QKeySequence("Ctrl+Z"), self)
        self._undo_key.setContext(Qt.WidgetWithChildrenShortcut)
        self._undo_key.activated.connect(self.undo_schema)
        add.clicked.connect(self.add_field)
        remove.clicked.connect(self.remove_field)
        up.clicked.connect(self.move_up)
        self.save_schema_button.clicked.connect(self.save_schema)
        self.undo_schema_button.clicked.connect(self.undo_schema)
        row = QHBoxLayout()
        for b in (add, remove, up):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.undo_schema_button)
        row.addWidget(self.save_schema_button)
        self.schema_note = QLabel()
        self.schema_note.setWordWrap(True)
        self.schema_note.setTextInteractionFlags(Qt.TextSelectableByMouse)
        schema_box = QGroupBox("Schema: the fields to read off each page")
        sl = QVBoxLayout(schema_box)
        sl.addWidget(QLabel("A field's name becomes its tags (B-name, I-name); the weight scales its words "
                            "in the loss against O (default 3). Keys 1–9 in Review follow this order."))
        sl.addWidget(self.table)
        sl.addLayout(row)
        sl.addWidget(self.schema_note)

        # -- labelling model ----------------------------------------------------------------
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://api.example.com/v1 (OpenAI-compatible), or $DXSTUDIO_LABEL_URL")
        self.model = QLineEdit()
        self.model.setPlaceholderText("model name, or $DXSTUDIO_LABEL_MODEL")
        self.key_env = QLineEdit()
        self.key_env.setPlaceholderText(DEFAULT_API_KEY_ENV)
        self.key_env.setToolTip("The name of the environment variable that holds the API key; the key itself "
                                "is never stored in the project")
        self.key_state = QLabel()
        self.limit = QSpinBox()
        self.limit.setRange(0, 1_000_000)
        self.limit.setSpecialValueText("all pages")
        self.limit.setToolTip("Ask for at most this many pages (0: all that need answers)")
        self.force = QCheckBox("Ask again for pages that already have answers")
        save_settings = QPushButton("Save settings")
        save_settings.clicked.connect(self.save_labelling)
        self.label_button = QPushButton("Label pages")
        self.label_button.setToolTip("Ask the labelling model for every field of every page that needs answers, "
                                     "in the background; answers are cached on disk")
        self.label_button.setStyleSheet("QPushButton { font-weight: bold; padding: 5px 14px; }")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.import_button = QPushButton("Import answers (JSONL)…")
        self.import_button.setToolTip('One {"id": page id, "answers": {field: text or null}} per line')
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("not running")
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.label_button.clicked.connect(self.start_labelling)
        self.cancel_button.clicked.connect(self.cancel_labelling)
        self.import_button.clicked.connect(self.import_jsonl)
        form = QFormLayout()
        form.addRow("Endpoint URL", self.url)
        form.addRow("Model", self.model)
        form.addRow("API key variable", self.key_env)
        form.addRow("", self.key_state)
        form.addRow("Pages per run", self.limit)
        form.addRow("", self.force)
        buttons = QHBoxLayout()
        buttons.addWidget(save_settings)
        buttons.addStretch(1)
        buttons.addWidget(self.import_button)
        buttons.addWidget(self.label_button)
        buttons.addWidget(self.cancel_button)
        label_box = QGroupBox("Labelling model")
        ll = QVBoxLayout(label_box)
        ll.addLayout(form)
        ll.addLayout(buttons)
        ll.addWidget(self.progress)
        ll.addWidget(self.result)

        layout = QVBoxLayout(self)
        layout.addWidget(schema_box, 3)
        layout.addWidget(label_box, 2)
        self.key_env.textChanged.connect(self._show_key_state)
        self.load()

    # -- schema ----------------------------------------------------------------------------
    def load(self) -> None:
        project = self.session.project
        # the rows there are kept and set (after Save schema the table already reads as saved):
        # making every row anew, its weight box included, took 20-40 ms on the GUI thread
        schema = list(project.schema)
        while self.table.rowCount() > len(schema):
            self.table.removeRow(self.table.rowCount() - 1)
        for r, f in enumerate(schema):
            if r >= self.table.rowCount() or self.table.item(r, 0) is None or self.table.item(r, 1) is None \
                    or self.table.cellWidget(r, 2) is None:
                if r < self.table.rowCount():
                    self.table.removeRow(r)
                    self.table.insertRow(r)
                    self._fill_row(r, f.name, f.description, f.weight, f.name)
                else:
                    self._append_row(f.name, f.description, f.weight, f.name)
                continue
            name, desc = self.table.item(r, 0), self.table.item(r, 1)
            if name.text() != f.name:
                name.setText(f.name)
            name.setData(Qt.UserRole, f.name)
            if desc.text() != f.description:
                desc.setText(f.description)
            spin = self.table.cellWidget(r, 2)
            if spin.value() != f.weight:
                spin.setValue(f.weight)
        self.table.clearSelection()  # as a table made anew: no row selected, no current cell
        self.table.setCurrentCell(-1, -1)
        self._refresh_undo()
        cfg = project.labelling
        self.url.setText(cfg.get("url") or "")
        self.model.setText(cfg.get("model") or "")
        self.key_env.setText(cfg.get("api_key_env") or DEFAULT_API_KEY_ENV)
        self._show_key_state()

    def _append_row(self, name: str, description: str, weight: float, saved_as: str | None = None) -> None:
        """saved_as: the field's name in the saved schema (None for a new row): a row whose name
        is edited is a rename, whose labels go with it."""
        r = self.table.rowCount()
        self.table.insertRow(r)
        self._fill_row(r, name, description, weight, saved_as)

    def _fill_row(self, r: int, name: str, description: str, weight: float, saved_as: str | None) -> None:
        item = QTableWidgetItem(name)
        item.setData(Qt.UserRole, saved_as)
        self.table.setItem(r, 0, item)
        self.table.setItem(r, 1, QTableWidgetItem(description))
        spin = QDoubleSpinBox()
        spin.setRange(0.1, 100.0)
        spin.setDecimals(1)
        spin.setValue(weight)
        self.table.setCellWidget(r, 2, spin)

    def add_field(self) -> None:
        self._append_row(f"field_{self.table.rowCount() + 1}", "", DEFAULT_WEIGHT)
        r = self.table.rowCount() - 1
        # the new row becomes the current cell, so Tab from its name goes to its description
        self.table.setFocus()
        self.table.setCurrentCell(r, 0)
        self.table.editItem(self.table.item(r, 0))

    def remove_field(self) -> None:
        r = self.table.currentRow()
        if r >= 0:
            self.table.removeRow(r)

    def move_up(self) -> None:
        r = self.table.currentRow()
        if r <= 0:
            return
        fields = self.fields()
        saved = self._saved_names()
        fields[r - 1], fields[r] = fields[r], fields[r - 1]
        saved[r - 1], saved[r] = saved[r], saved[r - 1]
        self.table.setRowCount(0)
        for f, was in zip(fields, saved):
            self._append_row(f["name"], f["description"], f["weight"], was)
        self.table.selectRow(r - 1)

    def _saved_names(self) -> list:
        return [self.table.item(r, 0).data(Qt.UserRole) if self.table.item(r, 0) else None
                for r in range(self.table.rowCount())]

    def renames(self) -> dict:
        """{saved name: new name} of the rows whose name was edited."""
        out = {}
        for was, f in zip(self._saved_names(), self.fields()):
            if was and f["name"] and f["name"] != was:
                out[was] = f["name"]
        return out

    def is_dirty(self) -> bool:
        """The table differs from the saved schema (unsaved edits)."""
        saved = [f.to_dict() for f in self.session.project.schema]
        try:
            return [dict(f, weight=float(f["weight"])) for f in self.fields()] != saved
        except (TypeError, ValueError):
            return True

    def _refresh_undo(self) -> None:
        u = getattr(self.session, "_undo", [])
        self.undo_schema_button.setEnabled(bool(u) and isinstance(u[-1], _SchemaEdit))

    def undo_schema(self) -> bool:
        """Undo the last saved schema edit (only when it is the last decision of the session), on
        a background job like Save schema."""
        u = self.session._undo
        if self.schema_busy or not u or not isinstance(u[-1], _SchemaEdit):
            return False
        self._stage(None, None, undo=True)
        return True

    # -- the slow half of a schema edit off the GUI thread (every label file and status) ----------
    @property
    def schema_busy(self) -> bool:
        return getattr(self, "_schema_job", None) is not None

    def wait_schema(self, timeout: float = 60.0) -> bool:
        return process_events_while(lambda: self.schema_busy, timeout)

    def _run_schema_job(self, work, on_done) -> None:
        self._schema_job = Job(work, "dxstudio-schema", expected=(ProjectError, ReviewError, LabelError, OSError,
                                                                  ValueError), parent=self, pooled=True)
        self._schema_job.connect(None, lambda r: self._schema_job_done(on_done, r),
                                 lambda m: self._schema_job_done(None, m))
        focused = QApplication.focusWidget()
        if focused in (self.save_schema_button, self.undo_schema_button):
            # a disabled button hands the focus to the next widget, the Endpoint URL box: the
            # keys typed next (seen in a real-window walk) went into the labelling endpoint
            self.table.setFocus(Qt.FocusReason.OtherFocusReason)
        for b in (self.save_schema_button, self.undo_schema_button):
            b.setEnabled(False)
        self.schema_note.setText("Saving the schema: reading every page's labels…")
        self._schema_job.start()

    def _schema_job_done(self, on_done, result) -> None:
        job, self._schema_job = self._schema_job, None
        job.join()
        job.deleteLater()
        self.save_schema_button.setEnabled(True)
        if on_done is None:
            QMessageBox.warning(self, "Schema not saved", str(result))
            self.schema_note.setText(f"Not saved: {result}")
            self._refresh_undo()
            return
        on_done(result)

    def _stage(self, fields, renames, undo=None) -> None:
        session = self.session

        def work(job):  # its reading and writing in the worker process: its Python held the GIL
            return session.stage_schema(fields, renames, undo, run=PROCESS.call)  # in turns with the GUI's

        self._run_schema_job(work, self._committed)

    def _committed(self, staged) -> None:
        undo = staged.get("undo")
        change = self.session.commit_schema(staged)
        self.load()
        if undo is not None:
            text = f"{'Undone' if undo else 'Redone'}: the schema is {', '.join(self.session.field_names)}."
        else:
            text = f"Schema saved: {', '.join(self.session.field_names) or 'no fields'}."
            if change is not None and change.any:
                text += " " + change.summary()
        problems = getattr(self.session, "rename_problems", [])
        if problems:
            text += f" {len(problems)} label file(s) not renamed: " + "; ".join(f"{f}: {m}" for f, m in problems[:3])
            self.session.rename_problems = []
        self.schema_note.setText(text)  # (said once, under the schema: not again under Label pages)
        self.schemaChanged.emit()

    def fields(self) -> list[dict]:
        out = []
        for r in range(self.table.rowCount()):
            name = (self.table.item(r, 0).text() if self.table.item(r, 0) else "").strip()
            desc = self.table.item(r, 1).text() if self.table.item(r, 1) else ""
            out.append({"name": name, "description": desc, "weight": self.table.cellWidget(r, 2).value()})
        return out

    def save_schema(self) -> bool:
        """Write the table into dxproject.json; a bad field name is shown and nothing is saved.
        A renamed row carries its labels; removing a field asks first, saying what is lost. The
        work (every label file and page status) runs on background jobs: what the edit does is
        counted first, then, once confirmed, it is made (schema_busy meanwhile; wait_schema).
        False when the table cannot be saved as it is."""
        if self.schema_busy:
            return False
        fields, renames = self.fields(), self.renames()
        try:
            parse_schema(fields, str(self.session.project.project_file))
        except ProjectError as e:
            QMessageBox.warning(self, "Schema not saved", str(e))
            return False
        project = self.session.project
        self._run_schema_job(lambda job: schema_change(project, fields, renames),
                             lambda change: self._confirm_and_stage(change, fields, renames))
        return True

    def _confirm_and_stage(self, change, fields, renames) -> None:
        if change.removed:
            answer = QMessageBox.question(
                self, "Remove field" + ("s" if len(change.removed) > 1 else ""),
                f"Remove {', '.join(change.removed)}? {change.removal_text()}. The values stay in the label "
                f"files: Undo schema edit (Ctrl+Z here) brings the field back with them.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                self.load()
                self.schema_note.setText("Not saved: the fields are as they were saved.")
                return
        self._stage(fields, renames)

    # -- labelling -------------------------------------------------------------------------
    def _show_key_state(self) -> None:
        name = self.key_env.text().strip() or DEFAULT_API_KEY_ENV
        have = bool(os.environ.get(name))
        self.key_state.setText(f"<span style='color:{'#2B9348' if have else '#6C757D'}'>"
                               f"{'$' + name + ' is set' if have else '$' + name + ' is not set (no key sent)'}</span>")

    def save_labelling(self) -> bool:
        try:
            project = Project.open(self.session.project.root)
            project.labelling.update({"url": self.url.text().strip() or None,
                                      "model": self.model.text().strip() or None,
                                      "api_key_env": self.key_env.text().strip() or DEFAULT_API_KEY_ENV})
            project.save()
        except ProjectError as e:
            QMessageBox.warning(self, "Settings not saved", str(e))
            return False
        self.session.project.labelling.update(project.labelling)
        return True

    @property
    def running(self) -> bool:
        return self._job is not None

    def _mark_endpoint(self, message: str | None) -> None:
        """Point at the Endpoint URL box (red frame, focus, the message under the buttons)."""
        for box in (self.url, self.model):
            box.setStyleSheet("")
        if message is None:
            return
        box = self.url if not self.url.text().strip() and not os.environ.get("DXSTUDIO_LABEL_URL") else self.model
        box.setStyleSheet("QLineEdit { border: 2px solid #D7191C; }")
        box.setFocus()
        self.result.setText(f"<span style='color:#D7191C'>{message}</span>")

    def endpoint_problem(self) -> str | None:
        """Why Label pages cannot start with the boxes as they are (no endpoint or model), or None."""
        if not self.url.text().strip() and not os.environ.get("DXSTUDIO_LABEL_URL"):
            return ("Enter the labelling model's endpoint in the Endpoint URL box above "
                    "(an OpenAI-compatible URL), or set $DXSTUDIO_LABEL_URL")
        if not self.model.text().strip() and not os.environ.get("DXSTUDIO_LABEL_MODEL"):
            return "Enter the model name in the Model box above, or set $DXSTUDIO_LABEL_MODEL"
        return None

    def start_labelling(self) -> None:
        if self.running:
            return
        problem = self.endpoint_problem()
        self._mark_endpoint(problem)
        if problem is not None:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat("not running")
            self.endpointMissing.emit()
            return
        if not self.save_labelling():
            return

        work = label_work(self.session.project.root, self.limit.value() or None, self.force.isChecked(),
                          self.client_factory)
        self._job = Job(work, "dxstudio-label", expected=(LabellingError, ProjectError, LabelError, OSError),
                        parent=self)
        self._job.connect(lambda p: self._on_progress(*p), self._on_finished, self._on_failed)
        self.label_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.result.setText("Asking the labelling model…")
        self._job.start()

    def cancel_labelling(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self.cancel_button.setEnabled(False)
            self.result.setText("Cancelling after the current page…")

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setFormat("%v / %m pages")
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)

    def _stop_thread(self) -> None:
        if self._job is not None:
            self._job.join()  # its last act was the signal being handled
            self._job.deleteLater()
        self._job = None
        self.label_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _on_finished(self, result: dict) -> None:
        self._stop_thread()
        if result.get("cancelled"):
            text = "Cancelled: the pages labelled so far are saved."
        else:
            text = (f"Labelled {result['labelled']} page(s) ({result['cached']} from the cache), "
                    f"{result['skipped']} already had answers.")
            if result.get("grounding"):
                text += " Grounding: " + ", ".join(f"{k} {v}" for k, v in result["grounding"].items()) + "."
            if result.get("stopped"):
                text += f" {result['stopped']}."
        errors = result.get("errors") or []
        if errors:  # the same failure on every page is said once, with its count
            unique = list(dict.fromkeys(re.sub(r": page [A-Za-z0-9_.-]+: ", ": ", e["error"]) for e in errors))
            text += f"\n{len(errors)} page(s) failed: " + "; ".join(unique[:3])
            if len(unique) > 3:
                text += f"; and {len(unique) - 3} other problem(s)"
        if result.get("stopped") and errors and not result.get("cancelled"):
            # "stopped after 3 pages failed in a row: <the error>": the error is said below once
            text = text.replace(f" {result['stopped']}.", f" {result['stopped'].split(': ', 1)[0].capitalize()}.")
        labelled = result.get("labelled") or 0
        asked = labelled + len(errors)
        self.progress.setRange(0, max(1, asked))
        self.progress.setValue(labelled)
        self.progress.setFormat(f"{labelled} of {asked} page(s) labelled" if asked else "nothing to ask")
        self.result.setText(text)
        # the review shows the new labels, then labellingFinished says it is all done
        self._reload_session(lambda: self.labellingFinished.emit(result))

    def _reload_session(self, then=None) -> None:
        """The label files changed: the session reads them again (on the window's reloader's
        background job when there is one), then then()."""
        if self.reloader is not None:
            self.reloader.request(then)
            return
        self.session.reload()
        if then is not None:
            then()

    def _on_failed(self, message: str) -> None:
        self._stop_thread()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("failed")
        self.result.setText(f"<span style='color:#D7191C'>{message}</span>")

    def shutdown(self) -> None:
        """Stop a labelling run (after its current page) before the window closes."""
        if self._job is not None:
            self._job.cancel()
            self._job.wait(30)

    def import_jsonl(self, path=None) -> dict | None:
        if not path:
            path, _ = QFileDialog.getOpenFileName(self, "Import answers", str(self.session.project.root),
                                                  "JSON lines (*.jsonl *.json);;All files (*)")
            if not path:
                return None
        try:
            self.session.flush_writes()  # it rewrites label files
            report = import_answers_jsonl(self.session.project, path).to_dict()
        except LabelError as e:
            self.result.setText(f"<span style='color:#D7191C'>{e}</span>")
            return None
        text = f"Imported answers for {report['labelled']} page(s) from {path}."
        if report["errors"]:
            text += f"\n{len(report['errors'])} bad line(s): " + "; ".join(e["error"] for e in report["errors"][:3])
        self.result.setText(text)
        self._reload_session()
        return report
