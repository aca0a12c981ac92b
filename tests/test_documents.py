"""Documents (issue 28): pages of one file taken together as one record."""
import io
import json

import pytest

from dxstudio.documents import DocumentError, bind_document, group_documents
from dxstudio.engine.page import MAX_PAGES_PER_DOCUMENT, Page, PageError, Word, page_from_dict
from dxstudio.importers import import_pages, pdf_pages
from dxstudio.project import Project, ProjectError
from tests.test_importers import minimal_pdf


def word_page(pid, texts, document=None, number=None, width=600.0, height=800.0):
    words = tuple(Word(t, (10.0 + 60 * (i % 8), 10.0 + 20 * (i // 8), 60.0 + 60 * (i % 8), 25.0 + 20 * (i // 8)))
                  for i, t in enumerate(texts))
    return Page(pid, width, height, words, None, document, number)


def pdf_of(pages_texts, sizes=None) -> bytes:
    import pypdfium2 as pdfium

    sizes = sizes or [(612, 792)] * len(pages_texts)
    doc = pdfium.PdfDocument(minimal_pdf(pages_texts[0], sizes[0]))
    for texts, size in zip(pages_texts[1:], sizes[1:]):
        doc.import_pages(pdfium.PdfDocument(minimal_pdf(texts, size)))
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "proj", "docs", ["total", "number"])


# -- 1. the page JSON and the project ---------------------------------------------------------

def test_page_json_names_its_document_and_round_trips():
    d = word_page("inv-p2", ["Total", "9.00"], "inv", 2).to_dict()
    assert d["document"] == "inv" and d["page_number"] == 2
    p = page_from_dict(json.loads(json.dumps(d)), "x.json")
    assert (p.document, p.page_number, p.document_id, p.number) == ("inv", 2, "inv", 2)
    alone = page_from_dict(word_page("r1", ["a"]).to_dict())
    assert "document" not in alone.to_dict() and alone.document_id == "r1" and alone.number == 1


@pytest.mark.parametrize("extra, message", [
    ({"document": "inv"}, "go together"),
    ({"page_number": 2}, "go together"),
    ({"document": "../etc", "page_number": 1}, "not a valid document id"),
    ({"document": "inv", "page_number": 0}, "from 1 to"),
    ({"document": "inv", "page_number": True}, "from 1 to"),
    ({"document": "inv", "page_number": MAX_PAGES_PER_DOCUMENT + 1}, "MAX_PAGES_PER_DOCUMENT"),
])
def test_bad_document_fields_are_clear_errors(extra, message):
    d = {**word_page("p", ["a"]).to_dict(), **extra}
    with pytest.raises(PageError, match=message) as e:
        page_from_dict(d, "pages/p.json")
    assert "pages/p.json" in str(e.value)


def test_group_documents_orders_pages_and_reports_problems():
    pages = [word_page("b-2", ["x"], "b", 3), word_page("b-1", ["x"], "b", 1), word_page("a", ["x"]),
             word_page("c-1", ["x"], "c", 1), word_page("c-2", ["x"], "c", 1),  # two pages numbered 1
             word_page("d", ["x"]), word_page("d-p2", ["x"], "d", 2)]  # id "d" is a page of its own too
    docs = group_documents(pages)
    assert [(d.id, d.pages, d.numbers) for d in docs.documents] == [("a", ("a",), (1,)), ("b", ("b-1", "b-2"), (1, 3))]
    problems = dict(docs.problems)
    assert "c-1 and c-2 both have page number 1" in problems["c"]
    assert "also the id of page d" in problems["d"]
    assert docs.of_page == {"a": "a", "b-1": "b", "b-2": "b"}


def test_old_projects_load_as_one_page_documents(receipts_project):
    proj = Project.open(receipts_project)
    docs = proj.documents()
    ids = proj.page_ids()
    assert [d.id for d in docs.documents] == ids and all(d.pages == (d.id,) for d in docs.documents)
    assert docs.problems == []


def test_project_documents_and_document_pages(project):
    for p in (word_page("inv-p2", ["Total", "9.00"], "inv", 2), word_page("inv-p1", ["Invoice", "7"], "inv", 1),
              word_page("r1", ["x"])):
        project.add_page(p)
    assert [p.id for p in project.document_pages("inv")] == ["inv-p1", "inv-p2"]
    assert [p.id for p in project.document_pages("r1")] == ["r1"]
    with pytest.raises(ProjectError, match="no document or page 'nope'"):
        project.document_pages("nope")


def test_pages_of_different_sizes_in_one_document_keep_their_own(project):
    """Documented behaviour: each page keeps its own size and boxes; nothing is rescaled."""
    project.add_page(word_page("c-p1", ["a"], "c", 1, 612, 792))
    project.add_page(word_page("c-p2", ["b"], "c", 2, 1224, 792))  # a fold-out
    pages = project.document_pages("c")
    assert [(p.width, p.height) for p in pages] == [(612, 792), (1224, 792)]


def test_bind_document_errors():
    p = word_page("x", ["a"])
    with pytest.raises(DocumentError, match="both have page number 1"):
        bind_document("doc", [(1, p), (1, word_page("y", ["b"]))], 2, "f.pdf")
    with pytest.raises(DocumentError, match="MAX_PAGES_PER_DOCUMENT"):
        bind_document("doc", [(1, p)], MAX_PAGES_PER_DOCUMENT + 1, "f.pdf")
    assert bind_document("doc", [(1, p)], 1) == [p]  # a one-page file: the page as it was


def test_import_pdf_makes_one_document_per_file(project, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "inv.pdf").write_bytes(pdf_of([[(72, 700, "Invoice 7")], [], [(72, 100, "Total 9.00")]]))
    (tmp_path / "in" / "one.pdf").write_bytes(minimal_pdf([(72, 700, "Receipt 1")]))
    report = import_pages("pdf", tmp_path / "in", project)
    assert report.added == ["inv-p1", "inv-p3", "one"] and not report.errors
    docs = project.documents()
    assert [(d.id, d.pages, d.numbers) for d in docs.documents] == [
        ("inv", ("inv-p1", "inv-p3"), (1, 3)), ("one", ("one",), (1,))]
    assert "document" not in json.loads(project.page_path("one").read_text())  # as before documents


def test_import_pdf_tells_pages_imported_before_documents_their_document(project, tmp_path):
    from dataclasses import replace

    path = tmp_path / "inv.pdf"
    path.write_bytes(pdf_of([[(72, 700, "Invoice 7")], [(72, 100, "Total 9.00")]]))
    for p in pdf_pages(path):  # as an older version saved them: no document fields
        project.add_page(replace(p, document=None, page_number=None))
    project.save_labels("inv-p2", project.load_labels("inv-p2"))
    report = import_pages("pdf", path, project)
    assert sorted(report.unchanged) == ["inv-p1", "inv-p2"] and not report.errors
    assert project.load_page("inv-p2").document == "inv"


def test_a_5000_page_pdf_is_refused_naming_the_bound(project, tmp_path):
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for _ in range(5000):
        doc.new_page(100, 100)
    buf = io.BytesIO()
    doc.save(buf)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "huge.pdf").write_bytes(buf.getvalue())
    (tmp_path / "in" / "ok.pdf").write_bytes(minimal_pdf([(72, 700, "Receipt 1")]))
    report = import_pages("pdf", tmp_path / "in", project)
    assert report.added == ["ok"]  # the rest goes on
    [(f, msg)] = report.errors
    assert f.endswith("huge.pdf") and "5000 pages" in msg and "MAX_PAGES_PER_DOCUMENT" in msg


# -- 2. answers per document ------------------------------------------------------------------

def invoice_document(project, doc="inv", total_on=(2, 3)):
    """Three pages: the vendor on pages 1 and 3, the number on page 1, the total on `total_on`."""
    texts = {1: ["ACME", "Ltd", "Invoice", "No", "4711", "Widget", "10.00"],
             2: ["Carried", "forward", "Total", "30.00", "Gadget", "20.00"],
             3: ["ACME", "Ltd", "Total", "30.00", "Thank", "you"]}
    for n in (1, 2, 3):
        t = list(texts[n])
        if n not in total_on:
            t = [w for w in t if w not in ("Total", "30.00")]
        project.add_page(word_page(f"{doc}-p{n}", t, doc, n))


def test_a_document_is_asked_once_with_page_markers_and_grounded_where_printed(project, tmp_path):
    from dxstudio.grounding import project_targets
    from dxstudio.labelling import LabelClient, label_project
    from dxstudio.project import Field
    from tests.test_labelling import FakeEndpoint

    project.set_schema([Field("vendor"), Field("number"), Field("total")])
    project.save()
    invoice_document(project)
    project.add_page(word_page("r1", ["Shop", "Total", "5.00"]))
    server = FakeEndpoint(default=("good", {"vendor": "ACME Ltd", "number": "4711", "total": "30.00"}))
    try:
        client = LabelClient(server.url, "m", None, cache_dir=tmp_path / "cache", timeout=5, retries=0)
        report = label_project(project, client)
        assert len(server.requests) == 2 and report.documents == ["inv", "r1"] and not report.errors
        prompt = server.requests[0]["body"]["messages"][1]["content"]
        assert "=== Page 1 of 3 ===" in prompt and "=== Page 3 of 3 ===" in prompt
        assert prompt.index("4711") < prompt.index("Carried") < prompt.index("Thank")
        assert "=== Page" not in server.requests[1]["body"]["messages"][1]["content"]  # a page of its own
        g = {p: project.load_labels(p).grounding for p in ("inv-p1", "inv-p2", "inv-p3")}
        # a number printed on pages 2 and 3: the last; text on pages 1 and 3: the first
        assert g["inv-p3"]["total"]["status"] == "exact" and g["inv-p3"]["total"]["words"] == [3]
        assert g["inv-p2"]["total"] == {"status": "other_page", "words": [], "page": "inv-p3",
                                        "reason": "printed on page 3 (inv-p3) of document inv"}
        assert g["inv-p1"]["vendor"]["words"] == [0, 1] and g["inv-p3"]["vendor"]["status"] == "other_page"
        assert g["inv-p1"]["number"]["status"] == "exact"
        assert project.load_labels("inv-p2").extra["document"] == "inv"
        pt = project_targets(project)
        kept = {pid: t for pid, _, t in pt.kept}
        assert set(kept) == {"inv-p1", "inv-p2", "inv-p3"}  # r1 does not print ACME Ltd
        assert kept["inv-p2"].field_words["total"] == () and list(kept["inv-p2"].tags) == [0] * 6
        again = label_project(project, client, force=True)
        assert again.cached == 2 and len(server.requests) == 2  # the document's answer is cached
    finally:
        server.close()


def test_a_value_printed_on_no_page_excludes_the_document(project):
    from dxstudio.grounding import project_targets
    from dxstudio.labelling import import_answers_jsonl

    invoice_document(project)
    project.add_page(word_page("r1", ["Total", "5.00"]))
    path = project.root / "answers.jsonl"
    path.write_text(json.dumps({"id": "inv", "answers": {"total": "99.00", "number": "4711"}}) + "\n"
                    + json.dumps({"id": "r1", "answers": {"total": "5.00", "number": None}}) + "\n"
                    + json.dumps({"id": "ghost", "answers": {"total": "1"}}) + "\n")
    report = import_answers_jsonl(project, path)
    assert report.documents == ["inv"] and report.labelled == ["inv-p1", "inv-p2", "inv-p3", "r1"]
    assert "no page 'ghost' (nor a document of that id)" in report.errors[0][1]
    pt = project_targets(project)
    assert [p for p, _, _ in pt.kept] == ["r1"]
    reasons = dict(pt.excluded)
    assert all("'99.00' is not on any page of document inv" in reasons[f"inv-p{n}"] for n in (1, 2, 3))
    assert pt.summary()["excluded_by_reason"] == {"total absent": 3}


def test_a_long_document_is_asked_in_parts_of_whole_pages(project, tmp_path):
    from dxstudio.labelling import LabelClient, document_parts
    from tests.test_labelling import FakeEndpoint

    invoice_document(project)
    pages = project.document_pages("inv")
    assert [[p.id for p in part] for part in document_parts(pages, 150)] == [["inv-p1", "inv-p2"], ["inv-p3"]]
    server = FakeEndpoint(script=[("good", {"total": None, "number": "4711"}),
                                  ("good", {"total": "30.00", "number": "9"})])
    try:
        client = LabelClient(server.url, "m", None, timeout=5, retries=0)
        answers = client.ask_document(pages, project.schema, max_chars=150)
        assert answers == {"total": "30.00", "number": "4711"}  # the first part's value that is not null
        assert len(server.requests) == 2
    finally:
        server.close()


# -- 3. training per page, the split per document -----------------------------------------------

def labelled_documents(project, n_docs=6, pages_per_doc=3, singles=4):
    from dxstudio.labelling import import_answers_jsonl

    lines = []
    for d in range(n_docs):
        for n in range(1, pages_per_doc + 1):
            words = [f"Doc{d}", "page", str(n)] + (["Total", f"{d + 1}0.00"] if n == pages_per_doc else ["Items"])
            project.add_page(word_page(f"d{d}-p{n}", words, f"d{d}", n))
        lines.append({"id": f"d{d}", "answers": {"total": f"{d + 1}0.00", "number": None}})
    for s in range(singles):
        project.add_page(word_page(f"s{s}", ["Shop", "Total", f"{s}.50"]))
        lines.append({"id": f"s{s}", "answers": {"total": f"{s}.50", "number": None}})
    path = project.root / "a.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = import_answers_jsonl(project, path)
    assert not report.errors


def test_the_split_keeps_a_documents_pages_together(project):
    from dxstudio.tuning import schedule
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import resolve_settings

    labelled_documents(project)
    settings = resolve_settings(project.settings, {"heldout_fraction": 0.3, "seed": 5})
    for fold in (None, (0, 3), (2, 3), (None, 3)):
        pt, train, held = usable_split(project, settings, 512, "tuning", fold)
        docs_of = lambda rows: {page.document_id for _, page, _ in rows}  # noqa: E731
        assert not docs_of(train) & docs_of(held)
        assert len(train) + len(held) == 22
        for rows in (train, held):  # each document's pages together, in page order
            ids = [pid for pid, _, _ in rows]
            for d in docs_of(rows):
                at = [i for i, (_, p, _) in enumerate(rows) if p.document_id == d]
                assert at == list(range(at[0], at[0] + len(at)))
                assert [rows[i][1].number for i in at] == sorted(rows[i][1].number for i in at)
            assert len(ids) == len(set(ids))
    # one-page documents: the split of pages, unchanged
    docs = {d: [d] for d in ["a", "b", "c", "d", "e"]}
    assert schedule.split_documents(docs, 7, 0.4) == schedule.split_pages(list(docs), 7, 0.4)
    assert schedule.fold_split_documents(docs, 7, 3, 1) == schedule.fold_split(list(docs), 7, 3, 1)
    assert schedule.document_pages_order(docs, 7) == schedule.hash_order(list(docs), 7)


def test_pages_of_a_document_with_two_page_1s_are_left_out_of_training(project):
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import resolve_settings

    labelled_documents(project, n_docs=2, pages_per_doc=2, singles=2)
    project.add_page(word_page("d0-extra", ["Doc0", "Total", "10.00"], "d0", 1))
    lf = project.load_labels("d0-p1")
    lf.page = "d0-extra"
    lf.grounding = {"total": {"status": "exact", "words": [2], "reason": ""}, "number": {"status": "null"}}
    project.save_labels("d0-extra", lf)
    pt, train, held = usable_split(project, resolve_settings(project.settings, {}), 512, "tuning")
    used = {pid for pid, _, _ in train + held}
    assert not used & {"d0-p1", "d0-p2", "d0-extra"}
    reasons = dict(pt.excluded)
    assert "both have page number 1" in reasons["d0-p1"] and "both have page number 1" in reasons["d0-extra"]


def test_one_document_cannot_be_split(project):
    from dxstudio.tuning.pages import usable_split
    from dxstudio.tuning.settings import TuneError, resolve_settings

    labelled_documents(project, n_docs=1, pages_per_doc=3, singles=0)
    with pytest.raises(TuneError, match="all of document d0; tuning needs at least 2 documents"):
        usable_split(project, resolve_settings(project.settings, {}), 512, "tuning")


# -- 4. scores per document -----------------------------------------------------------------------

def test_document_scores_take_the_most_confident_pages_value():
    from dxstudio.tuning.scoring import HeldOutDocument, HeldOutPage, score_documents, score_pages

    def doc(did, pages):
        return HeldOutDocument(did, tuple(pages))

    # total printed on page 2; the model reads it on page 2 (0.9) and wrongly on page 1 (0.6)
    right = doc("a", [HeldOutPage("a1", {"total": ()}, {"total": ((4,), 0.6)}),
                      HeldOutPage("a2", {"total": (3,)}, {"total": ((3,), 0.9)})])
    # the wrong page's value is the more confident one
    wrong = doc("b", [HeldOutPage("b1", {"total": ()}, {"total": ((4,), 0.95)}),
                      HeldOutPage("b2", {"total": (3,)}, {"total": ((3,), 0.9)})])
    missed = doc("c", [HeldOutPage("c1", {"total": (1,)}, {"total": None}), HeldOutPage("c2", {}, {})])
    unscored = doc("d", [HeldOutPage("d1", {"total": (1,)}, {"total": ((1,), 0.9)}),
                         HeldOutPage("d2", {"total": (2,)}, {}, frozenset({"total"}))])
    rep = score_documents(["total"], [right, wrong, missed, unscored], share=0.5, min_values=1)
    out = {d["id"]: d["outcomes"]["total"] for d in rep["documents"]}
    assert out == {"a": "correct", "b": "wrong", "c": "missed", "d": "unscored"}
    assert rep["documents"][0]["values"]["total"] == {"page": "a2", "words": [3], "confidence": 0.9}
    assert rep["fields"]["total"]["agreement"] == 1 / 3 and rep["n_documents"] == 4 and rep["n_pages"] == 8
    # per page the same pages score otherwise: the spurious page-1 values count against
    pages = [p for d in (right, wrong, missed, unscored) for p in d.pages]
    assert score_pages(["total"], pages, 0.5, 1)["fields"]["total"]["agreement"] == 3 / 6
    with pytest.raises(Exception, match="appears twice"):
        score_documents(["total"], [right, right])


def test_one_page_documents_score_as_their_pages():
    import random

    from dxstudio.tuning.scoring import HeldOutDocument, HeldOutPage, score_documents, score_pages

    rng = random.Random(3)
    pages = []
    for i in range(40):
        label = {"a": (rng.randrange(5),) if rng.random() < 0.7 else (), "b": ()}
        pred = {"a": ((rng.randrange(5),), rng.random()) if rng.random() < 0.8 else None,
                "b": ((1,), rng.random()) if rng.random() < 0.2 else None}
        pages.append(HeldOutPage(f"p{i}", label, pred))
    by_page = score_pages(["a", "b"], pages, 0.8, 3)
    by_doc = score_documents(["a", "b"], [HeldOutDocument(p.page_id, (p,)) for p in pages], 0.8, 3)
    for k in ("fields", "overall", "threshold"):
        assert by_doc[k] == by_page[k] or k == "overall"
    assert {k: v for k, v in by_doc["overall"].items() if k != "threshold_statement"} == \
        {k: v for k, v in by_page["overall"].items() if k != "threshold_statement"}


# -- 5. extract and route per document ---------------------------------------------------------

@pytest.fixture
def doc_model(tmp_path):
    from dxstudio import cli

    path = tmp_path / "m.safetensors"
    assert cli.main(["new-model", str(path), "--size", "tiny", "--fields", "total,number", "--seed", "3"]) == 0
    return path


def test_extract_gives_one_line_per_document_and_per_page_with_pages(doc_model, tmp_path, capsys):
    from dxstudio import cli

    pdf = tmp_path / "inv.pdf"
    pdf.write_bytes(pdf_of([[(72, 700, "Invoice 4711 Widget 10.00")], [(72, 100, "Total 30.00 Gadget 20.00")]],
                           sizes=[(612, 792), (842, 595)]))  # a landscape second page: documented, fine
    single = tmp_path / "r1.json"
    single.write_text(json.dumps(word_page("r1", ["Shop", "Total", "5.00"]).to_dict()))
    capsys.readouterr()
    assert cli.main(["extract", str(doc_model), str(pdf), str(single)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["id"] for x in lines] == ["inv", "r1"]
    doc, page = lines
    assert doc["pages"] == ["inv-p1", "inv-p2"] and set(doc["fields"]) == {"total", "number"}
    assert "pages" not in page and "page" not in page["fields"]["total"]  # a page of its own: as before
    assert cli.main(["extract", str(doc_model), str(pdf), "--pages"]) == 0
    per_page = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["id"], x["document"], x["page_number"]) for x in per_page] == [("inv-p1", "inv", 1), ("inv-p2", "inv", 2)]
    for name, v in doc["fields"].items():  # the document's value is its most confident page's
        vals = [(x["fields"][name]["confidence"], x["id"], x["fields"][name]) for x in per_page
                if x["fields"][name]["value"] is not None]
        if not vals:
            assert v["value"] is None and v["page"] is None
            continue
        conf, pid, best = max(vals, key=lambda t: t[0])
        assert (v["page"], v["words"], v["confidence"], v["value"]) == (pid, best["words"], conf, best["value"])
        assert v["page_number"] == int(pid[-1]) and v["route"] == "ask"  # a new model stores no threshold


