import numpy as np
import pytest

from dxstudio.engine.page import Page, Word
from dxstudio.grounding import (Excluded, PageTargets, canonical_number, ground_value, page_targets,
                                project_targets, word_key)
from dxstudio.project import LabelError, LabelFile, Project


def page_of(*texts, pid="p"):
    words = tuple(Word(t, (10.0 * i, 0.0, 10.0 * i + 9, 10.0)) for i, t in enumerate(texts))
    return Page(pid, 1000.0, 100.0, words)


RECEIPT = page_of("ACME", "Store", "SDN", "BHD", "Date:", "25/12/2018",
                  "Tea", "3.50", "Cake", "9.00", "TOTAL", "RM", "12.50", "CASH", "20.00", "CHANGE", "7.50")


def labels(answers=None, fixes=None, state="unreviewed", reason=None, pid="p"):
    review = {"state": state, "fixes": fixes or {}, "history": []}
    if reason:
        review["reason"] = reason
    if answers is not None:  # the labelling model is asked for every field: one left out is null
        answers = {**{f: None for f in FIELDS}, **answers}
    return LabelFile(pid, answers, "llm" if answers is not None else None, {}, review)


# -- numbers and normalization ---------------------------------------------------------------

@pytest.mark.parametrize("text, canon", [
    ("1,234.50", "1234.5"), ("1234.50", "1234.5"), ("1234,50", "1234.5"), ("1.234,50", "1234.5"),
    ("75,000", "75000"), ("75.000", "75000"), ("1,591,600", "1591600"), ("9.00", "9"), ("9", "9"),
    ("0.50", "0.5"), ("007", None), ("25.12.2018", None), ("1,2,3", None), ("abc", None), ("1.2.3,4", None),
])
def test_canonical_number(text, canon):
    assert canonical_number(text) == canon


def test_word_key_normalizes_case_unicode_edges_and_currency():
    assert word_key("Ｔｏｔａｌ:") == "total"  # NFKC full-width, edge punctuation, case
    assert word_key("RM12.50") == "12.5" and word_key("$1,234.50") == "1234.5"
    assert word_key("RM") == "" and word_key(":") == ""
    assert word_key("(JOHOR)") == "johor"


# -- statuses ---------------------------------------------------------------------------------

def test_exact():
    g = ground_value(RECEIPT, "ACME  Store SDN BHD")  # white space inside a value does not matter
    assert (g.status, g.words) == ("exact", (0, 1, 2, 3))
    assert ground_value(RECEIPT, "25/12/2018").words == (5,)


def test_normalized_case_punctuation_and_number_format():
    g = ground_value(RECEIPT, "acme store sdn bhd.")
    assert (g.status, g.words) == ("normalized", (0, 1, 2, 3))
    assert ground_value(RECEIPT, "RM 12.50").words == (11, 12)  # printed so: exact
    g = ground_value(RECEIPT, "RM12.50")  # the currency word is not part of the label
    assert (g.status, g.words) == ("normalized", (12,))
    assert ground_value(page_of("Total", "RM12.50"), "12.50").words == (1,)
    assert ground_value(RECEIPT, "12,50").words == (12,)
    assert ground_value(page_of("Total", "1,234.50"), "1234.50").words == (1,)
    # OCR glued two words: found ignoring punctuation
    g = ground_value(page_of("BOOK", "TA", ".K(TAMAN", "DAYA)"), "BOOK TA .K (TAMAN DAYA)")
    assert (g.status, g.words) == ("normalized", (0, 1, 2, 3))
    assert "punctuation" in g.reason


def test_computed_values_are_never_labelled():
    g = ground_value(RECEIPT, "16.00")  # 12.50 + 3.50, printed nowhere
    assert g.status == "computed" and g.words == () and "3.5 + 12.5" in g.reason
    assert ground_value(RECEIPT, "31.50").status == "computed"  # 9.00 x 3.50
    page = page_of("a", "1.00", "b", "2.00", "c", "4.00", "d", "8.00")
    assert ground_value(page, "15.00").status == "computed"  # the sum of every amount


