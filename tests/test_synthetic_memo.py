"""Memo-like documents (`synthetic-memo:COUNT[:SEED]`, dxstudio/corpus/synthetic_memo.py): every
kind made, the parties and the date each one span from B-, cc lists linked to their key without a
class, and neither `synthetic:N` nor `synthetic-wide:N` touched by it (the same bytes in every
process, a bad spec's error and pretraining's reading: tests/test_synthetic_wide.py, for both
generators)."""
from __future__ import annotations

import pytest

from dxstudio.corpus import synthetic, synthetic_memo as memo, synthetic_wide as wide
from dxstudio.corpus.document import corpus_digest
from dxstudio.corpus.sources import read_source
from dxstudio.engine.page import page_from_dict
from tests.test_synthetic_wide import kinds_made_and_classes

pytest.importorskip("faker")


def test_a_stream_apart_from_the_broader_generators():
    # the same bytes in every process: tests/test_synthetic_wide.py, for both generators
    assert corpus_digest(memo.generate(25, seed=3)) != corpus_digest(wide.generate(25, seed=3))


def test_every_kind_appears_with_valid_pages_and_only_generic_classes():
    docs = memo.generate(120)
    kinds_made_and_classes(memo, docs, ("company", "customer", "date", "phone", "invoice_number"))
    for d in docs:
        assert d.source == "synthetic-memo" and d.doc_type in ("form", "other")
        page_from_dict(d.page.to_dict(), d.id)  # finite boxes inside the page
    text = " ".join(w.text for d in docs for w in d.page.words).lower()
    for key in ("to", "from", "cc", "date", "re", "fax"):
        assert any(w.rstrip(":.") == key for w in text.split()), key


def test_without_noise_each_party_and_the_date_is_one_span_from_b(monkeypatch):
    # the noise (tested in test_synthetic_wide.py) may put a value's lines out of order; without it
    # each class of a page is one value: B- then I- on consecutive words, over one line or several
    monkeypatch.setattr(wide, "ocr_noise", lambda words, meta, lines, *a: (words, meta, lines))
    multi_line, cc_lines = 0, 0
    for d in memo.generate(80, seed=5):
        tagged = [(i, t) for i, t in enumerate(d.tags) if t != "O"]
        by_class = {}
        for i, t in tagged:
            by_class.setdefault(t[2:], []).append((i, t[:2]))
        for cls, run in by_class.items():
            idx = [i for i, _ in run]
            assert idx == list(range(idx[0], idx[0] + len(idx))), (d.id, cls)
            assert [p for _, p in run] == ["B-"] + ["I-"] * (len(run) - 1), (d.id, cls)
            boxes = [d.page.words[i].box for i in idx]
            multi_line += any(b[1] > a[3] for a, b in zip(boxes, boxes[1:]))
        assert {"company", "customer", "date"} <= set(by_class), d.id
        # a cc list: the values linked to a key whose text is a cc label, without a class
        cc_keys = {i for i, w in enumerate(d.page.words) if d.roles[i] == "key" and w.text.lower().rstrip(":") in ("cc", "c")}
        linked = [i for i in range(len(d.tags)) if d.kv[i] in cc_keys and i not in cc_keys]
        assert all(d.tags[i] == "O" for i in linked), d.id
        cc_lines += len({round(d.page.words[i].box[1]) for i in linked}) >= 2
    assert multi_line > 5 and cc_lines > 5, (multi_line, cc_lines)


def test_the_spec_reads_and_does_not_touch_the_other_generators():
    before = corpus_digest(synthetic.generate(6, seed=2)), corpus_digest(wide.generate(6, seed=2))
    rep = read_source("synthetic-memo:4:2")
    assert rep.kind == "synthetic-memo" and len(rep.docs) == 4 and rep.to_dict()["licence"].startswith("generated")
    # the Faker instances it shares with synthetic-wide are reseeded per document
    assert (corpus_digest(synthetic.generate(6, seed=2)), corpus_digest(wide.generate(6, seed=2))) == before

