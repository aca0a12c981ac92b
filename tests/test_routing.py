"""LocalFirst routing without the command line or Qt (dxstudio/routing.py): the engine's rule
per value, one ask path for a page and a document, answers grounded, lines in input order, the
circuit breaker, and the summary's counts. A fake labelling client stands in for the endpoint."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dxstudio.engine.page import page_from_dict
from dxstudio.labelling import LabellingError
from dxstudio.project import Field
from dxstudio.routing import (LABELLING, Breaker, Router, asked_fields, document_grounding, grounded_field)

WORDS = [("Total", [10, 10, 60, 20]), ("9.99", [70, 10, 110, 20]), ("Acme", [10, 40, 60, 50])]


def page(pid: str):
    return page_from_dict({"id": pid, "width": 200, "height": 100,
                           "words": [{"text": t, "box": b} for t, b in WORDS]})


def record(pid: str, total, shop):
    return {"id": pid, "fields": {"total": total, "shop": shop}}


SURE = {"value": "9.99", "confidence": 0.99}
UNSURE = {"value": "Acme", "confidence": 0.2}
NONE = {"value": None, "confidence": None}
THRESHOLDS = {"pooled": 0.5, "fields": {"total": 0.9, "shop": 0.9}}


class FakeClient:
    def __init__(self, answers=None, fail=()):
        self.answers = answers or {"total": "9.99", "shop": "Acme"}
        self.fail, self.requests, self.calls = set(fail), 0, []
        self.gate = threading.Event()
        self.gate.set()

    def cached(self, page, schema):
        return None

    def cached_document(self, pages, schema):
        return self.answers if len(pages) > 2 else None  # a "hit" to count

    def ask(self, page, schema):
        return self._ask("page", [page])

    def ask_document(self, pages, schema):
        return self._ask("document", pages)

    def _ask(self, kind, pages):
        self.gate.wait(10)
        self.requests += 1
        self.calls.append((kind, [p.id for p in pages]))
        if pages[0].id in self.fail:
            raise LabellingError(f"{pages[0].id}: HTTP 500")
        return dict(self.answers)


SCHEMA = [Field("total"), Field("shop")]


def test_asked_fields_follow_the_engines_rule():
    assert asked_fields(record("a", SURE, UNSURE), THRESHOLDS) == {"shop": "below threshold"}
    assert asked_fields(record("a", SURE, NONE), THRESHOLDS) == {"shop": "no value"}
    assert asked_fields(record("a", SURE, SURE), {"pooled": 0.1, "fields": {"shop": 0.5}}) == {"total": "no threshold"}
    assert asked_fields(record("a", SURE, SURE), None) == {"total": "no threshold", "shop": "no threshold"}


def test_grounded_fields_and_a_documents_grounding():
    assert grounded_field("9.99", "exact", 0.3) == {"value": "9.99", "source": LABELLING, "grounding": "exact",
                                                    "confidence": 0.3}
    assert grounded_field("7", "absent", 0.3) == {"value": None, "source": LABELLING, "grounding": "absent",
                                                  "confidence": 0.3, "model_value": "7"}
    reports = {"p1": {"t": {"status": "other_page"}, "s": {"status": "absent"}},
               "p2": {"t": {"status": "normalized"}, "s": {"status": "absent"}}}
    assert document_grounding(reports, ["t", "s"]) == {"t": {"status": "normalized"}, "s": {"status": "absent"}}
    assert document_grounding({"p1": {"t": {"status": "other_page"}}}, ["t"]) == {"t": {"status": "absent"}}


def test_lines_come_in_input_order_a_page_and_a_document_by_one_path():
    client = FakeClient()
    client.gate.clear()  # the asks wait: local lines behind them wait too
    with ThreadPoolExecutor(2) as pool:
        r = Router(client, SCHEMA, THRESHOLDS, pool)
        r.submit(record("p1", SURE, UNSURE), [page("p1")])
        r.submit(record("p2", SURE, SURE), [page("p2")])
        doc = {"id": "d", "pages": ["d1", "d2"], "fields": {"total": {**SURE, "page": "d2"}, "shop": {**NONE, "page": None}}}
        r.submit(doc, [page("d1"), page("d2")], document=True)
        assert list(r.ready(keep=5)) == [] and r.waiting == 3
        client.gate.set()
        lines = list(r.ready(wait=True))
    assert [line["id"] for line in lines] == ["p1", "p2", "d"]
    assert sorted(client.calls) == [("document", ["d1", "d2"]), ("page", ["p1"])]
    p1, p2, d = lines
    assert p1["fields"]["total"] == {"value": "9.99", "source": "local", "confidence": 0.99}
    assert p1["fields"]["shop"] == {"value": "Acme", "source": LABELLING, "grounding": "exact", "confidence": 0.2,
                                    "why": "below threshold"}
    assert all(v["source"] == "local" for v in p2["fields"].values())
    assert d["pages"] == ["d1", "d2"] and d["fields"]["total"]["page"] == "d2" and d["fields"]["shop"]["page"] is None
    assert d["fields"]["shop"]["source"] == LABELLING and d["fields"]["shop"]["why"] == "no value"
    s = r.summary(pages=4, bad=0)
    assert (s["values_local"], s["values_asked"], s["pages_local"], s["pages_asked"]) == (4, 2, 1, 2)
    assert s["requests"] == 2 and s["pages_failed"] == 0 and s["not_asked"] == [] and "stopped" not in s
    assert s["fields"] == {"total": {"local": 3}, "shop": {"below threshold": 1, "local": 1, "no value": 1}}


def test_the_breaker_stops_asking_after_failures_in_a_row():
    client = FakeClient(fail={"p0", "p1", "p2"})
    with ThreadPoolExecutor(1) as pool:  # one at a time: the failures come in order
        r = Router(client, SCHEMA, THRESHOLDS, pool, limit=3)
        for k in range(5):
            r.submit(record(f"p{k}", SURE, UNSURE), [page(f"p{k}")])
        lines = list(r.ready(wait=True))
    assert client.requests == 3
    assert [("error" in line) for line in lines] == [True] * 5
    assert lines[0]["fields"]["shop"] == {"value": None, "source": None, "confidence": 0.2, "why": "below threshold"}
    assert "not asked" in lines[4]["error"] and "3 pages failed in a row" in lines[4]["error"]
    s = r.summary(pages=5, bad=0)
    assert s["pages_failed"] == 5 and s["not_asked"] == ["p3", "p4"] and s["pages_not_asked"] == 2
    assert s["stopped"].startswith("stopped asking the labelling model after 3 pages")


def test_a_success_resets_the_breaker():
    b = Breaker(2)
    b.failed(LabellingError("x"))
    b.succeeded()
    b.failed(LabellingError("y"))
    assert b.tripped is None
    b.failed(LabellingError("z"))
    assert b.tripped and "(z)" in b.tripped


@pytest.mark.parametrize("keep", [0, 1])
def test_ready_keeps_at_most_keep_lines_waiting(keep):
    client = FakeClient()
    client.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        r = Router(client, SCHEMA, THRESHOLDS, pool)
        r.submit(record("p1", SURE, UNSURE), [page("p1")])
        r.submit(record("p2", SURE, UNSURE), [page("p2")])
        client.gate.set()
        first = list(r.ready(keep=keep))  # blocks on the oldest while more than keep wait
        assert r.waiting <= keep and len(first) >= 2 - keep
        list(r.ready(wait=True))