def test_absent_and_null():
    g = ground_value(RECEIPT, "Globex")
    assert g.status == "absent" and "'Globex' is not on the page" in g.reason
    assert ground_value(RECEIPT, "1000.01").status == "absent"
    assert ground_value(RECEIPT, None).status == "null"
    assert ground_value(RECEIPT, "   ").status == "null"
    g = ground_value(RECEIPT, "--")
    assert g.status == "null" and "no words" in g.reason


def test_several_occurrences_rule():
    page = page_of("Tea", "9.00", "Total", "9.00", "Cash", "9.00", "Shop", "Tea")
    g = ground_value(page, "9.00")
    assert g.words == (5,) and "3 occurrences, took the last" in g.reason  # numbers: the last
    assert ground_value(page, "9.00", prefer="first").words == (1,)
    assert ground_value(page, "Tea").words == (0,)  # text: the first
    assert ground_value(page, "Tea", prefer="last").words == (7,)
    # a run just after the field's name on the same row wins over the others
    g = ground_value(page, "9.00", field="total")
    assert g.words == (5,) and "2 after the field's name, took the last" in g.reason
    two_rows = Page("p", 100.0, 100.0, (Word("Total", (0, 0, 9, 10)), Word("9.00", (10, 0, 19, 10)),
                                        Word("Cash", (0, 20, 9, 30)), Word("9.00", (10, 20, 19, 30)),
                                        Word("Change", (0, 40, 9, 50)), Word("0.00", (10, 40, 19, 50))))
    g = ground_value(two_rows, "9.00", field="total")
    assert g.words == (1,) and "1 after the field's name" in g.reason
    assert ground_value(two_rows, "9.00", field="cash").words == (3,)
    assert ground_value(two_rows, "9.00", field="total_amount").words == (1,)  # a part of the name
    assert ground_value(two_rows, "9.00", field="vendor").words == (3,)  # no name: the last


# -- targets ------------------------------------------------------------------------------------

FIELDS = ["vendor", "date", "total"]


def test_tags_b_then_i_and_o_elsewhere():
    t = page_targets(RECEIPT, labels({"vendor": "ACME Store SDN BHD", "date": "25/12/2018", "total": "12.50"}), FIELDS)
    assert isinstance(t, PageTargets) and t.tags.dtype == np.int64 and len(t.tags) == len(RECEIPT.words)
    expect = np.zeros(len(RECEIPT.words), dtype=np.int64)
    expect[0], expect[1:4] = 1, 2  # vendor = class 0
    expect[5] = 3  # date = class 1
    expect[12] = 5  # total = class 2
    assert t.tags.tolist() == expect.tolist()
    assert t.field_words == {"vendor": (0, 1, 2, 3), "date": (5,), "total": (12,)}
    assert t.unscored == set()


def test_computed_and_null_fields_are_no_value():
    t = page_targets(RECEIPT, labels({"vendor": None, "date": "25/12/2018", "total": "16.00"}), FIELDS)
    assert t.field_words == {"vendor": (), "date": (5,), "total": ()}
    assert t.tags.tolist().count(0) == len(RECEIPT.words) - 1 and t.unscored == set()


def test_absent_value_excludes_the_page_with_the_reason():
    t = page_targets(RECEIPT, labels({"vendor": "Globex", "date": "25/12/2018", "total": "12.50"}), FIELDS)
    assert isinstance(t, Excluded) and "vendor" in t.reason and "Globex" in t.reason


def test_non_contiguous_words_are_ignored_and_unscored():
    t = page_targets(RECEIPT, labels({"total": "12.50"}, fixes={"vendor": [0, 2]}), FIELDS)
    assert t.tags[0] == -1 and t.tags[2] == -1 and t.tags[1] == 0
    assert t.unscored == {"vendor"} and t.tags[12] == 5


