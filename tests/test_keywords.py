"""A field's keywords for the "printing" reading (tuning/keywords.py, setting `keywords`): from its
name split into words, its description, and the printed words beside or above its labelled values
on the run's training pages. Hand-made pages for the reading; the tiny model for the run."""
from __future__ import annotations


import numpy as np
import pytest

from dxstudio import grounding
from dxstudio.engine.container import ModelFileError, check_keywords, load_model, model_bytes
from dxstudio.engine.extract import fields_from_logits, printings_by_rule, reading_keywords
from dxstudio.engine.page import Page, Word
from dxstudio.grounding import PageTargets, description_keywords, name_keywords
from dxstudio.project import Field, Project
from dxstudio.tuning import TuneRun
from dxstudio.tuning import run as run_mod
from dxstudio.tuning.evaluation import evaluate_model
from dxstudio.tuning.keywords import field_keywords
from dxstudio.tuning.settings import TuneError, resolve_settings
from tests.conftest import rename_project_fields

RENAMES = {"total": "to_pay", "cash": "wibble"}  # names no generic class matches; "to_pay" is not printed


def page_of(rows, pid="p"):
    """rows: lists of word texts, one list per printed row (reading order: row by row)."""
    words = []
    for r, texts in enumerate(rows):
        for k, t in enumerate(texts):
            words.append(Word(t, (10 + 60 * k, 10 + 20 * r, 60 + 60 * k, 25 + 20 * r)))
    return Page(pid, 400, 20 * len(rows) + 20, tuple(words))


def idx(page, text, nth=0):
    return [i for i, w in enumerate(page.words) if w.text == text][nth]


def read(page, fields, likes, keywords=None):
    """The printing reading of hand-made tag logits (likes {(word, tag): logit})."""
    lg = np.full((len(page.words), 1 + 2 * len(fields)), -4.0, np.float32)
    lg[:, 0] = 0.0
    for (i, t), v in likes.items():
        lg[i, t] = v
    return printings_by_rule(page, fields, fields_from_logits(page, fields, lg, joint=True), keywords)


def targets(page, fields, words):
    tags = np.zeros(len(page.words), np.int64)
    for c, f in enumerate(fields):
        for k, w in enumerate(words.get(f, ())):
            tags[w] = 1 + 2 * c if k == 0 else 2 + 2 * c
    return PageTargets(page.id, tags, {f: tuple(words.get(f, ())) for f in fields})


def test_a_fields_name_is_split_into_words_and_abbreviations_read():
    assert name_keywords("to_pay") == {"pay", "topay"}
    assert name_keywords("invoiceNum") >= {"invoice", "number", "no"}
    assert name_keywords("contract_no") >= {"contract", "number", "no"}
    assert name_keywords("TotalAMT") >= {"total", "amount"}
    assert name_keywords("store-addr") >= {"store", "address"}
    assert name_keywords("tel") >= {"tel", "phone", "telephone"}
    assert name_keywords("when") == set()  # a stop word names nothing
    assert description_keywords("the amount to pay, as printed") == {"amount", "pay"}
    # a word that is exactly another field's name names that field: "total" is not sub_total's
    kw = field_keywords([Field("sub_total"), Field("total")], [], "schema")
    assert kw["fields"] == [sorted({"sub", "subtotal"}), ["total"]]


def test_a_custom_named_total_reads_after_its_description_or_its_learnt_label_not_its_last_printing():
    page = page_of([["ACME", "STORE"], ["TEA", "12.50"], ["TOTAL", "12.50"], ["CHANGE", "12.50"]])
    tea, total, change = (idx(page, "12.50", k) for k in range(3))
    likes = {(tea, 1): 5.0}  # the model reads the amount right, at the item line
    # the seed's rule: "to_pay" is not printed, so a number goes to its last printing (wrong)
    assert read(page, ["to_pay"], likes)["to_pay"].words == (change,)
    # the schema's description names it
    schema = [Field("to_pay", "the total amount to pay")]
    kw = field_keywords(schema, [], "schema")
    assert "total" in kw["fields"][0]
    assert read(page, ["to_pay"], likes, reading_keywords(kw, ["to_pay"]))["to_pay"].words == (total,)
    # no description: the training pages teach it (labelled right of TOTAL, never of CHANGE)
    train = []
    for k in range(4):
        p = page_of([["SHOP", str(k)], ["TOTAL", f"{k}.50"], ["CHANGE", f"{k}.50"], ["PAID", "AMOUNT", f"{k}.50"]],
                    f"t{k}")
        train.append((p.id, p, targets(p, ["to_pay"], {"to_pay": (idx(p, f"{k}.50", 0),)})))
    kw = field_keywords([Field("to_pay")], train, "learned")
    assert "total" in kw["fields"][0] and "change" not in kw["fields"][0] and "paid" not in kw["fields"][0]
    assert read(page, ["to_pay"], likes, reading_keywords(kw, ["to_pay"]))["to_pay"].words == (total,)


