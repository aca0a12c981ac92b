"""The broader generator (`synthetic-wide:COUNT[:SEED]`, dxstudio/corpus/synthetic_wide.py):
the same bytes every run, every kind made, OCR-like noise that keeps tags aligned with words,
clear errors for a bad spec, and `synthetic:N` untouched by it."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from dxstudio.corpus import synthetic, synthetic_memo as memo, synthetic_wide as wide
from dxstudio.corpus.document import CorpusError, corpus_digest
from dxstudio.corpus.generic import GENERIC_FIELDS
from dxstudio.corpus.sources import read_source
from dxstudio.corpus.synthetic import Chunk
from dxstudio.engine.page import page_from_dict

pytest.importorskip("faker")

def fresh_process_digest(spec: str) -> str:
    """The corpus digest of a spec read in two fresh processes with different string hash seeds
    (PYTHONHASHSEED), asserted the same in both."""
    code = ("from dxstudio.corpus.sources import read_source; from dxstudio.corpus.document import corpus_digest; "
            f"print(corpus_digest(read_source({spec!r}).docs))")
    env = lambda h: dict(os.environ, PYTHONHASHSEED=h)  # noqa: E731
    out = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env(h)).stdout.strip()
           for h in ("1", "987")]
    assert out[0] == out[1] and len(out[0]) == 64, (spec, out)
    return out[0]


@pytest.mark.parametrize("name, module", [("synthetic-wide", wide), ("synthetic-memo", memo)])
def test_same_digest_in_two_fresh_processes_and_a_document_does_not_depend_on_the_count(name, module):
    digest = fresh_process_digest(f"{name}:25:3")
    docs = module.generate(25, seed=3)
    assert corpus_digest(docs) == digest
    assert corpus_digest([module.generate_one(7, seed=3)]) == corpus_digest([docs[7]])
    assert corpus_digest(module.generate(25, seed=4)) != digest
    assert corpus_digest(synthetic.generate(25, seed=3)) != digest  # a stream of its own


def kinds_made_and_classes(module, docs, expected) -> Counter:
    """The words of each class in the generator's documents, after checking that every kind of the
    module was made, only generic classes are used and each expected class appears."""
    kinds = Counter(d.page.id.split("-")[3] for d in docs)
    assert set(kinds) == set(module.KINDS), kinds
    classes = Counter(t[2:] for d in docs for t in d.tags if t != "O")
    assert set(classes) <= set(GENERIC_FIELDS)
    assert all(classes[cls] > 0 for cls in expected), classes
    return classes


def test_every_kind_appears_with_valid_pages_and_only_generic_classes():
    docs = wide.generate(120)
    kinds_made_and_classes(wide, docs, ("company", "address", "customer", "date", "invoice_number", "total", "subtotal",
                                        "tax", "item_name"))
    for d in docs:
        assert d.source == "synthetic-wide" and d.doc_type in ("form", "invoice", "other")
        page_from_dict(d.page.to_dict(), d.id)  # finite boxes inside the page
    # multi-line values: a span (B- then I-) that runs over more than one line of the page
    multi = 0
    for d in docs:
        for i in range(1, len(d.tags)):
            if d.tags[i].startswith("I-") and d.page.words[i].box[1] > d.page.words[i - 1].box[3]:
                multi += 1
    assert multi > 50
    # amounts in words and date ranges are there (English documents)
    text = " ".join(w.text for d in docs for w in d.page.words).lower()
    assert "hundred" in text and ("period" in text or "term" in text)


def _page_with(values):
    """A page of one line per (text, class) through the generator's builder."""
    b = wide._Page(random.Random(0), 612.0, 792.0, 6.0, 14.0, 30.0)
    for k, (text, cls) in enumerate(values):
        b.line([Chunk(text, cls, "value" if cls else "other", span=f"s{k}")])
    return b


