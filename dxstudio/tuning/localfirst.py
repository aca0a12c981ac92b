"""What a tuned model may promise, in plain words, Qt-free (issue 21).

    auto_folds(n_usable, settings) -> K or None     # the folds a run uses when folds is unset
    folds_plan(n_usable, settings) -> FoldsPlan      # the same, with its cost, for the Train form
    promise_sentence(report) -> str                  # the one sentence the CLI and Results lead with
    verdicts(report) -> {field: Verdict}             # eval --all: does the promise hold on these pages?

The sentence states only what the one-sided 95% lower bound of the held-out precision supports
(docs/tuning.md "The claim is the bound"); a field without a threshold of its own is said to be
asked, with about how many more pages would give it one.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from dxstudio.tuning import schedule
from dxstudio.tuning.pages import check_folds
from dxstudio.tuning.scoring import CONFIDENCE_LEVEL, clopper_pearson_lower, values_needed
from dxstudio.tuning.settings import DEFAULTS, TuneError


def _floor_pct(x: float) -> str:
    """A share as a percentage rounded down (never overstated): 0.9789 -> "97%"."""
    return f"{math.floor(x * 100 + 1e-9):d}%"


# -- folds by default ------------------------------------------------------------------------

def single_split_values(n_usable: int, settings: dict) -> int:
    """The held-out pages of a single split of n_usable pages: the most values one field can
    have there (one per page)."""
    return schedule.heldout_count(n_usable, settings["heldout_fraction"]) if n_usable >= 2 else 0


def auto_folds(n_usable: int, settings: dict) -> int | None:
    """The folds a run of n_usable pages uses: the setting folds when set (checked against the
    pages), else auto_folds folds while a single split's held-out pages cannot hold
    values_needed(share) values of a field (then no field could get a threshold by the bound;
    with the defaults, below 1990 usable pages), capped at the usable pages; None: the single
    split (also with auto_folds 0)."""
    k = settings.get("folds")
    if k is not None:

        return check_folds(k, n_usable)
    auto = settings.get("auto_folds", 5)
    if auto == 0:
        return None
    if auto == 1:
        raise TuneError("setting auto_folds must be 0 (never) or at least 2, not 1")
    need = values_needed(settings["share"])
    if need is not None and single_split_values(n_usable, settings) >= need:
        return None
    if n_usable < 2:
        return None  # the run itself says a project needs 2 usable pages
    return min(auto, n_usable)


def auto_folds_below(settings: dict) -> int | None:
    """The fewest usable pages whose single split holds values_needed(share) held-out pages:
    below it folds are the default (1990 with share 0.99 and heldout_fraction 0.15; 190 with 0.9)."""
    if settings.get("auto_folds", 5) == 0:
        return None
    return _auto_folds_below(float(settings["share"]), settings["heldout_fraction"])


@functools.lru_cache(maxsize=64)
def _auto_folds_below(share: float, heldout_fraction) -> int | None:
    # (pure, and 2-3 ms of exact binomial tails a call: the Train tab asks on the GUI thread)
    need = values_needed(share)
    if need is None:
        return None
    n = 2
    while schedule.heldout_count(n, heldout_fraction) < need:
        n = n * 2
    lo, hi = n // 2, n
    while lo < hi:
        mid = (lo + hi) // 2
        if schedule.heldout_count(mid, heldout_fraction) >= need:
            hi = mid
        else:
            lo = mid + 1
    return hi


@dataclass(frozen=True)
class FoldsPlan:
    folds: int | None  # None: the single split
    steps: int  # all parts' steps
    single_steps: int  # a single split's steps
    text: str  # for the Train form

    @property
    def cost(self) -> float:
        return self.steps / self.single_steps if self.single_steps else 1.0


def folds_plan(n_usable: int, settings: dict, seconds_per_step: float | None = None) -> FoldsPlan:
    """What a run of n_usable pages will do about folds and what it costs, in words: "5 folds
    (the default below 1990 usable pages): 6 trainings, 4.6x the steps of a single split
    (about 3 min)". seconds_per_step: a measured step time (e.g. the last run's), for minutes."""
    b, e = settings["batch"], settings["epochs"]
    if n_usable < 2:
        return FoldsPlan(None, 0, 0, "At least 2 usable pages are needed to train.")
    n_held = schedule.heldout_count(n_usable, settings["heldout_fraction"])
    single = schedule.total_steps(n_usable - n_held, b, e)
    try:
        k = auto_folds(n_usable, settings)
    except TuneError as err:
        return FoldsPlan(None, single, single, str(err))
    if k is None:
        why = ("the setting auto_folds is 0" if settings.get("auto_folds", 5) == 0
               else f"enough pages for a single split's {n_held} held-out pages")
        when = f" in about {_duration(single * seconds_per_step)}" if seconds_per_step else ""
        return FoldsPlan(None, single, single, f"Single split ({why}): {single} steps{when}.")
    steps = schedule.total_steps(n_usable, b, e)
    for i in range(k):
        held = len(range(i, n_usable, k))
        steps += schedule.total_steps(n_usable - held, b, e)
    below = auto_folds_below(settings)
    why = ("set in the settings" if settings.get("folds") is not None
           else f"the default below {below} usable pages, so that every page is held out once" if below
           else "the default")
    when = f", about {_duration(steps * seconds_per_step)}" if seconds_per_step else ""
    return FoldsPlan(k, steps, single, f"{k} folds ({why}): {k + 1} trainings, {steps} steps, "
                                       f"{steps / single:.1f}x the time of a single split{when}.")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


