"""Scores of a tuned model on the held-out pages, and the suggested LocalFirst threshold.

The seed's definitions, per field and held-out page:
* correct: the model's value has exactly the label's words; no value on either side is correct;
* recall: correct / pages where the label has a value;
* agreement: correct / pages where the label or the model has a value;
* threshold (the seed's rule, `threshold_rule: seed`): the lowest confidence from which at least
  `share` of the model's values were exactly right, with at least `min_values` values at or
  above it. The default rule (`threshold_rule: bound`, issue 21) asks more: the lowest
  confidence at which the one-sided 95% Clopper-Pearson lower bound of the precision of the
  values at or above it reaches `share`, so the claim a threshold makes is the bound, never the
  point estimate; a field where none qualifies has no threshold and `needed_right` says how
  many more right values at the top would give it one.
Beside them (issue 10), value-level scores: a value is value-right when its text equals the
label's after the grounding normalizer (dxstudio.grounding.value_key), so the same amount read
at another place where it is printed counts; `value_recall` and `value_agreement` use it. At
the threshold: `values` (held-out values at or above it), `precision` (right / values),
`precision_lower` (one-sided 95% Clopper-Pearson lower bound), `coverage` (values / all
values), the precision-versus-coverage `curve`, and `confidence_auc`.
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

# The LocalFirst rule's defaults: the settings table's (dxstudio/tuning/settings.py); runs and
# commands pass the setting. The pure functions below default to the seed's rule and its share
# (the seed: "the stated share (default 0.99)"), so called bare they are the seed's rule.
DEFAULT_SHARE = DEFAULTS["share"]
SEED_SHARE = 0.99
DEFAULT_MIN_VALUES = DEFAULTS["min_values"]
# What "right" means for the threshold and the figures at it: "words", the seed's (exactly the
# label's words), or "value" (the label's value after the grounding normalizer).
THRESHOLD_BY = ("words", "value")
# How a threshold is chosen: "bound" (the bound of the precision reaches the share) or "seed"
# (the point estimate reaches it, with at least min_values values): the setting threshold_rule.
THRESHOLD_RULES = ("bound", "seed")

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
    # fields whose predicted value equals the label's value after the grounding normalizer
    # (value-right even when read at another printing); exactly-right values are always value-right
    value_match: frozenset = field(default_factory=frozenset)


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


def threshold(pairs, share: float = SEED_SHARE, min_values: int = DEFAULT_MIN_VALUES) -> float | None:
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


def _right_text(by: str) -> str:
    return "exactly right" if by == "words" else "right (the label's value)"


def threshold_statement(n_values: int, found: float | None, share: float, min_values: int,
                        subject: str = "the tuned model", by: str = "words", rule: str = "seed",
                        needed: int | None = None) -> str:
    """One plain sentence about the suggested threshold (or why there is none)."""
    if rule == "bound":
        if found is not None:
            return (f"Suggested LocalFirst threshold {found:.6g}: with 95% confidence at least "
                    f"{_share_text(share)} of {subject}'s values at or above it are {_right_text(by)} "
                    f"(the lower bound on its held-out values).")
        more = (f" About {needed} more right value{'' if needed == 1 else 's'} at the top would be needed."
                if needed else "")
        return (f"No LocalFirst threshold: {subject}'s {n_values} held-out value{'' if n_values == 1 else 's'} "
                f"cannot show, with 95% confidence, that at least {_share_text(share)} of the values at or above "
                f"any confidence are {_right_text(by)}.{more}")
    if found is not None:
        return (f"Suggested LocalFirst threshold {found:.6g}: at or above it at least "
                f"{_share_text(share)} of {subject}'s values on held-out pages were {_right_text(by)}.")
    if n_values < min_values:
        return (f"No LocalFirst threshold can be suggested: {subject} gave {n_values} value"
                f"{'' if n_values == 1 else 's'} on held-out pages and at least {min_values} are needed.")
    return (f"No LocalFirst threshold can be suggested: at no confidence were at least "
            f"{_share_text(share)} of {subject}'s values (at least {min_values}) {_right_text(by)}.")


CONFIDENCE_LEVEL = 0.95  # of the one-sided lower bound on the precision at the threshold


def clopper_pearson_lower(right: int, n: int, level: float = CONFIDENCE_LEVEL) -> float | None:
    """One-sided Clopper-Pearson lower bound: the p at which P(X >= right | n, p) = 1 - level.

    With probability `level`, the true share of right values is at least this. None for n = 0;
    0 for right = 0; (1 - level) ** (1 / n) for right = n. Computed by bisection on the exact
    binomial tail (terms in log space, summed from the largest), to about 1e-12; no scipy.
    """
    for v, what in ((right, "right"), (n, "n")):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ScoringError(f"{what} must be a non-negative integer, not {v!r}")
    if right > n:
        raise ScoringError(f"right ({right}) cannot exceed n ({n})")
    if not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ScoringError(f"level must be in (0, 1), not {level!r}")
    if n == 0:
        return None
    if right == 0:
        return 0.0
    alpha = 1.0 - level
    log_comb = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in range(right, n + 1)]

    def tail(p: float) -> float:  # P(X >= right | n, p)
        lp, lq = math.log(p), math.log1p(-p)
        logs = [c + j * lp + (n - j) * lq for c, j in zip(log_comb, range(right, n + 1))]
        top = max(logs)
        return math.exp(top) * math.fsum(math.exp(v - top) for v in logs)

    lo, hi = 0.0, 1.0  # tail(lo) < alpha <= tail(hi); the tail grows with p
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if tail(mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def values_needed(share: float, level: float = CONFIDENCE_LEVEL) -> int | None:
    """The fewest values, all right, whose lower bound reaches `share` (299 for 0.99 at 95%);
    None when no number can (share 1)."""
    share = float(share)
    if share >= 1:
        return None
    n = max(1, math.ceil(math.log(1 - level) / math.log(share)))
    while clopper_pearson_lower(n, n, level) < share:
        n += 1
    while n > 1 and clopper_pearson_lower(n - 1, n - 1, level) >= share:
        n -= 1
    return n


def _check_rule(rule) -> str:
    if rule not in THRESHOLD_RULES:
        raise ScoringError(f"threshold rule must be one of {', '.join(THRESHOLD_RULES)}, not {rule!r}")
    return rule


def _upper_tail(right: int, n: int, p: float) -> float:
    """P(X >= right) for X ~ Binomial(n, p), 0 < p < 1: log-space terms summed from the largest."""
    if right <= 0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    logs = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq
            for j in range(right, n + 1)]
    top = max(logs)
    return math.exp(top) * math.fsum(math.exp(v - top) for v in logs)


def bound_reaches(right: int, n: int, share: float, level: float = CONFIDENCE_LEVEL) -> bool:
    """True when the one-sided Clopper-Pearson lower bound of right / n reaches `share`:
    P(X >= right | n, share) <= 1 - level (the tail grows with p, so the bound is at least
    share exactly then). One tail, not a bisection: cheap enough for every candidate."""
    if n <= 0 or right <= 0:
        return False
    share = float(share)
    if share >= 1:
        return False
    if right * 1.0 < share * n:  # the bound is below the point estimate
        return False
    return _upper_tail(right, n, share) <= 1.0 - level


def _groups(pairs):
    """(confidence, values, right) of each distinct confidence, most confident first."""
    items = []
    for conf, ok in pairs:
        conf = float(conf)
        if not (math.isfinite(conf) and 0.0 <= conf <= 1.0):
            raise ScoringError(f"confidence {conf!r} is not in [0, 1]")
        items.append((conf, bool(ok)))
    items.sort(key=lambda item: -item[0])
    out, i = [], 0
    while i < len(items):
        conf, n, r = items[i][0], 0, 0
        while i < len(items) and items[i][0] == conf:  # a tie enters as one group
            n += 1
            r += items[i][1]
            i += 1
        out.append((conf, n, r))
    return out


def bound_threshold(pairs, share: float = SEED_SHARE, level: float = CONFIDENCE_LEVEL) -> float | None:
    """The lowest confidence c such that the one-sided `level` lower bound of the precision of
    the values with confidence >= c reaches `share`; None when no c qualifies (always with fewer
    than values_needed(share) values). Candidates and ties as in threshold()."""
    _exact_share(share)
    best, count, right = None, 0, 0
    for conf, n, r in _groups(pairs):
        count += n
        right += r
        if bound_reaches(right, count, share, level):
            best = conf  # keep going: a lower confidence may qualify again
    return best


def _total_needed(wrong: int, share: float, level: float) -> int:
    """The fewest values N, `wrong` of them wrong, whose bound reaches share."""
    lo = hi = max(1, wrong + 1)
    while not bound_reaches(hi - wrong, hi, share, level):
        lo, hi = hi, hi * 2
    while lo < hi:  # the bound grows with N at a fixed number wrong
        mid = (lo + hi) // 2
        if bound_reaches(mid - wrong, mid, share, level):
            hi = mid
        else:
            lo = mid + 1
    return hi


def right_values_needed(pairs, share: float = SEED_SHARE, level: float = CONFIDENCE_LEVEL) -> int | None:
    """How many more right values, above every value there is, would give a threshold by the
    bound rule: the least k such that at some confidence (or above all of them) the values at or
    above it plus k right ones have a bound that reaches share. 0 when a threshold exists; None
    for share 1 (no number can)."""
    _exact_share(share)
    if float(share) >= 1:
        return None
    best_n = {0: 0}  # values wrong -> the most values at a cut with that many wrong
    count = wrong = 0
    for _, n, r in _groups(pairs):
        count += n
        wrong += n - r
        best_n[wrong] = max(best_n.get(wrong, 0), count)
    best = None
    for w in sorted(best_n):
        need = _total_needed(w, share, level)
        if best is not None and need - count > best:
            break  # the need grows with w faster than the values can
        k = max(0, need - best_n[w])
        best = k if best is None else min(best, k)
    return best


def rule_threshold(pairs, share: float, min_values: int, rule: str = "seed") -> float | None:
    """The threshold by `rule`: "seed" (threshold()) or "bound" (bound_threshold())."""
    _check_rule(rule)
    pairs = list(pairs)
    return threshold(pairs, share, min_values) if rule == "seed" else bound_threshold(pairs, share)


def confidence_auc(pairs) -> float | None:
    """How well confidence separates right from wrong values: the chance that a random right
    value has a higher confidence than a random wrong one, ties counting half (the area under
    the ROC curve). None without at least one right and one wrong value."""
    items = sorted((float(c), bool(ok)) for c, ok in pairs)
    n_right = sum(ok for _, ok in items)
    n_wrong = len(items) - n_right
    if n_right == 0 or n_wrong == 0:
        return None
    wins2 = 0  # twice the count of (right, wrong) pairs ordered right above wrong, ties half
    wrong_below = 0
    i = 0
    while i < len(items):
        j = i
        while j < len(items) and items[j][0] == items[i][0]:
            j += 1
        group = items[i:j]
        r = sum(ok for _, ok in group)
        w = len(group) - r
        wins2 += r * (2 * wrong_below + w)
        wrong_below += w
        i = j
    return wins2 / (2 * n_right * n_wrong)


def curve_points(pairs, value_pairs=None) -> list:
    """[[confidence, coverage, precision, value precision], ...], confidence descending, one
    point per distinct confidence: the values at or above it, their share of all values and of
    them the share right (exactly, and by value). value_pairs: same order, value-right flags."""
    n = len(pairs)
    if n == 0:
        return []
    vflags = [bool(v) for v in value_pairs] if value_pairs is not None else [bool(ok) for _, ok in pairs]
    items = sorted(((float(c), bool(ok), v) for (c, ok), v in zip(pairs, vflags)), key=lambda t: -t[0])
    out, count, right, vright, i = [], 0, 0, 0, 0
    while i < n:
        conf = items[i][0]
        while i < n and items[i][0] == conf:
            count += 1
            right += items[i][1]
            vright += items[i][2]
            i += 1
        out.append([conf, count / n, right / count, vright / count])
    return out


def _pct(x: float) -> str:
    """A share as a percentage rounded DOWN (a bound is never overstated): 0.8780 -> 87%."""
    return f"{math.floor(x * 100 + 1e-9):d}%"


def bound_statement(values: int, right: int, found: float | None, lower: float | None,
                    level: float = CONFIDENCE_LEVEL, where: str | None = None) -> str:
    """The threshold's evidence in words: "23 values at or above 0.997, all right: with 95%
    confidence at least 87% of such values are right"."""
    if found is None or values == 0:
        return "No threshold, so no values are answered locally."
    head = f"{values} value{'s' if values != 1 else ''} {where or f'at or above {found:.6g}'}"
    if right == values:
        tally = "all right" if values > 1 else "right"
    else:
        tally = f"{right} right ({right / values * 100:.1f}%)"
    return (f"{head}, {tally}: with {level * 100:g}% confidence at least {_pct(lower)} of such values "
            f"are right.")


