"""The Extract tab: use the model. Choose (or drop) PDFs and page JSON files; each page is read
by the model in the background and shown with its fields drawn on it (the field's colour and
name, the confidence) and a table of field, value, confidence and LocalFirst route; Save
results writes one JSON line per page.

The model is the project's model (dxproject.json "model"), else the newest run's
runs/<run>/model.safetensors, or one chosen with "Model…". The route of a value is "local"
when its confidence is at or above the model's stored threshold for that field (else the
pooled one) and "ask" (send the page to the labelling model or a person) below it, for no
value, or for a model without stored thresholds (which the tab says): the engine's rule,
dxstudio.engine.extract.route, as `dxstudio extract` applies it.

    panel = ExtractPanel(project)
    panel.set_model(path); panel.extract_files([paths]) -> bool (starts the background job)
    panel.results -> [ExtractResult]; panel.save_jsonl(path) -> int; panel.wait(timeout)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QHeaderView, QLabel, QListWidget, QListWidgetItem,
                               QProgressBar, QPushButton, QSplitter, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from dxstudio.engine.page import PageError, load_page
from dxstudio.fsutil import MAX_SOURCE_BYTES, read_regular_file, write_bytes_atomic
from dxstudio.importers import SourceError, document_pages, is_document
from dxstudio.project import LabelFile, Project, ProjectError, check_page_id, safe_page_id
from dxstudio.tuning import rundir
from dxstudio.ui.jobs import Job, process_events_while
from dxstudio.ui.page_view import FillBar, PageView


@dataclass
class ExtractResult:
    source: str  # the file the page came from
    page: object  # dxstudio.engine.page.Page
    fields: dict  # {name: {"value", "words", "confidence", "route"}}
    corrected: set = None  # fields a person set here (route "person")

    def __post_init__(self):
        if self.corrected is None:
            self.corrected = set()

    def to_json(self) -> dict:
        return {"id": self.page.id, "source": self.source, "fields": self.fields}


def format_confidence(v) -> str:
    """A confidence as the table and the page's tags both show it: three decimals, never
    rounded up to 1 (0.9996 is "0.9996", not "1.000" beside an "ask")."""
    if v is None:
        return ""
    digits = 3
    text = f"{v:.{digits}f}"
    while float(text) >= 1.0 > v and digits < 9:
        digits += 1
        text = f"{v:.{digits}f}"
    return text


def add_to_project(project, result: "ExtractResult") -> str:
    """Add an extracted page to the project as a reviewed page: the page (its image copied into
    pages/images/), and a label file whose values are the ones shown (the model's, or a
    person's corrections) as a person's fixes, accepted. So the model learns from its mistakes
    at the next Fine-tune. Returns the page id; ProjectError when the project has another page
    under that id."""
    import dataclasses
    import shutil

    page = result.page
    pid = page.id if isinstance(page.id, str) and page.id else safe_page_id(Path(result.source).stem)
    check_page_id(pid, result.source)
    image = None
    if page.image:
        src = Path(page.image)
        if not src.is_absolute():
            src = Path(result.source).parent / src
        if src.is_file():
            image = f"images/{pid}{src.suffix.lower() or '.png'}"
    page = dataclasses.replace(page, id=pid, image=image)
    if project.has_page(pid) and project.label_path(pid).is_file():
        try:
            if project.load_page(pid).to_dict() == page.to_dict():
                raise ProjectError(f"{project.page_path(pid)}: {pid} is already in the project (review it there)")
        except ValueError as e:
            if isinstance(e, ProjectError):
                raise
    status = project.add_page(page)  # refuses another page under the same id
    if image is not None and status == "added":
        project.images_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, project.pages_dir / image)
    names = project.field_names
    by_model = dict(zip(list(result.fields), project.model_field_names(list(result.fields))))
    answers, fixes = {}, {}
    for name, v in result.fields.items():
        schema_name = by_model.get(name, name)
        if schema_name not in names:
            continue
        answers[schema_name] = v.get("value")
        fixes[schema_name] = [int(i) for i in v.get("words") or []]
    labels = LabelFile(page=pid, answers=answers, answer_source="extract",
                       review={"state": "accepted", "fixes": fixes,
                               "history": [{"op": "added from Extract", "fields": sorted(result.corrected)}]})
    project.save_labels(pid, labels)
    return pid


def newest_model(project) -> Path | None:
    """The project's model, else the newest run's model file (by the run folder's name)."""
    m = project.model
    if m is not None and m.is_file():
        return m
    runs = sorted(p for p in project.runs_dir.glob(f"*/{rundir.MODEL}") if p.is_file()) \
        if project.runs_dir.is_dir() else []
    return runs[-1] if runs else None


def load_pages(path: Path, image_dir: Path | None = None) -> list:
    """The pages of one file: a PDF (its text layer, else OCR; one page per PDF page), an
    image (PNG, JPEG, TIFF, WebP: OCR) or a page JSON. With image_dir, each page's image (a
    PDF page rendered, the upright photo) is written there and shown under its fields."""
    import dataclasses

    if not is_document(path.name):
        return [load_page(path)]
    read = document_pages(str(path), read_regular_file(path, MAX_SOURCE_BYTES, SourceError))
    if image_dir is None:
        return [page for page, _, _ in read]
    out, pages = [], []
    for page, data, ext in read:
        if data is not None:  # read by OCR: its words are in this image's pixels
            target = image_dir / f"{len(list(image_dir.iterdir()))}{ext}"
            target.write_bytes(data)
            out.append(dataclasses.replace(page, image=str(target)))
        else:
            pages.append(page)
            out.append(page)
    if not pages:
        return out
    rendered = {}
    for page in pages:
        tail = page.id.rsplit("-p", 1)[-1] if len(read) > 1 else "1"
        index = int(tail) - 1 if tail.isdigit() else 0
        try:
            image = render_pdf_page(path, index, image_dir / f"{len(list(image_dir.iterdir()))}.png")
        except Exception:  # the words are what matter; a page that does not render shows its boxes
            image = None
        rendered[page.id] = dataclasses.replace(page, image=str(image)) if image else page
    return [rendered.get(p.id, p) if p.image is None else p for p in out]


def render_pdf_page(path: Path, index: int, out: Path, dpi: float = 100.0) -> Path:
    """Render page `index` of a PDF to a PNG (pypdfium2, then Qt's PNG writer); returns out."""
    import pypdfium2 as pdfium
    from PySide6.QtGui import QImage

    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[index]
        bitmap = page.render(scale=dpi / 72.0)
        arr = bitmap.to_numpy()
        h, w = arr.shape[:2]
        channels = arr.shape[2] if arr.ndim == 3 else 1
        fmt = {1: QImage.Format_Grayscale8, 3: QImage.Format_BGR888, 4: QImage.Format_RGBX8888}[channels]
        import numpy as np
        arr = np.ascontiguousarray(arr)
        img = QImage(arr.data, w, h, arr.strides[0], fmt).copy()
        page.close()
    finally:
        pdf.close()
    if not img.save(str(out), "PNG"):
        raise OSError(f"{out}: cannot write the rendered page")
    return out


def extract_work(model_path, files, image_dir=None):
    """Reading the files as a dxstudio.ui.jobs.Job's work. Reports ("progress", done, total),
    ("result", ExtractResult) and ("problem", message) for a file that cannot be read (the
    rest goes on); a model that cannot be read fails the job."""
    def work(job):
        from dxstudio.engine.container import load_model
        from dxstudio.engine.extract import model_decoding, predict_page, prediction_json, reading_keywords
        from dxstudio.engine.model import to_runtime

        model = load_model(model_path)
        params = to_runtime(model.params)
        thresholds = model.thresholds
        paths = [Path(f) for f in files]
        for k, path in enumerate(paths):
            job.report(("progress", k, len(paths)))
            if job.cancelled.is_set():
                break
            try:
                pages = load_pages(path, image_dir)
            except (PageError, SourceError, OSError, ValueError) as e:
                job.report(("problem", str(e) if str(path) in str(e) else f"{path}: {e}"))
                continue
            for page in pages:
                try:
                    pred = predict_page(model.cfg, params, page, decoding=model_decoding(model.thresholds),
                                        keywords=reading_keywords(model.keywords, model.cfg.fields))
                except Exception as e:  # one bad page never stops the rest
                    job.report(("problem", f"{path}: page {page.id}: {type(e).__name__}: {e}"))
                    continue
                fields = prediction_json(pred, thresholds)["fields"]  # the engine's route rule
                job.report(("result", ExtractResult(str(path), page, fields)))
        job.report(("progress", len(paths), len(paths)))
        return None
    return work


class ExtractPanel(QWidget):
    finished = Signal()
    pageAdded = Signal(str)  # a corrected page joined the project (its id)

    def __init__(self, project, parent=None):
        super().__init__(parent)
        self.project = project
        self.model_path: Path | None = None
        self.thresholds: dict | None = None
        self.results: list[ExtractResult] = []
        self.problems: list[str] = []
        self._job: Job | None = None
        self._image_dir: Path | None = None
        self._chosen = False  # a model picked with Model… (else the project's model is followed)
        self._pending: list = []  # files dropped before there was a model: read when one comes
        self.setAcceptDrops(True)

        self.model_label = QLabel()
        self.model_label.setWordWrap(True)
        self.model_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        model_button = QPushButton("Model…")
        model_button.setToolTip("Use another model file (.safetensors)")
        model_button.clicked.connect(self._choose_model)
        self.open_button = QPushButton("Open PDFs, images or pages…")
        self.open_button.setToolTip("PDF files, scans and photos (read by OCR), or page JSON files; you can also drop them here")
        self.open_button.setStyleSheet("QPushButton { font-weight: bold; padding: 5px 14px; }")
        self.open_button.clicked.connect(self._choose_files)
        self.save_button = QPushButton("Save results…")
        self.save_button.setToolTip("One JSON line per page: its fields, word indices, confidences and routes")
        self.save_button.setEnabled(False)
        self.save_button.clicked.connect(lambda: self.save_jsonl())
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("drop PDFs, photos or page JSON files here, or press Open")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #495057;")
        top = QHBoxLayout()
        top.addWidget(self.model_label, 1)
        top.addWidget(model_button)
        top.addWidget(self.open_button)
        top.addWidget(self.save_button)

        self.list = QListWidget()
        self.list.setMinimumWidth(250)  # "receipt_00012  ·  3 value(s), 2 ask" whole, no scroll bar
        self.list.currentRowChanged.connect(self.show_result)
        self.view = PageView()
        self.fill_bar = FillBar(self.view)
        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.fill_bar)
        cl.addWidget(self.view, 1)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Field", "Value", "Confidence", "Route"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.Stretch)
        split = QSplitter()
        split.addWidget(self.list)
        split.addWidget(centre)
        split.addWidget(self.table)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 560, 360])
        self.table.setSelectionBehavior(QTableWidget.SelectRows)
        self.table.setSelectionMode(QTableWidget.SingleSelection)
        self.table.setToolTip("Select a field's row, select its words on the page (click, drag, or the arrow "
                              "keys), then Set from selection (or the field's key 1–9)")
        self.set_button = QPushButton("Set from selection")
        self.set_button.setToolTip("The selected words on the page become the value of the field selected in the "
                                   "table (a correction: route “person”)  [keys 1–9: that field]")
        self.set_button.clicked.connect(lambda: self.correct_field())
        self.none_button = QPushButton("No value")
        self.none_button.setToolTip("The field selected in the table has no value on this page")
        self.none_button.clicked.connect(lambda: self.correct_field(words=[]))
        self.add_button = QPushButton("Add page to project")
        self.add_button.setToolTip("The page joins the project as a reviewed (accepted) page with the values shown, "
                                   "corrections included: the next Fine-tune learns from it")
        self.add_button.clicked.connect(lambda: self.add_current_to_project())
        for b in (self.set_button, self.none_button, self.add_button):
            b.setEnabled(False)
        fix_row = QHBoxLayout()
        fix_row.addWidget(QLabel("Correct a value:"))
        fix_row.addWidget(self.set_button)
        fix_row.addWidget(self.none_button)
        fix_row.addStretch(1)
        fix_row.addWidget(self.add_button)
        from PySide6.QtGui import QKeySequence, QShortcut
        self._keys = []
        for k in range(1, 10):
            sc = QShortcut(QKeySequence(str(k)), self)
            sc.setContext(Qt.WidgetWithChildrenShortcut)
            sc.activated.connect(lambda k=k: self.correct_field(index=k - 1))
            self._keys.append(sc)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.progress)
        layout.addWidget(self.note)
        layout.addLayout(fix_row)
        layout.addWidget(split, 1)
        self.set_model(newest_model(project))

    # -- the model ---------------------------------------------------------------------------
    def set_model(self, path) -> bool:
        from dxstudio.engine.container import ModelFileError, load_model

        self.model_path, self.thresholds = None, None
        if path is None:
            self.model_label.setText("<b>No model yet</b>: fine-tune one (Train tab), or choose a model file.")
            return False
        try:
            model = load_model(path)
        except (ModelFileError, OSError, ValueError) as e:
            self.model_label.setText(f"<span style='color:#D7191C'>{e}</span>")
            return False
        self.model_path = Path(path)
        self.thresholds = model.thresholds
        if "D7191C" in self.note.text():  # an error about having no model is no longer true
            self.note.setText("")
        fields = ", ".join(model.cfg.fields)
        try:  # a model of this project is named by its path in the project
            shown = self.model_path.resolve().relative_to(Path(self.project.root).resolve())
        except ValueError:
            shown = self.model_path
        from dxstudio.engine.extract import field_threshold
        own = [f for f in model.cfg.fields if field_threshold(f, self.thresholds) is not None]
        # (a model whose run found no threshold stores one per field, each None: every value is
        # asked, which the line said as "local at or above, ask below" - seen in a walk)
        if own and len(own) == len(model.cfg.fields):
            how = "routes from its stored LocalFirst thresholds: local at or above, ask below"
        elif own:
            how = (f"routes from its stored LocalFirst thresholds ({', '.join(own)}: local at or above, ask "
                   f"below); the other fields have none of their own: asked")
        else:
            how = "no stored LocalFirst threshold: every value is asked"
        self.model_label.setText(f"<b>Model</b> {shown} · fields {fields} · {how}")
        return True

    def _choose_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Model", str(self.project.root), "Models (*.safetensors)")
        if path:
            self.choose_model(path)

    def choose_model(self, path) -> bool:
        """Model…: this file, kept until the window closes (the project's model is not followed)."""
        ok = self.set_model(path)
        self._chosen = ok
        if ok:
            self._read_pending()
        return ok

    def follow_project(self) -> bool:
        """The project's model as dxproject.json says now (Runs' Use this model, a run that just
        ended), unless a model was picked with Model…. True when there is a model."""
        if self._chosen and self.model_path is not None:
            return True
        try:
            project = Project.open(self.project.root)
        except (ProjectError, OSError):
            project = self.project
        path = newest_model(project)
        if path is None:
            return False
        if self.model_path is None or Path(path).resolve() != self.model_path.resolve():
            if not self.set_model(path):
                return False
        self._read_pending()
        return True

    def _read_pending(self) -> None:
        if self._pending and self.model_path is not None and not self.running:
            paths, self._pending = self._pending, []
            self.extract_files(paths)

    # -- extracting --------------------------------------------------------------------------
    def _choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Pages to read", str(self.project.root),
                                                "PDFs, images and page JSON (*.pdf *.png *.jpg *.jpeg *.tif *.tiff *.webp *.json);;All files (*)")
        if paths:
            self.extract_files(paths)

    @property
    def running(self) -> bool:
        return self._job is not None

    def extract_files(self, paths) -> bool:
        if self.running:
            return False
        if self.model_path is None:
            self.follow_project()
        if self.model_path is None:
            self._pending = [str(p) for p in paths]
            self.note.setText(f"<span style='color:#D7191C'>No model to read with yet: {len(self._pending)} file(s) "
                              f"wait here and are read as soon as there is one (fine-tune in the Train tab, or "
                              f"choose a model file with Model…).</span>")
            return False
        self.results, self.problems = [], []
        self.list.clear()
        self.table.setRowCount(0)
        self.view.clear_page()
        self.note.setText("")
        import tempfile
        if self._image_dir is None:  # rendered PDF pages, removed when the window closes
            self._image_dir = Path(tempfile.mkdtemp(prefix="dxstudio-extract-"))
        self._job = Job(extract_work(self.model_path, paths, self._image_dir), "dxstudio-extract", parent=self)
        self._job.connect(self._on_event, lambda _: self._on_finished(), self._on_failed)
        self.open_button.setEnabled(False)
        self._job.start()
        return True

    def _on_event(self, event) -> None:
        kind = event[0]
        if kind == "progress":
            self._on_progress(event[1], event[2])
        elif kind == "result":
            self._on_result(event[1])
        else:
            self._on_problem(event[1])

    def _on_failed(self, message: str) -> None:
        self.problems.append(message)
        self._on_finished()

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.progress.setFormat("%v / %m files read")

    def _on_result(self, r: ExtractResult) -> None:
        self.results.append(r)
        n = sum(1 for v in r.fields.values() if v["value"] is not None)
        asks = sum(1 for v in r.fields.values() if v.get("route") == "ask")
        item = QListWidgetItem(f"{r.page.id}  ·  {n} value(s)" + (f", {asks} ask" if asks else ""))
        item.setToolTip(r.source)
        self.list.addItem(item)
        if len(self.results) == 1:
            self.list.setCurrentRow(0)

    def _on_problem(self, message: str) -> None:
        self.problems.append(message)

    def _on_finished(self) -> None:
        if self._job is not None:
            self._job.join()  # its last act was the signal being handled
            self._job.deleteLater()
        self._job = None
        self.open_button.setEnabled(True)
        self.save_button.setEnabled(bool(self.results))
        parts = [f"Read {len(self.results)} page(s)."]
        if self.problems:
            parts.append(f"{len(self.problems)} file(s) skipped: " + "; ".join(self.problems[:3]))
        if not self.thresholds and self.results:
            parts.append("This model stores no LocalFirst threshold, so every value is routed to ask.")
        self.note.setText(" ".join(parts))
        self.finished.emit()

    def wait(self, timeout: float = 60.0) -> bool:
        """For tests and the screenshot command: process events until the job ends."""
        return process_events_while(lambda: self.running, timeout)

    def shutdown(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self._job.wait(30)
        if self._image_dir is not None:
            import shutil
            shutil.rmtree(self._image_dir, ignore_errors=True)
            self._image_dir = None

    # -- showing -----------------------------------------------------------------------------
    def show_result(self, row: int) -> None:
        if not 0 <= row < len(self.results):
            return
        r = self.results[row]
        names = list(r.fields)
        tags = [0] * len(r.page.words)
        for c, name in enumerate(names):
            words = r.fields[name]["words"]
            for k, i in enumerate(words):
                tags[i] = (1 if k == 0 else 2) + 2 * c
        labels = {}
        for name, v in r.fields.items():
            if name in r.corrected:
                labels[name] = f"{name} · person"
            elif v["confidence"] is not None:
                labels[name] = f"{name} {format_confidence(v['confidence'])}" + \
                    (f" · {v['route']}" if v.get("route") else "")
        self.view.name_text = labels
        image_root = Path(r.source).parent
        self.view.show_page(r.page, tags, field_names=names, image_root=image_root)
        keep = self.table.currentRow()
        self.table.setRowCount(len(names))
        for k, name in enumerate(names):
            v = r.fields[name]
            conf = format_confidence(v["confidence"])
            route = v.get("route") or ""
            for col, text in enumerate((name, v["value"] or "(none)", conf, route)):
                item = QTableWidgetItem(text)
                if col == 3 and text == "ask":
                    item.setForeground(Qt.darkRed)
                self.table.setItem(k, col, item)
        self.table.resizeColumnToContents(0)
        if names:
            asks = [k for k, n in enumerate(names) if r.fields[n].get("route") == "ask"]
            self.table.selectRow(keep if 0 <= keep < len(names) else (asks[0] if asks else 0))
        for b in (self.set_button, self.none_button, self.add_button):
            b.setEnabled(True)

    def current_result(self) -> "ExtractResult | None":
        row = self.list.currentRow()
        return self.results[row] if 0 <= row < len(self.results) else None

    def correct_field(self, words=None, index: int | None = None) -> bool:
        """A person's value for a field of the page shown: the selected words (or `words`; []
        for no value), for the table's selected field or field `index`. Its route becomes
        "person", and the page can then join the project (Add page to project)."""
        r = self.current_result()
        if r is None:
            return False
        names = list(r.fields)
        k = index if index is not None else self.table.currentRow()
        if not 0 <= k < len(names):
            self.note.setText("Select the field to correct in the table first.")
            return False
        from_selection = words is None
        words = self.view.selected_words() if from_selection else list(words)
        if from_selection and not words:
            self.note.setText(f"Select the words of {names[k]} on the page first (click, drag, or the arrow keys), "
                              f"or press No value.")
            return False
        name = names[k]
        text = " ".join(r.page.words[i].text for i in words) if words else None
        r.fields[name] = {"value": text, "words": list(words), "confidence": None, "route": "person"}
        r.corrected.add(name)
        self.view.clear_selection()
        self.table.selectRow(k)
        self.show_result(self.list.currentRow())
        self.note.setText(f"{name} = {('“' + text + '”') if text else 'no value'} (your correction). "
                          f"Add page to project makes it a reviewed page the next Fine-tune learns from.")
        return True

    def add_current_to_project(self) -> str | None:
        r = self.current_result()
        if r is None:
            return None
        try:
            project = Project.open(self.project.root)
            pid = add_to_project(project, r)
        except (ProjectError, ValueError, OSError) as e:
            self.note.setText(f"<span style='color:#D7191C'>Not added: {e}</span>")
            return None
        self.note.setText(f"{pid} joined the project as a reviewed page"
                          + (f" with your corrections of {', '.join(sorted(r.corrected))}" if r.corrected else "")
                          + ": the next Fine-tune learns from it.")
        self.pageAdded.emit(pid)
        return pid

    def save_jsonl(self, path=None) -> int | None:
        if not path:
            path, _ = QFileDialog.getSaveFileName(self, "Save results", str(self.project.extracted_export),
                                                  "JSON lines (*.jsonl)")
            if not path:
                return None
        text = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in self.results)
        try:
            write_bytes_atomic(path, text.encode("utf-8"))
        except OSError as e:
            self.note.setText(f"<span style='color:#D7191C'>{path}: cannot write ({e.strerror or e})</span>")
            return None
        self.note.setText(f"Saved {len(self.results)} page(s) to {path}")
        return len(self.results)

    # -- drag and drop -----------------------------------------------------------------------
    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event):
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.extract_files(paths)
            event.acceptProposedAction()