# -- the one sentence --------------------------------------------------------------------------

def _names(names: list) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def pages_needed(report: dict, field: str) -> int | None:
    """About how many more labelled pages would give `field` a threshold: the right values it
    still needs (needed_right) over the right values a held-out page gave it, divided by the
    held-out fraction for a single split (only that share of new pages is held out). None when
    no held-out page gave a right value yet."""
    f = report["fields"][field]
    need = f.get("needed_right")
    if need is None:
        return None
    col = 2 if report.get("threshold_by") == "value" else 1
    right = sum(1 for c in f.get("confidences", []) if c[col])
    pages = report.get("n_pages") or 0
    if right == 0 or pages == 0:
        return None
    run = report.get("run") or {}
    share_held = 1.0
    if not run.get("folds") and run.get("settings", {}).get("heldout_fraction"):
        share_held = float(run["settings"]["heldout_fraction"])
    return max(1, math.ceil(need / (right / pages) / share_held))


def promise_sentence(report: dict) -> str:
    """The one sentence a person can rely on: what the fields with a threshold of their own
    promise, as the lower bound supports it (never more), and which fields are asked and about
    how many more right values and labelled pages would change that. E.g. (SROIE 50, --share
    0.9) "Values at or above their field's threshold (company 0.603564, date 0.840031) will
    be right at least 91% of the time (95% confidence, from 70 held-out values); address and total
    have no threshold yet and are always asked (they need about 6 more right held-out values for
    address, 23 for total): label about 27 more pages"."""
    fields = report.get("fields") or {}
    share = report.get("share", DEFAULTS["share"])
    level = f"{CONFIDENCE_LEVEL * 100:g}%"
    with_t = [n for n, f in fields.items() if f.get("threshold") is not None and f.get("values")]
    without = [n for n in fields if n not in with_t]
    n_values = sum(f.get("n_values", 0) for f in fields.values())
    if with_t:
        # a report from before the bound was kept has right and values: the bound from them
        lows = [fields[n].get("precision_lower") if fields[n].get("precision_lower") is not None
                else clopper_pearson_lower(int(fields[n].get("right", 0)), int(fields[n]["values"])) for n in with_t]
        held = sum(fields[n]["values"] for n in with_t)
        low = min(lows)
        if len(with_t) == 1:
            n = with_t[0]
            head = f"Values of {n} at or above {fields[n]['threshold']:.6g}"
        else:
            head = ("Values at or above their field's threshold ("
                    + ", ".join(f"{n} {fields[n]['threshold']:.6g}" for n in with_t) + ")")
        # the claim is the weakest field's bound, rounded down: never a share the bound does not support
        sentence = (f"{head} will be right at least {_floor_pct(low)} of the time ({level} confidence, from "
                    f"{held} held-out value{'s' if held != 1 else ''})")
        if low < share - 1e-12:
            sentence += f", less than the {share * 100:g}% asked for"
    elif n_values == 0:
        return ("No value can be answered locally yet: the held-out pages gave no values, so every value is "
                "asked; label more pages and tune again.")
    else:
        need = values_needed(share)
        need_text = (f"takes at least {need} held-out values of that field above its threshold, all right "
                     f"(more if some are wrong)" if need is not None else "takes more values than any project has")
        sentence = (f"No value can be answered locally yet: to show with {level} confidence that "
                    f"{share * 100:g}% of a field's values are right {need_text}, and the "
                    f"{n_values} held-out value{'s' if n_values != 1 else ''} here "
                    f"(at most one per field a page) fall{'s' if n_values == 1 else ''} short, so every value is asked")
    if without:
        pages = [p for p in (pages_needed(report, n) for n in without) if p is not None]
        more = f": label about {max(pages)} more pages" if pages else ": label more pages"
        short = _short_of(report, without)
        if with_t:
            verb = "has" if len(without) == 1 else "have"
            sentence += f"; {_names(without)} {verb} no threshold yet and {'is' if len(without) == 1 else 'are'} " \
                        f"always asked{short}{more}"
        else:
            sentence += short + more
    return sentence + "."