class _Tally:
    """Counts of one field (or of all fields pooled)."""

    def __init__(self):
        self.outcomes = {k: 0 for k in (CORRECT, BOTH_NULL, WRONG, MISSED, SPURIOUS, UNSCORED)}
        self.pairs: list[tuple[float, bool]] = []
        self.value_right: list[bool] = []  # per value in self.pairs: value-right
        self.value_correct = 0  # labelled pages whose value is value-right

    def add(self, outcome: str, conf: float | None, value_ok: bool = False) -> None:
        self.outcomes[outcome] += 1
        value_ok = outcome == CORRECT or (outcome == WRONG and value_ok)
        self.value_correct += value_ok
        if conf is not None:
            self.pairs.append((conf, outcome == CORRECT))
            self.value_right.append(value_ok)

    def summary(self, share: float, min_values: int, subject: str, by: str = "words", rule: str = "seed") -> dict:
        o = self.outcomes
        n_labelled = o[CORRECT] + o[WRONG] + o[MISSED]
        n_either = n_labelled + o[SPURIOUS]
        n_scored = n_either + o[BOTH_NULL]
        n_values = len(self.pairs)

        def rate(num, den):
            return None if den == 0 else num / den

        # the threshold's notion of right: the seed's exact words, or the value
        ruled = self.pairs if by == "words" else [(c, v) for (c, _), v in zip(self.pairs, self.value_right)]
        found = rule_threshold(ruled, share, min_values, rule)
        # with the bound rule, how many more right values at the top would give a threshold
        needed = (0 if found is not None else right_values_needed(ruled, share)) if rule == "bound" else None
        above = [i for i, (c, _) in enumerate(self.pairs) if found is not None and c >= found]
        right = sum(ruled[i][1] for i in above)
        vright = sum(self.value_right[i] for i in above)
        lower = clopper_pearson_lower(right, len(above)) if above else None
        return {
            "recall": rate(o[CORRECT], n_labelled),
            "agreement": rate(o[CORRECT], n_either),
            "value_recall": rate(self.value_correct, n_labelled),
            "value_agreement": rate(self.value_correct, n_either),
            "accuracy": rate(o[CORRECT] + o[BOTH_NULL], n_scored),  # both-null pages count here only
            "precision_all": rate(o[CORRECT], n_values),
            "threshold": found,
            "threshold_statement": threshold_statement(n_values, found, share, min_values, subject, by, rule,
                                                       needed),
            "needed_right": needed,
            "values": len(above),
            "right": right,
            "precision": rate(right, len(above)),
            "precision_lower": lower,
            "value_precision": rate(vright, len(above)),
            "value_precision_lower": clopper_pearson_lower(vright, len(above)) if above else None,
            "coverage": rate(len(above), n_values),
            "bound_statement": bound_statement(len(above), right, found, lower),
            "confidence_auc": confidence_auc(ruled),
            "curve": curve_points(self.pairs, self.value_right),
            "n_scored": n_scored,
            "n_labelled": n_labelled,
            "n_either": n_either,
            "n_values": n_values,
            "n_correct": o[CORRECT],
            "n_value_correct": self.value_correct,
            "outcomes": dict(o),
            "confidences": [[c, ok, v] for (c, ok), v in zip(self.pairs, self.value_right)],
        }


