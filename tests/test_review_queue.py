"""The review queue's rules without Qt (dxstudio/review_queue.py): the model against the labels,
the queue's order, the next page, and the answers cache read once per model and page."""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from dxstudio.project import ProjectLayout
from dxstudio.review_queue import (Answer, FieldCompare, answers_work, compare, next_in_queue,
                                   queue_key, read_cache, same_text)


def test_importing_the_rules_does_not_import_qt():
    import subprocess

    code = "import sys, dxstudio.review_queue; sys.exit(any(m.startswith('PySide6') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1]).returncode == 0


def test_compare_agrees_on_the_same_words_or_the_same_value_elsewhere():
    answers = {"total": Answer((4,), "5.000", 0.9), "date": Answer((1,), "1/2", 0.4), "shop": None,
               "extra": Answer((7,), "x", 0.8)}
    labels = {"total": (9,), "date": (1,), "shop": ()}
    texts = {"total": " 5.000 ", "date": "1/2", "shop": ""}
    comp = compare(["total", "date", "shop", "tax"], answers, labels, texts.__getitem__)
    assert list(comp) == ["total", "date", "shop"]  # the schema's fields the model answered, in order
    assert comp["total"] == FieldCompare("total", (9,), answers["total"], True, True)  # elsewhere
    assert comp["date"].agrees and not comp["date"].elsewhere
    assert comp["shop"].agrees  # no value and no label
    texts["total"] = "6.000"
    assert not compare(["total"], answers, labels, texts.__getitem__)["total"].agrees
    assert same_text("A  b", "a B") and not same_text("ab", "a b")


def test_the_queue_key_puts_disagreement_first_then_the_least_sure():
    agree = {"a": FieldCompare("a", (1,), Answer((1,), "x", 0.7), True)}
    differ = {"a": FieldCompare("a", (1,), Answer((2,), "y", 0.95), False),
              "b": FieldCompare("b", (), None, True)}
    assert queue_key("unreviewed", agree, 3) == (1, 0.7, 3)
    assert queue_key("conflicts", differ, 0) == (0, 0.95, 0)
    assert queue_key("accepted", differ, 0) is None and queue_key("excluded", agree, 0) is None
    assert queue_key(None, agree, 0) is None and queue_key("unreviewed", {}, 0) is None
    assert queue_key("unreviewed", {"b": differ["b"]}, 2) == (1, 1.0, 2)  # no value: sure of nothing


def test_next_in_queue_goes_on_after_the_cursor_and_wraps():
    keyed = [((1, 0.5, 2), "p2"), ((0, 0.9, 1), "p1"), ((1, 0.2, 0), "p0")]
    assert next_in_queue(keyed, None, None) == ((0, 0.9, 1), "p1")  # the top the first time
    assert next_in_queue(keyed, "p1", None) == ((1, 0.2, 0), "p0")  # not the page shown
    assert next_in_queue(keyed, None, (0, 0.9, 1)) == ((1, 0.2, 0), "p0")
    assert next_in_queue(keyed, None, (1, 0.5, 2)) == ((0, 0.9, 1), "p1")  # from the top after the end
    assert next_in_queue([((0, 0.1, 0), "p0")], "p0", None) is None


class FakeJob:
    def __init__(self):
        self.events, self.cancelled = [], threading.Event()

    def report(self, event):
        self.events.append(event)


def test_answers_work_reads_each_page_once_per_model_and_keeps_the_cache(small_project):
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params
    from dxstudio.project import Project

    project = Project.open(small_project)
    cfg = size_config("tiny", project.field_names)
    model = Path(small_project) / "runs" / "r" / "model.safetensors"
    model.parent.mkdir(parents=True)
    save_model(model, cfg, new_params(cfg, 3))
    pids = project.page_ids()

    job = FakeJob()
    sha, computed, reused, cancelled = answers_work(small_project, model)(job)
    assert (computed, reused, cancelled) == (len(pids), 0, False)
    pages = {e[1]: e[2] for e in job.events if e[0] == "page"}
    assert list(pages) == pids and all(set(f) == set(project.field_names) for f in pages.values())
    cache = ProjectLayout(small_project).answers_cache_file(sha)
    assert set(read_cache(cache, sha)) == set(pids) and read_cache(cache, "another model") == {}

    again = FakeJob()
    assert answers_work(small_project, model)(again)[1:] == (0, len(pids), False)  # all from the cache
    assert {e[1]: e[2] for e in again.events if e[0] == "page"} == pages

    changed = project.page_path(pids[0])  # a changed page is read again, the others are not
    d = json.loads(changed.read_text())
    d["words"][0]["text"] += "x"
    changed.write_text(json.dumps(d))
    assert answers_work(small_project, model)(FakeJob())[1:] == (1, len(pids) - 1, False)
