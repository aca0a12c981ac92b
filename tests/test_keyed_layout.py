"""The "keyed_layout" decoding (grounding.keyed_extents' `layout`, engine/extract.py keyed_values'
`layout`): keyed_learned, with the words after a key read on over the next rows that start where
they start (an address, a list of names in columns), a run stopping where the reading order goes
back left on its row. Hand-made pages and tag logits: no training."""
from __future__ import annotations

import pytest

from dxstudio import grounding
from dxstudio.engine.extract import (DECODINGS, KEYED_DECODINGS, LEARNED_DECODINGS, FieldValue, ReadingKeywords,
                                     keyed_reading, keyed_values, reading_keywords)
from dxstudio.engine.page import Page, Word
from dxstudio.tuning.keywords import reading_record
from dxstudio.tuning.settings import resolve_settings
from tests.test_keyed_decoding import logits
from tests.test_keyed_learned import decoding_setting_and_tiny_model, two_readings

FIELDS = ["to", "from", "cc"]
KW = {"to": frozenset({"to"}), "from": frozenset({"from"}), "cc": frozenset({"cc"})}


def page_at(rows):
    """rows: lists of (text, column) printed on one row each, in reading order; column c starts
    at x = 10 + 60 c (words 50 wide, 15 high), rows 20 apart."""
    words = [Word(t, (10 + 60 * c, 10 + 20 * r, 60 + 60 * c, 25 + 20 * r))
             for r, row in enumerate(rows) for t, c in row]
    return Page("p", 800, 20 * len(rows) + 20, tuple(words))


def texts(page, run):
    return " ".join(page.words[i].text for i in range(run[0], run[1] + 1))


ADDRESS = [[("TO:", 0), ("LORILLARD,", 1), ("INC.", 2)],
           [("ONE", 1), ("PARK", 2), ("AVENUE", 3)],
           [("NEW", 1), ("YORK", 2)],
           [("FROM:", 0), ("Bob", 1)]]


def test_a_keyed_run_goes_on_over_the_rows_that_start_where_it_starts_up_to_a_key():
    page = page_at(ADDRESS)
    rows = grounding.keyed_extents(page, FIELDS, KW)
    assert [texts(page, r) for r in rows["to"]] == ["LORILLARD, INC."]  # keyed: the key's row
    runs = grounding.keyed_extents(page, FIELDS, KW, layout=True)
    assert [texts(page, r) for r in runs["to"]] == ["LORILLARD, INC. ONE PARK AVENUE NEW YORK"]
    assert [texts(page, r) for r in runs["from"]] == ["Bob"]  # "FROM:" starts at the key's x: not a row of to's
    # a list of names in columns: the rows are taken to their ends across the gap
    cc = page_at([[("CC:", 0), ("V.", 1), ("LOSITO", 2), ("M.", 5), ("TAHMASEB", 6)],
                  [("G.", 1), ("BAROODY", 2), ("L.", 5), ("STEVENS", 6)]])
    assert [texts(cc, r) for r in grounding.keyed_extents(cc, FIELDS, KW)["cc"]] == ["V. LOSITO"]
    assert [texts(cc, r) for r in grounding.keyed_extents(cc, FIELDS, KW, layout=True)["cc"]] == \
        ["V. LOSITO M. TAHMASEB G. BAROODY L. STEVENS"]


def test_rows_that_do_not_start_under_the_value_or_lie_far_below_are_not_read_on():
    other = page_at([[("TO:", 0), ("Ron", 1)], [("FAX", 0), ("555", 1)]])  # the next row starts at the key
    assert [texts(other, r) for r in grounding.keyed_extents(other, FIELDS, KW, layout=True)["to"]] == ["Ron"]
    keyed_next = page_at([[("TO:", 0), ("Ron", 1)], [("cc:", 1), ("Ann", 2)]])  # a key first on the next row
    runs = grounding.keyed_extents(keyed_next, FIELDS, KW, layout=True)
    assert [texts(keyed_next, r) for r in runs["to"]] == ["Ron"] and [texts(keyed_next, r) for r in runs["cc"]] == ["Ann"]
    far = Page("p", 800, 200, (Word("TO:", (10, 10, 60, 25)), Word("Ron", (70, 10, 120, 25)),
                               Word("Smith", (70, 60, 120, 75))))  # 35 units (2.3 heights) below: another block
    assert [texts(far, r) for r in grounding.keyed_extents(far, FIELDS, KW, layout=True)["to"]] == ["Ron"]
    # the reading order back to the left on the key's row (another column): the run stops there
    back = page_at([[("TO:", 2), ("Ron", 3), ("MEMO", 0)]])
    assert [texts(back, r) for r in grounding.keyed_extents(back, FIELDS, KW)["to"]] == ["Ron MEMO"]
    assert [texts(back, r) for r in grounding.keyed_extents(back, FIELDS, KW, layout=True)["to"]] == ["Ron"]


