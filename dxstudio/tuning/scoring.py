"""Scores of a tuned model on the held-out pages, and the suggested LocalFirst threshold.

The seed's definitions, per field and held-out page:
* correct: the model's value has exactly the label's words; no value on either side is correct;
* recall: correct / pages where the label has a value;
* agreement: correct / pages where the label or the model has a value;
* threshold: the lowest confidence from which at least `share` of the model's values were
  exactly right, with at least `min_values` values at or above it.
A field the label rules left unscored on a page (its words are not one run, or a word is claimed
by two fields) counts nowhere for that page. A rate whose denominator is 0 is None, never 0.
docs/tuning.md pins the remaining choices.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from fractions import Fraction

from dxstudio.fsutil import write_json_atomic
from dxstudio.tuning.settings import DEFAULTS

# The LocalFirst rule's defaults: the settings table's (dxstudio/tuning/settings.py)
DEFAULT_SHARE = DEFAULTS["share"]
DEFAULT_MIN_VALUES = DEFAULTS["min_values"]

# Outcome of one field on one page
CORRECT = "correct"  # both have a value, same words
BOTH_NULL = "both_null"  # neither has a value (correct)
WRONG = "wrong"  # both have a value, different words
MISSED = "missed"  # the label has a value, the model none
SPURIOUS = "spurious"  # the model has a value, the label none
UNSCORED = "unscored"  # left out by the label rules


class ScoringError(ValueError):
    pass


@dataclass(frozen=True)
class HeldOutPage:
    """One held-out page as the scorer sees it.

    label: {field: word indices of the label's value, () for no value}
    prediction: {field: (word indices, confidence) or None for no value}
    unscored: fields the label rules left out on this page.
    A field missing from label or prediction has no value there.
    """

    page_id: str
    label: dict
    prediction: dict
    unscored: frozenset = field(default_factory=frozenset)


def _words(value, where: str) -> frozenset:
    """A value's word indices as a set; the order of indices does not matter, repeats are an error."""
    if not isinstance(value, (tuple, list)):
        raise ScoringError(f"{where}: word indices must be a list, not {value!r}")
    for i in value:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0:
            raise ScoringError(f"{where}: word index {i!r} is not a non-negative integer")
    words = frozenset(int(i) for i in value)
    if len(words) != len(value):
        raise ScoringError(f"{where}: a word index appears twice in {list(value)}")
    return words


def _prediction(value, where: str) -> tuple[frozenset, float] | None:
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ScoringError(f"{where}: a prediction must be (word indices, confidence) or None, not {value!r}")
    words = _words(value[0], where)
    if not words:
        raise ScoringError(f"{where}: a predicted value has no words (use None for no value)")
    conf = value[1]
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) and not hasattr(conf, "__float__"):
        raise ScoringError(f"{where}: confidence {conf!r} is not a number")
    conf = float(conf)
    if not (math.isfinite(conf) and 0.0 <= conf <= 1.0):
        raise ScoringError(f"{where}: confidence {conf!r} is not in [0, 1]")
    return words, conf


def field_outcome(label_words, predicted) -> tuple[str, float | None]:
    """(outcome, confidence of the model's value or None) for one scored field on one page."""
    label = _words(label_words, "label")
    pred = _prediction(predicted, "prediction")
    if pred is None:
        return (MISSED if label else BOTH_NULL), None
    words, conf = pred
    if not label:
        return SPURIOUS, conf
    return (CORRECT if words == label else WRONG), conf


def _exact_share(share) -> Fraction:
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        raise ScoringError(f"share must be a number, not {share!r}")
    if not math.isfinite(float(share)) or not 0 < float(share) <= 1:
        raise ScoringError(f"share must be in (0, 1], not {share!r}")
    return Fraction(repr(float(share)))  # 0.99 is read as 99/100 exactly


def _check_min_values(min_values) -> int:
    if isinstance(min_values, bool) or not isinstance(min_values, int) or min_values < 1:
        raise ScoringError(f"min_values must be a positive integer, not {min_values!r}")
    return min_values


def threshold(pairs, share: float = DEFAULT_SHARE, min_values: int = DEFAULT_MIN_VALUES) -> float | None:
    """The lowest confidence c such that the values with confidence >= c number at least
    `min_values` and at least `share` of them are correct; None when no c qualifies.

    pairs: (confidence, correct) of each value the model gave. Candidates are the values' own
    confidences, so values with equal confidence are always in or out together. The share is
    compared exactly (correct * 100 >= 99 * count for 0.99), not in floating point.
    """
    target = _exact_share(share)
    min_values = _check_min_values(min_values)
    items = []
    for conf, ok in pairs:
        conf = float(conf)
        if not (math.isfinite(conf) and 0.0 <= conf <= 1.0):
            raise ScoringError(f"confidence {conf!r} is not in [0, 1]")
        items.append((conf, bool(ok)))
    items.sort(key=lambda item: -item[0])  # most confident first
    best = None
    count = correct = 0
    i = 0
    while i < len(items):
        conf = items[i][0]
        while i < len(items) and items[i][0] == conf:  # a tie enters as one group
            count += 1
            correct += items[i][1]
            i += 1
        if count >= min_values and correct * target.denominator >= target.numerator * count:
            best = conf  # keep going: a lower confidence may qualify again
    return best


