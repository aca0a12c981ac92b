import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from dxstudio import cli
from dxstudio.importers import (SourceError, cord_page, funsd_page, image_size, import_pages, pdf_pages,
                                reading_order, split_line)
from dxstudio.project import Project
from tests.conftest import load_script

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared beside the repo
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "proj", "imports")


def tiny_png(path: Path, width: int, height: int) -> None:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)))


def minimal_pdf(texts, size=(612, 792)) -> bytes:
    """A one-page PDF written by hand: Helvetica text objects at (x, y) in points."""
    content = "".join(f"BT /F1 12 Tf {x} {y} Td ({t}) Tj ET\n" for x, y, t in texts).encode()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            (f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {size[0]} {size[1]}] /Contents 4 0 R "
             f"/Resources << /Font << /F1 5 0 R >> >> >>").encode(),
            b"<< /Length %d >>\nstream\n" % len(content) + content + b"endstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    return pdf_from_objects(objs)


def pdf_from_objects(objs, trailer: bytes = b"") -> bytes:
    """A PDF file of the objects 1..n (object 1 the catalog) with its cross-reference table;
    `trailer`: more trailer entries (an /Encrypt, an /ID)."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for o in offsets:
        out += b"%010d 00000 n \n" % o
    out += (b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n"
            % (len(objs) + 1, b" " + trailer if trailer else b"", xref))
    return bytes(out)


# -- helpers --------------------------------------------------------------------------------------

def test_split_line_estimates_boxes_by_characters():
    words = split_line("AB  CDEF", (0.0, 5.0, 80.0, 15.0))  # 8 characters of 10 units
    assert [w.text for w in words] == ["AB", "CDEF"]
    assert words[0].box == (0.0, 5.0, 20.0, 15.0)
    assert words[1].box == (40.0, 5.0, 80.0, 15.0)


def test_reading_order_rows_then_left_to_right():
    boxes = [(300, 12, 350, 30), (10, 10, 80, 30), (10, 50, 80, 70), (100, 8, 200, 28)]
    assert reading_order(boxes) == [1, 3, 0, 2]


def test_image_size_png_and_jpeg(tmp_path):
    tiny_png(tmp_path / "a.png", 123, 45)
    assert image_size(tmp_path / "a.png") == (123, 45)
    assert image_size(tmp_path / "missing.png") is None
    jpg = DATA / "sroie-train" / "img" / "000.jpg"
    if jpg.exists():
        assert image_size(jpg) == (457, 1000)


# -- json ---------------------------------------------------------------------------------------

def test_json_import_reports_bad_files_and_goes_on(project, tmp_path):
    src = tmp_path / "pages"
    src.mkdir()
    shutil.copy(FIXTURES / "pages" / "invoice-1.json", src)
    (src / "broken.json").write_text("{")
    (src / "noid.json").write_text(json.dumps({"width": 1, "height": 1, "words": []}))
    bad_id = json.loads((FIXTURES / "pages" / "invoice-1.json").read_text())
    bad_id["id"] = "../evil"
    (src / "evil.json").write_text(json.dumps(bad_id))
    report = import_pages("json", src, project)
    assert report.added == ["invoice-1"]
    errors = dict(report.errors)
    assert set(errors) == {str(src / n) for n in ("broken.json", "noid.json", "evil.json")}
    assert "not JSON" in errors[str(src / "broken.json")]
    assert "not a valid page id" in errors[str(src / "evil.json")]  # the one rule of engine/page.py
    again = import_pages("json", src / "invoice-1.json", project)
    assert again.unchanged == ["invoice-1"] and not again.errors


def test_unknown_format_and_missing_source(project, tmp_path):
    with pytest.raises(SourceError, match="unknown import format 'xml'"):
        import_pages("xml", tmp_path, project)
    with pytest.raises(SourceError, match="no such file or folder"):
        import_pages("json", tmp_path / "nope", project)


# -- SROIE --------------------------------------------------------------------------------------

def make_sroie(root: Path, with_sizes=True, with_image=True):
    (root / "box").mkdir(parents=True)
    (root / "key").mkdir()
    lines = ["10,10,110,10,110,30,10,30,ACME TRADING SDN BHD",
             "10,40,90,40,90,60,10,60,NO 5, JALAN SATU,",  # commas inside TEXT
             "10,70,60,70,60,90,10,90,TOTAL",
             "70,70,110,70,110,90,70,90,12.50"]
    (root / "box" / "001.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (root / "key" / "001.json").write_text(json.dumps(
        {"company": "ACME TRADING SDN BHD", "date": "01/02/2019", "address": "NO 5, JALAN SATU", "total": "12.50"}))
    (root / "box" / "002.csv").write_text("10,10,50,10,50,30,10,30,HELLO\n1,2,3,TOO SHORT\n")
    (root / "box" / "003.csv").write_text("5,5,45,5,45,25,5,25,ONLY LINE\n")
    (root / "key" / "003.json").write_text(json.dumps({"company": "X", "colour": "red"}))
    if with_image:
        (root / "img").mkdir()
        tiny_png(root / "img" / "001.png", 300, 400)
    if with_sizes:
        (root / "image_sizes.csv").write_text("id,width,height\n001,600,800\n")


def test_sroie_folder(project, tmp_path):
    make_sroie(tmp_path / "sroie")
    report = import_pages("sroie", tmp_path / "sroie", project)
    assert report.added == ["001", "003"]  # 003's key file is bad: the page comes without answers
    assert project.load_labels("003").answers is None
    assert report.fields_added == ["company", "date", "address", "total"]
    errs = dict(report.errors)
    assert "line 2" in errs[str(tmp_path / "sroie" / "box" / "002.csv")]
    assert "unknown field(s) ['colour']" in errs[str(tmp_path / "sroie" / "key" / "003.json")]
    page = project.load_page("001")
    assert (page.width, page.height) == (600, 800)  # image_sizes.csv wins over the image
    assert [w.text for w in page.words] == ["ACME", "TRADING", "SDN", "BHD", "NO", "5,", "JALAN", "SATU,", "TOTAL", "12.50"]
    assert page.words[-1].box == (70.0, 70.0, 110.0, 90.0)
    labels = project.load_labels("001")
    assert labels.answer_source == "import"
    status = {f: g["status"] for f, g in labels.grounding.items()}
    assert status == {"company": "exact", "date": "absent", "address": "normalized", "total": "exact"}
    assert labels.grounding["address"]["words"] == [4, 5, 6, 7]
    assert Project.open(project.root).field_names == ["company", "date", "address", "total"]


def test_sroie_page_size_falls_back_to_image_then_boxes(tmp_path):
    make_sroie(tmp_path / "a", with_sizes=False)
    p = Project.create(tmp_path / "pa", "a")
    import_pages("sroie", tmp_path / "a", p)
    assert (p.load_page("001").width, p.load_page("001").height) == (300, 400)
    make_sroie(tmp_path / "b", with_sizes=False, with_image=False)
    p = Project.create(tmp_path / "pb", "b")
    import_pages("sroie", tmp_path / "b", p)
    assert (p.load_page("001").width, p.load_page("001").height) == (110, 90)


def test_reimport_keeps_the_review(project, tmp_path):
    make_sroie(tmp_path / "sroie")
    import_pages("sroie", tmp_path / "sroie", project)
    labels = project.load_labels("001")
    labels.review = {"state": "accepted", "fixes": {"date": []}, "history": [{"op": "fix"}]}
    project.save_labels("001", labels)
    report = import_pages("sroie", tmp_path / "sroie", project)
    assert report.unchanged == ["001", "003"] and report.fields_added == []
    assert project.load_labels("001").review["fixes"] == {"date": []}


@pytest.mark.shared_data("sroie-train")
def test_real_sroie_receipts(project):
    root = DATA / "sroie-train"
    for stem in ("000", "004", "104"):  # 004 has CRLF lines, 104 lacks "address"
        report = import_pages("sroie", root / "box" / f"{stem}.csv", project)
        assert report.added == [stem] and not report.errors
    page = project.load_page("000")
    assert (page.width, page.height) == (463, 1013)
    assert page.image.endswith("img/000.jpg")
    assert page.words[0].text == "TAN" and page.words[0].box[1] == 25
    labels = project.load_labels("000")
    assert labels.answers["total"] == "9.00"
    assert labels.grounding["total"]["status"] in ("exact", "normalized")
    assert all(page.words[i].text.startswith("9.00") for i in labels.grounding["total"]["words"])
    # OCR says "SDN BND" where the key says "SDN BHD": one letter misread in 26, forgiven
    # (dxstudio/grounding.py FUZZY_CHARS_PER_EDIT), on the company's words of the first rows
    company = labels.grounding["company"]
    assert company["status"] == "normalized" and "1 character(s) read differently" in company["reason"]
    assert " ".join(page.words[i].text for i in company["words"]) == "BOOK TA .K(TAMAN DAYA) SDN BND"
    assert project.load_labels("104").answers["address"] is None


# -- CORD ---------------------------------------------------------------------------------------

def test_cord_file_clamps_boxes_and_sorts_lines(tmp_path):
    def word(text, x0, y0, x1, y1, is_key=0):
        return {"text": text, "is_key": is_key,
                "quad": {"x1": x0, "y1": y0, "x2": x1, "y2": y0, "x3": x1, "y3": y1, "x4": x0, "y4": y1}}
    receipt = {"meta": {"image_size": {"width": 200, "height": 100}}, "valid_line": [
        {"category": "total.total_price", "group_id": 2, "words": [word("1,500", 150, 60, 210, 75)]},
        {"category": "total.total_price", "group_id": 2, "words": [word("TOTAL", -5, 61, 40, 74, is_key=1)]},
        {"category": "menu.nm", "group_id": 1, "words": [word("Tea", 10, 10, 40, 25), word("", 45, 10, 50, 25)]},
        {"category": "total.cashprice", "group_id": 3, "words": [word("2,000", 150, 80, 190, 95)]}]}
    (tmp_path / "receipt_00001.json").write_text(json.dumps(receipt))
    page, answers = cord_page(tmp_path / "receipt_00001.json")
    assert [w.text for w in page.words] == ["Tea", "TOTAL", "1,500", "2,000"]
    assert page.words[1].box[0] == 0 and page.words[2].box[2] == 200
    assert answers == {"total": "1,500", "subtotal": None, "tax": None, "cash": "2,000", "change": None}


@pytest.mark.shared_data("cord-v1-train/json")
def test_real_cord_receipts(project):
    src = DATA / "cord-v1-train" / "json"
    for name in ("receipt_00000.json", "receipt_00001.json", "receipt_00002.json"):
        report = import_pages("cord", src / name, project)
        assert len(report.added) == 1 and not report.errors and report.answers == 1
    assert project.field_names == ["total", "subtotal", "tax", "cash", "change"]
    page = project.load_page("receipt_00000")
    assert (page.width, page.height) == (864, 1296)
    assert all(0 <= w.box[0] <= w.box[2] <= 864 and 0 <= w.box[1] <= w.box[3] <= 1296 for w in page.words)
    tops = [w.box[1] for w in page.words]
    assert tops[0] < tops[len(tops) // 2] < tops[-1]  # roughly top to bottom
    labels = project.load_labels("receipt_00000")
    assert labels.answers["total"] == "1,591,600" and labels.answers["subtotal"] == "1,346,000"
    assert labels.grounding["total"]["status"] == "exact"
    assert [page.words[i].text for i in labels.grounding["total"]["words"]] == ["1,591,600"]


# -- FUNSD --------------------------------------------------------------------------------------

@pytest.mark.shared_data("funsd/training_data/annotations/0000971160.json")
def test_real_funsd_form(project):
    path = DATA / "funsd" / "training_data" / "annotations" / "0000971160.json"
    page = funsd_page(path)
    form = json.loads(path.read_text())["form"]
    texts = sorted(w["text"] for e in form for w in e["words"] if w["text"].strip())
    assert sorted(w.text for w in page.words) == texts  # every word, empty ones dropped
    assert page.image.endswith("images/0000971160.png")
    assert (page.width, page.height) == image_size(page.image)
    # words stay together within an entity
    entity = next(e for e in form if len(e["words"]) > 3)
    seq = [w.text for w in page.words]
    first = [w["text"] for w in entity["words"] if w["text"].strip()]
    assert any(seq[i:i + len(first)] == first for i in range(len(seq)))
    report = import_pages("funsd", path, project)
    assert report.added == ["0000971160"] and project.field_names == [] and report.answers == 0


# -- PDF ----------------------------------------------------------------------------------------

def test_pdf_text_layer(project, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "invoice 7.pdf").write_bytes(minimal_pdf([(72, 700, "Invoice No 42"), (72, 680, "Total 12.50")]))
    (tmp_path / "docs" / "scan.pdf").write_bytes(minimal_pdf([]))
    (tmp_path / "docs" / "junk.pdf").write_bytes(b"not a pdf at all")
    pages = pdf_pages(tmp_path / "docs" / "invoice 7.pdf")
    assert len(pages) == 1
    page = pages[0]
    assert page.id == "invoice_7" and (page.width, page.height) == (612, 792)
    assert [w.text for w in page.words] == ["Invoice", "No", "42", "Total", "12.50"]
    x0, y0, x1, y1 = page.words[0].box
    assert 72 <= x0 < x1 < 120 and 792 - 700 - 14 < y0 < y1 <= 792 - 700 + 4  # y flipped downwards
    assert page.words[3].box[1] > page.words[0].box[1]  # the second line is lower
    report = import_pages("pdf", tmp_path / "docs", project)
    assert report.added == ["invoice_7"]
    errors = dict(report.errors)
    assert "no text layer" in errors[str(tmp_path / "docs" / "scan.pdf")]
    assert "not a readable PDF" in errors[str(tmp_path / "docs" / "junk.pdf")]


# -- the command --------------------------------------------------------------------------------

def test_import_command_exit_codes(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES / "pages" / "invoice-1.json", src)
    target = tmp_path / "newproj"
    assert cli.main(["import", "json", str(src), str(target)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == 1 and out["pages_in_project"] == 1
    assert Project.open(target).page_ids() == ["invoice-1"]
    (src / "bad.json").write_text("[]")
    assert cli.main(["import", "json", str(src), str(target)]) == 1
    captured = capsys.readouterr()
    assert "bad.json" in captured.err and json.loads(captured.out)["unchanged"] == 1
    assert cli.main(["import", "json", str(tmp_path / "missing"), str(target)]) == 2
    assert "no such file or folder" in capsys.readouterr().err


# -- the bundled sample ---------------------------------------------------------------------------

SAMPLE = Path(__file__).parent.parent / "resources" / "sample"


def test_bundled_sample_project_is_usable():
    from dxstudio.grounding import project_targets

    p = Project.open(SAMPLE)
    assert len(p.page_ids()) == 200 and p.field_names == ["total", "subtotal", "tax", "cash", "change"]
    credits = (SAMPLE / "CREDITS.md").read_text()
    assert "CC BY 4.0" in credits and "Clova AI" in credits
    targets = project_targets(p, max_words=512)
    assert len(targets.kept) >= 35 and not targets.errors
    assert all(r for _, r in targets.excluded)  # every exclusion says why


@pytest.mark.shared_data("cord-v1-train/json")
def test_sample_script_rebuilds_the_committed_sample(tmp_path):
    make_sample = load_script(SAMPLE.parent / "make_sample.py")
    make_sample.build(DATA / "cord-v1-train", tmp_path / "sample")
    built = sorted(p.relative_to(tmp_path / "sample") for p in (tmp_path / "sample").rglob("*") if p.is_file())
    committed = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*") if p.is_file())
    assert built == committed
    for rel in built:
        assert (tmp_path / "sample" / rel).read_bytes() == (SAMPLE / rel).read_bytes(), rel


def test_pdf_pages_come_with_their_rendered_images(project, tmp_path):
    """import pdf renders each page (pypdfium2) to pages/images/<id>.png, which the page JSON
    names as the sample's images are named; importing again leaves everything unchanged, and a
    page imported before images were rendered stays as it was."""
    import numpy as np

    from dxstudio.importers import png_gray

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bill.pdf").write_bytes(minimal_pdf([(20, 350, "Bill 9"), (20, 330, "Total 3.00")],
                                                          size=(300, 400)))
    report = import_pages("pdf", tmp_path / "docs", project)
    assert report.added == ["bill"] and not report.errors
    saved = json.loads(project.page_path("bill").read_text())
    assert saved["image"] == "images/bill.png"
    png = (project.pages_dir / "images" / "bill.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    w, h = struct.unpack(">II", png[16:24])
    assert (w, h) == (round(300 * 100 / 72), round(400 * 100 / 72))  # 100 dpi, the page's aspect
    # the text is drawn: dark pixels where the first word is, paper elsewhere
    import zlib
    idat = png[png.index(b"IDAT") + 4:png.index(b"IEND") - 8]
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, w + 1)[:, 1:]
    x0, y0, x1, y1 = (v * 100 / 72 for v in project.load_page("bill").words[0].box)
    assert rows[int(y0):int(y1) + 1, int(x0):int(x1) + 1].min() < 100
    assert rows[:int(y0) - 20].min() > 200
    again = import_pages("pdf", tmp_path / "docs", project)
    assert again.unchanged == ["bill"] and not again.added and not again.errors
    # a page saved by an older import (no image) is the same page: unchanged, not refused
    saved.pop("image")
    project.page_path("bill").write_text(json.dumps(saved))
    third = import_pages("pdf", tmp_path / "docs", project)
    assert third.unchanged == ["bill"] and not third.errors
    assert png_gray(np.full((2, 3), 7, np.uint8))[12:16] == b"IHDR"
    with pytest.raises(ValueError, match="shape"):
        png_gray(np.zeros((2, 3, 4), np.uint8))


def test_each_page_of_a_pdf_gets_its_own_image(project, tmp_path):
    """A two-page PDF of different page sizes: each page's image has its own page's size, so
    page 2 never shows page 1."""
    import io

    import pypdfium2 as pdfium

    first = pdfium.PdfDocument(minimal_pdf([(20, 350, "One")], size=(300, 400)))
    first.import_pages(pdfium.PdfDocument(minimal_pdf([(20, 50, "Two")], size=(200, 400))))
    buf = io.BytesIO()
    first.save(buf)
    (tmp_path / "two.pdf").write_bytes(buf.getvalue())
    report = import_pages("pdf", tmp_path / "two.pdf", project)
    assert report.added == ["two-p1", "two-p2"] and not report.errors
    for pid, width in (("two-p1", 300), ("two-p2", 200)):
        page = project.load_page(pid)
        assert page.image == f"images/{pid}.png" and page.width == width
        png = (project.pages_dir / page.image).read_bytes()
        assert struct.unpack(">II", png[16:24]) == (round(width * 100 / 72), round(400 * 100 / 72))
