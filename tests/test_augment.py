"""Seeded augmentation of training pages (dxstudio/tuning/augment.py): what each setting does to
a page and its tags, bad values named, and tuning with it on bit-identical at any degree and
after a resume."""
from __future__ import annotations

import numpy as np
import pytest

from dxstudio.engine.page import Page, Word
from dxstudio.project import Project
from dxstudio.tuning import TuneRun
from dxstudio.tuning.augment import Stream, augment_page, value_pool, word_shape
from dxstudio.tuning.settings import TuneError, resolve_settings

ON = {"augment_values": 0.5, "augment_swap": 0.5, "augment_case": 0.3, "augment_drop": 0.2, "augment_jitter": 0.01, "augment_shift": 0.05}


def receipt():
    texts = ["ACME", "STORE", "Date:", "12/03/2019", "Total", "RM", "17.50", "Thank", "you"]
    words = tuple(Word(t, (10 + 60 * (i % 3), 10 + 30 * (i // 3), 60 + 60 * (i % 3), 30 + 30 * (i // 3)))
                  for i, t in enumerate(texts))
    # fields: company (B=1, I=2), date (3, 4), total (5, 6); word 5 ignored (-1)
    return Page("r1", 200, 100, words), np.array([1, 2, 0, 3, 0, -1, 5, 0, 0], np.int64)


def test_stream_is_fixed_and_uniform():
    a, b = Stream("k", 1, 2), Stream("k", 1, 2)
    xs = [a.uniform() for _ in range(1000)]
    assert xs == [b.uniform() for _ in range(1000)]
    assert xs[:4] != [Stream("k", 1, 3).uniform() for _ in range(4)]
    assert 0 <= min(xs) and max(xs) < 1 and 0.45 < sum(xs) / len(xs) < 0.55


def test_off_is_the_page_itself():
    page, tags = receipt()
    got, gtags = augment_page(page, tags, {}, 1, 0)
    assert got == page and np.array_equal(gtags, tags)


def test_values_keep_their_shape_and_labels():
    page, tags = receipt()
    got, gtags = augment_page(page, tags, {"augment_values": 1.0}, 1, 3)
    assert np.array_equal(gtags, tags)
    old, new = [w.text for w in page.words], [w.text for w in got.words]
    assert new[3] != old[3] and new[6] != old[6]  # the date's and the total's digits changed
    for k in (3, 6):
        assert [c.isdigit() for c in new[k]] == [c.isdigit() for c in old[k]]
        assert [c for c in new[k] if not c.isdigit()] == [c for c in old[k] if not c.isdigit()]
        assert new[k][0] != "0"
    assert new[:3] == old[:3] and new[4:6] == old[4:6] and new[7:] == old[7:]  # letters and O words stay


def test_word_shape():
    assert [word_shape(t) for t in ("2/18/80", "K.", "Sparrow", "SPARROW", "RM17.50", "(M)")] == \
        ["9/9/9", "a.", "a", "a", "a9.9", "(a)"]


def test_swapped_values_come_from_the_same_field_and_shape_at_every_printing():
    page, tags = receipt()
    # the total printed again (ignored, -1, as other printings of a value are trained)
    words = page.words + (Word("17.50", (130, 70, 180, 90)),)
    page, tags = Page("r1", 200, 100, words), np.append(tags, -1)
    other = Page("r2", 200, 100, tuple(Word(t, (0, 0, 1, 1)) for t in
                                       ["BETA", "SHOP", "01/02/2020", "9.99", "2020", "Best", "Shop", "Inc"]))
    other_tags = np.array([1, 2, 3, 5, 3, 1, 2, 2], np.int64)
    pool = value_pool([(page, tags), (other, other_tags)])
    assert pool[(0, ("a", "a"))] == [("ACME", "STORE"), ("BETA", "SHOP")]  # sorted, distinct
    assert pool[(1, ("9/9/9",))] == [("01/02/2020",), ("12/03/2019",)] and pool[(1, ("9",))] == [("2020",)]
    got, gtags = augment_page(page, tags, {"augment_swap": 1.0}, 1, 0, pool)
    new = [w.text for w in got.words]
    assert np.array_equal(gtags, tags) and [w.box for w in got.words] == [w.box for w in page.words]
    assert new[:2] == ["BETA", "SHOP"] and new[3] == "01/02/2020"  # the one other value of the same shape
    assert new[6] == "9.99" and new[9] == "9.99"  # the total at both its printings
    assert new[2] == "Date:" and new[7:9] == ["Thank", "you"]  # O words stay
    # a value with no other of its field and shape stays; off, or with a pool of itself, the page itself
    alone = value_pool([(page, tags)])
    assert augment_page(page, tags, {"augment_swap": 1.0}, 1, 0, alone)[0] == page
    assert augment_page(page, tags, {"augment_swap": 0.0}, 1, 0, pool)[0] == page
    with pytest.raises(ValueError, match="augment_swap needs the pool"):
        augment_page(page, tags, {"augment_swap": 0.5}, 1, 0)


def test_case_changes_only_the_case():
    page, tags = receipt()
    got, gtags = augment_page(page, tags, {"augment_case": 1.0}, 1, 2)
    old, new = [w.text for w in page.words], [w.text for w in got.words]
    assert np.array_equal(gtags, tags) and [w.box for w in got.words] == [w.box for w in page.words]
    assert [t.lower() for t in new] == [t.lower() for t in old] and new != old
    assert all(t in (o.upper(), o.lower(), o.capitalize()) for t, o in zip(new, old))


def test_dropping_takes_o_words_only_and_their_tags_follow():
    page, tags = receipt()
    got, gtags = augment_page(page, tags, {"augment_drop": 0.9}, 1, 5)
    assert len(got.words) < len(page.words) and len(gtags) == len(got.words)
    kept = [w.text for w in got.words]
    for k, t in enumerate(tags):
        if t != 0:
            assert page.words[k].text in kept  # labelled and ignored words are never dropped
    by_text = {w.text: int(t) for w, t in zip(page.words, tags)}
    assert [by_text[w.text] for w in got.words] == [int(t) for t in gtags]


def test_jitter_and_shift_move_boxes_inside_the_page():
    page, tags = receipt()
    got, _ = augment_page(page, tags, {"augment_jitter": 0.05, "augment_shift": 0.2}, 1, 7)
    moved = 0
    for a, b in zip(page.words, got.words):
        x0, y0, x1, y1 = b.box
        assert 0 <= x0 <= x1 <= page.width and 0 <= y0 <= y1 <= page.height
        assert abs((x1 - x0) - (a.box[2] - a.box[0])) < 1e-9 and abs((y1 - y0) - (a.box[3] - a.box[1])) < 1e-9
        moved += a.box != b.box
    assert moved == len(page.words)


def test_same_variant_for_the_same_seed_step_and_page():
    page, tags = receipt()
    pool = value_pool([(page, tags)])
    a = augment_page(page, tags, ON, 9, 4, pool)
    assert a[0] == augment_page(page, tags, ON, 9, 4, pool)[0]
    assert a[0] != augment_page(page, tags, ON, 9, 5, pool)[0] and a[0] != augment_page(page, tags, ON, 10, 4, pool)[0]
    with pytest.raises(ValueError, match="r1: 3 tags for 9 words"):
        augment_page(page, tags[:3], ON, 1, 0, pool)


@pytest.mark.parametrize("name,bad", [("augment_values", 1.5), ("augment_swap", 1.5), ("augment_swap", -0.5), ("augment_case", 2), ("augment_drop", -0.1), ("augment_drop", 0.95),
                                      ("augment_jitter", 0.5), ("augment_shift", "x")])
def test_bad_values_are_named(name, bad):
    with pytest.raises(TuneError, match=f"setting {name} must be"):
        resolve_settings({name: bad})


def _tune(project_dir, run_dir, **overrides):
    run = TuneRun.prepare(Project.open(project_dir), run_dir, overrides)
    assert run.train()
    run.finish()
    return run, (run_dir / "model.safetensors").read_bytes()


def test_augmented_tuning_is_the_same_bytes_at_any_degree_and_after_resume(receipts_project, tmp_path):
    run1, b1 = _tune(receipts_project, tmp_path / "d1", degree=1, **ON)
    _, b2 = _tune(receipts_project, tmp_path / "d2", degree=2, **ON)
    _, plain = _tune(receipts_project, tmp_path / "plain", degree=1)
    assert b1 == b2 and b1 != plain
    part = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", dict(ON, degree=1))
    assert part.total_steps > 3 and part.train(stop_after=3) is False
    resumed = TuneRun.prepare(Project.open(receipts_project), tmp_path / "part", dict(ON, degree=2))
    assert resumed.train(resume=True)
    resumed.finish()
    assert (tmp_path / "part" / "model.safetensors").read_bytes() == b1
    # the fingerprint covers the augmentation: another setting is another run
    other = TuneRun.prepare(Project.open(receipts_project), tmp_path / "o", dict(ON, augment_drop=0.3))
    assert other.fingerprint != run1.fingerprint
