"""File > New project and File > Import pages.

NewProjectDialog(parent_folder): a folder, a name and the fields to read (comma-separated,
optional descriptions after '='); Create makes the project (dxstudio.project.Project.create)
and emits created(path).

ImportDialog(project_root): a format (json, funsd, sroie, cord, pdf, images), a source file or folder;
Import runs dxstudio.importers.import_pages as a background dxstudio.ui.jobs.Job (the window
never freezes) with a progress bar and Cancel (between two source files), then says what was
added, what was already there and what was skipped and why (one line per file), and emits
imported(report dict).
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPlainTextEdit, QProgressBar, QPushButton, QVBoxLayout)

from dxstudio.importers import FORMATS, SourceError, import_pages
from dxstudio.project import LabelError, Project, ProjectError
from dxstudio.ui.jobs import Job

FORMAT_HELP = {
    "json": "page JSON files: a file or a folder of *.json",
    "funsd": "a FUNSD folder (annotations/*.json); no answers",
    "sroie": "a SROIE folder (box/*.csv, key/*.json, img/): company, date, address, total become answers",
    "cord": "a CORD folder (json/receipt_*.json): total, subtotal, tax, cash, change become answers",
    "pdf": "PDF files: a file or a folder of *.pdf, one page per PDF page; pages without a text layer "
           "(scans) are read by OCR",
    "images": "scans and photos (PNG, JPEG, TIFF, WebP): a file or a folder, read by OCR "
              "(the ocr extra, docs/ocr.md); the page id is the file name",
}


def parse_fields(text: str) -> list[dict]:
    """'total, date = the invoice date' -> [{"name": "total"}, {"name": "date", "description": ...}]."""
    out = []
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part:
            continue
        name, _, desc = part.partition("=")
        out.append({"name": name.strip(), "description": desc.strip()})
    return out


class NewProjectDialog(QDialog):
    created = Signal(str)

    def __init__(self, parent_folder, parent=None):
        super().__init__(parent)
        self.setWindowTitle("New project")
        self.folder = QLineEdit(str(Path(parent_folder) / "new-project"))
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        self.name = QLineEdit()
        self.name.setPlaceholderText("a name for the project (default: the folder's name)")
        self.fields = QLineEdit()
        self.fields.setPlaceholderText("total, date = the invoice date, vendor")
        self.fields.setToolTip("The fields to read off each page, comma-separated; text after '=' is the "
                               "description the labelling model gets. You can change them later.")
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.create_button = QPushButton("Create")
        self.create_button.setDefault(True)
        self.create_button.clicked.connect(self.create)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.folder, 1)
        row.addWidget(browse)
        form = QFormLayout()
        form.addRow("Folder", row)
        form.addRow("Name", self.name)
        form.addRow("Fields", self.fields)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(cancel)
        buttons.addWidget(self.create_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        self.resize(560, 180)

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder for the new project", self.folder.text())
        if path:
            self.folder.setText(path)

    def create(self) -> str | None:
        folder = self.folder.text().strip()
        if not folder:
            self.message.setText("<span style='color:#D7191C'>Choose a folder for the project.</span>")
            return None
        try:
            project = Project.create(folder, self.name.text().strip() or None, parse_fields(self.fields.text()))
        except (ProjectError, OSError) as e:
            self.message.setText(f"<span style='color:#D7191C'>{e}</span>")
            return None
        self.created.emit(str(project.root))
        self.accept()
        return str(project.root)


class ImportCancelled(Exception):
    pass


def import_work(fmt: str, src: str, project_root):
    """The import as a dxstudio.ui.jobs.Job's work: reports (done, total), returns the report dict."""
    def work(job):
        def progress(done, total):
            job.report((done, total))
            if job.cancelled.is_set() and done < total:
                raise ImportCancelled()

        try:
            report = import_pages(fmt, src, Project.open(project_root), progress=progress)
        except ImportCancelled:
            return {"cancelled": True}
        result = report.to_dict()
        result["cancelled"] = False
        return result
    return work


