"""The span decoding (engine/extract.py, docs/model.md "Span decoding") on crafted tag logits:
the best-scoring BIO span per field, one value per page, fields never sharing a word, spans
never crossing a window's edge, confidences in [0, 1]; and the seed's reading kept beside it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dxstudio.engine.container import check_thresholds
from dxstudio.engine.extract import (DECODINGS, DEFAULT_DECODING, check_decoding, decode_spans, fields_from_logits,
                                     fields_from_tags, model_decoding, prediction_json, tag_confidence)
from dxstudio.engine.page import Page, Word
from dxstudio.tuning.settings import TuneError, resolve_settings

O = 0


def B(c):
    return 1 + 2 * c


def I(c):
    return 2 + 2 * c


def logits_for(rows, n_fields):
    """rows: per word {tag: logit}; unnamed tags get -4 (O gets 0 unless named)."""
    out = np.full((len(rows), 1 + 2 * n_fields), -4.0, np.float32)
    out[:, O] = 0.0
    for i, r in enumerate(rows):
        for t, v in r.items():
            out[i, t] = v
    return out


def page_of(n):
    return Page("p", 100, 100, tuple(Word(f"w{i}", (0, i, 10, i + 1)) for i in range(n)))


def seed_fields(page, fields, logits):
    tags = np.argmax(logits, axis=1)
    return fields_from_tags(page, fields, tags, tag_confidence(logits, tags))


def test_a_weak_word_inside_a_value_does_not_cut_it_short():
    # an address over 5 words whose 3rd word the model finds slightly likelier O than I
    rows = [{}, {B(0): 4.0}, {I(0): 3.0}, {I(0): -0.5}, {I(0): 3.0}, {I(0): 2.5}, {}]
    lg = logits_for(rows, 1)
    page = page_of(len(rows))
    seed = seed_fields(page, ["address"], lg)["address"]
    span = fields_from_logits(page, ["address"], lg)["address"]
    assert seed.words in ((1, 2), (4, 5))  # the seed reads a piece of it
    assert span.words == (1, 2, 3, 4, 5) and span.text == "w1 w2 w3 w4 w5"
    # the confidence: the lowest binary64 probability of the span's own tags (word 3's I < 0.5)
    want = tag_confidence(lg[1:6], np.array([B(0), I(0), I(0), I(0), I(0)]))
    assert span.confidence == float(np.min(want)) and 0 < span.confidence < 0.5


def test_a_value_does_not_run_on_over_words_likelier_o():
    rows = [{B(0): 5.0}, {I(0): 4.0}, {I(0): -3.0}, {I(0): -3.0}, {I(0): 1.0}]
    span = fields_from_logits(page_of(5), ["a"], logits_for(rows, 1))["a"]
    assert span.words == (0, 1)  # extending to word 4 would cost 6 and gain 1


def test_the_best_scoring_span_wins_not_the_first_or_the_most_confident_word():
    # run 1: one word, very sure; run 2: three words each fairly sure, more in sum
    rows = [{B(0): 6.0}, {}, {B(0): 3.0}, {I(0): 3.0}, {I(0): 3.0}]
    lg = logits_for(rows, 1)
    page = page_of(5)
    assert seed_fields(page, ["a"], lg)["a"].words == (0,)  # the seed: the most confident run
    assert fields_from_logits(page, ["a"], lg)["a"].words == (2, 3, 4)
    assert decode_spans(lg, 1)[0] == (9.0, 2, 4)


def test_bio_an_inside_tag_alone_is_no_value():
    # an isolated I- whose B- is unlikely: the seed opens a span on it, the BIO reading does not
    rows = [{}, {I(0): 2.0, B(0): -5.0}, {}]
    lg = logits_for(rows, 1)
    page = page_of(3)
    assert seed_fields(page, ["a"], lg)["a"].words == (1,)
    assert fields_from_logits(page, ["a"], lg)["a"] is None


def test_all_o_is_no_value_and_a_margin_of_zero_is_none():
    assert fields_from_logits(page_of(4), ["a", "b"], logits_for([{}] * 4, 2)) == {"a": None, "b": None}
    tie = logits_for([{B(0): 0.0}], 1)  # B as likely as O: a score of 0 is not above none
    assert decode_spans(tie, 1) == {}


def test_one_value_per_field_and_no_word_shared_between_fields():
    # total and subtotal both like word 1 most; total more: subtotal takes its next best (word 4)
    rows = [{}, {B(0): 5.0, B(1): 4.0}, {}, {}, {B(1): 2.0, B(0): 1.0}, {B(0): 0.5}]
    lg = logits_for(rows, 2)
    got = fields_from_logits(page_of(6), ["total", "subtotal"], lg)
    assert got["total"].words == (1,) and got["subtotal"].words == (4,)
    spans = decode_spans(lg, 2)
    assert set(spans) == {0, 1}
    assert not set(range(spans[0][1], spans[0][2] + 1)) & set(range(spans[1][1], spans[1][2] + 1))


def test_equal_scores_go_to_the_earlier_field_and_the_earlier_span():
    rows = [{B(0): 2.0, B(1): 2.0}, {}, {B(0): 1.0, B(1): 1.0}]
    got = decode_spans(logits_for(rows, 2), 2)
    assert got[0] == (2.0, 0, 0) and got[1] == (1.0, 2, 2)
    rows = [{B(0): 2.0}, {}, {B(0): 2.0}]
    assert decode_spans(logits_for(rows, 1), 1)[0] == (2.0, 0, 0)


def test_a_span_never_crosses_a_window_edge():
    rows = [{B(0): 3.0}, {I(0): 3.0}, {I(0): 3.0}, {I(0): 3.0}]
    lg = logits_for(rows, 1)
    assert decode_spans(lg, 1, (0,))[0] == (12.0, 0, 3)
    assert decode_spans(lg, 1, (0, 2))[0] == (6.0, 0, 1)  # word 2 opens window 2: I- there opens nothing better


def test_agrees_with_the_seed_on_clean_runs_confidence_included():
    rows = [{}, {B(0): 6.0}, {I(0): 5.0}, {}, {B(1): 7.0}, {}]
    lg = logits_for(rows, 2)
    page = page_of(6)
    seed = seed_fields(page, ["a", "b"], lg)
    span = fields_from_logits(page, ["a", "b"], lg)
    for f in ("a", "b"):
        assert span[f].words == seed[f].words and span[f].confidence == seed[f].confidence


def test_random_logits_give_consecutive_disjoint_spans_with_confidences_in_range():
    rng = np.random.default_rng(5)
    for _ in range(30):
        n, k = int(rng.integers(1, 40)), int(rng.integers(1, 5))
        lg = (rng.normal(0, 3, (n, 1 + 2 * k))).astype(np.float32)
        got = fields_from_logits(page_of(n), [f"f{c}" for c in range(k)], lg)
        taken = []
        for v in got.values():
            if v is None:
                continue
            assert list(v.words) == list(range(v.words[0], v.words[-1] + 1))
            assert 0.0 <= v.confidence <= 1.0
            taken += v.words
        assert len(taken) == len(set(taken))
        # a field with a B- word likelier than O among the words no value took always has a value
        free = np.ones(n, bool)
        free[taken] = False
        for c in range(k):
            if np.any((lg[:, B(c)] > lg[:, O]) & free):
                assert got[f"f{c}"] is not None


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="do not fit 2 fields"):
        decode_spans(np.zeros((3, 3), np.float32), 2)
    bad = np.zeros((2, 3), np.float32)
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        decode_spans(bad, 1)
    with pytest.raises(ValueError, match="decoding must be span, seed, joint, printing, keyed, keyed_learned or keyed_layout, not 'viterbi'"):
        check_decoding("viterbi")
    with pytest.raises(TuneError, match="setting decoding must be span or seed or joint or printing or keyed or keyed_learned or keyed_layout, not 'first'"):
        resolve_settings({"decoding": "first"})
    assert resolve_settings(None)["decoding"] == DEFAULT_DECODING == "keyed_layout" and DECODINGS == ("span", "seed", "joint", "printing", "keyed", "keyed_learned", "keyed_layout")


def test_a_model_is_read_as_its_thresholds_were_found():
    assert model_decoding(None) == "keyed_layout"
    assert model_decoding({"pooled": 0.9, "fields": {}}) == "seed"  # tuned before the reading was stored
    assert model_decoding({"pooled": 0.9, "fields": {}, "decoding": "span"}) == "span"
    assert check_thresholds({"pooled": None, "fields": {}, "decoding": "seed"}, ["a"])["decoding"] == "seed"
    with pytest.raises(ValueError, match="decoding 'x' is not span, seed, joint, printing, keyed, keyed_learned or keyed_layout"):
        check_thresholds({"pooled": None, "fields": {}, "decoding": "x"}, ["a"])


def test_predict_page_says_which_reading_it_used(tmp_path):
    from dxstudio.engine.config import size_config
    from dxstudio.engine.extract import predict_page
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny", fields=("a", "b"))
    rt = to_runtime(new_params(cfg, 3))
    words = tuple(Word(t, (10 + 40 * (i % 5), 10 + 20 * (i // 5), 45 + 40 * (i % 5), 25 + 20 * (i // 5)))
                  for i, t in enumerate(["Total", "12.50", "Date", "2019-03-01", "ACME"] * 4))
    page = Page("p", 300, 200, words)
    seed = predict_page(cfg, rt, page, decoding="seed")
    span = predict_page(cfg, rt, page, decoding="span")
    assert seed.decoding == "seed" and span.decoding == "span"
    assert np.array_equal(seed.tags, span.tags)  # the per-word tags are the argmax's either way
    assert json.loads(json.dumps(prediction_json(span)))["decoding"] == "span"
    with pytest.raises(ValueError, match="decoding must be"):
        predict_page(cfg, rt, page, decoding="first")


def test_tune_and_eval_say_which_reading_and_a_model_keeps_its_own(receipts_project, tmp_path):
    from dxstudio.engine.container import load_model
    from dxstudio.project import Project
    from dxstudio.tuning import TuneRun, evaluate_model
    from dxstudio.tuning.heldout import load_run_model

    runs = {}
    for dec in ("seed", "span"):
        run = TuneRun.prepare(Project.open(receipts_project), tmp_path / dec, {"decoding": dec, "degree": 1})
        assert run.train()
        report = run.finish()
        assert report["decoding"] == dec and report["run"]["settings"]["decoding"] == dec
        assert load_model(tmp_path / dec / "model.safetensors").thresholds["decoding"] == dec
        assert load_run_model(tmp_path / dec / "model.safetensors", "fast").decoding == dec
        runs[dec] = run
    # the reading does not change the weights, only how values are read (and the stored thresholds)
    assert runs["seed"].fingerprint != runs["span"].fingerprint
    project = Project.open(receipts_project)
    assert evaluate_model(tmp_path / "seed" / "model.safetensors", project)["decoding"] == "seed"
    assert evaluate_model(tmp_path / "seed" / "model.safetensors", project, overrides={"decoding": "span"})[
        "decoding"] == "span"
