"""LocalFirst routing, Qt-free and outside the command line: which of an extracted record's
values are answered locally, asking the labelling model for the rest, and the tally.

The rule per value is the engine's (dxstudio.engine.extract.route_reason: at or above the
field's own stored threshold is local; below it, no threshold of its own, or no value is
asked). A Router takes records in input order, a page's (prediction_json) or a document's
(document_json over its pages), asks the labelling model for the fields not local of each (a
page: LabelClient.ask; a document's pages, once: LabelClient.ask_document; one path for both)
on a thread pool, and gives back each record's output line, in input order, as its answer
arrives. After `limit` pages or documents fail in a row (STOP_AFTER_FAILURES, as `label`
stops) the endpoint is not asked again: those left are "not asked".

    router = Router(client, ask_schema, thresholds, pool)   # pool: a concurrent.futures executor
    router.submit(record, pages, document=False)            # pages: the record's Page(s)
    for line in router.ready(keep=N): ...                   # lines whose answer is in (or when more
                                                            # than N wait), in input order
    for line in router.ready(keep=0, wait=True): ...        # the rest, at the end
    router.summary(pages=done, bad=bad) -> {...}            # the summary line's counts

`dxstudio route` (dxstudio/cli/route.py) is its command line; its docstring describes the lines.
"""
from __future__ import annotations

import threading
from collections import deque

from dxstudio.engine.extract import route_reason
from dxstudio.grounding import ground_answers, ground_document
from dxstudio.labelling import STOP_AFTER_FAILURES, LabellingError

LABELLING = "labelling model"  # an asked value's "source"
GROUNDED = ("exact", "normalized", "computed")  # an answer found on the page (as label grounds it)


def ask_reason(field: str, value: dict, thresholds) -> str | None:
    """engine.extract.route_reason on an output record's field: None when local, else why it
    is asked ("below threshold", "no threshold", "no value")."""
    return route_reason(field, None if value["value"] is None else value["confidence"], thresholds)


def asked_fields(record: dict, thresholds) -> dict:
    """{field: why asked} of a record's fields that are not answered locally."""
    return {f: why for f, v in record["fields"].items() if (why := ask_reason(f, v, thresholds)) is not None}


def grounded_field(answer, status: str, confidence) -> dict:
    """An asked field's output: the labelling model's answer where it is on the page (or
    computed from printed numbers), grounded as `label` grounds it; an answer that is not on
    the page ("absent") is no answer: value null, the model's text kept apart as "model_value"."""
    out = {"value": answer if status in GROUNDED else None, "source": LABELLING, "grounding": status,
           "confidence": confidence}
    if status == "absent":
        out["model_value"] = answer
    return out


def document_grounding(reports: dict, names) -> dict:
    """A field's grounding in a document from ground_document's per-page reports: the best
    status of its pages (where it is printed; "other_page" everywhere is "absent")."""
    grounding = {}
    for n in names:
        statuses = [r[n]["status"] for r in reports.values()]
        best = next((s for s in GROUNDED if s in statuses), statuses[0] if statuses else "null")
        grounding[n] = {"status": "absent" if best == "other_page" else best}
    return grounding


class NotAsked(Exception):
    """A page the circuit breaker kept from the endpoint; str() says why."""


class Breaker:
    """Stops asking after `limit` pages fail in a row (in the order they fail), as label does;
    thread-safe (the asks run on the pool's threads)."""

    def __init__(self, limit: int):
        self.limit, self.in_row, self.tripped = limit, 0, None
        self._lock = threading.Lock()

    def failed(self, e) -> None:
        with self._lock:
            self.in_row += 1
            if self.in_row >= self.limit and self.tripped is None:
                self.tripped = f"stopped asking the labelling model after {self.in_row} pages failed in a row ({e})"

    def succeeded(self) -> None:
        with self._lock:
            self.in_row = 0