def test_extract_says_when_a_documents_pages_come_apart_or_repeat(doc_model, tmp_path, capsys):
    from dxstudio import cli

    paths = []
    for name, page in (("1", word_page("a-p1", ["x"], "a", 1)), ("2", word_page("b", ["y"])),
                       ("3", word_page("a-p2", ["z"], "a", 2)), ("4", word_page("a-p2b", ["w"], "a", 2))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(page.to_dict()))
    capsys.readouterr()
    assert cli.main(["extract", str(doc_model), *map(str, paths)]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(x)["id"] for x in out.splitlines()] == ["a", "b", "a"]
    assert "comes after another document's pages" in err and "page number 2 given twice; page a-p2b left out" in err


def test_route_asks_a_documents_non_local_fields_once_with_its_pages(doc_model, tmp_path, capsys):
    from dxstudio import cli
    from tests.test_labelling import FakeEndpoint

    proj = Project.create(tmp_path / "p", "p", ["total", "number"])
    proj.labelling.update({"url": None, "model": "m"})
    server = FakeEndpoint(default=("good", {"total": "30.00", "number": "4711"}))
    try:
        proj.labelling["url"] = server.url
        proj.save()
        pdf = tmp_path / "inv.pdf"
        pdf.write_bytes(pdf_of([[(72, 700, "Invoice 4711")], [(72, 100, "Total 30.00")]]))
        capsys.readouterr()
        code = cli.main(["route", str(doc_model), str(pdf), "--project", str(proj.root), "--threshold", "1.0"])
        out, err = capsys.readouterr()
        assert code == 0, err
        lines = [json.loads(x) for x in out.splitlines()]
        assert lines[0]["id"] == "inv" and lines[0]["pages"] == ["inv-p1", "inv-p2"]
        assert {f: v["value"] for f, v in lines[0]["fields"].items()} == {"total": "30.00", "number": "4711"}
        assert len(server.requests) == 1  # one question for the document
        prompt = server.requests[0]["body"]["messages"][1]["content"]
        assert "=== Page 1 of 2 ===" in prompt and "=== Page 2 of 2 ===" in prompt
        assert lines[1]["summary"]["pages_asked"] == 1
    finally:
        server.close()


