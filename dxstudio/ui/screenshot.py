"""`dxstudio screenshot PROJECT OUT.png --screen review|schema|training|results|runs|extract|queue`.

Renders a screen of the real app (dxstudio.ui.app.MainWindow) offscreen to a PNG. For
"training" and "results" it first runs a real fine-tune through the Train tab, on a copy of
the project (the project itself gets no run folder). By default that is a short run (a tiny
model, about --steps steps, with a learning rate that learns something in that time: quick,
for tests); with --project-settings it is the run the project's own tuning settings make
(dxproject.json "settings"), as pressing Fine-tune in the app would. "runs" fine-tunes twice
(the second run at half the learning rate) and shows the Runs tab comparing the two. The Train tab's form shows
the settings the run used. "extract" then reads the first EXTRACT_PAGES held-out pages with the
new model in the Extract tab (their page JSON files, as a person would open them). "queue" waits
for the new model to read the project's pages (the Review tab's model answers) and shows the first
page of its review queue in Review (the Q key). The PNG is --size pixels
(default 1400x880), written atomically.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from dxstudio.console import fail, warn
from dxstudio.fsutil import write_bytes_atomic
from dxstudio.project import Project, ProjectError, copy_project

SCREENS = ("review", "schema", "training", "results", "runs", "extract", "queue")
TAB_OF_SCREEN = {"review": "Review", "schema": "Schema & labels", "training": "Train", "results": "Results",
                 "runs": "Runs", "extract": "Extract", "queue": "Review"}
TRAINED_SCREENS = ("training", "results", "runs", "extract", "queue")  # these first fine-tune on a copy of the project
EXTRACT_PAGES = 4  # the extract screen reads this many held-out pages with the new model
# A short run that learns something: a tiny model with a brisk rate trains a few seconds.
SHORT_RUN = {"size": "tiny", "lr": 0.01, "backbone_scale": 1.0, "warmup": 5}


def configure(name, p):
    p.add_argument("project", help="project folder")
    p.add_argument("out", help="PNG file to write")
    p.add_argument("--screen", choices=SCREENS, default="review")
    p.add_argument("--steps", type=int, default=60,
                   help="about how many training steps the short fine-tune takes (training, results)")
    p.add_argument("--project-settings", action="store_true",
                   help="train with the project's own tuning settings instead of a short tiny run "
                        "(slower; the screenshots then show what the project really learns)")
    p.add_argument("--size", default="1400x880", help="window size WIDTHxHEIGHT in pixels")
    p.add_argument("--page", help="page to show on the review screen (default: the window's first)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the fine-tune")


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size must be WIDTHxHEIGHT such as 1400x880, not {text!r}") from None
    if not (320 <= w <= 8000 and 240 <= h <= 8000):
        raise ValueError(f"--size {text}: width 320..8000 and height 240..8000 pixels")
    return w, h


def short_run_settings(project_root: Path, steps: int) -> dict:
    """The settings of a short fine-tune of about `steps` steps: SHORT_RUN plus the epochs that
    give that many steps at the project's batch size (at least 3, so the agreement is a line)."""
    from dxstudio.tuning import TuneRun, resolve_settings  # Numba: when a run is rendered, not when the command line is parsed

    project = Project.open(project_root)
    settings = dict(SHORT_RUN)
    run = TuneRun.prepare(project, project.runs_dir / "_count", settings)  # reads, writes nothing
    batch = resolve_settings(project.settings, settings)["batch"]
    settings["epochs"] = max(3, round(steps * batch / max(1, len(run.train_pages))))
    return settings


