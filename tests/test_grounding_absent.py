"""A value grounding does not find: the page policy (the tuning setting absent_value).

"ignore" (the setting's default since the eighth round of docs/ocr.md) keeps a page whose other
values are found when one text value is not (a stamp read into an address line), that field
unscored on it and the rows where it may be printed ignored by the loss; "exclude" (the seed's
rule, still a setting, and page_targets' own default) leaves the page out (docs/project.md)."""
import pytest

from dxstudio.engine.page import Page, Word
from dxstudio.grounding import (ABSENT_MIN_FOUND, ABSENT_POLICIES, Excluded, page_targets, possible_words,
                                project_targets)
from dxstudio.project import LabelFile, Project

FIELDS = ["company", "date", "address", "total"]


def rows_page(*rows, pid="p"):
    """A page of rows of words, each row 20 px below the last, words 60 px apart."""
    words = []
    for r, texts in enumerate(rows):
        for i, t in enumerate(texts.split()):
            words.append(Word(t, (60.0 * i, 20.0 * r, 60.0 * i + 50, 20.0 * r + 12)))
    return Page(pid, 1000.0, 20.0 * len(rows) + 20, tuple(words))


# receipt 028 of SROIE as rapidocr read it: the first address line under a PAID stamp
STAMPED = rows_page(
    "99 SPEED MART S/B (519537-X)",   # row 0: company
    "AIT PAID",                       # row 1: "LOT P.T. 2811, JALAN ANGSA," under the stamp
    "TAMAN BERKELEY",                 # row 2
    "41150 KLANG, SELANGOR",          # row 3
    "1076-IJOK",                      # row 4
    "GST ID. NO : 000181747712",      # row 5
    "10:43AM 568582 24-01-18",        # row 6: date
    "GARBAGE BAG 1.25",               # row 7
    "Total Sales 2.50",               # row 8: total
    "Thank you KLANG",                # row 9: a piece of the address far from it
)
ANSWERS = {"company": "99 SPEED MART S/B", "date": "24-01-18",
           "address": "LOT P.T. 2811, JALAN ANGSA, TAMAN BERKELEY 41150 KLANG, SELANGOR 1076-IJOK",
           "total": "2.50"}


def labels(answers, pid="p"):
    return LabelFile(pid, {**{f: None for f in FIELDS}, **answers}, "llm", {},
                     {"state": "unreviewed", "fixes": {}, "history": []})


def words_of_rows(page, *rows):
    """The indices of the words on the given rows (rows_page's layout)."""
    return [i for i, w in enumerate(page.words) if round(w.box[1] / 20) in rows]


def test_a_page_with_one_text_value_not_found_is_excluded_by_page_targets_default():
    t = page_targets(STAMPED, labels(ANSWERS), FIELDS)
    assert isinstance(t, Excluded) and "address" in t.reason
    assert page_targets(STAMPED, labels(ANSWERS), FIELDS, absent="exclude") == t


def test_ignore_keeps_the_page_with_the_field_unscored_and_its_rows_ignored():
    t = page_targets(STAMPED, labels(ANSWERS), FIELDS, absent="ignore")
    assert not isinstance(t, Excluded)
    assert t.unscored == {"address"} and t.field_words["address"] == ()
    tags = t.tags.tolist()
    # the other fields are taught as before
    assert [tags[i] for i in t.field_words["company"]] == [1, 2, 2, 2]
    assert [tags[i] for i in t.field_words["date"]] == [3]
    assert [tags[i] for i in t.field_words["total"]] == [7]
    # the address's rows (2-4 hold its pieces), and one row above and below: the stamped line
    # (row 1) and row 5; not the company's words on row 0, which keep their tags
    ignored = [i for i, v in enumerate(tags) if v == -1]
    assert ignored == words_of_rows(STAMPED, 1, 2, 3, 4, 5)
    # the rest is O, the lone KLANG of the footer too (outside the cluster of the address's pieces)
    assert all(tags[i] == 0 for i in words_of_rows(STAMPED, 7, 9))
    assert tags[words_of_rows(STAMPED, 6)[0]] == 0  # 10:43AM, before the date


def test_without_the_policy_the_same_page_would_have_taught_the_address_as_o():
    exact = dict(ANSWERS, address="TAMAN BERKELEY 41150 KLANG, SELANGOR 1076-IJOK")
    t = page_targets(STAMPED, labels(exact), FIELDS, absent="ignore")  # found: nothing ignored
    assert t.unscored == set() and -1 not in t.tags.tolist()
    assert len(t.field_words["address"]) == 6


