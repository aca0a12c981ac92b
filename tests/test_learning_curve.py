"""bench/learning_curve.py: the FUNSD fixed schema's labels, the docs table's markers, --sizes."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.conftest import SHARED, load_script

REPO = Path(__file__).resolve().parents[1]
lc = load_script(REPO / "bench" / "learning_curve.py")


def test_the_table_goes_between_its_markers_and_missing_markers_are_named(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("head\n<!-- learning-curve sroie -->\nold\n<!-- /learning-curve sroie -->\ntail\n")
    lc.replace_in_doc(doc, "sroie", "| new |")
    assert doc.read_text() == "head\n<!-- learning-curve sroie -->\n| new |\n<!-- /learning-curve sroie -->\ntail\n"
    with pytest.raises(lc.BenchError, match=r"d\.md: no '<!-- learning-curve funsd -->'"):
        lc.replace_in_doc(doc, "funsd", "x")


def test_sizes():
    assert lc._sizes("25,50,all") == [25, 50, "all"]
    for bad in ("1", "x", "25,-3"):
        with pytest.raises(argparse.ArgumentTypeError, match="sizes must be"):
            lc._sizes(bad)


def _entity(eid, label, text, x0, y0, links=()):
    """A FUNSD entity whose words (split on spaces) sit side by side from (x0, y0), 10 high."""
    words, x = [], x0
    for t in text.split():
        words.append({"text": t, "box": [x, y0, x + 8 * len(t), y0 + 10]})
        x += 8 * len(t) + 4
    return {"id": eid, "label": label, "text": text, "box": [x0, y0, x - 4, y0 + 10],
            "words": words, "linking": [list(link) for link in links]}


def _funsd_form(tmp_path, form) -> Path:
    d = tmp_path / "annotations"
    d.mkdir(exist_ok=True)
    path = d / "form.json"
    path.write_text(json.dumps({"form": form}))
    return path


def _targets(page: dict, label: dict):
    from dxstudio.engine.page import page_from_dict
    from dxstudio.grounding import page_targets
    from dxstudio.project import label_from_dict

    return page_targets(page_from_dict(page), label_from_dict(label, "label.json"), list(lc.FUNSD_FIELDS))


def test_funsd_a_value_split_over_boxes_takes_the_unlinked_piece_on_its_line(tmp_path):
    # "Date: November 12, 1999" where FUNSD links the question to "November" and "1999" only;
    # "To:" has one answer; "From:" has none (the form left it blank); there is no "cc:"
    path = _funsd_form(tmp_path, [
        _entity(0, "question", "Date:", 10, 10, [(0, 1), (0, 3)]),
        _entity(1, "answer", "November", 100, 10, [(0, 1)]),
        _entity(2, "other", "12,", 170, 10),
        _entity(3, "answer", "1999", 200, 10, [(0, 3)]),
        _entity(4, "question", "To:", 10, 40, [(4, 5)]),
        _entity(5, "answer", "K. A. Sparrow", 100, 40, [(4, 5)]),
        _entity(6, "question", "From:", 10, 70),
    ])
    page, label = lc.funsd_labelled(path)
    words = [w["text"] for w in page["words"]]
    fixes = label["review"]["fixes"]
    assert [words[i] for i in fixes["date"]] == ["November", "12,", "1999"]
    assert [words[i] for i in fixes["to"]] == ["K.", "A.", "Sparrow"]
    assert label["answers"] == {"from": None, "cc": None}
    t = _targets(page, label)
    assert not t.unscored and [words[i] for i in t.field_words["date"]] == ["November", "12,", "1999"]


def test_funsd_a_value_not_one_run_is_unscored_not_cut_to_its_first_box(tmp_path):
    # a cc: list of names in two rows; a stamp printed at the right margin, on neither row's
    # line, is read between them: the field's words are not one run, so the page's targets
    # leave cc unscored (its words ignored by the loss) instead of "A. Tisch" standing for all
    stamp = _entity(4, "other", "91355841", 400, 45)
    stamp["box"] = stamp["words"][0]["box"] = [400, 45, 410, 80]  # printed upright: tall and thin
    path = _funsd_form(tmp_path, [
        _entity(0, "question", "cc:", 10, 50, [(0, 1), (0, 2), (0, 3)]),
        _entity(1, "answer", "A. Tisch", 60, 50, [(0, 1)]),
        _entity(2, "answer", "R. Orcutt", 160, 50, [(0, 2)]),
        stamp,
        _entity(3, "answer", "L. Gordon", 60, 90, [(0, 3)]),
    ])
    page, label = lc.funsd_labelled(path)
    words = [w["text"] for w in page["words"]]
    assert words == ["cc:", "A.", "Tisch", "R.", "Orcutt", "91355841", "L.", "Gordon"]  # the stamp inside
    cc = label["review"]["fixes"]["cc"]
    assert [words[i] for i in cc] == ["A.", "Tisch", "R.", "Orcutt", "L.", "Gordon"]
    t = _targets(page, label)
    assert t.unscored == {"cc"}
    assert [int(t.tags[i]) for i in cc] == [-1] * 6 and int(t.tags[words.index("91355841")]) == 0


@pytest.mark.shared_data("funsd")
def test_funsd_labels_are_the_linked_answers():
    files = sorted((SHARED / "funsd" / "training_data" / "annotations").glob("*.json"))[:30]
    found = 0
    for f in files:
        page, label = lc.funsd_labelled(f)
        form = json.loads(f.read_text())["form"]
        fixes = label["review"]["fixes"]
        assert label["review"]["state"] == "accepted"
        assert set(fixes) | set(label["answers"]) == set(lc.FUNSD_FIELDS) and not set(fixes) & set(label["answers"])
        targets = _targets(page, label)
        for field, words in fixes.items():
            if words != list(range(words[0], words[-1] + 1)):  # not one run: unscored on this form
                assert field in targets.unscored
                continue
            text = " ".join(page["words"][i]["text"] for i in words)
            answers = {" ".join(" ".join(w["text"].split()) for w in e["words"] if w["text"].strip())
                       for e in form if e["label"] == "answer"}
            # the value is one answer entity's words, or several answers of one question joined
            assert text in answers or any(a in text for a in answers)
            assert field not in targets.unscored
            found += 1
    assert found >= 10


def test_sroie_renamed_names_match_no_class_and_the_copy_moves_labels(receipts_project, tmp_path):
    from dxstudio.corpus.generic import match_field
    from dxstudio.project import Project

    assert all(match_field(new) is None for new in lc.SROIE_RENAMES.values())
    assert set(lc.SROIE_RENAMES) == {"company", "date", "address", "total"}
    src = Project.open(receipts_project)
    pid = src.page_ids()[0]
    before = src.load_labels(pid).answers
    dst = lc._renamed_copy(receipts_project, tmp_path / "renamed", {"total": "to_pay", "cash": "wibble"})
    p = Project.open(dst)
    assert p.field_names == [{"total": "to_pay", "cash": "wibble"}.get(f, f) for f in src.field_names]
    after = p.load_labels(pid).answers
    assert after["to_pay"] == before["total"] and "total" not in after
    assert Project.open(receipts_project).field_names == src.field_names  # the source is untouched
    # a new name that still matches a class is refused, and nothing is left behind
    with pytest.raises(lc.BenchError, match="still match a generic class"):
        lc._renamed_copy(receipts_project, tmp_path / "bad", {"total": "amount"})
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.part").exists()


def test_keywords_sources_apply_to_the_readings_that_use_keywords():
    assert lc._readings(["span", "printing", "keyed"], ["name", "learned"]) == [
        ("span", None), ("printing", "name"), ("printing", "learned"), ("keyed", "name"), ("keyed", "learned")]
    assert lc._readings(["keyed"], []) == [("keyed", None)]