def test_generated_invoices_print_the_total_on_the_last_page_only(tmp_path):
    from bench.multipage_invoices import generate, write
    from dxstudio.grounding import project_targets
    from dxstudio.labelling import import_answers_jsonl

    docs = generate(6, seed=4)
    write(tmp_path / "gen", docs)
    project = Project.create(tmp_path / "p", "gen", ["vendor", "invoice_number", "total"])
    assert not import_pages("json", tmp_path / "gen" / "pages", project).errors
    assert not import_answers_jsonl(project, tmp_path / "gen" / "answers.jsonl").errors
    pt = project_targets(project)
    assert not pt.excluded and len(pt.kept) == sum(len(p) for p, _ in docs)
    for pages, answers in docs:
        last = pages[-1].id
        assert answers["total"] in " ".join(w.text for w in pages[-1].words)
        assert all(answers["total"] not in " ".join(w.text for w in p.words) for p in pages[:-1])
        for p in pages:
            g = project.load_labels(p.id).grounding
            assert g["total"]["status"] == ("exact" if p.id == last else "other_page")
            assert g["vendor"]["status"] == ("exact" if p.number == 1 else "other_page")  # printed on every page


def test_a_document_value_read_at_another_pages_printing_is_value_right():
    from dxstudio.engine.extract import FieldValue, PagePrediction
    from dxstudio.grounding import PageTargets
    from dxstudio.tuning.evaluation import score_predictions

    p1 = word_page("v-p1", ["ACME", "Ltd", "Invoice"], "v", 1)
    p2 = word_page("v-p2", ["ACME", "Ltd", "Total", "9.00"], "v", 2)
    t1 = PageTargets("v-p1", None, {"vendor": (0, 1), "total": ()}, set())
    t2 = PageTargets("v-p2", None, {"vendor": (), "total": (3,)}, set())
    pr1 = PagePrediction("v-p1", {"vendor": FieldValue((0, 1), "ACME Ltd", 0.7), "total": None}, None, None)
    pr2 = PagePrediction("v-p2", {"vendor": FieldValue((0, 1), "ACME Ltd", 0.8), "total": FieldValue((3,), "9.00", 0.9)},
                         None, None)
    rep = score_predictions(["vendor", "total"], [("v-p2", p2, t2, pr2), ("v-p1", p1, t1, pr1)], 0.9, 1)
    d = rep["documents"]
    assert d["documents"][0]["pages"] == ["v-p1", "v-p2"]  # page order, whatever the input order
    assert d["documents"][0]["outcomes"] == {"vendor": "wrong", "total": "correct"}
    assert d["fields"]["vendor"]["value_agreement"] == 1.0 and d["fields"]["vendor"]["agreement"] == 0.0


def test_eval_all_reports_per_document_beside_per_page(doc_model, project, capsys):
    from dxstudio import cli

    labelled_documents(project, n_docs=3, pages_per_doc=2, singles=2)
    capsys.readouterr()
    assert cli.main(["eval", str(doc_model), str(project.root), "--all"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    docs = report["documents"]
    assert docs["n_documents"] == 5 and docs["n_pages"] == 8
    assert sorted(d["id"] for d in docs["documents"]) == ["d0", "d1", "d2", "s0", "s1"]
    assert docs["stored"]["pooled"]["values"] == 0  # a new model stores no threshold: nothing local
    assert "Per document (5 documents, 3 of several pages; 8 pages): agreement" in err
    from dxstudio.ui.results_tab import documents_sentence

    assert documents_sentence(report).startswith("Per document: 5 held-out documents (3 of several pages, 8 pages)")