def test_near_misses_still_exclude_the_page():
    # two values not found
    two = dict(ANSWERS, company="GLOBEX TRADING SDN BHD")
    assert isinstance(page_targets(STAMPED, labels(two), FIELDS, absent="ignore"), Excluded)
    # a number not found: where a misread total is cannot be told
    number = dict(ANSWERS, address="TAMAN BERKELEY 41150 KLANG, SELANGOR 1076-IJOK", total="7.90")
    t = page_targets(STAMPED, labels(number), FIELDS, absent="ignore")
    assert isinstance(t, Excluded) and "total" in t.reason
    # too few other values found (ABSENT_MIN_FOUND): company found, date and total null
    few = {"company": "99 SPEED MART S/B", "address": ANSWERS["address"]}
    assert ABSENT_MIN_FOUND == 2
    assert isinstance(page_targets(STAMPED, labels(few), FIELDS, absent="ignore"), Excluded)
    assert not isinstance(page_targets(STAMPED, labels(dict(few, date="24-01-18")), FIELDS, absent="ignore"),
                          Excluded)
    # a text value none of whose pieces is on the page
    elsewhere = dict(ANSWERS, address="NO 5 JALAN PUDU 55100 KUALA LUMPUR")
    assert isinstance(page_targets(STAMPED, labels(elsewhere), FIELDS, absent="ignore"), Excluded)


def test_possible_words_are_the_densest_cluster_of_the_values_pieces():
    rows = possible_words(STAMPED, ANSWERS["address"])
    assert list(rows) == words_of_rows(STAMPED, 1, 2, 3, 4, 5)
    # a misread piece (one edit in five characters or more) and look-alikes still count
    misread = rows_page("SHOP NAME", "TAMRN BERKELEY", "4115O KLANG")
    assert list(possible_words(misread, "TAMAN BERKELEY 41150 KLANG")) == words_of_rows(misread, 0, 1, 2)
    # pieces under three characters say nothing; a number is never placed
    assert possible_words(rows_page("NO 5", "SHOP"), "NO 5") == ()
    assert possible_words(STAMPED, "2.50") == ()
    assert possible_words(rows_page(), "TAMAN BERKELEY") == ()


def test_a_bad_policy_is_refused_by_name():
    with pytest.raises(ValueError, match="absent must be one of exclude, ignore, not 'drop'"):
        page_targets(STAMPED, labels(ANSWERS), FIELDS, absent="drop")


def test_the_setting_offers_the_policies_and_refuses_another():
    from dxstudio.tuning.settings import DEFAULTS, SETTINGS, TuneError, resolve_settings

    row = next(r for r in SETTINGS if r.name == "absent_value")
    assert row.choices == ABSENT_POLICIES and DEFAULTS["absent_value"] == "ignore"
    assert resolve_settings({})["absent_value"] == "ignore"
    assert resolve_settings({}, command="eval")["absent_value"] == "ignore"
    assert resolve_settings({"absent_value": "exclude"})["absent_value"] == "exclude"  # the seed's rule
    assert "eval" in row.commands and row.fingerprinted
    with pytest.raises(TuneError, match="setting absent_value must be exclude or ignore, not 'keep'"):
        resolve_settings({"absent_value": "keep"})


def test_the_setting_reaches_the_pages_a_run_uses(tmp_path):
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import TuneError, resolve_settings

    from dxstudio.labelling import apply_answers

    project = Project.create(tmp_path / "proj", "t", FIELDS)
    other = rows_page("ACME STORE SDN BHD", "NO 1 JALAN TEPI", "01-02-18", "TOTAL 9.00", pid="q")
    for page, answers in ((STAMPED, ANSWERS), (other, {"company": "ACME STORE SDN BHD", "date": "01-02-18",
                                                       "address": "NO 1 JALAN TEPI", "total": "9.00"})):
        project.add_page(page)
        apply_answers(project, page.id, answers, "llm")  # grounded as `label` does
    before = project_targets(project)
    assert [k[0] for k in before.kept] == ["q"] and [e[0] for e in before.excluded] == ["p"]
    pt, train, held = usable_split(project, resolve_settings({"absent_value": "ignore"}), 512, "tuning")
    assert sorted(k[0] for k in pt.kept) == ["p", "q"] and pt.excluded == []
    # the default keeps it; the seed's rule, set, leaves it out
    assert sorted(k[0] for k in usable_split(project, resolve_settings({}), 512, "tuning")[0].kept) == ["p", "q"]
    with pytest.raises(TuneError, match="1 usable page"):
        usable_split(project, resolve_settings({"absent_value": "exclude"}), 512, "tuning")
    kept = {k[0]: k[2] for k in pt.kept}
    assert kept["p"].unscored == {"address"} and kept["q"].unscored == set()
    # the Train tab's counts follow the project's setting: the stamped page trains at ignore
    from dxstudio.tuning.pages import training_breakdown

    for policy, usable, conflicts in (("exclude", 1, 1), ("ignore", 2, 0)):
        project.settings["absent_value"] = policy
        project.save()
        c = training_breakdown(Project.open(project.root))
        assert (c["usable"], c["conflicts"]) == (usable, conflicts), policy
        assert training_breakdown(Project.open(project.root), absent=policy)["usable"] == usable