def _short_of(report: dict, names: list) -> str:
    """" (about 8 more right values for company, 12 for address)": each field's needed_right,
    the right held-out values it still lacks; "" when the report does not say."""
    fields = report.get("fields") or {}
    parts = [(n, fields[n].get("needed_right")) for n in names if fields[n].get("needed_right")]
    if not parts:
        return ""
    if len(parts) == 1:
        n, k = parts[0]
        return f" (it needs about {k} more right held-out value{'s' if k != 1 else ''})"
    first, rest = parts[0], parts[1:]
    return (f" (they need about {first[1]} more right held-out values for {first[0]}, "
            + ", ".join(f"{k} for {n}" for n, k in rest) + ")")


# -- eval --all: does the promise hold on these pages? -------------------------------------------

@dataclass(frozen=True)
class Verdict:
    holds: bool | None  # None: not tested (no threshold, or no value cleared it)
    text: str


def verdicts(report: dict) -> dict:
    """Per field and "pooled" (every value routed local by its field's threshold): does the
    model's promise (its stored share) hold on the pages of an `eval --all` report? Holds when
    the share right among the values routed local is at least the promised share; the text
    gives the count and the 95% lower bound on these pages."""
    stored = report.get("stored") or {}
    thresholds = stored.get("thresholds") or {}
    share = thresholds.get("share") or report.get("share", DEFAULTS["share"])
    out = {}
    for name, f in list((stored.get("fields") or {}).items()) + [("pooled", stored.get("pooled") or {})]:
        n, right = f.get("values", 0), f.get("right", 0)
        if name != "pooled" and f.get("threshold") is None:
            out[name] = Verdict(None, "no threshold: every value is asked")
            continue
        if not n:
            out[name] = Verdict(None, "not tested: no value on these pages was routed local")
            continue
        holds = right * 1.0 >= share * n - 1e-9
        low = f.get("precision_lower")
        text = (f"{'holds' if holds else 'does not hold'} at {share * 100:g}%: {right} of {n} values routed local "
                f"right ({right / n * 100:.1f}%); with 95% confidence at least {_floor_pct(low)} on these pages")
        if holds and low is not None and low < share:
            text += " (too few values here to prove the share itself)"
        out[name] = Verdict(holds, text)
    return out