def test_keyed_values_with_layout_fill_and_run_on_over_the_rows():
    page = page_at(ADDRESS)
    n = len(page.words)
    none = {f: None for f in FIELDS}
    lg = logits(n, 3, {})
    assert keyed_values(page, FIELDS, none, lg, KW)["to"].text == "LORILLARD, INC."
    out = keyed_values(page, FIELDS, none, lg, KW, layout=True)
    assert out["to"].text == "LORILLARD, INC. ONE PARK AVENUE NEW YORK" and out["to"].words == tuple(range(1, 8))
    assert out["to"].confidence < 0.01  # the model's own confidence of those words as to's: low
    assert out["from"].text == "Bob" and out["cc"] is None
    # a value the model cut short runs on over the rows while it reads each word as not clearly O
    cut = {"to": FieldValue((1, 2), "LORILLARD, INC.", 0.9), "from": None, "cc": None}
    assert keyed_values(page, FIELDS, cut, lg, KW, layout=True)["to"].words == (1, 2)  # I- far below O: stops
    likes = {(w, 2): 0.0 for w in range(3, 8)}  # I-to (field 0's I- is tag 2) level with O
    run_on = keyed_values(page, FIELDS, cut, logits(n, 3, likes), KW, layout=True)
    assert run_on["to"].words == tuple(range(1, 8))


def test_keyed_layout_is_a_setting_the_default_and_reads_as_keyed_learned_plus_rows():
    assert "keyed_layout" in DECODINGS and "keyed_layout" in KEYED_DECODINGS and "keyed_layout" in LEARNED_DECODINGS
    cfg, rt = decoding_setting_and_tiny_model("keyed_layout", FIELDS)
    assert resolve_settings({})["decoding"] == "keyed_layout"  # the default (docs/base-model.md)
    page = page_at(ADDRESS)
    learned, layout = two_readings(cfg, rt, page, KW, {"to"}, "keyed_learned", "keyed_layout")
    assert learned.fields["to"].text == "LORILLARD, INC."  # read by its key alone, on the key's row
    assert layout.fields["to"].text == "LORILLARD, INC. ONE PARK AVENUE NEW YORK"
    # keyed_reading is the one place the readings' rules are chosen (predict_page, the baseline)
    lg = logits(len(page.words), 3, {})
    none = {f: None for f in FIELDS}
    reading = ReadingKeywords(KW)
    reading.alone = frozenset({"to"})
    assert keyed_reading(page, FIELDS, none, lg, reading, "fast", "keyed_layout") == \
        keyed_values(page, FIELDS, none, lg, reading, alone={"to"}, layout=True)
    # a report of the reading says which fields its learnt rules took, as keyed_learned's
    stored = {"source": "learned", "fields": [["to"], ["from"], ["cc"]], "keyed": [[3, 3, 0, 3], [0, 0, 0, 1], [0, 0, 0, 0]]}
    rec = reading_record("keyed_layout", stored, FIELDS)
    assert rec["alone"] == ["to"] and rec["digits"] == [] and rec["near"] == []  # four counts: no near field
    assert {k: v for k, v in rec.items() if k not in ("near", "inside", "colon", "longer")} == \
        reading_record("keyed_learned", stored, FIELDS)


