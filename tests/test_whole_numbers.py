"""The "keyed_layout" reading's whole numbers: a value that ends on the first piece of a number the
OCR split into words ("8/" "7/" "87", "2" "/15" "/90") runs on over the rest of it (extract.py
whole_numbers; docs/base-model.md "A number split into words")."""
from __future__ import annotations

import pytest

import dxstudio.grounding  # noqa: F401  (hands the keyed rules to the engine)
from dxstudio.engine.extract import FieldValue, _splits_a_number, keyed_values
from dxstudio.engine.page import Page, Word
from tests.test_keyed_decoding import logits


def row(*texts, y=10, x=10, width=30, gap=6):
    """Words on one row, `gap` apart (words 15 high)."""
    out = []
    for t in texts:
        out.append(Word(t, (x, y, x + width, y + 15)))
        x += width + gap
    return out


@pytest.mark.parametrize("a, b, joined", [
    ("8/", "7/", True), ("7/", "87", True), ("2", "/15", True), ("/15", "/90", True), ("12-", "05", True),
    ("10:", "30", True), ("3,", "1998", True), ("12.", "50", True),
    ("3,", "19", False),      # "," only before a year
    ("Inc.", "5", False),     # no digit before the "."
    ("87", "STUDY", False), ("12", "34", False), ("8/", "x7", False), ("2", "/", False), ("2", "-x", False),
    ("-", "5", False), ("", "5", False)])
def test_two_words_are_pieces_of_one_number_by_their_characters(a, b, joined):
    wa, wb = row(a, b)
    assert _splits_a_number(wa, wb) is joined


def test_pieces_on_another_row_or_far_apart_are_not_one_number():
    a, b = row("8/", "7/")
    assert _splits_a_number(a, b)
    below = Word("7/", (b.box[0], 40, b.box[2], 55))
    assert not _splits_a_number(a, below)
    far = Word("7/", (a.box[2] + 16, 10, a.box[2] + 46, 25))  # more than one word height (15) right
    assert not _splits_a_number(a, far)
    near = Word("7/", (a.box[2] + 15, 10, a.box[2] + 45, 25))  # exactly one height: still one number
    assert _splits_a_number(a, near)


PAGE = Page("p", 800, 100, tuple(row("APPROVALS", "DATE", "8/", "7/", "87", "STUDY", "DIRECTOR")))
KW = {"date": frozenset({"date"}), "name": frozenset({"director"})}


def test_a_date_cut_short_runs_on_over_its_pieces_in_keyed_layout_only():
    n = len(PAGE.words)
    cut = {"date": FieldValue((2, 3), "8/ 7/", 0.9), "name": None}
    lg = logits(n, 2, {(2, 1): 3.0, (3, 2): 3.0})  # B-date at "8/", I-date at "7/"; "87" read O
    out = keyed_values(PAGE, ["date", "name"], cut, lg, KW, layout=True)
    assert out["date"].words == (2, 3, 4) and out["date"].text == "8/ 7/ 87"
    assert out["date"].confidence < 0.01  # "87" was read O: the value's confidence says so
    assert keyed_values(PAGE, ["date", "name"], cut, lg, KW)["date"].words == (2, 3)  # keyed_learned: as read
    # a whole value stays as it is
    whole = {"date": FieldValue((2, 3, 4), "8/ 7/ 87", 0.9), "name": None}
    assert keyed_values(PAGE, ["date", "name"], whole, lg, KW, layout=True)["date"].words == (2, 3, 4)


def test_the_pieces_after_a_value_are_not_taken_from_another_field():
    page = Page("p", 800, 100, tuple(row("Date", "2", "/15", "/90", "Ref")))
    n = len(page.words)
    values = {"date": FieldValue((1,), "2", 0.8), "ref": FieldValue((3,), "/90", 0.7)}
    out = keyed_values(page, ["date", "ref"], values, logits(n, 2, {(1, 1): 3.0}),
                       {"date": frozenset({"date"}), "ref": frozenset({"ref"})}, layout=True)
    assert out["date"].words == (1, 2)  # "/90" is ref's
    assert out["ref"].words == (3,)