POOLED_KEYS = ("threshold", "values", "right", "precision", "precision_lower", "value_precision",
               "value_precision_lower", "coverage", "confidence_auc", "bound_statement", "curve")


def too_few_warning(pooled: dict, n_pages: int, share: float, n_values: int = 0) -> str | None:
    """A plain warning when the held-out values at the threshold cannot support the share even
    if every one was right; None when they can."""
    need = values_needed(share)
    found = pooled["threshold"] is not None
    n = pooled["values"] if found else n_values
    if need is not None and n >= need:
        return None
    best = clopper_pearson_lower(n, n) if n else 0.0
    need_text = f"About {need}" if need is not None else "No finite number of"
    return (f"Too few held-out pages to trust a {_share_text(share)} claim: {n_pages} held-out page"
            f"{'' if n_pages == 1 else 's'} gave {n} value{'' if n == 1 else 's'}"
            f"{' at or above the threshold' if found else ' in all'}, and even if all were right, 95% "
            f"confidence supports only {_pct(best)}. {need_text} such values are needed: label more pages "
            f"(with a single split, --folds 5 also holds every page out once).")


def _check_report_args(fields, share, min_values, by) -> list:
    """The arguments score_pages and score_documents share, checked; the fields as a list."""
    fields = list(fields)
    if not fields or len(set(fields)) != len(fields) or not all(isinstance(f, str) and f for f in fields):
        raise ScoringError(f"fields must be distinct non-empty names, not {fields!r}")
    _exact_share(share)
    _check_min_values(min_values)
    if by not in THRESHOLD_BY:
        raise ScoringError(f"by must be one of {', '.join(THRESHOLD_BY)}, not {by!r}")
    return fields