def test_a_field_named_where_it_is_printed_takes_no_model_value_without_its_key():
    from dxstudio.engine.extract import KEY_NEAR_SHARE, near_keys
    from dxstudio.engine.container import check_keywords

    page = page_at([[("MEMO", 0)], [("To:", 0), ("Ron", 1), ("Smith", 2)], [("dear", 0), ("Ann", 1)],
                    [("cc", 3)], [("Bob", 3)]])
    ron, ann, bob = 2, 5, 7
    assert grounding.keyword_near(page, ron, {"to"})  # "To:" before it on its row
    assert not grounding.keyword_near(page, ann, {"to"})  # "dear" is no key of to's; "Ron" above is no key
    assert grounding.keyword_near(page, bob, {"cc"})  # "cc" on the row just above, over it
    lg = logits(len(page.words), 3, {})
    wrong = {"to": FieldValue((ann,), "Ann", 0.9), "from": FieldValue((ann,), "Ann", 0.9), "cc": None}
    out = keyed_values(page, FIELDS, wrong, lg, KW, layout=True, near={"to"})
    assert out["to"].text == "Ron Smith"  # the model's "Ann" is dropped, then the key fills
    assert out["from"].text == "Ann"  # from is not a near field: its value stays
    assert keyed_values(page, FIELDS, wrong, lg, KW, layout=True)["to"].text == "Ann"  # no near field
    kept = {"to": FieldValue((ron,), "Ron", 0.9), "from": None, "cc": FieldValue((bob,), "Bob", 0.9)}
    assert keyed_values(page, FIELDS, kept, lg, KW, layout=True, near={"to", "cc"})["cc"].text == "Bob"
    # learnt: values >= 3 and near >= KEY_NEAR_SHARE of them; four numbers (an older model): none
    assert KEY_NEAR_SHARE == 0.8
    assert near_keys([[0, 0, 0, 5, 4], [0, 0, 0, 5, 3], [0, 0, 0, 2, 2]], FIELDS) == frozenset({"to"})
    assert near_keys([[0, 0, 0, 5], [0, 0, 0, 5], [0, 0, 0, 2]], FIELDS) == frozenset() == near_keys(None, FIELDS)
    stored = {"source": "learned", "fields": [["to"], ["from"], ["cc"]],
              "keyed": [[0, 3, 0, 4, 4], [0, 0, 0, 4, 1], [0, 0, 0, 1, 1]]}  # to: near, not alone
    assert check_keywords(stored, FIELDS) == stored
    reading = reading_keywords(stored, FIELDS)
    assert reading.near == frozenset({"to"}) and reading.alone == frozenset()
    assert reading_record("keyed_layout", stored, FIELDS)["near"] == ["to"]
    assert "near" not in reading_record("keyed_learned", stored, FIELDS)
    # keyed_reading hands the near fields to keyed_layout only
    assert keyed_reading(page, FIELDS, wrong, lg, reading, "fast", "keyed_layout")["to"].text == "Ron Smith"
    assert keyed_reading(page, FIELDS, wrong, lg, reading, "fast", "keyed_learned")["to"].text == "Ann"