def test_a_word_claimed_by_two_fields():
    t = page_targets(RECEIPT, labels({"date": "25/12/2018"}, fixes={"vendor": [4, 5]}), FIELDS)
    assert t.unscored == {"vendor", "date"}
    assert t.tags[4] == -1 and t.tags[5] == -1 and (t.tags >= 0).sum() == len(RECEIPT.words) - 2


def test_fixes_override_the_model_and_rescue_an_absent_value():
    lf = labels({"vendor": "Globex", "date": "25/12/2018", "total": "9.00"}, fixes={"vendor": [0, 1], "total": []})
    t = page_targets(RECEIPT, lf, FIELDS)
    assert t.field_words == {"vendor": (0, 1), "date": (5,), "total": ()}
    assert t.tags[:2].tolist() == [1, 2] and t.tags[9] == 0


def test_review_exclusion_and_unlabelled_pages():
    lf = labels({"total": "12.50"}, state="excluded", reason="a photo of a cat")
    assert page_targets(RECEIPT, lf, FIELDS) == Excluded("a photo of a cat")
    assert page_targets(RECEIPT, labels(None), FIELDS) == Excluded("not labelled yet")
    t = page_targets(RECEIPT, labels(None, state="accepted", fixes={"total": [12]}), FIELDS)
    assert t.field_words["total"] == (12,) and t.field_words["vendor"] == ()


def test_max_words_window():
    lf = labels({"vendor": "ACME Store SDN BHD", "total": "12.50"})
    t = page_targets(RECEIPT, lf, FIELDS, max_words=10)
    assert t.unscored == {"total"}
    assert t.tags[10:].tolist() == [-1] * (len(RECEIPT.words) - 10)
    assert t.tags[:4].tolist() == [1, 2, 2, 2]
    # a value cut by the window edge: not scored, all of its words ignored
    t = page_targets(RECEIPT, lf, FIELDS, max_words=2)
    assert t.unscored == {"vendor", "total"} and (t.tags == -1).all()


def test_bad_word_index_names_the_label_file():
    with pytest.raises(LabelError, match=r"labels/p\.json: the fix of 'total' names word 99"):
        page_targets(RECEIPT, labels({}, fixes={"total": [99]}), FIELDS)


def test_project_targets_reports_and_goes_on(tmp_path):
    p = Project.create(tmp_path / "proj", "t", FIELDS)
    for pid in ("good", "gone", "broken", "new"):
        p.add_page(page_of(*[w.text for w in RECEIPT.words], pid=pid))
    from dxstudio.labelling import apply_answers
    apply_answers(p, "good", {"vendor": "ACME Store SDN BHD", "total": "12.50"}, "llm")
    apply_answers(p, "gone", {"vendor": "Globex"}, "llm")
    p.label_path("broken").write_text("{")
    r = project_targets(p)
    assert [k for k, _, _ in r.kept] == ["good"]
    assert dict(r.excluded) == {"gone": "vendor: 'Globex' is not on the page", "new": "not labelled yet"}
    assert r.errors[0][0] == "broken" and "labels/broken.json" in r.errors[0][1]
    s = r.summary()
    assert s["kept"] == 1 and s["excluded_by_reason"] == {"vendor absent": 1, "not labelled yet": 1}
    assert "only one usable page (good; 2 excluded, 1 unreadable)" in r.not_trainable_reason()
    empty = Project.create(tmp_path / "empty", "e", FIELDS)
    assert "no usable page" in project_targets(empty).not_trainable_reason()
    apply_answers(p, "new", {"total": "12.50"}, "llm")
    assert project_targets(p).not_trainable_reason() is None


