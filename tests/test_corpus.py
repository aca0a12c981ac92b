"""Pretraining corpora: generic classes, the converters (on small fixtures and, where present,
on ../shared/data), the synthetic generator, and the windows' targets."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dxstudio.corpus.document import CorpusDoc, CorpusError, corpus_digest, doc_targets, doc_windows
from dxstudio.corpus.generic import GENERIC_FIELDS, match_field, transfer_tag_head
from dxstudio.corpus.sources import cord_doc, docbank_doc, invoice2data_docs, naf_doc, read_source
from dxstudio.corpus.synthetic import fmt_amount, generate, generate_one
from dxstudio.engine.config import size_config
from dxstudio.engine.page import Page, Word

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


# -- generic classes ------------------------------------------------------------------------

@pytest.mark.parametrize("name,cls", [
    ("company", "company"), ("store_name", "company"), ("Vendor", "company"), ("total", "total"),
    ("total_amount", "total"), ("subtotal", "subtotal"), ("sub_total", "subtotal"), ("tax", "tax"),
    ("vat_amount", "tax"), ("invoice_number", "invoice_number"), ("receipt_no", "invoice_number"),
    ("invoiceDate", "date"), ("date", "date"), ("time", "time"), ("address", "address"),
    ("cash", "paid"), ("change", "change"), ("phone", "phone"), ("qty", "item_quantity"),
    ("item_name", "item_name"), ("unit_price", "item_unit_price"), ("line_total", "item_price"),
])
def test_field_names_find_their_generic_class(name, cls):
    assert match_field(name) == cls


def test_description_decides_when_the_name_says_nothing():
    assert match_field("f1", "the name of the shop that issued the receipt") == "company"
    assert match_field("colour") is None
    assert match_field("colour", "the colour of the ink") is None


def test_transfer_copies_matched_rows_and_keeps_the_drawn_ones():
    cfg = size_config("tiny", GENERIC_FIELDS)
    rng = np.random.default_rng(0)
    base = {"tag_head.weight": rng.standard_normal((cfg.n_tags, cfg.d_model)).astype(np.float32),
            "tag_head.bias": rng.standard_normal(cfg.n_tags).astype(np.float32)}
    drawn_w = np.full((1 + 2 * 3, cfg.d_model), 7.0, np.float32)
    drawn_b = np.full(7, 7.0, np.float32)
    w, b, matched = transfer_tag_head(cfg, base, ["store", "colour", "total"], drawn_w, drawn_b)
    assert matched == {"store": "company", "total": "total"}
    g_company, g_total = GENERIC_FIELDS.index("company"), GENERIC_FIELDS.index("total")
    np.testing.assert_array_equal(w[0], base["tag_head.weight"][0])
    np.testing.assert_array_equal(w[1:3], base["tag_head.weight"][1 + 2 * g_company:3 + 2 * g_company])
    np.testing.assert_array_equal(w[5:7], base["tag_head.weight"][1 + 2 * g_total:3 + 2 * g_total])
    np.testing.assert_array_equal(b[5:7], base["tag_head.bias"][1 + 2 * g_total:3 + 2 * g_total])
    assert np.all(w[3:5] == 7.0) and np.all(b[3:5] == 7.0)  # "colour": still the drawn rows
    assert np.all(drawn_w == 7.0)  # the inputs are not changed


# -- documents and windows ------------------------------------------------------------------

def _doc(n=5, **kw):
    words = tuple(Word(f"w{i}", (10.0 * i, 0.0, 10.0 * i + 8, 10.0)) for i in range(n))
    return CorpusDoc("test", Page("p", 100.0, 20.0, words), **kw)


def test_validate_names_the_document_and_the_problem():
    with pytest.raises(CorpusError, match="test/p: 2 tags for 5 words"):
        _doc(tags=("O", "O")).validate()
    with pytest.raises(CorpusError, match="unknown tag 'B-colour'"):
        _doc(tags=("B-colour", "O", "O", "O", "O")).validate()
    with pytest.raises(CorpusError, match="kv pointer 9"):
        _doc(kv=(0, 1, 2, 3, 9)).validate()
    with pytest.raises(CorpusError, match="unknown document type"):
        _doc(doc_type="letter").validate()


def test_windows_cut_pointers_that_leave_them():
    cfg = size_config("tiny", GENERIC_FIELDS)
    doc = _doc(tags=("B-total", "I-total", "O", None, "B-date"), roles=("key", "value", None, "other", "value"),
               kv=(0, 0, 2, 3, 3), items=(0, 1, 2, 3, 4), doc_type="receipt").validate()
    assert doc_windows(doc, 3) == [(0, 3), (3, 5)]
    t = doc_targets(doc, cfg, 3, 5)
    assert t.tags.tolist() == [-1, cfg.tags.index("B-date")]
    assert t.roles.tolist() == [0, 2]
    assert t.kv.tolist() == [0, 0]  # word 4 points at word 3: local index 0
    t0 = doc_targets(doc, cfg, 0, 3)
    assert t0.tags.tolist() == [cfg.tags.index("B-total"), cfg.tags.index("I-total"), 0]
    assert t0.roles.tolist() == [1, 2, -1] and t0.doc == cfg.doc_types.index("receipt")
    t1 = doc_targets(_doc(kv=(0, 4, 2, 3, 4)).validate(), cfg, 0, 3)
    assert t1.kv.tolist() == [0, -1, 2]  # its key lies in the next window: ignored
    assert t1.tags.tolist() == [-1, -1, -1] and t1.roles is None and t1.items is None and t1.doc == -1


# -- converters on fixtures -----------------------------------------------------------------

def _quad(x0, y0, x1, y1):
    return {"x1": x0, "y1": y0, "x2": x1, "y2": y0, "x3": x1, "y3": y1, "x4": x0, "y4": y1}


def test_cord_receipt_fields_keys_and_items(tmp_path):
    rec = {"meta": {"image_size": {"width": 400, "height": 600}}, "valid_line": [
        {"category": "total.total_price", "group_id": 9, "words": [
            {"text": "TOTAL", "quad": _quad(10, 300, 60, 320), "is_key": 1},
            {"text": "45.000", "quad": _quad(300, 300, 360, 320), "is_key": 0}]},
        {"category": "menu.nm", "group_id": 3, "words": [
            {"text": "ICE", "quad": _quad(10, 100, 40, 120), "is_key": 0},
            {"text": "TEA", "quad": _quad(45, 100, 80, 120), "is_key": 0}]},
        {"category": "menu.price", "group_id": 3, "words": [
            {"text": "15.000", "quad": _quad(300, 101, 360, 121), "is_key": 0}]},
    ]}
    p = tmp_path / "receipt_00001.json"
    p.write_text(json.dumps(rec))
    d = cord_doc(p).validate()
    assert [w.text for w in d.page.words] == ["ICE", "TEA", "15.000", "TOTAL", "45.000"]
    assert d.tags == ("B-item_name", "I-item_name", "B-item_price", "O", "B-total")
    assert d.roles == ("value", "value", "value", "key", "value")
    assert d.kv == (0, 1, 2, 3, 3)  # 45.000 -> TOTAL
    assert d.items == (0, 0, 0, 3, 4)  # the menu group's words -> its first word
    assert d.doc_type == "receipt"


def test_naf_form_keys_values_and_links(tmp_path):
    form = {"width": 1000, "height": 800,
            "textBBs": [{"id": "t0", "type": "text", "poly_points": [[10, 10], [110, 10], [110, 30], [10, 30]]},
                        {"id": "t1", "type": "textP", "poly_points": [[10, 300], [300, 300], [300, 320], [10, 320]]}],
            "fieldBBs": [{"id": "f0", "type": "field", "isBlank": 1, "poly_points": [[200, 12], [400, 12], [400, 30], [200, 30]]},
                         {"id": "f1", "type": "field", "isBlank": 1, "poly_points": [[200, 100], [400, 100], [400, 120], [200, 120]]}],
            "transcriptions": {"t0": "Full name", "t1": "Some \u00a7 prose", "f0": "John \u00bf\u00bf Smith", "f1": ""},
            "pairs": [["t0", "f0"]], "samePairs": []}
    p = tmp_path / "form.json"
    p.write_text(json.dumps(form))
    d = naf_doc(p).validate()
    assert [w.text for w in d.page.words] == ["Full", "name", "John", "Smith", "Some", "prose"]
    assert d.roles == ("key", "key", "value", "value", "other", "other")
    assert d.kv == (0, 1, 0, 0, 4, 5)
    assert d.tags is None and d.doc_type == "form"


def test_docbank_roles_and_a_bad_line_named(tmp_path):
    p = tmp_path / "page.txt"
    rows = ["Title\t100\t50\t200\t70\t0\t0\t0\tF\ttitle", "##LTLine##\t0\t0\t1\t1\t0\t0\t0\tF\tfigure",
            "text\t100\t80\t140\t90\t0\t0\t0\tF\tparagraph"]
    p.write_text("\n".join(rows))
    d = docbank_doc(p).validate()
    assert [w.text for w in d.page.words] == ["Title", "text"] and d.roles == ("header", "other")
    p.write_text("Title\t100\t50\n")
    with pytest.raises(CorpusError, match=r"page\.txt: line 1 has 3"):
        docbank_doc(p)


def test_invoice2data_grounds_the_expected_values(tmp_path):
    words = [("ACME", 10), ("Corp", 50), ("Invoice", 10), ("A-17", 60), ("Date:", 10), ("03/20/2023", 50),
             ("Total", 10), ("1,234.50", 60)]
    page = {"width": 600, "height": 800, "words": [
        {"text": t, "box": [x, 20 * (k // 2) + 10, x + 35, 20 * (k // 2) + 20], "line": k // 2} for k, (t, x) in enumerate(words)]}
    p = tmp_path / "inv.json"
    p.write_text(json.dumps({"pages": [page], "expected": [
        {"issuer": "ACME Corp", "invoice_number": "A-17", "date": "2023-03-20", "amount": 1234.5}]}))
    (d,) = invoice2data_docs(p)
    assert d.tags == ("B-company", "I-company", "O", "B-invoice_number", "O", "B-date", "O", "B-total")


def test_invoice2data_grounds_on_the_text_layer_without_the_ocr_tiers(tmp_path):
    """A text PDF's words are not misread: the converter takes a value only as printed,
    normalized or punctuation-blind (the shipped base's corpus, docs/base-model.md), though
    grounding's OCR tiers would take the 'August 03, 2014' rendering of the date one edit away."""
    from dxstudio.grounding import ground_value

    words = ["Date", "August", "3", ",", "2014", "Total", "9.99"]
    page = {"width": 600, "height": 800, "words": [
        {"text": t, "box": [10 + 60 * k, 10, 50 + 60 * k, 20]} for k, t in enumerate(words)]}
    p = tmp_path / "inv.json"
    p.write_text(json.dumps({"pages": [page], "expected": {"date": "2014-08-03", "amount": 9.99}}))
    (d,) = invoice2data_docs(p)
    assert d.tags == ("O",) * 5 + ("O", "B-total")
    pg = Page("p", 600, 800, tuple(Word(t, (10 + 60 * k, 10, 50 + 60 * k, 20)) for k, t in enumerate(words)))
    ocr = ground_value(pg, "August 03, 2014", field="date")
    assert ocr.status == "normalized" and ocr.words == (1, 2, 3, 4) and ocr.reason.startswith("OCR:")
    assert ground_value(pg, "August 03, 2014", field="date", ocr=False).status == "absent"
    assert ground_value(pg, "August 3, 2014", field="date", ocr=False).words == (1, 2, 3, 4)
    assert ground_value(pg, "9.99", field="total", ocr=False).status == "exact"


def test_read_source_refuses_research_data_and_unknown_folders(tmp_path):
    (tmp_path / "sroie" / "box").mkdir(parents=True)
    (tmp_path / "sroie" / "key").mkdir()
    with pytest.raises(CorpusError, match="SROIE is research data"):
        read_source(str(tmp_path / "sroie"))
    (tmp_path / "funsd" / "annotations").mkdir(parents=True)
    with pytest.raises(CorpusError, match="FUNSD is research data"):
        read_source(str(tmp_path / "funsd"))
    (tmp_path / "other").mkdir()
    with pytest.raises(CorpusError, match="not a corpus source"):
        read_source(str(tmp_path / "other"))
    with pytest.raises(CorpusError, match="no such file"):
        read_source(str(tmp_path / "missing"))
    for bad in ("synthetic:x", "synthetic:0", "synthetic:3:-1"):
        with pytest.raises(CorpusError, match="synthetic:COUNT"):
            read_source(bad)


def test_a_bad_file_is_named_and_the_rest_is_kept(tmp_path):
    root = tmp_path / "cord"
    (root / "json").mkdir(parents=True)
    good = {"meta": {"image_size": {"width": 100, "height": 100}}, "valid_line": [
        {"category": "total.total_price", "group_id": 1, "words": [{"text": "9.00", "quad": _quad(10, 10, 40, 20)}]}]}
    (root / "json" / "receipt_00000.json").write_text(json.dumps({"valid_line": [], **{"meta": good["meta"]}}))
    (root / "json" / "receipt_00001.json").write_text(json.dumps(good))
    (root / "json" / "receipt_00002.json").write_text("{not json")
    rep = read_source(str(root))
    assert rep.kind == "cord" and [d.page.id for d in rep.docs] == ["receipt_00001"]
    assert [Path(f).name for f, _ in rep.errors] == ["receipt_00000.json", "receipt_00002.json"]
    assert "receipt_00002.json: not JSON" in rep.errors[1][1]  # the hardened reader (issue 27)


# -- the generator --------------------------------------------------------------------------

def test_generator_is_deterministic_and_each_document_stands_alone():
    a, b = generate(6, seed=3), generate(6, seed=3)
    assert corpus_digest(a) == corpus_digest(b)
    assert generate_one(4, seed=3).to_dict() == a[4].to_dict()
    assert corpus_digest(generate(6, seed=4)) != corpus_digest(a)


def test_generated_documents_are_consistent():
    docs = generate(60, seed=1)
    assert {d.doc_type for d in docs} == {"receipt", "invoice", "form"}
    assert len({d.page.id.split("-")[-1] for d in docs}) >= 5  # several locales
    for d in docs:
        d.validate()
        tags, roles = d.tags, d.roles
        for i, k in enumerate(d.kv):
            if k != i:  # a value points at a key word
                assert roles[k] == "key" and roles[i] == "value", d.id
        for i, a in enumerate(d.items):
            if a != i:
                assert tags[i].split("-", 1)[-1].startswith("item") or tags[i] == "O", d.id
        for i, t in enumerate(tags):
            if t.startswith("I-"):
                assert tags[i - 1][2:] == t[2:], (d.id, i)
        if d.doc_type != "form":
            assert any(t == "B-total" for t in tags), d.id


def test_amount_formats():
    import random

    rng = random.Random(0)
    assert fmt_amount(1234.6, "1.234", rng).replace(",", ".") == "1.235"
    outs = {fmt_amount(1234.5, "1.234,56", random.Random(s)) for s in range(20)}
    assert outs <= {"1.234,50", "1234,50"} and "1.234,50" in outs


# -- the real sources (shared_data: skipped, and counted, without ../shared/data) -------------

@pytest.mark.parametrize("name,count", [
    pytest.param(name, count, marks=pytest.mark.shared_data(name))
    for name, count in [("cord-v1-train", 800), ("docbank-samples", 100), ("invoice2data-samples", 13), ("naf", 708)]])
def test_real_sources_convert_without_errors(name, count):
    root = SHARED / name
    rep = read_source(str(root))
    assert rep.errors == [] and len(rep.docs) == count
    labelled = sum(1 for d in rep.docs for t in (d.tags or ()) if t not in (None, "O"))
    roles = sum(1 for d in rep.docs for r in (d.roles or ()) if r in ("key", "value", "header"))
    assert labelled > 0 or roles > 0