def test_a_near_field_is_read_after_its_key_alone_not_after_a_longer_key():
    from dxstudio.engine.extract import FieldValue as FV

    # "MESSAGE TO:" (the keyword does not open its piece of the row) and "TO TRAVEL TO IS:" style
    # keys (words between the keyword and the value) are other questions than "To:"
    page = page_at([[("MESSAGE", 0), ("TO:", 1), ("Ann", 2)], [("To:", 0), ("Ron", 1)],
                    [("DATE", 0), ("TO", 1), ("NYO:", 2), ("Bob", 3)]])
    ann, ron, bob = 2, 4, 8
    assert grounding.after_part_of_a_key(page, ann, {"to"})  # "MESSAGE" right before "TO:"
    assert not grounding.after_part_of_a_key(page, ron, {"to"})  # "To:" opens its row
    assert grounding.after_part_of_a_key(page, bob, {"to"})  # "NYO:" between "TO" and the value
    assert not grounding.after_part_of_a_key(page, bob, {"cc"})  # no keyword of the field at all
    # a keyword far right of the word before it opens its piece of the row (another column)
    apart = page_at([[("MEMO", 0), ("TO:", 3), ("Ann", 4)]])
    assert not grounding.after_part_of_a_key(apart, 2, {"to"})
    # a key of several of the field's own keywords, or numbered, is the field's key alone
    own = page_at([[("Start", 0), ("Date:", 1), ("1/2/20", 2)], [("1.", 0), ("Date:", 1), ("3/4/20", 2)]])
    assert not grounding.after_part_of_a_key(own, 2, {"start", "date"})
    assert grounding.after_part_of_a_key(own, 2, {"date"})  # "Start" is no keyword of this field
    assert not grounding.after_part_of_a_key(own, 5, {"date"})
    lg = logits(len(page.words), 3, {})
    none = {f: None for f in FIELDS}
    # a near field: the runs after the longer keys are none of its; the model's "Ann" is dropped
    assert keyed_values(page, FIELDS, none, lg, KW, layout=True, near={"to"})["to"].text == "Ron"
    wrong = {"to": FV((ann,), "Ann", 0.9), "from": None, "cc": None}
    assert keyed_values(page, FIELDS, wrong, lg, KW, layout=True, near={"to"})["to"].text == "Ron"
    read_alone = keyed_values(page, FIELDS, none, lg, KW, alone={"to"}, layout=True, near={"to"})
    assert read_alone["to"].text == "Ron"  # read by its key alone: its first run after "To:" alone
    only_longer = page_at([[("MESSAGE", 0), ("TO:", 1), ("Ann", 2)]])
    assert keyed_values(only_longer, FIELDS, none, logits(3, 3, {}), KW, layout=True, near={"to"})["to"] is None
    # not a near field (or not keyed_layout): read as before, the first run
    assert keyed_values(page, FIELDS, none, lg, KW, layout=True)["to"].text == "Ann"
    assert keyed_values(page, FIELDS, wrong, lg, KW, layout=True)["to"].text == "Ann"


def test_a_field_read_inside_its_keyed_run_is_filled_with_the_span_the_model_reads_best():
    from dxstudio.engine.extract import KEY_INSIDE_SHARE, inside_keys

    page = page_at([[("TO:", 0), ("SALES", 1), ("GST", 2), ("6%", 3), ("RM", 4), ("23.60", 5)]])
    sales, rm, amount = 1, 4, 5
    none = {f: None for f in FIELDS}
    # the model reads no value; of the run's words it scores "23.60" best as B-to (tag 1), below O
    # all the same; "SALES" higher still, but a span without a digit is never taken
    lg = logits(len(page.words), 3, {(amount, 1): -1.0, (sales, 1): -0.5})
    assert keyed_values(page, FIELDS, none, lg, KW, layout=True)["to"].text == "SALES GST 6% RM 23.60"
    inside = keyed_values(page, FIELDS, none, lg, KW, layout=True, inside={"to"})["to"]
    assert inside.text == "23.60" and inside.words == (amount,)
    two = logits(len(page.words), 3, {(rm, 1): 3.0, (amount, 2): 3.0})  # "RM" B-to, "23.60" I-to
    assert keyed_values(page, FIELDS, none, two, KW, layout=True, inside={"to"})["to"].text == "RM 23.60"
    # a value the model reads stays its own (only a fill is read inside the run)
    own = {"to": FieldValue((sales,), "SALES", 0.9), "from": None, "cc": None}
    assert keyed_values(page, FIELDS, own, lg, KW, layout=True, inside={"to"})["to"].text == "SALES"
    # learnt: a digit field (digits >= 0.9 of 3 or more values) whose keyed run was its value on
    # fewer than half of the 3 or more pages printing it
    assert KEY_INSIDE_SHARE == 0.5
    counts = [[1, 6, 5, 5, 0], [3, 6, 5, 5, 0], [1, 6, 0, 5, 0]]  # to: inside; from: 3 of 6 hits; cc: no digits
    assert inside_keys(counts, FIELDS) == frozenset({"to"})
    assert inside_keys([[0, 2, 5, 5, 0]] + counts[1:], FIELDS) == frozenset()  # printed on 2 pages only
    assert inside_keys(None, FIELDS) == frozenset()
    stored = {"source": "learned", "fields": [["to"], ["from"], ["cc"]], "keyed": counts}
    reading = reading_keywords(stored, FIELDS)
    assert reading.inside == frozenset({"to"})
    assert reading_record("keyed_layout", stored, FIELDS)["inside"] == ["to"]
    assert "inside" not in reading_record("keyed_learned", stored, FIELDS)
    # keyed_reading hands the inside fields to keyed_layout only
    assert keyed_reading(page, FIELDS, none, lg, reading, "fast", "keyed_layout")["to"].text == "23.60"
    assert keyed_reading(page, FIELDS, none, lg, reading, "fast", "keyed_learned")["to"].text == "SALES GST 6% RM 23.60"