def test_fields_grounded_together_do_not_share_words():
    from dxstudio.grounding import ground_answers

    def row(y, *texts):
        return [Word(t, (10.0 * i, y, 10.0 * i + 9, y + 10)) for i, t in enumerate(texts)]
    page = Page("p", 200.0, 100.0, tuple(row(0, "Subtotal", "50,000") + row(20, "Service", "0")
                                         + row(40, "Grand", "Total", "50,000") + row(60, "Paid", "50,000")))
    answers = {"subtotal": "50,000", "total": "50,000", "cash": "50,000"}
    report = ground_answers(page, answers, ["subtotal", "total", "cash"])
    words = {f: tuple(g["words"]) for f, g in report.items()}
    # subtotal and total follow their names; cash, named nowhere, would take the last
    # occurrence anyway; had it been taken, it moves to a free one
    assert words == {"subtotal": (1,), "total": (6,), "cash": (8,)}
    page2 = Page("p", 200.0, 100.0, tuple(row(0, "Subtotal", "50,000") + row(40, "Total", "50,000")))
    report = ground_answers(page2, {"subtotal": "50,000", "total": "50,000", "cash": "50,000"},
                            ["subtotal", "total", "cash"])
    # three fields, two occurrences, both claimed by their names: cash stays on a shared word
    assert report["cash"]["words"] == [3] and report["total"]["words"] == [3]
    report = ground_answers(page2, {"vendor": "50,000", "total": "50,000"}, ["vendor", "total"])
    assert report["vendor"]["words"] == [1] and "moved off words another field uses" in report["vendor"]["reason"]
    # a value with one occurrence claimed by two fields stays put: both unscored
    page = page_of("Total", "9.00")
    report = ground_answers(page, {"total": "9.00", "cash": "9.00"}, ["total", "cash"])
    t = page_targets(page, LabelFile("p", {"total": "9.00", "cash": "9.00"}, "llm", report), ["total", "cash"])
    assert t.unscored == {"total", "cash"} and t.tags.tolist() == [0, -1]


# -- OCR text (dxstudio/ocr.py): case, spacing and misread characters ----------------------------

def _ocr_page(text: str):
    from dxstudio.engine.page import Page, Word

    return Page("ocr", 1000, 100, tuple(Word(t, (i * 10.0, 0.0, i * 10.0 + 9, 10.0))
                                        for i, t in enumerate(text.split())))


OCR_RECEIPT = ("tan woon yann BOOKTA .K(TAMAN DAYA)SDN BHD NO.5: 55,57& 59,JALAN SAGU 18 TAM AN DAYA. "
               "8110OJOHOR BAHRU JOHOR. Date: 25/12/20 18 Total: 9.00")


def test_ocr_case_and_spacing_are_normalized():
    """What an OCR engine does to a receipt's words (lower case, spaces dropped or added inside
    a value): the value is still found, on exactly its words."""
    page = _ocr_page(OCR_RECEIPT)
    g = ground_value(page, "TAN WOON YANN")
    assert (g.status, g.words) == ("normalized", (0, 1, 2))
    g = ground_value(page, "BOOK TA .K (TAMAN DAYA) SDN BHD")  # "BOOKTA", "DAYA)SDN": spaces moved
    assert (g.status, g.words) == ("normalized", (3, 4, 5, 6))
    g = ground_value(page, "25/12/2018")  # split in two by the OCR: "25/12/20" "18"
    assert (g.status, g.words) == ("normalized", (19, 20))


def test_ocr_misread_characters_are_forgiven_in_long_text_values_only():
    page = _ocr_page(OCR_RECEIPT)
    # "NO.5:" for "NO.53" (one edit) and "8110O" for "81100" (a look-alike, no edit) in 55 characters
    g = ground_value(page, "NO.53 55,57 & 59, JALAN SAGU 18, TAMAN DAYA, 81100 JOHOR BAHRU, JOHOR.")
    assert g.status == "normalized" and g.words == tuple(range(7, 18))
    assert "1 character(s) read differently" in g.reason
    # a number is never matched loosely: 8.00 is not 9.00
    assert ground_value(page, "8.00", field="total").status == "absent"
    # nor a short text, nor one with more differences than one in eight characters
    assert ground_value(_ocr_page("SAM SAN TRADING"), "SAM SAM").status == "absent"
    assert ground_value(page, "NO.99 11,22 & 33, JALAN BATU 18, TAMAN DAYA").status == "absent"