def test_a_label_above_its_value_is_learnt_and_read_and_the_name_rule_never_looks_above():
    page = page_of([["12/03/2019", "REF", "77"], ["Delivery", "date"], ["12/03/2019"]])
    first, second = idx(page, "12/03/2019", 0), idx(page, "12/03/2019", 1)
    likes = {(first, 1): 5.0}
    # the seed's rule: a text value's first printing (the label above is not looked at)
    assert read(page, ["shipped_on"], likes)["shipped_on"].words == (first,)
    g = grounding.ground_answers(page, {"date": "12/03/2019"}, ["date"])
    assert g["date"]["words"] == [first]  # not even under its own name: the rule is the seed's
    train = []
    for k in range(3):
        v = f"0{k + 1}/04/2020"
        p = page_of([[v, "REF", str(k)], ["Delivery", "date"], [v]], f"t{k}")
        train.append((p.id, p, targets(p, ["shipped_on"], {"shipped_on": (idx(p, v, 1),)})))
    kw = field_keywords([Field("shipped_on")], train, "learned")
    assert "delivery" in kw["fields"][0]  # the word over the value ("date" is over nothing of it)
    assert read(page, ["shipped_on"], likes, reading_keywords(kw, ["shipped_on"]))["shipped_on"].words == (second,)


def test_a_word_beside_every_printing_of_the_value_is_not_learnt():
    train = []
    for k in range(5):
        p = page_of([["TOTAL", "AMOUNT", f"{k}.25"], ["PAID", "AMOUNT", f"{k}.25"]], f"t{k}")
        train.append((p.id, p, targets(p, ["to_pay"], {"to_pay": (idx(p, f"{k}.25", 0),)})))
    kw = field_keywords([Field("to_pay")], train, "learned")["fields"][0]
    assert "total" in kw and "amount" not in kw  # beside the other printing as often: no evidence
    # a word seen beside the value on one page only is not kept
    one = field_keywords([Field("to_pay")], train[:1], "learned")["fields"][0]
    assert "total" not in one


@pytest.fixture
def custom_project(receipts_project):
    rename_project_fields(receipts_project, RENAMES)
    return receipts_project


def test_keywords_are_learnt_from_the_training_pages_only_for_a_fold_too(custom_project, tiny_base, tmp_path,
                                                                          monkeypatch):
    seen = []
    real = run_mod.field_keywords

    def spy(schema, pages, source):
        seen.append(sorted(p for p, _, _ in pages))
        return real(schema, pages, source)

    monkeypatch.setattr(run_mod, "field_keywords", spy)
    run = TuneRun.prepare(Project.open(custom_project), tmp_path / "r", {"epochs": 1}, model_path=tiny_base)
    assert run.heldout_pages and seen[-1] == sorted(p for p, _, _ in run.train_pages)
    assert set(seen[-1]).isdisjoint(p for p, _, _ in run.heldout_pages)
    assert run.keywords["source"] == "learned"
    assert run.keywords == real(Project.open(custom_project).schema, run.train_pages, "learned")
    fold = TuneRun.prepare(Project.open(custom_project), tmp_path / "f", {"epochs": 1}, model_path=tiny_base,
                           fold=(0, 2))
    assert seen[-1] == sorted(p for p, _, _ in fold.train_pages)
    assert set(seen[-1]).isdisjoint(p for p, _, _ in fold.heldout_pages)