def test_a_field_keyed_with_a_colon_is_keyed_only_where_its_keyword_is_printed_with_one():
    from dxstudio.engine.container import check_keywords
    from dxstudio.engine.extract import KEY_COLON_SHARE, colon_keys
    from dxstudio.tuning.keywords import keyed_counts
    from tests.test_keywords import targets

    page = page_at([[("To", 0), ("whom", 1), ("are", 2), ("we", 3), ("talking?", 4)],
                    [("From:", 0), ("Ann", 1), ("to", 2), ("Bob", 3)],
                    [("To:", 0), ("Ron", 1), ("Smith", 2)]])
    whom, ann, bob, ron = 1, 6, 8, 10
    runs = grounding.keyed_extents(page, FIELDS, KW, layout=True)
    assert [texts(page, r) for r in runs["to"]] == ["whom are we talking?", "Ron Smith"]
    colon = grounding.keyed_extents(page, FIELDS, KW, layout=True, colon={"to"})
    assert [texts(page, r) for r in colon["to"]] == ["Ron Smith"]  # the bare "To" opening a row is no key
    # a bare keyword still ends another field's run ("From: Ann" stops at "to"), and a field not
    # keyed with a colon keeps its bare keys
    assert [texts(page, r) for r in colon["from"]] == [texts(page, r) for r in runs["from"]] == ["Ann"]
    assert grounding.keyed_extents(page, FIELDS, KW, layout=True, colon={"from"})["to"] == runs["to"]
    # the reading: a fill after the bare "To" where the model reads no value, none with the rule
    none = {f: None for f in FIELDS}
    lg = logits(len(page.words), 3, {})
    assert keyed_values(page, FIELDS, none, lg, KW, layout=True)["to"].text == "whom are we talking?"
    assert keyed_values(page, FIELDS, none, lg, KW, layout=True, colon={"to"})["to"].text == "Ron Smith"
    # a value the model reads after a bare key stays its own (the rule moves keyed runs only)
    own = {"to": FieldValue((whom,), "whom", 0.9), "from": None, "cc": None}
    assert keyed_values(page, FIELDS, own, lg, KW, layout=True, colon={"to"})["to"].text == "whom"
    # the key beside a value, and whether it is printed with a colon (":" as a word of its own too)
    assert grounding.key_beside(page, whom, {"to"}) == 0 and not grounding.key_with_colon(page, whom, {"to"})
    assert grounding.key_with_colon(page, ron, {"to"}) and grounding.key_with_colon(page, ann, {"from"})
    assert grounding.key_beside(page, bob, {"from"}) == ann - 1  # three words before "Bob"
    assert grounding.key_beside(page, whom + 3, {"to"}) is None  # "To" is four words before "talking?"
    spaced = page_at([[("DATE", 0), (":", 1), ("18/03/18", 2)]])
    assert grounding.key_with_colon(spaced, 2, {"date"})
    # counted over the training labels: beside (a key among the three words before), colon
    names = ["to", "from"]
    rows = [("a", page, targets(page, names, {"to": (ron, ron + 1), "from": (ann,)})),
            ("b", page, targets(page, names, {"to": (whom,), "from": (bob,)}))]
    assert [c[5:7] for c in keyed_counts(names, rows, {"to": {"to"}, "from": {"from"}})] == [[2, 1], [2, 2]]
    # learnt: beside >= 3 and colon >= KEY_COLON_SHARE of them; five numbers (an older model): none
    assert KEY_COLON_SHARE == 0.9
    counts = [[0, 0, 0, 5, 5, 4, 4], [0, 0, 0, 5, 5, 4, 3], [0, 0, 0, 5, 5, 2, 2]]  # 1.0; 0.75; too few
    assert colon_keys(counts, FIELDS) == frozenset({"to"})
    assert colon_keys([c[:5] for c in counts], FIELDS) == frozenset() == colon_keys(None, FIELDS)
    stored = {"source": "learned", "fields": [["to"], ["from"], ["cc"]], "keyed": counts}
    assert check_keywords(stored, FIELDS) == stored
    for bad in ([0, 0, 0, 5, 5, 4, 5], [0, 0, 0, 5, 5, 6, 4]):  # colon above beside, beside above values
        with pytest.raises(ValueError, match=r"0 <= colon <= beside <= values"):
            check_keywords({**stored, "keyed": [bad] + counts[1:]}, FIELDS)
    reading = reading_keywords(stored, FIELDS)
    assert reading.colon == frozenset({"to"})
    assert reading_record("keyed_layout", stored, FIELDS)["colon"] == ["to"]
    assert "colon" not in reading_record("keyed_learned", stored, FIELDS)
    # keyed_reading hands the colon fields to keyed_layout only
    assert keyed_reading(page, FIELDS, none, lg, reading, "fast", "keyed_layout")["to"].text == "Ron Smith"
    assert keyed_reading(page, FIELDS, none, lg, reading, "fast", "keyed_learned")["to"].text == "whom are we talking?"