def test_ocr_joined_words_hold_a_value():
    """A date the OCR ran into the time ("03Mar201818:22"): the word is labelled when the value
    is most of it; a value lost in a long word, or a number, is not."""
    page = _ocr_page("UNIHAKKA SDN BHD 03Mar201818:22 Total 8.20 GSTREG000858195584")
    g = ground_value(page, "03 MAR 2018")
    assert (g.status, g.words) == ("normalized", (3,)) and "the date runs on into the time" in g.reason
    g = ground_value(_ocr_page("K3-113.JLIBRAHIMSULAN 80300JOHORBAHRU JOHOR"), "JOHOR BAHRU")
    assert (g.status, g.words) == ("normalized", (1,)) and "joined" in g.reason
    # never cutting a number: 07-04-20 is not the start of 07-04-2019
    assert ground_value(_ocr_page("Date 07-04-2019 10:30"), "07-04-20").status == "absent"
    assert ground_value(page, "000858", field="gst").status == "absent"  # 6 of 17 characters
    assert ground_value(_ocr_page("Total 18.20"), "8.20", field="total").status == "absent"


# -- the OCR tiers, one category of failure each (SROIE receipts read by rapidocr, docs/ocr.md) --

def test_ocr_lookalike_characters_are_one_in_text_values():
    """L0T for LOT, 433O0 for 43300, 5/B for S/B, Ja1an for Jalan: a letter read as the digit it
    looks like (or back) is no difference in a text value, punctuation ignored."""
    page = _ocr_page("MR. D.I.Y. L0T 1851-A & 1851-B, JALAN KPB 6, 433O0 SERI KEMBANGAN 99 SPEED MART 5/B "
                     "No.2, Ja1an Temenggung Total 8.10")
    g = ground_value(page, "LOT 1851-A & 1851-B, JALAN KPB 6, 43300 SERI KEMBANGAN")
    assert (g.status, g.words) == ("normalized", tuple(range(2, 12))) and "look-alike" in g.reason
    assert ground_value(page, "99 SPEED MART S/B").words == (12, 13, 14, 15)
    assert ground_value(page, "NO.2, JALAN TEMENGGUNG").words == (16, 17, 18)


def test_ocr_lookalikes_never_make_a_different_number_or_short_text():
    """Each look-alike class holds one digit: 43300 is never 48300 or 43800; a number is never
    matched through look-alikes (8.10 is not 8.1O... nor B.10), nor a text shorter than four."""
    page = _ocr_page("L0T 48300 SERI 8.I0 S0 TOTAL B.10 10-0l-18 L0T 1851-A")
    assert ground_value(page, "LOT 43300").status == "absent"  # under ten characters: no edit forgiven
    assert ground_value(page, "LOT 43800").status == "absent"
    assert ground_value(page, "LOT 1851-A").words == (8, 9)
    assert ground_value(page, "8.10", field="total").status == "absent"
    assert ground_value(page, "SO").status == "absent"  # two characters: no look-alike reading
    assert ground_value(page, "10-01-18").words == (7,)  # a date is text: 0l is 01
    assert ground_value(page, "10-01-16").status == "absent"  # but 8 is never 6


def test_ocr_fuzzy_start_may_be_misread():
    """The first letter of a long value misread (Henara for Menara) still starts a run; a value
    with more differences than one in eight characters is still not found."""
    page = _ocr_page("Dion Realties Henara Dian #02-03, Level 2, 27, Jalan Sultan Isnail, 50250 KualaLunpur. Tel")
    g = ground_value(page, "MENARA DION #02-03, LEVEL 2, 27, JALAN SULTAN ISMAIL, 50250 KUALA LUMPUR.")
    assert (g.status, g.words) == ("normalized", tuple(range(2, 13))) and "4 character(s)" in g.reason
    assert ground_value(page, "MERANA DIAN #02-03, LEVEL 2, 27, JALAN SUTLAN IMSAIL, 50250 KUALA LUMPUR.").status == "absent"


