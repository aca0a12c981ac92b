"""Early stopping on held-back pages and checkpoint averaging (issue 20 item 2; docs/tuning.md
"Early stopping and averaging").

    early_stop        patience in epochs: the run scores its early-stop pages after every epoch
                      and stops when their mean agreement (ties: their B-/I- tag F1) has not risen
                      for this many epochs; the model is the best epoch's weights (the earliest
                      of equal scores); while every score is 0 (the model tags nothing on those
                      pages yet) the run goes on and the last epoch counts as the best.
                      0 = off: every epoch trains and the model is the last one's.
    early_stop_share  the share of the training documents held back as early-stop pages (never
                      trained on, never in the run's scores: the run's held-out pages stay for
                      those), the first of the training order (the split's hash order).
    average_last      the model is the mean of the weights at the end of this many epochs,
                      ending at the kept epoch (the best with early stopping, else the last).
                      0 or 1 = off.

Bytes: the weights of every epoch end are written to the run folder (epochs/E.safetensors,
the same bytes whenever epoch E is trained again: after a resume, at another degree) and the
mean is taken over them in epoch order in binary64, then rounded to binary32 once: the same
bytes at any degree and after a resume. The early-stop scores live in epochs/scores.json; on a
resume the epochs after the checkpoint are dropped from it and trained again (they come out the
same). A run that stops early finishes at its total step count, so a resume or the app sees it
done; the report's run.early_stop says which epochs were scored, kept and averaged.

The hook in run.py is small on purpose: `carve` after the split, `Selection` at the start of
the steps, `epoch_end` at each epoch's end, `finish` after the last step, `report` in finish().
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np

from dxstudio.engine.container import read_model_bytes
from dxstudio.engine.extract import predict_page
from dxstudio.fsutil import write_bytes_atomic, write_json_atomic
from dxstudio.tuning.evaluation import score_predictions
from dxstudio.tuning.settings import TuneError

EPOCH_SETTINGS = ("early_stop", "early_stop_share", "average_last")
SCORES = "scores.json"


def enabled(settings: dict) -> bool:
    return bool(settings.get("early_stop")) or (settings.get("average_last") or 0) > 1


def unfingerprinted(settings: dict) -> dict:
    """The fingerprinted settings without these when they are off (a run from before them keeps
    its fingerprint); early_stop_share only matters with early_stop."""
    s = dict(settings)
    if not s.get("early_stop"):
        s.pop("early_stop", None)
        s.pop("early_stop_share", None)
    if (s.get("average_last") or 0) <= 1:
        s.pop("average_last", None)
    return s


def carve(train_pages: list, settings: dict, where="") -> tuple[list, list]:
    """(training rows, early-stop rows): with early_stop on, the first round(share x documents)
    documents of the training order (at least one) are held back, all their pages."""
    if not settings.get("early_stop"):
        return train_pages, []
    docs: list = []
    for _, page, _ in train_pages:
        if page.document_id not in docs:
            docs.append(page.document_id)
    share = settings["early_stop_share"]
    k = max(1, int(round(share * len(docs))))
    if k >= len(docs):
        raise TuneError(f"{where}setting early_stop_share {share:g}: holding back {k} of the {len(docs)} "
                        f"training documents for early stopping leaves none to train on (lower it, label "
                        f"more pages, or set early_stop 0)")
    held = set(docs[:k])
    return ([r for r in train_pages if r[1].document_id not in held],
            [r for r in train_pages if r[1].document_id in held])


def _mean_agreement(report: dict) -> float:
    vals = [f["agreement"] for f in report["fields"].values() if f.get("agreement") is not None]
    return float(sum(vals) / len(vals)) if vals else 0.0


def tag_f1(preds) -> float:
    """F1 of the B-/I- tags over the words of the pages (ignored words left out): the tie-break
    of equal agreements, which on a few pages move in steps too coarse to see a change."""
    tp = fp = fn = 0
    for _, _, t, pred in preds:
        want = np.asarray(t.tags, np.int64)
        n = min(len(want), len(pred.tags))
        want, got = want[:n], np.asarray(pred.tags[:n], np.int64)
        scored = want >= 0
        tp += int(np.sum(scored & (want > 0) & (got == want)))
        fp += int(np.sum(scored & (got > 0) & (got != want)))
        fn += int(np.sum(scored & (want > 0) & (got != want)))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def _save_params(path: Path, params) -> None:
    from safetensors.numpy import save

    write_bytes_atomic(path, save({k: np.ascontiguousarray(v) for k, v in params.items()}))


def _load_params(path: Path, like) -> OrderedDict:
    from safetensors.numpy import load

    try:
        arrays = load(read_model_bytes(path))
    except Exception as e:  # a missing, cut or foreign file: the library's errors are not one family
        raise TuneError(f"{path}: the weights of an epoch cannot be read ({' '.join(str(e).split())[:160]}); "
                        f"start the run again with overwrite") from None
    out = OrderedDict()
    for k, v in like.items():
        a = arrays.get(k)
        if a is None or a.dtype != np.float32 or a.shape != np.shape(v) or not np.isfinite(a).all():
            raise TuneError(f"{path}: tensor {k!r} is missing or not the run's; start the run again with overwrite")
        out[k] = a
    return out


def average(params_list: list) -> OrderedDict:
    """The element-wise mean of weight sets, summed in the given order in binary64 and rounded to
    binary32 once (fixed order: the same bytes however the sets were made)."""
    out = OrderedDict()
    for k in params_list[0]:
        acc = np.zeros(np.shape(params_list[0][k]), np.float64)
        for p in params_list:
            acc += np.asarray(p[k], np.float64)
        out[k] = (acc / len(params_list)).astype(np.float32)
    return out


class Selection:
    """The epoch bookkeeping of one run (a no-op when both settings are off)."""

    def __init__(self, run, start_step: int):
        self.run = run
        s = run.settings
        self.on = enabled(s)
        self.patience = int(s.get("early_stop") or 0)
        self.k = max(1, int(s.get("average_last") or 0))
        self.folder = run.rundir.epochs_dir  # RunDir names the run folder's files
        self.scores: dict = {}  # {epoch: [step, mean agreement]}
        self.last_epoch = 0
        if not self.on:
            return
        if start_step == 0:  # a fresh run: nothing of an earlier one counts
            if self.folder.is_dir():
                for f in self.folder.iterdir():
                    if f.is_file():
                        f.unlink()
            self.folder.mkdir(parents=True, exist_ok=True)
            return
        path = self.folder / SCORES
        if path.is_file():
            try:
                rows = json.loads(path.read_text(encoding="utf-8"))["scores"]
                self.scores = {int(e): [int(v[0]), float(v[1]), float(v[2])] for e, v in rows.items()}
            except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
                raise TuneError(f"{path}: not readable ({e}); start the run again with overwrite") from None
        # epochs after the checkpoint are trained again (the same weights, the same scores)
        self.scores = {e: v for e, v in self.scores.items() if v[0] <= start_step}
        self.folder.mkdir(parents=True, exist_ok=True)

    def best(self) -> int:
        """The kept epoch: the best early-stop score (mean agreement, then the tag F1; the earliest
        of equal ones), else the last."""
        if self.patience and self.scores:
            top = max((v[1], v[2]) for v in self.scores.values())
            if top > (0.0, 0.0):  # else the model finds nothing on them yet: no epoch to prefer
                return min(e for e, v in self.scores.items() if (v[1], v[2]) == top)
        return self.last_epoch

    def epoch_end(self, epoch: int, step: int) -> bool:
        """Record the weights (and the early-stop score) of this epoch's end; True: stop now."""
        if not self.on:
            return False
        self.last_epoch = epoch
        _save_params(self.folder / f"{epoch}.safetensors", self.run.state.params)
        if self.patience:
            s, run = self.run.settings, self.run
            preds = [(pid, page, t, predict_page(run.cfg, run.state.params, page, s["kernels"], s["decoding"],
                                                run.reading_keywords))
                     for pid, page, t in run.stop_pages]
            rep = score_predictions(list(run.cfg.fields), preds, s["share"], s["min_values"], s["threshold_by"],
                                    s["threshold_rule"])
            self.scores[epoch] = [step, _mean_agreement(rep), tag_f1(preds)]
            write_json_atomic(self.folder / SCORES, {"scores": {str(e): v for e, v in sorted(self.scores.items())}})
        keep_from = self.best() - self.k + 1  # earlier epochs are never averaged now
        for f in self.folder.glob("*.safetensors"):
            if f.stem.isdigit() and int(f.stem) < keep_from:
                f.unlink()
        return bool(self.patience) and epoch - self.best() >= self.patience

    def finish(self) -> None:
        """Put the kept (and averaged) weights into the run's state; a run that stopped early is
        marked done at its total steps."""
        if not self.on or self.last_epoch == 0:
            return
        best = self.best()
        epochs = [e for e in range(max(1, best - self.k + 1), best + 1)]
        params = [_load_params(self.folder / f"{e}.safetensors", self.run.state.params) for e in epochs]
        self.run.state.params = average(params) if len(params) > 1 else params[0]
        self.kept, self.averaged = best, epochs
        self.run.state.step = self.run.total_steps

    def report(self) -> dict:
        """{"early_stop": {...}} for the report's run section (empty when off)."""
        if not self.on or not hasattr(self, "kept"):
            return {}
        return {"early_stop": {"patience": self.patience, "share": self.run.settings["early_stop_share"],
                               "pages": [r[0] for r in self.run.stop_pages], "last_epoch": self.last_epoch,
                               "kept_epoch": self.kept, "averaged_epochs": self.averaged,
                               "scores": {str(e): v[1:] for e, v in sorted(self.scores.items())}}}