def test_noise_changes_words_and_keeps_every_tag_on_its_own_words():
    # letters that no character confusion touches, so each value's letters can be followed
    values = [("WXYZ QRTU KVWX", "company"), ("HJKW YUQT", None), ("TRUY WWXX", "address"), ("QQQQ WWWW YYYY", None),
              ("KKKK HHHH", "customer"), ("UUUU", "total")]
    changed = Counter()
    for seed in range(40):
        b = _page_with(values)
        before = [w.box for w in b.words]
        words, meta, lines = wide.ocr_noise(b.words, b.meta, b.line_of, random.Random(seed), 1.0, b.width, b.height)
        b.words, b.meta, b.line_of = words, meta, lines
        doc = b.doc("p", "form").validate()
        assert len(doc.tags) == len(doc.page.words)
        changed["count"] += len(words) != len(before)
        changed["order"] += lines != sorted(lines)
        changed["boxes"] += [w.box for w in words][: len(before)] != before[: len(words)]
        changed["case"] += any(w.text != w.text.upper() for w in words)
        for text, cls in values:
            got = [(w.text, t) for w, t in zip(doc.page.words, doc.tags) if (t[2:] if t != "O" else None) == cls]
            if cls is None:
                continue
            # the class's words are exactly its value's letters, in order, one span starting with B-
            assert "".join(w for w, _ in got).upper() == text.replace(" ", ""), (seed, cls, got)
            assert got[0][1] == "B-" + cls and all(t == "I-" + cls for _, t in got[1:]), (seed, cls, got)
        others = "".join(w.text for w, t in zip(doc.page.words, doc.tags) if t == "O").upper()
        assert sorted(others) == sorted("HJKWYUQTQQQQWWWWYYYY")
    assert all(changed[k] > 0 for k in ("count", "order", "boxes", "case")), changed


def test_noise_level_zero_changes_nothing():
    b = _page_with([("WXYZ QRTU", "company")])
    words, meta, lines = wide.ocr_noise(b.words, b.meta, b.line_of, random.Random(1), 0.0, b.width, b.height)
    assert words == b.words and meta == b.meta and lines == b.line_of


# the memo generator (tests/test_synthetic_memo.py) is read by the same spec rules and pretraining,
# and is the same bytes in every process too (above)
GENERATORS = ("synthetic-wide", "synthetic-memo")


@pytest.mark.parametrize("spec", [f"{name}:{rest}" for name in GENERATORS for rest in ("0", "x", "", "5:1:2", "5:-1")])
def test_a_bad_spec_is_a_clear_error(spec):
    name = spec.split(":")[0]
    with pytest.raises(CorpusError, match=rf"{name}:COUNT or {name}:COUNT:SEED") as e:
        read_source(spec)
    assert str(e.value).startswith(spec + ":")


def test_the_spec_reads_and_does_not_touch_synthetic_documents():
    before = corpus_digest(synthetic.generate(6, seed=2))
    rep = read_source("synthetic-wide:4:2")
    assert rep.kind == "synthetic-wide" and len(rep.docs) == 4 and rep.to_dict()["licence"].startswith("generated")
    assert corpus_digest(synthetic.generate(6, seed=2)) == before  # the shared Faker instances are reseeded per document


def test_number_words():
    assert wide.number_words(0) == "zero"
    assert wide.number_words(1234) == "one thousand two hundred thirty-four"
    assert wide.number_words(2_000_015) == "two million fifteen"
    with pytest.raises(ValueError):
        wide.number_words(-1)


@pytest.mark.parametrize("name", GENERATORS)
def test_pretrain_reads_it(tmp_path, name):
    from dxstudio.tuning.pretrain import PretrainRun

    run = PretrainRun.prepare([f"{name}:3"], tmp_path / "r", {"size": "tiny", "steps": 1, "window": 64})
    assert run.sources[0]["kind"] == name and len(run.windows) >= 3
    ex = run.example(0)
    assert (ex.targets.tags >= 0).all() and ex.targets.roles is not None