def score_pages(fields, pages, share: float = SEED_SHARE, min_values: int = DEFAULT_MIN_VALUES,
                by: str = "words", rule: str = "seed") -> dict:
    """The scores report of held-out pages (a JSON-ready dict).

    {"fields": {NAME: {recall, agreement, value_recall, value_agreement, accuracy, precision_all,
    threshold, threshold_statement, values, right, precision, precision_lower, value_precision,
    value_precision_lower, coverage, bound_statement, confidence_auc, curve, n_scored,
    n_labelled, n_either, n_values, n_correct, n_value_correct, outcomes, confidences}},
    "overall": the same pooled over fields, "pooled": the threshold's part of it, "threshold":
    the overall threshold or None, "threshold_statement", "warning" (None or a sentence),
    "share", "min_values", "n_pages", "pages": [{"id", "outcomes": {NAME: outcome}}]}.
    """
    fields = _check_report_args(fields, share, min_values, by)
    _check_rule(rule)
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
        for what, keys in (("label", page.label), ("prediction", page.prediction), ("unscored", page.unscored),
                           ("value_match", page.value_match)):
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
                per_field[name].add(outcome, conf, name in page.value_match)
                pooled.add(outcome, conf, name in page.value_match)
            row[name] = outcome
        page_rows.append({"id": pid, "outcomes": row})
    overall = pooled.summary(share, min_values, "the tuned model", by, rule)
    pooled_part = {k: overall[k] for k in POOLED_KEYS}
    return {
        "fields": {name: per_field[name].summary(share, min_values, f"field {name}", by, rule) for name in fields},
        "overall": overall,
        "pooled": pooled_part,
        "threshold": overall["threshold"],
        "threshold_statement": overall["threshold_statement"],
        "warning": too_few_warning(pooled_part, len(page_rows), share, overall["n_values"]),
        "share": float(share),
        "min_values": min_values,
        "threshold_by": by,
        "threshold_rule": rule,
        "n_pages": len(page_rows),
        "pages": page_rows,
    }