def test_ocr_currency_code_after_the_number():
    """5.00RM, 1.50RH (RM misread): the number is the value; a code with no number left, or a
    number that differs, is not."""
    page = _ocr_page("Pay parking 1.50RH Total anount 5.00RM A4RM")
    assert ground_value(page, "1.50", field="total").words == (2,)
    assert ground_value(page, "5.00", field="total").words == (5,)
    assert ground_value(page, "1.5O", field="total").status == "absent"
    assert ground_value(page, "4", field="total").status == "absent"  # A4RM is no amount
    assert ground_value(page, "50", field="total").status == "absent"  # 1.50RH is not 150 nor 50


def test_ocr_value_in_another_order():
    """Two boxes on one tilted row put a line of the value after the next: the same words in
    another order, nothing else among them, are the value (at least three pieces)."""
    page = _ocr_page("LIGHTROOM GALLERY No: 28,JALAN ASTANA 1C, KLANG SELANGOR D.E, MALAYSIA BANDAR BUKIT "
                     "RAJA, 41050 ROC No.: 1072825-A")
    g = ground_value(page, "NO: 28, JALAN ASTANA 1C, BANDAR BUKIT RAJA, 41050 KLANG SELANGOR D.E, MALAYSIA")
    assert (g.status, g.words) == ("normalized", tuple(range(2, 14))) and "another order" in g.reason
    # a word missing, or one more, or a word twice: not the value
    assert ground_value(page, "NO: 28, JALAN ASTANA 1C, BANDAR BUKIT RAJA, 41050 KLANG SELANGOR, MALAYSIA "
                              "JOHOR").status == "absent"
    assert ground_value(page, "NO: 28, JALAN ASTANA 1C, BANDAR BUKIT RAJA, 41050 KLANG KLANG SELANGOR D.E, "
                              "MALAYSIA").status == "absent"
    assert ground_value(_ocr_page("SDN BHD AIK"), "AIK SDN BHD X").status == "absent"


def test_ocr_value_between_punctuation_in_a_joined_word():
    """MYNEWSRETAILSB(306295-X)FKA: the value is the whole piece before the parenthesis even
    though it is under 60% of the word; a value cut inside a piece is not."""
    page = _ocr_page("TQ myNEWS.cOm MYNEWSRETAILSB(306295-X)FKA BISON")
    g = ground_value(page, "MYNEWS RETAIL SB")
    assert (g.status, g.words) == ("normalized", (2,)) and "between punctuation" in g.reason
    assert ground_value(page, "MYNEWS RETAIL").status == "absent"  # ends inside the piece
    assert ground_value(page, "306295", field="gst").status == "absent"  # a number: never


def test_ocr_date_run_on_into_the_time():
    """01-03-185:23:26 for 01-03-18 at 5:23; Date:25-03-201809: 42 for 25-03-2018 at 09:42; a
    date followed by anything but a time, or a two-digit year that may be half of 2018, is not."""
    page = _ocr_page("Date 01-03-185:23:26 PM Date:25-03-201809: 42: 19AM 07-04-2019 12-05-20181")
    assert ground_value(page, "01-03-18").words == (1,)
    g = ground_value(page, "25-03-2018")
    assert g.words == (3,) and "runs on into the time" in g.reason
    assert ground_value(page, "07-04-20").status == "absent"  # 07-04-2019 is not 07-04-20
    assert ground_value(page, "12-05-2018").status == "absent"  # 12-05-20181: no time follows
    assert ground_value(_ocr_page("25-03-2018: 10:30"), "25-03-20").status == "absent"
    assert ground_value(_ocr_page("01-03-1185:23"), "01-03-18").status == "absent"  # not at the start
    g = ground_value(_ocr_page("UNIHAKKA BHD 19 Mar201818: 26 (867388.U)"), "19 MAR 2018")  # over two words
    assert g.words == (2, 3)
    assert ground_value(_ocr_page("Date: 25-03-201809: 42"), "25-03-2018").words == (1,)  # not "Date:"