def test_a_field_whose_values_follow_longer_keys_keeps_them_there():
    """Receipts print their total after "Grand Total": learnt from the labels (the eighth keyed
    count, `longer`), such a near field's value after a longer key stays its own (the rule of
    "MESSAGE TO:" dropped every total of the bundled sample's receipts after "Grand Total")."""
    from dxstudio.engine.container import check_keywords
    from dxstudio.engine.extract import FieldValue as FV, longer_keys, reading_keywords
    from dxstudio.tuning.keywords import keyed_counts

    page = page_at([[("Sub", 0), ("Total", 1), ("10.00", 2)], [("Grand", 0), ("Total", 1), ("12.00", 2)]])
    assert grounding.after_part_of_a_key(page, 5, {"total"})  # "Grand" is no keyword of total
    kw = {"total": frozenset({"total"})}
    value = {"total": FV((5,), "12.00", 0.99)}
    lg = logits(len(page.words), 1, {})
    assert keyed_values(page, ["total"], value, lg, kw, layout=True, near={"total"})["total"] is None  # as before
    kept = keyed_values(page, ["total"], value, lg, kw, layout=True, near={"total"}, longer={"total"})
    assert kept["total"].words == (5,)
    # the count: the training values after a longer key of which a keyword is only a part
    from types import SimpleNamespace
    t = SimpleNamespace(field_words={"total": [5]}, unscored=set())
    counts = keyed_counts(["total"], [("p", page, t)], kw)
    assert len(counts[0]) == 8 and counts[0][7] == 1 and counts[0][5] == 1
    # the rule's field: at least KEY_LONGER_MIN values and KEY_LONGER_SHARE of those with a key beside
    assert longer_keys([[0, 0, 0, 40, 35, 20, 0, 2]], ["total"]) == {"total"}
    assert longer_keys([[0, 0, 0, 40, 35, 20, 0, 1]], ["total"]) == frozenset()  # one: FUNSD's date
    assert longer_keys([[0, 0, 0, 40, 35, 31, 0, 3]], ["total"]) == frozenset()  # under a tenth of 31
    assert longer_keys([[0, 0, 0, 40, 35, 31, 0, 4]], ["total"]) == {"total"}
    assert longer_keys([[0, 0, 0, 40, 35, 31, 0]], ["total"]) == frozenset()  # seven counts: as before
    stored = {"source": "learned", "fields": [["total"]], "keyed": [[0, 0, 0, 40, 35, 31, 0, 12]]}
    assert reading_keywords(check_keywords(stored, ["total"]), ["total"]).longer == {"total"}
    with pytest.raises(ValueError, match="longer <= beside"):
        check_keywords({"source": "learned", "fields": [["total"]], "keyed": [[0, 0, 0, 40, 35, 31, 0, 32]]}, ["total"])