def _share_text(share: float) -> str:
    return f"{float(share) * 100:g}%"


def threshold_statement(n_values: int, found: float | None, share: float, min_values: int,
                        subject: str = "the tuned model") -> str:
    """One plain sentence about the suggested threshold (or why there is none)."""
    if found is not None:
        return (f"Suggested LocalFirst threshold {found:.6g}: at or above it at least "
                f"{_share_text(share)} of {subject}'s values on held-out pages were exactly right.")
    if n_values < min_values:
        return (f"No LocalFirst threshold can be suggested: {subject} gave {n_values} value"
                f"{'' if n_values == 1 else 's'} on held-out pages and at least {min_values} are needed.")
    return (f"No LocalFirst threshold can be suggested: at no confidence were at least "
            f"{_share_text(share)} of {subject}'s values (at least {min_values}) exactly right.")


class _Tally:
    """Counts of one field (or of all fields pooled)."""

    def __init__(self):
        self.outcomes = {k: 0 for k in (CORRECT, BOTH_NULL, WRONG, MISSED, SPURIOUS, UNSCORED)}
        self.pairs: list[tuple[float, bool]] = []

    def add(self, outcome: str, conf: float | None) -> None:
        self.outcomes[outcome] += 1
        if conf is not None:
            self.pairs.append((conf, outcome == CORRECT))

    def summary(self, share: float, min_values: int, subject: str) -> dict:
        o = self.outcomes
        n_labelled = o[CORRECT] + o[WRONG] + o[MISSED]
        n_either = n_labelled + o[SPURIOUS]
        n_scored = n_either + o[BOTH_NULL]
        n_values = len(self.pairs)

        def rate(num, den):
            return None if den == 0 else num / den

        found = threshold(self.pairs, share, min_values)
        return {
            "recall": rate(o[CORRECT], n_labelled),
            "agreement": rate(o[CORRECT], n_either),
            "accuracy": rate(o[CORRECT] + o[BOTH_NULL], n_scored),  # both-null pages count here only
            "precision": rate(o[CORRECT], n_values),
            "threshold": found,
            "threshold_statement": threshold_statement(n_values, found, share, min_values, subject),
            "n_scored": n_scored,
            "n_labelled": n_labelled,
            "n_either": n_either,
            "n_values": n_values,
            "n_correct": o[CORRECT],
            "outcomes": dict(o),
            "values": [[c, ok] for c, ok in self.pairs],
        }


def score_pages(fields, pages, share: float = DEFAULT_SHARE, min_values: int = DEFAULT_MIN_VALUES) -> dict:
    """The scores report of held-out pages (a JSON-ready dict).

    {"fields": {NAME: {recall, agreement, accuracy, precision, threshold, threshold_statement,
    n_scored, n_labelled, n_either, n_values, n_correct, outcomes, values}}, "overall": the same
    pooled over fields, "threshold": the overall threshold or None, "threshold_statement",
    "share", "min_values", "n_pages", "pages": [{"id", "outcomes": {NAME: outcome}}]}.
    """
    fields = list(fields)
    if not fields or len(set(fields)) != len(fields) or not all(isinstance(f, str) and f for f in fields):
        raise ScoringError(f"fields must be distinct non-empty names, not {fields!r}")
    _exact_share(share)
    _check_min_values(min_values)
    known = set(fields)
    per_field = {name: _Tally() for name in fields}
    pooled = _Tally()
    page_rows = []
    seen_ids = set()
    for page in pages:
        pid = page.page_id
        if pid in seen_ids:
            raise ScoringError(f"held-out page {pid!r} appears twice")
        seen_ids.add(pid)
        for what, keys in (("label", page.label), ("prediction", page.prediction), ("unscored", page.unscored)):
            unknown = set(keys) - known
            if unknown:
                raise ScoringError(f"page {pid}: {what} names unknown field(s) {sorted(unknown)}")
        row = {}
        for name in fields:
            if name in page.unscored:
                outcome, conf = UNSCORED, None
                per_field[name].outcomes[UNSCORED] += 1
                pooled.outcomes[UNSCORED] += 1
            else:
                try:
                    outcome, conf = field_outcome(page.label.get(name, ()), page.prediction.get(name))
                except ScoringError as e:
                    raise ScoringError(f"page {pid}, field {name}: {e}") from None
                per_field[name].add(outcome, conf)
                pooled.add(outcome, conf)
            row[name] = outcome
        page_rows.append({"id": pid, "outcomes": row})
    overall = pooled.summary(share, min_values, "the tuned model")
    return {
        "fields": {name: per_field[name].summary(share, min_values, f"field {name}") for name in fields},
        "overall": overall,
        "threshold": overall["threshold"],
        "threshold_statement": overall["threshold_statement"],
        "share": float(share),
        "min_values": min_values,
        "n_pages": len(page_rows),
        "pages": page_rows,
    }


def write_report(path, report: dict) -> None:
    """Save a scores report atomically as JSON."""
    write_json_atomic(path, report)
