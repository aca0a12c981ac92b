"""A run's progress: its events and the metrics.jsonl rows they become (fine-tuning and pretraining).

    emit(Event("step", step, total, loss=..., lr=..., seconds=...))
    append_metric(rundir.metrics_path, ev)     # one JSON line; a full disk says so
    trim_metrics(rundir.metrics_path, start)   # on resume keep the lines of the steps taken
    metrics_rows(rundir.metrics_path)          # the rows (a line cut by a crash skipped)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dxstudio.fsutil import JSONInputError, disk_full, is_disk_full, loads_json, write_bytes_atomic


@dataclass
class Event:
    """A progress event: kind "step" (step, total, loss, lr, seconds) or "epoch" (epoch, scores)
    or "checkpoint" / "done" / "cancelled"."""
    kind: str
    step: int
    total: int
    loss: float | None = None
    lr: float | None = None
    seconds: float | None = None
    epoch: int | None = None
    scores: dict | None = None


def score_summary(report: dict) -> dict:
    """The headline of a scores report: {"fields": {NAME: {recall, agreement, value_recall,
    value_agreement, threshold}}, "threshold"}."""
    return {"fields": {k: {m: v.get(m) for m in ("recall", "agreement", "value_recall", "value_agreement", "threshold")}
                       for k, v in report["fields"].items()},
            "threshold": report.get("threshold")}


def metric_row(ev: Event) -> dict:
    """The metrics.jsonl row of an event: its fields that are set, the scores as their headline."""
    row = {k: v for k, v in ev.__dict__.items() if v is not None}
    if ev.scores is not None:
        row["scores"] = score_summary(ev.scores)
    return row


def append_metric(path, ev: Event) -> None:
    """Append the event's row to metrics.jsonl; a full disk raises the error that says so."""
    path = Path(path)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(metric_row(ev)) + "\n")
    except OSError as e:
        raise (disk_full(path, e) if is_disk_full(e) else e) from None


def metrics_rows(path) -> list[dict]:
    """The rows of a run's metrics.jsonl (one JSON object a line); a line cut by a crash is skipped."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(loads_json(line))
        except JSONInputError:  # a line cut by a crash, or one nobody should trust
            continue
    return rows


def trim_metrics(path, start: int) -> None:
    """On resume keep the lines of the steps already taken; a fresh run (start 0) starts a new file."""
    path = Path(path)
    if not path.exists():
        return
    keep = [row for row in metrics_rows(path)
            if start > 0 and row.get("step", 0) <= start and row.get("kind") in ("step", "epoch")]
    write_bytes_atomic(path, "".join(json.dumps(row) + "\n" for row in keep).encode())
