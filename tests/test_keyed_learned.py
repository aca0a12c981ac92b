"""The "keyed_learned" decoding (engine/extract.py keyed_values' `alone` and `digits`, key_rules;
tuning/keywords.py keyed_counts): keyed, with rules learnt per field on the training pages: a
field whose labelled values were nearly always exactly the words after its key is read by the key
rule alone, one whose values nearly always hold a digit takes no keyed run without one.
Hand-made pages, targets and tag logits: no training."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.container import check_keywords, load_model, model_bytes
from dxstudio.engine.extract import (KEY_ALONE_MIN_PAGES, KEY_ALONE_SHARE, KEY_DIGIT_SHARE, FieldValue,
                                     ReadingKeywords, key_rules, keyed_values, predict_page, reading_keywords)
from dxstudio.tuning.keywords import keyed_counts, reading_record
from dxstudio.tuning.settings import TuneError, resolve_settings
from tests.test_keyed_decoding import FIELDS, MEMO, logits, page_of
from tests.test_keywords import targets

KW = {"date": frozenset({"date"}), "to": frozenset({"to"}), "from": frozenset({"from"})}


def test_a_field_read_by_its_key_alone_replaces_the_models_value_and_frees_its_words():
    page = page_of(MEMO)  # MEMO 0 | To: Ron Milstein From: Jane Doe | Date: May 1, 2000 | prose
    n = len(page.words)
    ron, mil, jane, doe = 2, 3, 5, 6
    whom = [w.text for w in page.words].index("whom")
    lg = logits(n, 3, {})
    # the model read "to" in the prose and "from" on to's keyed words
    values = {"date": None, "to": FieldValue((whom,), "whom", 0.9), "from": FieldValue((ron, mil), "Ron Milstein", 0.7)}
    keyed = keyed_values(page, FIELDS, values, lg, KW)
    assert keyed["to"].words == (whom,) and keyed["from"].words == (ron, mil)  # keyed: the wrong values block
    out = keyed_values(page, FIELDS, values, lg, KW, alone={"to"})
    assert out["to"].words == (ron, mil) and out["to"].text == "Ron Milstein"
    assert out["to"].confidence < 0.01  # the model's own (low) confidence of those words as to's
    # from's value lay on to's keyed words: dropped, and then filled from its own key
    assert out["from"].text == "Jane Doe" and out["date"].text == "May 1, 2000"
    # an alone field whose key is not printed keeps the model's value
    plain = page_of([["ACME"], ["TOTAL", "12.50"], ["Ron", "Milstein"]])
    v = {"date": None, "to": FieldValue((3, 4), "Ron Milstein", 0.9), "from": None}
    assert keyed_values(plain, FIELDS, v, logits(5, 3, {}), KW, alone={"to"}) == v
    # a value that starts at the key's run is the model's (keyed runs it on or not): not replaced
    at_key = {"date": None, "to": FieldValue((ron,), "Ron", 0.9), "from": None}
    assert keyed_values(page, FIELDS, at_key, lg, KW, alone={"to"})["to"].words == (ron,)
    # two alone fields never share a word; with no words after the keys nothing is read
    page2 = page_of([["To:", "From:"]])
    assert keyed_values(page2, FIELDS, {f: None for f in FIELDS}, logits(2, 3, {}), KW,
                        alone={"to", "from"}) == {f: None for f in FIELDS}


def test_a_field_of_a_digits_shape_takes_no_keyed_words_without_a_digit():
    page = page_of([["Date", "RECEIVED"], ["To:", "Ron"], ["Date:", "May", "1,", "2000"]])
    n = len(page.words)
    none = {f: None for f in FIELDS}
    assert keyed_values(page, FIELDS, none, logits(n, 3, {}), KW)["date"].text == "RECEIVED"  # keyed: the first run
    out = keyed_values(page, FIELDS, none, logits(n, 3, {}), KW, digits={"date"})
    assert out["date"].text == "May 1, 2000" and out["to"].text == "Ron"
    # the same shape for a field read alone: its first run with a digit
    wrong = {"date": FieldValue((3,), "Ron", 0.9), "to": None, "from": None}
    out = keyed_values(page, FIELDS, wrong, logits(n, 3, {}), KW, alone={"date"}, digits={"date"})
    assert out["date"].text == "May 1, 2000" and out["to"].text == "Ron"  # to's words freed, then filled
    only = page_of([["Date", "RECEIVED"]])
    assert keyed_values(only, FIELDS, none, logits(2, 3, {}), KW, digits={"date"}) == none


def test_the_keyed_counts_are_the_training_labels_that_are_exactly_the_words_after_the_key():
    page = page_of(MEMO)
    ron, mil, jane = 2, 3, 5
    right = targets(page, FIELDS, {"to": (ron, mil), "from": (jane,), "date": (8, 9, 10)})  # from cut short
    none = targets(page, FIELDS, {"to": (ron, mil)})  # no date, no from labelled: neither seen nor counted
    unscored = targets(page, FIELDS, {"to": (ron,), "date": (8,)})
    unscored.unscored.add("to")  # an unscored field is not counted
    plain = page_of([["ACME"], ["Ron", "Milstein"]])
    nokey = targets(plain, FIELDS, {"to": (1, 2)})  # no key printed: a value, not seen
    rows = [("a", page, right), ("b", page, none), ("c", page, unscored), ("d", plain, nokey)]
    counts = keyed_counts(FIELDS, rows, KW)
    # [hits, seen, digits, values, near, beside, colon, longer]: date (8..10 is its run; "May" alone is
    # not), to, from; near: a keyword beside or above the value ("ACME" over plain's "Ron" is none
    # of to's); beside: one among the three words before it on its row; colon: that key printed
    # with a colon (all of MEMO's; a bare key: test_keyed_layout's colon test); longer: the key part
    # of a longer one (grounding.after_part_of_a_key: "From:" does not open its piece of the row
    # here, where page_of spaces the words evenly, so "To: Ron Milstein From:" is its key)
    assert counts == [[1, 2, 1, 2, 2, 2, 2, 0], [2, 2, 0, 3, 2, 2, 2, 0], [0, 1, 0, 1, 1, 1, 1, 1]]
    assert key_rules(counts, FIELDS) == (frozenset(), frozenset())  # under KEY_ALONE_MIN_PAGES everywhere
    assert (KEY_ALONE_MIN_PAGES, KEY_ALONE_SHARE, KEY_DIGIT_SHARE) == (3, 0.8, 0.9)
    alone, digits = key_rules([[3, 3, 9, 10], [4, 5, 8, 10], [3, 5, 2, 2]], FIELDS)
    assert alone == frozenset({"date", "to"})  # 1.0 and 0.8 of the seen; 0.6 is not
    assert digits == frozenset({"date"})  # 0.9 of 10 values; 0.8 is not, nor 2 of 2 values (too few)
    assert key_rules(None, FIELDS) == (frozenset(), frozenset())
    assert key_rules(counts, FIELDS) == key_rules([c[:4] for c in counts], FIELDS)  # near is not theirs


def test_the_counts_are_stored_with_the_keywords_checked_and_read_back(tmp_path):
    stored = {"source": "learned", "fields": [["date"], ["to"], ["from"]],
              "keyed": [[3, 3, 4, 4], [1, 4, 0, 5], [0, 0, 0, 0]]}
    assert check_keywords(stored, FIELDS) == stored
    reading = reading_keywords(stored, FIELDS)
    assert isinstance(reading, ReadingKeywords) and reading.alone == frozenset({"date"})
    assert reading.digits == frozenset({"date"})
    assert reading == {"date": frozenset({"date"}), "to": frozenset({"to"}), "from": frozenset({"from"})}
    # keywords without counts (a model tuned before them): no field alone, keyed_learned reads as keyed
    old = reading_keywords({"source": "learned", "fields": [["date"], ["to"], ["from"]]}, FIELDS)
    assert old.alone == frozenset() and old.digits == frozenset()
    z = [0, 0, 0, 0]
    for bad in ([[3, 2, 0, 3], z, z], [[1, 1, 0, 1], z], [[1.0, 1, 0, 1], z, z], [[-1, 1, 0, 1], z, z],
                [[1, 1, 2, 1], z, z], [[1, 2, 0, 1], z, z], [[1, 1], z, z], "x",
                [[1, 1, 0, 1, 2], z + [0], z + [0]],  # near above values
                [[1, 1, 0, 1, 1], z, z]):  # counts of two lengths
        with pytest.raises(ValueError, match=r"keyed must be a list of 3 \[hits, seen, digits, values\]"):
            check_keywords({**stored, "keyed": bad}, FIELDS)
    with pytest.raises(ValueError, match="exactly source and fields"):
        check_keywords({**stored, "other": 1}, FIELDS)
    from dxstudio.engine.config import size_config
    from dxstudio.engine.params import new_params
    cfg = size_config("tiny", fields=tuple(FIELDS))
    params = new_params(cfg, 3)
    path = tmp_path / "m.safetensors"
    data = model_bytes(cfg, params, None, None, stored)
    path.write_bytes(data)
    assert load_model(path).keywords == stored
    assert model_bytes(cfg, params, None, None, stored) == data  # the same bytes again
    rec = reading_record("keyed_learned", stored, FIELDS)
    assert rec["alone"] == ["date"] and rec["digits"] == ["date"] and rec["source"] == "learned"
    assert "alone" not in reading_record("keyed", stored, FIELDS)


def decoding_setting_and_tiny_model(decoding: str, fields):
    """Checks that `decoding` is a setting whose misspelling (with '-') is refused naming it; then
    a tiny random model of `fields` (config, runtime params) to read pages with."""
    from dxstudio.engine.config import size_config
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.params import new_params

    assert resolve_settings({"decoding": decoding})["decoding"] == decoding
    with pytest.raises(TuneError, match="decoding"):
        resolve_settings({"decoding": decoding.replace("_", "-")}, None, source="dxproject.json")
    cfg = size_config("tiny", fields=tuple(fields))
    return cfg, to_runtime(new_params(cfg, 3))


def two_readings(cfg, rt, page, keywords: dict, alone, first: str, second: str):
    """The page read by the model with decodings `first` and `second` (keywords: a ReadingKeywords
    of these, with `alone`): each says its reading, and the tags are the same (only the values
    differ)."""
    reading = ReadingKeywords(keywords)
    reading.alone = frozenset(alone)
    a = predict_page(cfg, rt, page, decoding=first, keywords=reading)
    b = predict_page(cfg, rt, page, decoding=second, keywords=reading)
    assert (a.decoding, b.decoding) == (first, second) and np.array_equal(a.tags, b.tags)
    return a, b


def test_keyed_learned_is_a_setting_and_a_bad_value_is_named():
    cfg, rt = decoding_setting_and_tiny_model("keyed_learned", FIELDS)
    assert resolve_settings({})["decoding"] == "keyed_layout"  # the default since (docs/base-model.md)
    page = page_of(MEMO)
    keyed, alone = two_readings(cfg, rt, page, KW, {"to"}, "keyed", "keyed_learned")
    assert alone.fields["to"].text == "Ron Milstein"
    # with no field alone it is the keyed reading
    plain = predict_page(cfg, rt, page, decoding="keyed_learned", keywords=ReadingKeywords(KW))
    assert plain.fields == predict_page(cfg, rt, page, decoding="keyed", keywords=ReadingKeywords(KW)).fields
