"""bench/gbdt_baseline.py: the gradient-boosted baseline's features and its eval-shaped report."""
import json
import shutil
from pathlib import Path

import pytest

from dxstudio.engine.page import Page, Word
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


gb = load_script(ROOT / "bench" / "gbdt_baseline.py")


def _page(lines):
    """lines: [[text, ...], ...] laid out top to bottom, left to right."""
    words = []
    for li, texts in enumerate(lines):
        for j, t in enumerate(texts):
            words.append(Word(t, (10.0 + 60 * j, 10.0 + 20 * li, 60.0 + 60 * j, 22.0 + 20 * li)))
    return Page("p", 400.0, 400.0, tuple(words))


def test_amount_values():
    assert gb.amount_value("RM12.50") == 12.5
    assert gb.amount_value("1,234.56") == 1234.56
    assert gb.amount_value("12,50") == 12.5
    assert gb.amount_value("12/03/2018") is None
    assert gb.amount_value("TOTAL") is None


def test_lines_are_grouped_by_height_and_ordered_by_x():
    page = Page("p", 100.0, 100.0, (Word("b", (50.0, 10.0, 60.0, 20.0)), Word("a", (10.0, 11.0, 20.0, 21.0)),
                                    Word("c", (10.0, 40.0, 20.0, 50.0))))
    line_of, lines = gb.lines_of(page)
    assert lines == [[1, 0], [2]]
    assert list(line_of) == [0, 0, 1]


def test_keywords_left_and_above_and_amount_rank():
    page = _page([["TOTAL", "12.50"], ["CASH", "20.00"], ["7.50"]])
    X = gb.word_features(page)
    K = len(gb.KEYWORDS)
    own = gb.N_BASIC + 1 + 7 + 13  # basic flags, shape, amount block, position block
    left, above = own + K, own + 2 * K
    total, cash = gb.KW_INDEX["total"], gb.KW_INDEX["cash"]
    assert X[0, own + total] == 1 and X[1, own + total] == 0
    assert X[1, left + total] == 1 and X[3, left + total] == 0  # 12.50 has TOTAL at its left
    assert X[3, left + cash] == 1 and X[3, above + total] == 1  # 20.00: CASH left, TOTAL above
    assert X[4, above + cash] == 1
    rank = gb.N_BASIC + 1 + 1  # after the log value
    assert [X[i, rank] for i in (1, 3, 4)] == [1, 0, 2]  # 20.00 is the largest amount
    summed = gb.N_BASIC + 1 + 6
    assert X[3, summed] == 1 and X[4, summed] == 0  # 20.00 = 12.50 + 7.50


@pytest.mark.heavy
def test_baseline_trains_and_scores_like_eval(tmp_path):
    pytest.importorskip("lightgbm")
    project = tmp_path / "sample"
    shutil.copytree(ROOT / "resources" / "sample", project)
    out = tmp_path / "report.json"
    assert gb.main([str(project), str(project), "--trees", "30", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["run"]["train_pages"] > 100 and report["run"]["heldout_pages"] > 10
    fields = json.loads((project / "dxproject.json").read_text())["schema"]
    assert set(report["fields"]) == {f["name"] for f in fields}
    assert report["run"]["mean_agreement"] > 0.4  # the sample's fields are easy for word features


def test_a_diverged_boosting_run_is_refused_by_name():
    # the curve SROIE all gave with lambda_l2 0 (every 25th round): 0.013 agreement out of it
    sroie_all = [0.106, 0.0378, 0.0341, 0.0100, 0.00701, 0.00605, 1.86, 1.21, 1.54, 6.82, 6.82, 6.82]
    why = gb.diverged(sroie_all, "p: ")
    assert why.startswith("p: the baseline diverged") and "round 6" in why and "round 7" in why
    assert gb.diverged([0.5, 0.2, 0.1, 0.05, 0.0501, 0.049]) is None  # falling, with noise
    assert gb.diverged([0.5, float("nan")]) is not None
    assert gb.diverged([]) is None


@pytest.mark.heavy
@pytest.mark.shared_data("sroie-train")
def test_baseline_on_all_sroie_receipts_does_not_diverge(tmp_path):
    """The failure that was: bench/learning_curve.py's sroie_all (378 training receipts) gave 0.013
    (its trees blew up after round 150) where 377 receipts gave 0.864. Several minutes."""
    pytest.importorskip("lightgbm")
    lc = load_script(ROOT / "bench" / "learning_curve.py")
    projects, ev = lc.sroie_projects(tmp_path, ["all"])
    out = tmp_path / "report.json"
    assert gb.main([str(projects["all"]), str(ev), "--all", "--out", str(out)]) == 0
    run = json.loads(out.read_text())["run"]
    assert run["train_pages"] == 378 and run["train_logloss"]["final"] <= 2 * run["train_logloss"]["lowest"] + 0.01
    assert run["mean_agreement"] > 0.8