def _process_until(app, done, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            return False
        app.processEvents()
        time.sleep(0.01)
    return True


def _save_png(widget, out: Path) -> None:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not widget.grab().save(buf, "PNG"):
        raise OSError(f"{out}: Qt could not encode the screenshot as PNG")
    buf.close()
    write_bytes_atomic(out, bytes(data))


def render(project: Path, out: Path, screen: str, size=(1400, 880), steps: int = 60, page: str | None = None,
           timeout: float = 600.0, project_settings: bool = False) -> Path:
    """Render one screen to out (PNG). steps: the short run's length; project_settings: train
    with the project's own settings instead (steps is then unused). Raises ValueError/OSError
    with a message naming the problem."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from dxstudio.ui.app import MainWindow

    if screen not in SCREENS:
        raise ValueError(f"--screen must be one of {', '.join(SCREENS)}, not {screen!r}")
    if page is not None:  # a page that is not there is an error, not a banner in the picture
        path = Project.open(project).page_path(page)  # ProjectError for an id that cannot be one
        if not path.is_file():
            raise ValueError(f"{path}: no such page in the project (--page {page})")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    with tempfile.TemporaryDirectory(prefix="dxstudio-screenshot-") as tmp:
        root = project
        if screen in TRAINED_SCREENS:  # train on a copy: the project gets no run folder from a screenshot
            root = Path(tmp) / project.name
            copy_project(project, root)
        window = MainWindow(root, remember=False)  # the project is left as it was
        try:
            window.resize(*size)
            window.show()
            if page is not None:
                window.goto(page)
            tabs = {window.tabs.tabText(i).replace("&&", "&"): i for i in range(window.tabs.count())}
            if screen in TRAINED_SCREENS:
                panel = window.training_panel
                if panel is None:
                    raise OSError("the training panel is not available in this window")
                panel.show_dialogs = False
                window.tabs.setCurrentIndex(tabs["Train"])
                if not project_settings:  # else the form already holds the project's settings
                    panel.set_settings(short_run_settings(root, steps))
                done = []
                panel.finished.connect(lambda *_: done.append(1))
                for n in range(2 if screen == "runs" else 1):
                    if n:  # a second run to compare with: half the learning rate
                        panel.set_settings({"lr": panel.settings_values()["lr"] / 2})
                        time.sleep(1.1)  # run folders are named by the second
                    if panel.fine_tune() is None:
                        raise ValueError(f"{project}: the fine-tune did not start: {panel.last_error}")
                    finished = lambda: not panel.is_running and (panel.last_error is not None or len(done) > n)
                    if not _process_until(app, finished, timeout):
                        panel.shutdown()
                        raise OSError(f"{project}: the fine-tune did not finish within {timeout:g} s")
                    if panel.last_error is not None:
                        raise ValueError(f"{project}: fine-tuning failed: {panel.last_error}")
            if screen == "extract":
                results = window.results_panel
                panel = window.extract_panel
                if not panel.choose_model(results.run_dir / "model.safetensors"):
                    raise OSError(f"{project}: the new model cannot be read: {panel.model_label.text()}")
                ids = results.heldout_ids[:EXTRACT_PAGES]
                panel.extract_files([root / "pages" / f"{pid}.json" for pid in ids])
                if not panel.wait(timeout):
                    raise OSError(f"{project}: the Extract tab did not finish within {timeout:g} s")
            if screen == "queue":  # the new model's answers beside the labels, the queue's first page
                if not window.model_answers.wait(timeout) or not window.model_answers.answers:
                    raise OSError(f"{project}: the model did not read the pages: {window.model_answers.error}")
            window.tabs.setCurrentIndex(tabs[TAB_OF_SCREEN[screen]])
            if screen == "queue":
                if not window.next_in_queue():
                    raise ValueError(f"{project}: the review queue is empty (every page is reviewed)")
            if screen == "runs":  # the two runs selected and compared
                runs = window.runs_panel
                runs.show_dialogs = False
                runs.select_runs([r.name for r in runs.runs[:2]])
                runs.compare_selected()
            _process_until(app, lambda: False, 0.3)  # let layouts and plots settle
            window.resize(*size)
            app.processEvents()
            got = (window.width(), window.height())
            if got != tuple(size):
                raise ValueError(f"--size {size[0]}x{size[1]}: the window cannot be that small; its minimum "
                                 f"is {window.minimumSizeHint().width()}x{window.minimumSizeHint().height()}")
            _save_png(window, out)
        finally:
            window.close()
            # Destroy the window now, not in the interpreter's final garbage collection (where
            # PySide6 and pyqtgraph objects going in an arbitrary order can abort the process).
            import shiboken6

            shiboken6.delete(window)
            app.processEvents()
    return out


def run(name, args) -> int:
    try:
        size = parse_size(args.size)
        if args.steps < 1:
            raise ValueError(f"--steps must be at least 1, not {args.steps}")
        out = render(Path(args.project), Path(args.out), args.screen, size, args.steps, args.page, args.timeout,
                     project_settings=args.project_settings)
    except (ProjectError, ValueError, OSError) as e:
        fail(e)
    warn(f"wrote {out} ({args.screen}, {size[0]}x{size[1]})")
    return 0
