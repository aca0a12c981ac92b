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


@pytest.mark.shared_data("funsd")
def test_funsd_labels_are_the_linked_answers_as_one_run():
    files = sorted((SHARED / "funsd" / "training_data" / "annotations").glob("*.json"))[:30]
    found = 0
    for f in files:
        page, label = lc.funsd_labelled(f)
        form = json.loads(f.read_text())["form"]
        fixes = label["review"]["fixes"]
        assert label["review"]["state"] == "accepted"
        assert set(fixes) | set(label["answers"]) == set(lc.FUNSD_FIELDS) and not set(fixes) & set(label["answers"])
        for field, words in fixes.items():
            assert words == list(range(words[0], words[-1] + 1))  # one run of the page's words
            text = " ".join(page["words"][i]["text"] for i in words)
            answers = {" ".join(" ".join(w["text"].split()) for w in e["words"] if w["text"].strip())
                       for e in form if e["label"] == "answer"}
            # the value is one answer entity's words, or several answers of one question joined
            assert text in answers or any(a in text for a in answers)
            found += 1
    assert found >= 10
