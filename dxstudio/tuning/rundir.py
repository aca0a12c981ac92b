"""A run folder, owned by this class: its files' names, its name, its lock, its status.

    PROJECT/runs/<run>/
      settings.json            the resolved settings, fingerprint, split, total steps
      targets.json             the label files' bytes the run trains on, as read at its start
                               (resume reads these, so review may go on during a run)
      metrics.jsonl            one JSON line per step and per epoch
      checkpoint.safetensors   weights, AdamW moments, step and fingerprint (for --resume)
      model.safetensors        the tuned model (written when the run finishes)
      report.json              the held-out scores (written last: the run is finished)
      .lock                    held (fcntl) while a process writes the folder

    rd = RunDir.create(project.runs_dir)      # a new folder with a unique name (time stamp)
    rd = RunDir(path)                          # an existing or chosen folder
    with rd.writing():                         # one writer at a time; orphaned .tmp files go
        ...
    RunDir.list(project.runs_dir)              # [RunInfo]: status, steps, scores, newest first

The trainer (run.py), the command line (cli/tune.py) and the app (ui/train_tab.py, ui/results_tab.py) use
these names and nothing else.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dxstudio.fsutil import read_json
from dxstudio.tuning.checkpoint import checkpoint_step, read_checkpoint
from dxstudio.tuning.metrics import metrics_rows, score_summary
from dxstudio.tuning.settings import TuneError

try:
    import fcntl
except ImportError:  # pragma: no cover  (not POSIX: no lock, one writer is the person's duty)
    fcntl = None

SETTINGS = "settings.json"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.safetensors"
MODEL = "model.safetensors"
REPORT = "report.json"
SNAPSHOT = "targets.json"
LOCK = ".lock"
EPOCHS = "epochs"  # the weights at each epoch's end, with early_stop or average_last on
RUN_FILES = (SETTINGS, METRICS, CHECKPOINT, MODEL, REPORT, SNAPSHOT)
# A cross-validated run (tuning/folds.py): its parts are run folders of their own
FOLDS = "folds"  # RUN/folds/<k+1>: fold k
FINAL = "final"  # RUN/final: the final model, on every usable page
HELDOUT = "heldout.json"  # in a finished fold: its held-out predictions

# Run statuses
FINISHED = "finished"  # model.safetensors and report.json written
STOPPED = "stopped"  # a checkpoint to resume from, no report
RUNNING = "running"  # another process holds the lock now
EMPTY = "empty"  # no checkpoint and no report (a run that never took a step)


class RunLockedError(TuneError):
    """Another process is writing the run folder."""


@dataclass(frozen=True)
class RunInfo:
    """One run of a project as the run list shows it."""
    name: str
    path: Path
    status: str
    step: int | None  # the checkpoint's step (None: no readable checkpoint)
    total_steps: int | None
    scores: dict | None  # the report's headline (tuning.metrics.score_summary), when finished
    modified: float  # seconds since the epoch of the newest run file


class RunDir:
    def __init__(self, path):
        self.path = Path(path)
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- names ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def settings_path(self) -> Path:
        return self.path / SETTINGS

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def model_path(self) -> Path:
        return self.path / MODEL

    @property
    def report_path(self) -> Path:
        return self.path / REPORT

    @property
    def snapshot_path(self) -> Path:
        return self.path / SNAPSHOT

    @property
    def epochs_dir(self) -> Path:
        return self.path / EPOCHS

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK

    @property
    def heldout_path(self) -> Path:
        """A fold's held-out predictions (a part of a cross-validated run)."""
        return self.path / HELDOUT

    def fold_part(self, k: int) -> "RunDir":
        """The folder of fold k (0-based) of a cross-validated run."""
        return RunDir(self.path / FOLDS / str(k + 1))

    def final_part(self) -> "RunDir":
        """The folder of a cross-validated run's final model."""
        return RunDir(self.path / FINAL)

    # -- creating --------------------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir, stem: str | None = None) -> "RunDir":
        """A new, empty run folder under runs_dir named by the time (or `stem`), with -2, -3, ...
        when the name is taken. mkdir claims the name, so two processes never share one."""
        runs_dir = Path(runs_dir)
        stem = stem or time.strftime("%Y%m%d-%H%M%S")
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
            for n in range(1, 10000):
                path = runs_dir / (stem if n == 1 else f"{stem}-{n}")
                try:
                    path.mkdir()
                except FileExistsError:
                    continue
                return cls(path)
        except OSError as e:
            raise TuneError(f"{runs_dir}: cannot create a run folder ({e.strerror or e})") from None
        raise TuneError(f"{runs_dir}: no free run folder name for {stem}")

    def has_run(self) -> bool:
        """True when the folder holds any of a run's files."""
        return any((self.path / f).exists() for f in RUN_FILES)

    def check_new(self, overwrite: bool = False) -> None:
        """Refuse a folder that holds a run, unless overwrite: a run is continued with resume,
        never silently replaced. Also refuses a path that is a file."""
        if self.path.exists() and not self.path.is_dir():
            raise TuneError(f"{self.path}: exists and is not a folder")
        if self.has_run() and not overwrite and not self.never_started():
            raise TuneError(f"{self.path}: already holds a run; continue it with --resume, "
                            f"replace it with --overwrite, or choose another --out")
        if not self.path.exists():
            parent = next((p for p in self.path.absolute().parents if p.exists()), None)
            if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                raise TuneError(f"{self.path}: cannot create the run folder "
                                f"({parent} is not a folder this user may write)")

    def never_started(self) -> bool:
        """A run folder whose run was stopped (killed) before its first checkpoint: it holds
        run files but nothing to resume or lose (no checkpoint, model or report), and no
        process writes it now. Such a run starts again from step 0, with or without resume."""
        return (self.path.is_dir() and self.has_run() and not self.is_locked_elsewhere()
                and not any((self.path / f).exists() for f in (CHECKPOINT, MODEL, REPORT))
                and self.checkpoint_step() is None)

    def check_resumable(self) -> None:
        if self.never_started():
            return  # nothing to resume: it starts again from step 0 (TuneRun.start_state)
        if not self.checkpoint_path.is_file() and self.checkpoint_step() is None:  # the latter: folded runs
            raise TuneError(f"{self.path}: no checkpoint to resume from "
                            f"({'no such run folder' if not self.path.is_dir() else 'no ' + CHECKPOINT})")

    def clear(self) -> None:
        """Remove the run's files (only those, and a cross-validated run's part folders), for a
        run started again with overwrite."""
        for f in RUN_FILES:
            try:
                (self.path / f).unlink()
            except FileNotFoundError:
                pass
        for part in (FOLDS, FINAL):  # tuning/folds.py
            if (self.path / part).is_dir():
                shutil.rmtree(self.path / part)

    # -- the lock ------------------------------------------------------------------------
    def acquire(self) -> None:
        """Create the folder if needed and take its lock; RunLockedError when another process
        holds it. Then remove the temporary files that killed writers left behind."""
        if self._lock_fd is not None:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = _open_lock(self.lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            if e.errno == errno.ELOOP or os.path.islink(self.lock_path):
                raise TuneError(f"{self.lock_path}: is a link; a run folder's lock is never followed "
                                f"(remove it, or choose another --out)") from None
            raise TuneError(f"{self.path}: cannot write the run folder ({e.strerror or e})") from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _read_holder(fd)
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunLockedError(f"{self.path}: another dxstudio process{holder} is writing this run "
                                         f"folder; wait for it to end or choose another --out") from None
                raise TuneError(f"{self.path}: cannot lock the run folder ({e.strerror or e})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        self.clean_tmp()

    def release(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock

    @property
    def locked_here(self) -> bool:
        return self._lock_fd is not None

    @contextmanager
    def writing(self):
        """Hold the lock for the block (a no-op when this object holds it already)."""
        held = self.locked_here
        self.acquire()
        try:
            yield self
        finally:
            if not held:
                self.release()

    def is_locked_elsewhere(self) -> bool:
        if fcntl is None or self.locked_here or not self.lock_path.exists():
            return False
        try:
            fd = _open_lock(self.lock_path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except OSError:
            return True
        finally:
            os.close(fd)

    def clean_tmp(self) -> list[Path]:
        """Remove the temporary files of atomic writes (.NAME.XXXX.tmp) that a killed process left;
        only while holding the lock, so no live writer's file is taken. Returns what was removed."""
        removed = []
        for p in self.path.glob(".*.tmp"):
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
        return removed

    def __del__(self):
        self.release()

    # -- reading -------------------------------------------------------------------------
    def read_settings(self) -> dict:
        """settings.json; TuneError naming the file when it is missing or broken."""
        d = read_json(self.settings_path, TuneError)
        if not isinstance(d, dict) or not isinstance(d.get("settings"), dict):
            raise TuneError(f"{self.settings_path}: not a run's settings file")
        return d

    def read_snapshot(self) -> dict:
        """targets.json (the run's label snapshot); TuneError naming the file when broken."""
        d = read_json(self.snapshot_path, TuneError, max_bytes=1 << 30)
        if not isinstance(d, dict) or not isinstance(d.get("labels"), dict) \
                or not all(isinstance(v, str) for v in d["labels"].values()):
            raise TuneError(f"{self.snapshot_path}: not a run's label snapshot")
        return d

    def resume_problem(self) -> str | None:
        """Why Resume cannot work on this run now (None: it can): not stopped, no readable
        checkpoint, its settings unreadable, or a checkpoint of another run than settings.json."""
        status = self.status()
        if status != STOPPED:
            return {FINISHED: "the run has finished", RUNNING: "another process is training it",
                    EMPTY: "it never reached a checkpoint"}[status]
        if self.folded_step() is not None:
            return None  # a cross-validated run: each part checks its own checkpoint when resumed
        try:
            meta = read_checkpoint(self.checkpoint_path, tensors=False)[0]
            settings = self.read_settings()
        except TuneError as e:
            return str(e)
        if meta.get("fingerprint") != settings.get("fingerprint"):
            return f"{self.checkpoint_path}: the checkpoint is not the one of {SETTINGS}"
        if self.snapshot_path.is_file():
            try:
                model = self.read_snapshot().get("starting_model_path")
            except TuneError as e:
                return str(e)
            if model and not Path(model).is_file():
                return f"{model}: the model the run started from is gone"
        return None

    def read_report(self) -> dict:
        d = read_json(self.report_path, TuneError)
        if not isinstance(d, dict) or not isinstance(d.get("fields"), dict):
            raise TuneError(f"{self.report_path}: not a run's report")
        return d

    def checkpoint_step(self) -> int | None:
        """The step the checkpoint holds, or None when there is no readable one. A
        cross-validated run (tuning/folds.py) counts the steps of all its parts."""
        folded = self.folded_step()
        return folded if folded is not None else checkpoint_step(self.checkpoint_path)

    def _settings_json(self):
        """settings.json as JSON, or None when missing or broken (for the questions below)."""
        try:
            return json.loads(self.settings_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def folded_step(self) -> int | None:
        """Steps a stopped cross-validated run has done (finished folds plus the checkpoints of
        the parts it stopped in: one when the parts ran in turn, several when they ran side by
        side), or None when this is not a folded run with something to resume."""
        info = self._settings_json()
        parts = info.get("parts") if isinstance(info, dict) else None
        if not isinstance(parts, list):
            return None
        done, found = 0, False
        for rel in parts:
            part = RunDir(self.path / rel)
            try:
                total = int(part._settings_json()["total_steps"])
            except (KeyError, TypeError, ValueError):
                continue  # not started
            if part.heldout_path.exists():
                done, found = done + total, True
                continue
            step = checkpoint_step(part.checkpoint_path)
            if step is not None:
                done, found = done + step, True
        return done if found else None

    def started_as(self):
        """What the folder holds to resume: its K (a cross-validated run), "single" (a single
        split's checkpoint), or None (nothing to resume)."""
        info = self._settings_json()
        if isinstance(info, dict) and isinstance(info.get("parts"), list) and isinstance(info.get("folds"), int):
            return info["folds"] if self.folded_step() is not None else None
        return "single" if self.checkpoint_path.is_file() else None

    def metrics(self, up_to_step: int | None = None) -> list[dict]:
        """The rows of metrics.jsonl (a line cut by a crash skipped), up to a step if given."""
        if not self.metrics_path.exists():
            return []
        rows = metrics_rows(self.metrics_path)
        return [r for r in rows if up_to_step is None or r.get("step", 0) <= up_to_step]

    def status(self) -> str:
        if self.is_locked_elsewhere():
            return RUNNING
        if self.report_path.is_file():
            return FINISHED
        if self.checkpoint_path.is_file() or self.checkpoint_step() is not None:  # the latter: folded runs
            return STOPPED
        return EMPTY

    def info(self) -> RunInfo:
        status = self.status()
        step = self.checkpoint_step()
        total = scores = None
        try:
            total = self.read_settings().get("total_steps")
        except TuneError:
            pass
        if status == FINISHED:
            try:
                scores = score_summary(self.read_report())
            except (TuneError, KeyError, AttributeError):
                scores = None
        times = [(self.path / f).stat().st_mtime for f in RUN_FILES if (self.path / f).exists()]
        return RunInfo(self.name, self.path, status, step, total, scores,
                       max(times, default=self.path.stat().st_mtime))

    @staticmethod
    def list(runs_dir) -> list[RunInfo]:
        """Every run folder under runs_dir, newest first."""
        runs_dir = Path(runs_dir)
        if not runs_dir.is_dir():
            return []
        infos = [RunDir(d).info() for d in runs_dir.iterdir() if d.is_dir() and not d.name.startswith(".")]
        return sorted(infos, key=lambda i: (i.modified, i.name), reverse=True)

    @staticmethod
    def unfinished(runs_dir) -> "RunDir | None":
        """The newest stopped run (a checkpoint and settings, no report): one to resume."""
        for info in RunDir.list(runs_dir):
            if info.status == STOPPED and (info.path / SETTINGS).exists():
                return RunDir(info.path)
        return None


def folded_step(run_dir) -> int | None:
    """RunDir(run_dir).folded_step()."""
    return RunDir(run_dir).folded_step()


def _open_lock(path: Path, flags: int) -> int:
    """The lock file's descriptor, never through a link (O_NOFOLLOW: a .lock that is a link
    raises ELOOP, so its target is neither created, truncated nor written), and only a regular
    file (O_NONBLOCK: a FIFO put there does not block)."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def _read_holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