def report_text(result: dict) -> str:
    if result.get("cancelled"):
        return "Cancelled: the pages imported so far are in the project."
    lines = [f"Added {result['added']} page(s); {result['unchanged']} were already in the project."]
    if result.get("answers"):
        lines.append(f"Answers imported for {result['answers']} page(s).")
    if result.get("fields_added"):
        lines.append(f"Fields added to the schema: {', '.join(result['fields_added'])}.")
    errors = result.get("errors") or []
    if errors:
        lines.append(f"Skipped {len(errors)} file(s):")
        lines += [f"  {e['error']}" for e in errors[:200]]
        if len(errors) > 200:
            lines.append(f"  … and {len(errors) - 200} more")
    else:
        lines.append("Nothing was skipped.")
    for n in (result.get("notes") or [])[:50]:
        lines.append(f"Note: {n['note']}")
    return "\n".join(lines)


class ImportDialog(QDialog):
    imported = Signal(dict)

    def __init__(self, project_root, parent=None):
        super().__init__(parent)
        self.project_root = Path(project_root)
        self.setWindowTitle(f"Import pages into {self.project_root.name}")
        self._job: Job | None = None
        self.result: dict | None = None
        self.format = QComboBox()
        for f in FORMATS:
            self.format.addItem(f, f)
        self.format.currentIndexChanged.connect(self._show_help)
        self.help = QLabel()
        self.help.setStyleSheet("color: #6C757D;")
        self.source = QLineEdit()
        self.source.setPlaceholderText("a file or a folder")
        file_button = QPushButton("File…")
        folder_button = QPushButton("Folder…")
        file_button.clicked.connect(self._browse_file)
        folder_button.clicked.connect(self._browse_folder)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("not running")
        self.report = QPlainTextEdit()
        self.report.setReadOnly(True)
        self.report.setPlaceholderText("What was imported and what was skipped appears here.")
        self.import_button = QPushButton("Import")
        self.import_button.setDefault(True)
        self.import_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        src_row = QHBoxLayout()
        src_row.addWidget(self.source, 1)
        src_row.addWidget(file_button)
        src_row.addWidget(folder_button)
        form = QFormLayout()
        form.addRow("Format", self.format)
        form.addRow("", self.help)
        form.addRow("Source", src_row)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.import_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.report, 1)
        layout.addLayout(buttons)
        self._show_help()
        self.resize(640, 420)

    def _show_help(self) -> None:
        self.help.setText(FORMAT_HELP[self.format.currentData()])

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import from", str(self.project_root.parent))
        if path:
            self.source.setText(path)

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Import from", str(self.project_root.parent))
        if path:
            self.source.setText(path)

    @property
    def running(self) -> bool:
        return self._job is not None

    def start(self) -> bool:
        src = self.source.text().strip()
        if self.running:
            return False
        if not src:
            self.report.setPlainText("Choose a file or folder to import from.")
            return False
        self.result = None
        self._job = Job(import_work(self.format.currentData(), src, self.project_root), "dxstudio-import",
                        expected=(SourceError, ProjectError, LabelError, OSError), parent=self)
        self._job.connect(lambda p: self._on_progress(*p), self._on_finished, self._on_failed)
        self.import_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setRange(0, 0)  # busy until the first count arrives
        self.report.setPlainText(f"Importing {src} as {self.format.currentData()}…")
        self._job.start()
        return True

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self.cancel_button.setEnabled(False)
            self.report.appendPlainText("Cancelling after the current file…")

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.progress.setFormat("%v / %m files")

    def _stop(self) -> None:
        if self._job is not None:
            self._job.join()  # its last act was the signal being handled
            self._job.deleteLater()
        self._job = None
        self.import_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _on_finished(self, result: dict) -> None:
        self._stop()
        self.result = result
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
            self.progress.setValue(1)
        self.report.setPlainText(report_text(result))
        self.imported.emit(result)

    def _on_failed(self, message: str) -> None:
        self._stop()
        self.result = {"failed": message}
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("failed")
        self.report.setPlainText(message)

    def closeEvent(self, event):
        if self._job is not None:
            self._job.cancel()
            self._job.wait(30)
        super().closeEvent(event)