def mean_agreement(scores: dict | None) -> float | None:
    """The mean over the fields of the held-out agreement in a report or its headline
    ({"fields": {name: {"agreement"}}}); fields without one (None) count nowhere; None when
    no field has one."""
    vals = [f.get("agreement") for f in (scores or {}).get("fields", {}).values() if f.get("agreement") is not None]
    return sum(vals) / len(vals) if vals else None


def write_report(path, report: dict) -> None:
    """Save a scores report atomically as JSON."""
    write_json_atomic(path, report)


# ---------------------------------------------------------------------------------------
# Per document (issue 28), beside the per-page scores above: a document's field is right when
# the value read from its pages, the most confident of its pages' values (ties: the earlier
# page), has exactly the label's words on the label's page.

@dataclass(frozen=True)
class HeldOutDocument:
    """One held-out document: its pages as the page scorer sees them, in page order.
    value_match: fields whose document value (the most confident page's) equals the label's
    value after the grounding normalizer, wherever either is printed."""

    document_id: str
    pages: tuple  # of HeldOutPage
    value_match: frozenset = field(default_factory=frozenset)


def document_value(doc: HeldOutDocument, name: str):
    """(page id, word indices, confidence) of the document's value for a field: the most
    confident of its pages' predictions (ties: the earlier page), or None."""
    best = None
    for page in doc.pages:
        pred = _prediction(page.prediction.get(name), f"document {doc.document_id}, page {page.page_id}, field {name}")
        if pred is not None and (best is None or pred[1] > best[2]):
            best = (page.page_id, pred[0], pred[1])
    return best