def test_the_model_stores_its_keywords_the_reports_say_which_and_eval_can_read_the_old_way(
        custom_project, tiny_base, tmp_path):
    # the printing reading: under keyed (and keyed_learned, keyed_layout, the default) the keywords also fill values, so the
    # held-out reading (and its thresholds) differ between the sources, not only the stored keywords
    s = {"epochs": 1, "checkpoint_every": 2, "decoding": "printing"}
    one = TuneRun.prepare(Project.open(custom_project), tmp_path / "one", {**s, "degree": 1}, model_path=tiny_base)
    assert one.train()
    rep = one.finish()
    model = tmp_path / "one" / "model.safetensors"
    loaded = load_model(model)
    assert loaded.keywords == one.keywords and loaded.keywords["source"] == "learned"
    # with the keyed counts of the training pages (keyed_learned's rules), one per field
    assert len(loaded.keywords["keyed"]) == len(loaded.cfg.fields)
    assert all(c[0] <= c[1] <= c[3] and c[2] <= c[3] for c in loaded.keywords["keyed"])
    assert rep["keywords"]["source"] == "learned" and set(rep["keywords"]["fields"]) == set(loaded.cfg.fields)
    two = TuneRun.prepare(Project.open(custom_project), tmp_path / "two", {**s, "degree": 2}, model_path=tiny_base)
    assert two.train()
    two.finish()
    assert (tmp_path / "two" / "model.safetensors").read_bytes() == model.read_bytes()  # any degree
    # the name rule stores nothing: the bytes of a model from before the setting, the same weights
    old = TuneRun.prepare(Project.open(custom_project), tmp_path / "old", {**s, "keywords": "name"},
                          model_path=tiny_base)
    assert old.fingerprint == one.fingerprint  # the reading never changes the weights
    assert old.train()
    old.finish()
    o = load_model(tmp_path / "old" / "model.safetensors")
    assert o.keywords is None
    np.testing.assert_array_equal(o.params["tag_head.weight"], loaded.params["tag_head.weight"])
    assert model_bytes(loaded.cfg, loaded.params, loaded.summary, loaded.thresholds) == \
        (tmp_path / "old" / "model.safetensors").read_bytes()
    project = Project.open(custom_project)
    by_name = evaluate_model(model, project, overrides={"keywords": "name"})
    assert by_name["keywords"]["source"] == "name" and by_name["keywords"]["fields"]["to_pay"] == ["pay", "topay"]
    assert evaluate_model(model, project)["keywords"]["source"] == "learned"  # the model's own
    assert evaluate_model(model, project, overrides={"keywords": "schema"})["keywords"]["source"] == "schema"
    assert evaluate_model(model, project, overrides={"decoding": "joint"})["keywords"] is None  # not used
    learned = evaluate_model(model, project, overrides={"decoding": "keyed_learned"})
    assert learned["decoding"] == "keyed_learned" and {"alone", "digits"} <= set(learned["keywords"])
    layout = evaluate_model(model, project, overrides={"decoding": "keyed_layout"})
    assert layout["decoding"] == "keyed_layout" and layout["keywords"]["alone"] == learned["keywords"]["alone"]
    with pytest.raises(TuneError, match="stores no learnt keywords"):
        evaluate_model(tmp_path / "old" / "model.safetensors", project, overrides={"keywords": "learned"})


def test_a_bad_keywords_value_is_named():
    with pytest.raises(TuneError, match="keywords"):
        resolve_settings({"keywords": "nearby"}, None, source="dxproject.json")
    with pytest.raises(ValueError, match="keywords must be one of"):
        field_keywords([Field("a")], [], "nearby")
    with pytest.raises(ValueError, match="source"):
        check_keywords({"source": "name", "fields": [[]]}, ["a"])
    with pytest.raises(ValueError, match="field 'a'"):
        check_keywords({"source": "learned", "fields": [["x", "x"]]}, ["a"])


def test_a_model_file_with_malformed_keywords_is_refused_naming_them(tiny_base, tmp_path):
    import json
    import struct

    data = tiny_base.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"]["keywords"] = json.dumps({"source": "learned", "fields": "total"})
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    with pytest.raises(ModelFileError, match="stored keywords are malformed"):
        load_model(bad)
