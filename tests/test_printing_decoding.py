"""The "printing" decoding (engine/extract.py printings_by_rule, docs/model.md "Span decoding"):
the span decoding's value, moved to the printing of the same value that the project's labelling
rule (grounding.ground_answers) labels. Hand-made pages and tag logits: no model, no training."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio import grounding
from dxstudio.engine.extract import (DECODINGS, FieldValue, check_decoding, fields_from_logits, printings_by_rule)
from dxstudio.engine.page import Page, Word
from dxstudio.tuning.settings import TuneError, resolve_settings


def page_of(rows, width=400):
    """rows: lists of word texts, one list per printed row (reading order: row by row); words 60
    units apart on a row, rows 20 apart, on a page `width` units wide."""
    words = []
    for r, texts in enumerate(rows):
        for k, t in enumerate(texts):
            words.append(Word(t, (10 + 60 * k, 10 + 20 * r, 60 + 60 * k, 25 + 20 * r)))
    return Page("p", width, 20 * len(rows) + 20, tuple(words))


def logits(n, n_fields, likes, other=-4.0):
    """likes: {(word, tag): logit}; O 0 everywhere, other tags `other`."""
    out = np.full((n, 1 + 2 * n_fields), other, np.float32)
    out[:, 0] = 0.0
    for (i, t), v in likes.items():
        out[i, t] = v
    return out


def idx(page, text, nth=0):
    return [i for i, w in enumerate(page.words) if w.text == text][nth]


def read(page, fields, lg):
    span = fields_from_logits(page, fields, lg, joint=True)
    return span, printings_by_rule(page, fields, span)


def test_a_total_read_at_another_printing_moves_to_the_one_after_its_name():
    page = page_of([["ACME", "STORE"], ["TEA", "12.50"], ["TOTAL", "12.50"], ["CASH", "20.00"]])
    tea, after_total = idx(page, "12.50", 0), idx(page, "12.50", 1)
    lg = logits(len(page.words), 1, {(tea, 1): 5.0, (after_total, 1): 3.0})  # the model likes the item line
    span, printed = read(page, ["total"], lg)
    assert span["total"].words == (tea,)
    assert printed["total"].words == (after_total,) and printed["total"].text == "12.50"
    # the value's confidence stays the span's (how sure the model is of the amount)
    assert printed["total"].confidence == span["total"].confidence


def test_a_number_without_its_name_goes_to_its_last_printing_a_text_to_its_first():
    page = page_of([["BEST", "SHOP"], ["9.90"], ["BEST", "SHOP"], ["9.90"], ["THANK", "YOU"]])
    first_amount, last_amount = idx(page, "9.90", 0), idx(page, "9.90", 1)
    second_shop = (3, 4)
    assert [page.words[i].text for i in second_shop] == ["BEST", "SHOP"]
    lg = logits(len(page.words), 2, {(first_amount, 1): 4.0, (3, 3): 4.0, (4, 4): 4.0})
    span, printed = read(page, ["total", "company"], lg)
    assert span["total"].words == (first_amount,) and span["company"].words == second_shop
    assert printed["total"].words == (last_amount,)  # a number: the last printing
    assert printed["company"].words == (0, 1)  # a text: the first


def test_it_is_the_labelling_rule_itself_words_equal_a_labels_grounding():
    page = page_of([["SUBTOTAL", "50.00"], ["TAX", "0.00"], ["TOTAL", "50.00"], ["PAID", "50.00"]])
    fields = ["subtotal", "total"]
    paid = idx(page, "50.00", 2)
    sub = idx(page, "50.00", 0)
    # the model reads both amounts right, at the wrong printings
    lg = logits(len(page.words), 2, {(paid, 1): 3.0, (paid, 3): 2.0, (sub, 3): 1.0})
    span, printed = read(page, fields, lg)
    assert {span["subtotal"].text, span["total"].text} == {"50.00"}
    label = grounding.ground_answers(page, {"subtotal": "50.00", "total": "50.00"}, fields)
    for f in fields:  # exactly the words a label with these answers is grounded to
        assert printed[f].words == tuple(label[f]["words"])
    assert printed["total"].words == (idx(page, "50.00", 1),)
    assert printed["subtotal"].words == (sub,)
    assert not set(printed["subtotal"].words) & set(printed["total"].words)  # never the same words


def test_the_rule_is_called_not_copied(monkeypatch):
    page = page_of([["TOTAL", "3.00"], ["3.00"]])
    lg = logits(len(page.words), 1, {(2, 1): 2.0})
    calls = []

    def spy(p, answers, names):
        calls.append(dict(answers))
        return {n: {"status": "exact", "words": [1], "reason": "spy"} for n in names}

    from dxstudio.engine import extract

    assert extract._printing_rule is grounding.ground_answers  # handed down by grounding, not a copy
    monkeypatch.setattr(extract, "_printing_rule", spy)
    _, printed = read(page, ["total"], lg)
    assert calls == [{"total": "3.00"}] and printed["total"].words == (1,)


def test_a_value_printed_once_or_no_value_is_left_as_the_span_read_it():
    page = page_of([["DATE", "01/02/2019"], ["TOTAL", "7.00"]])
    lg = logits(len(page.words), 2, {(1, 1): 3.0})
    span, printed = read(page, ["date", "total"], lg)
    assert printed == span and printed["total"] is None
    # a value the rule cannot place (not on the page as read: a hand-made value) keeps its words
    odd = {"date": FieldValue((1,), "not on this page", 0.5), "total": None}
    assert printings_by_rule(page, ["date", "total"], odd) == odd
    assert printings_by_rule(page, ["date", "total"], {"date": None, "total": None}) == {"date": None, "total": None}


def test_bad_decoding_names_are_clear_errors():
    assert DECODINGS == ("span", "seed", "joint", "printing", "keyed", "keyed_learned", "keyed_layout")
    with pytest.raises(ValueError, match="decoding must be span, seed, joint, printing, keyed, keyed_learned or keyed_layout, not 'printed'"):
        check_decoding("printed")
    with pytest.raises(TuneError, match="setting decoding must be .*printing.*, not 'rule'"):
        resolve_settings({"decoding": "rule"})
    assert resolve_settings({"decoding": "printing"})["decoding"] == "printing"


def test_predict_page_and_a_stored_reading_say_printing():
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import check_thresholds
    from dxstudio.engine.extract import model_decoding, predict_page
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny", fields=("a", "b"))
    rt = to_runtime(new_params(cfg, 3))
    page = page_of([["Total", "12.50"], ["Date", "2019-03-01"], ["ACME", "12.50"]] * 3)
    span, printed = predict_page(cfg, rt, page, decoding="span"), predict_page(cfg, rt, page, decoding="printing")
    assert printed.decoding == "printing" and np.array_equal(span.tags, printed.tags)
    joint = predict_page(cfg, rt, page, decoding="joint")
    assert joint.decoding == "joint"
    assert printed.fields == printings_by_rule(page, ["a", "b"], joint.fields)
    assert model_decoding({"pooled": None, "fields": {}, "decoding": "printing"}) == "printing"
    assert check_thresholds({"pooled": None, "fields": {}, "decoding": "printing"}, ["a"])["decoding"] == "printing"
    with pytest.raises(ValueError, match="decoding 'x' is not span, seed, joint, printing, keyed, keyed_learned or keyed_layout"):
        check_thresholds({"pooled": None, "fields": {}, "decoding": "x"}, ["a"])


def test_the_reading_is_read_time_tune_trains_the_same_bytes(receipts_project, tmp_path):
    """A decoding-only change: the weights (and the checkpoint's) are the same bytes; only the
    held-out reading, its thresholds and the stored `decoding` differ."""
    from safetensors.numpy import load

    from dxstudio.engine.container import load_model, read_model_bytes
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun, evaluate_model

    tensors = {}
    for dec in ("span", "printing"):
        run = TuneRun.prepare(Project.open(receipts_project), tmp_path / dec, {"decoding": dec, "degree": 1})
        assert run.train()
        report = run.finish()
        assert report["decoding"] == dec and report["run"]["settings"]["decoding"] == dec
        loaded = load_model(tmp_path / dec / "model.safetensors")
        assert loaded.thresholds["decoding"] == dec
        tensors[dec] = {k: np.asarray(v) for k, v in loaded.params.items()}
        tensors[dec + "-checkpoint"] = load(read_model_bytes(tmp_path / dec / "checkpoint.safetensors"))
    assert tensors["span"].keys() == tensors["printing"].keys()
    for k in tensors["span"]:
        assert tensors["span"][k].tobytes() == tensors["printing"][k].tobytes(), k
    for k in tensors["span-checkpoint"]:
        assert tensors["span-checkpoint"][k].tobytes() == tensors["printing-checkpoint"][k].tobytes(), k
    # eval reads a model the way --decoding says and its report says which
    project = Project.open(receipts_project)
    rep = evaluate_model(tmp_path / "span" / "model.safetensors", project, overrides={"decoding": "printing"})
    assert rep["decoding"] == "printing"
    assert evaluate_model(tmp_path / "printing" / "model.safetensors", project)["decoding"] == "printing"