def document_label(doc: HeldOutDocument, name: str):
    """The (page id, word indices) of the label's value of a field across the document's pages
    ([] for no value), or None when the field is unscored on one of its pages."""
    out = []
    for page in doc.pages:
        if name in page.unscored:
            return None
        words = _words(page.label.get(name, ()), f"document {doc.document_id}, page {page.page_id}, label {name}")
        if words:
            out.append((page.page_id, words))
    return out


def document_outcome(doc: HeldOutDocument, name: str) -> tuple[str, float | None, tuple | None]:
    """(outcome, confidence, (page id, words) of the document's value or None) of one field."""
    label = document_label(doc, name)
    if label is None:
        return UNSCORED, None, None
    pred = document_value(doc, name)
    if pred is None:
        return (MISSED if label else BOTH_NULL), None, None
    page_id, words, conf = pred
    if not label:
        return SPURIOUS, conf, (page_id, words)
    return (CORRECT if (page_id, words) in label else WRONG), conf, (page_id, words)


def score_documents(fields, documents, share: float = SEED_SHARE, min_values: int = DEFAULT_MIN_VALUES,
                    by: str = "words") -> dict:
    """The scores report of held-out documents, shaped as score_pages's ("fields", "overall",
    "pooled", "threshold", "threshold_statement", "warning", "share", "min_values",
    "threshold_by") with "n_documents", "n_pages" and "documents": [{"id", "pages",
    "outcomes": {NAME: outcome}, "values": {NAME: {"page", "words", "confidence"} or None}}].
    Documents of one page score exactly as score_pages scores their pages."""
    fields = _check_report_args(fields, share, min_values, by)
    per_field = {name: _Tally() for name in fields}
    pooled = _Tally()
    rows, seen, n_pages = [], set(), 0
    for doc in documents:
        if doc.document_id in seen:
            raise ScoringError(f"held-out document {doc.document_id!r} appears twice")
        seen.add(doc.document_id)
        if not doc.pages:
            raise ScoringError(f"held-out document {doc.document_id!r} has no pages")
        n_pages += len(doc.pages)
        outcomes, values = {}, {}
        for name in fields:
            outcome, conf, value = document_outcome(doc, name)
            if outcome == UNSCORED:
                per_field[name].outcomes[UNSCORED] += 1
                pooled.outcomes[UNSCORED] += 1
            else:
                per_field[name].add(outcome, conf, name in doc.value_match)
                pooled.add(outcome, conf, name in doc.value_match)
            outcomes[name] = outcome
            values[name] = None if value is None else {"page": value[0], "words": sorted(value[1]), "confidence": conf}
        rows.append({"id": doc.document_id, "pages": [p.page_id for p in doc.pages], "outcomes": outcomes,
                     "values": values})
    overall = pooled.summary(share, min_values, "the tuned model", by)
    overall["threshold_statement"] = overall["threshold_statement"].replace("held-out pages", "held-out documents")
    pooled_part = {k: overall[k] for k in POOLED_KEYS}
    warning = too_few_warning(pooled_part, len(rows), share, overall["n_values"])
    return {
        "fields": {name: per_field[name].summary(share, min_values, f"field {name}", by) for name in fields},
        "overall": overall,
        "pooled": pooled_part,
        "threshold": overall["threshold"],
        "threshold_statement": overall["threshold_statement"],
        "warning": warning.replace("held-out page", "held-out document") if warning else None,
        "share": float(share),
        "min_values": min_values,
        "threshold_by": by,
        "n_documents": len(rows),
        "n_pages": n_pages,
        "documents": rows,
    }


def document_summary(report: dict) -> dict:
    """Per document beside per page, for the command line and the Results tab: {"documents",
    "pages", "multi_page", "per_page": {agreement, value_agreement}, "per_document": {...},
    "fields": {NAME: {"page_agreement", "document_agreement"}}} of a scores report that has
    "documents" (run.score_predictions adds it)."""
    docs = report.get("documents")
    if not docs:
        return {}
    return {"documents": docs["n_documents"], "pages": docs["n_pages"],
            "multi_page": sum(1 for d in docs["documents"] if len(d["pages"]) > 1),
            "per_page": {k: report["overall"].get(k) for k in ("agreement", "value_agreement", "recall")},
            "per_document": {k: docs["overall"].get(k) for k in ("agreement", "value_agreement", "recall")},
            "fields": {name: {"page_agreement": f.get("agreement"),
                              "document_agreement": docs["fields"][name].get("agreement")}
                       for name, f in report["fields"].items()}}