class Router:
    def __init__(self, client, ask_schema, thresholds, pool, limit: int = STOP_AFTER_FAILURES):
        self.client, self.ask_schema, self.thresholds, self.pool = client, list(ask_schema), thresholds, pool
        self.names = [f.name for f in self.ask_schema]
        self.breaker = Breaker(limit)
        self.counts = {"values_local": 0, "values_asked": 0, "pages_local": 0, "pages_asked": 0,
                       "pages_failed": 0, "cache_hits": 0, "values_not_on_page": 0}
        self.not_asked: list = []  # ids of pages the circuit breaker kept from the endpoint
        self.why_counts: dict = {}  # field -> {"local" or the reason asked: count}
        self._pending: deque = deque()  # (record, asked fields, future or None), in input order

    def ask(self, pages: list, document: bool = False):
        """(from the cache, answers, {field: {"status"}}) for one page (document False: pages is
        [page]) or a document's pages, asked once; NotAsked after the breaker trips."""
        if self.breaker.tripped:
            raise NotAsked(self.breaker.tripped)
        c, s = self.client, self.ask_schema
        hit = (c.cached_document(pages, s) if document else c.cached(pages[0], s)) is not None
        try:
            answers = c.ask_document(pages, s) if document else c.ask(pages[0], s)
        except LabellingError as e:
            self.breaker.failed(e)
            raise
        self.breaker.succeeded()
        if document:
            return hit, answers, document_grounding(ground_document(pages, answers, self.names), self.names)
        return hit, answers, ground_answers(pages[0], answers, self.names)

    def submit(self, record: dict, pages: list, document: bool = False) -> None:
        """Route a record: its fields not local are asked (in the background) with its pages."""
        asked = asked_fields(record, self.thresholds)
        self.counts["values_local"] += len(record["fields"]) - len(asked)
        self.counts["values_asked"] += len(asked)
        future = None
        if asked:
            self.counts["pages_asked"] += 1
            future = self.pool.submit(self.ask, pages, document)
        else:
            self.counts["pages_local"] += 1
        self._pending.append((record, asked, future))

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def ready(self, keep: int = 0, wait: bool = False):
        """The output lines, in input order, of the records whose answer is in (or that asked
        nothing), and of the oldest while more than `keep` wait; with wait, every one."""
        p = self._pending
        while p and (wait or len(p) > keep or p[0][2] is None or p[0][2].done()):
            yield self._finish(*p.popleft())

    def _finish(self, record, asked, future) -> dict:
        fields = {}
        error = None
        answers = grounding = None
        if future is not None:
            try:
                hit, answers, grounding = future.result()
                self.counts["cache_hits"] += hit
            except NotAsked as e:
                error = f"{record['id']}: not asked: {e}"
                self.not_asked.append(record["id"])
            except LabellingError as e:
                error = str(e)
        for f, v in record["fields"].items():
            tally = self.why_counts.setdefault(f, {})
            key = asked.get(f) or "local"
            tally[key] = tally.get(key, 0) + 1
            if f not in asked:
                fields[f] = {"value": v["value"], "source": "local", "confidence": v["confidence"]}
            elif answers is not None:
                fields[f] = grounded_field(answers.get(f), grounding[f]["status"], v["confidence"])
                fields[f]["why"] = asked[f]
                self.counts["values_not_on_page"] += fields[f]["grounding"] == "absent"
            else:
                fields[f] = {"value": None, "source": None, "confidence": v["confidence"], "why": asked[f]}
            if "pages" in record:  # a document's line: the page of a local value
                fields[f]["page"] = v["page"] if f not in asked else None
        out = {"id": record["id"], "fields": fields}
        if "pages" in record:
            out = {"id": record["id"], "pages": record["pages"], "fields": fields}
        if error:
            out["error"] = error
            self.counts["pages_failed"] += 1
        return out

    def summary(self, pages: int, bad: int) -> dict:
        """The summary line's counts, after every line is out: pages given, bad (not read)."""
        counts = dict(self.counts)
        counts["requests"] = self.client.requests
        counts["pages"] = pages
        counts["pages_bad"] = bad
        counts["pages_not_asked"] = len(self.not_asked)
        counts["not_asked"] = list(self.not_asked)
        if self.not_asked:
            counts["stopped"] = self.breaker.tripped
        counts["fields"] = self.why_counts
        return counts
