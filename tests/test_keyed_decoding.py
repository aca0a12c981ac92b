"""The "keyed" decoding (engine/extract.py keyed_values, grounding.keyed_extents): the printing
reading, then a field with no value takes the words printed after its keywords on their row, and
a value that starts there but stops short runs on while the model does not read the next word as
clearly O. Hand-made pages and tag logits: no model, no training."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio import grounding
from dxstudio.engine.extract import KEYED_RUN_ON, FieldValue, keyed_values
from dxstudio.engine.page import Page, Word
from dxstudio.tuning.settings import resolve_settings
from tests.test_printing_decoding import logits as printing_logits
from tests.test_printing_decoding import page_of as printing_page


def page_of(rows):
    """The printing tests' page (words 60 units apart on a row), 600 units wide: a memo's row of 7 words."""
    return printing_page(rows, width=600)


MEMO = [["MEMO"], ["To:", "Ron", "Milstein", "From:", "Jane", "Doe"], ["Date:", "May", "1,", "2000"],
        ["this", "is", "sent", "to", "whom", "it", "concerns"]]
FIELDS = ["date", "to", "from"]


def texts(page, run):
    return " ".join(page.words[i].text for i in range(run[0], run[1] + 1))


def test_the_runs_after_a_key_stop_at_the_next_key_and_skip_running_text():
    page = page_of(MEMO)
    runs = grounding.keyed_extents(page, FIELDS, {"date": {"date"}, "to": {"to"}, "from": {"from"}})
    assert [texts(page, r) for r in runs["to"]] == ["Ron Milstein"]  # not "whom it concerns": "to" in prose
    assert [texts(page, r) for r in runs["from"]] == ["Jane Doe"]
    assert [texts(page, r) for r in runs["date"]] == ["May 1, 2000"]
    # no keywords given: the fields' names (the name rule's keys)
    assert grounding.keyed_extents(page, FIELDS) == runs
    # a word ending in ':' is another key: it ends a run even when no field names it
    page2 = page_of([["To:", "Ron", "Milstein", "Fax:", "555"]])
    assert [texts(page2, r) for r in grounding.keyed_extents(page2, ["to"])["to"]] == ["Ron Milstein"]
    # a gap wider than KEYED_GAP word heights ends a run
    wide = Page("p", 2000, 60, (Word("TO", (10, 10, 40, 25)), Word("Sam", (50, 10, 90, 25)),
                                Word("Zolot", (100, 10, 150, 25)), Word("Page", (900, 10, 950, 25))))
    assert [texts(wide, r) for r in grounding.keyed_extents(wide, ["to"])["to"]] == ["Sam Zolot"]


def logits(n, n_fields, likes):
    """The printing tests' logits with the tags other than O at -8: no word is read into a field by chance."""
    return printing_logits(n, n_fields, likes, other=-8.0)


def test_a_missed_field_takes_its_keyed_run_and_a_value_cut_short_runs_on():
    page = page_of(MEMO)
    n = len(page.words)
    ron, mil = 2, 3  # "MEMO" is word 0, "To:" word 1
    kw = {"date": frozenset({"date"}), "to": frozenset({"to"}), "from": frozenset({"from"})}
    # the model read "Ron" as to's value, "Milstein" it reads as I-to just under O: runs on
    lg = logits(n, 3, {(ron, 3): 2.0, (mil, 4): -(KEYED_RUN_ON - 1)})
    values = {"date": None, "to": FieldValue((ron,), "Ron", 0.9), "from": None}
    out = keyed_values(page, FIELDS, values, lg, kw)
    assert out["to"].text == "Ron Milstein" and out["to"].words == (ron, mil)
    assert out["from"].text == "Jane Doe" and out["date"].text == "May 1, 2000"
    # a filled value's confidence is the model's for those words: low where it did not read them
    assert out["from"].confidence < 0.01
    # "Milstein" read as clearly O (I- below O by more than KEYED_RUN_ON): "Ron" stays
    lg2 = logits(n, 3, {(ron, 3): 2.0, (mil, 4): -(KEYED_RUN_ON + 1)})
    assert keyed_values(page, FIELDS, values, lg2, kw)["to"].words == (ron,)
    # a value elsewhere than after the key stays as it is; another field's words are never taken
    elsewhere = {"date": None, "to": FieldValue((6,), "Doe", 0.8), "from": None}
    out = keyed_values(page, FIELDS, elsewhere, lg, kw)
    assert out["to"].words == (6,) and out["from"].text == "Jane"
    # no keyed run for a field: nothing changes
    plain = page_of([["ACME"], ["TOTAL", "12.50"]])
    none = {"date": None, "to": None, "from": None}
    assert keyed_values(plain, FIELDS, none, logits(3, 3, {}), kw) == none


def test_the_keyed_reading_is_a_setting_and_reads_the_printing_tags():
    from dxstudio.engine.config import size_config
    from dxstudio.engine.extract import predict_page
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.params import new_params

    assert resolve_settings({"decoding": "keyed"})["decoding"] == "keyed"
    cfg = size_config("tiny", fields=tuple(FIELDS))
    rt = to_runtime(new_params(cfg, 3))
    page = page_of(MEMO)
    printed, keyed = predict_page(cfg, rt, page, decoding="printing"), predict_page(cfg, rt, page, decoding="keyed")
    assert keyed.decoding == "keyed" and np.array_equal(printed.tags, keyed.tags)
    assert keyed.fields["from"] is not None
    for f, v in keyed.fields.items():  # every value keyed changed is a keyed run's, the others printing's
        if v != printed.fields[f]:
            assert page.words[v.words[0] - 1].text.rstrip(":").casefold() == f


def test_the_keyed_reading_is_refused_without_the_rule(monkeypatch):
    from dxstudio.engine import extract

    monkeypatch.setattr(extract, "_keyed_rule", None)
    with pytest.raises(RuntimeError, match="keyed decoding needs the keyed rule"):
        keyed_values(page_of(MEMO), FIELDS, {"date": None, "to": None, "from": None}, logits(18, 3, {}))
