"""OCR (dxstudio/ocr.py): `import images`, `import pdf` on scanned pages, `extract` on images
and PDFs. The images are made here: words rendered with PIL's default font at a large size,
which the OCR must read back. Without the ocr extra the OCR tests are skipped, each saying why;
the checks that need no engine (bounds, headers, the extra's message) always run."""
import io
import json
import struct
import zlib
from pathlib import Path

import pytest

from dxstudio import cli, ocr
from dxstudio.importers import OcrOptions, SourceError, import_pages
from dxstudio.project import Project
from tests.test_importers import pdf_from_objects

_MISSING = ocr.installed("rapidocr")  # makes no engine: nothing is folded into the user's cache
needs_ocr = pytest.mark.skipif(_MISSING is not None, reason=f"the ocr extra is not installed: {_MISSING}")
_TESS_MISSING = ocr.available("tesseract") if _MISSING is None else _MISSING
needs_tesseract = pytest.mark.skipif(_TESS_MISSING is not None, reason=f"tesseract is not installed: {_TESS_MISSING}")


@pytest.fixture(autouse=True, scope="module")
def ocr_model_cache(tmp_path_factory):
    """The folded models these tests make (ocr_graph) go to a temporary folder, never the user's
    cache (~/.cache/dxstudio/ocr-models): DXSTUDIO_OCR_CACHE for the module (worker processes
    inherit it), and engines made before or here are dropped before and after it."""
    mp = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("ocr-models")
    mp.setenv("DXSTUDIO_OCR_CACHE", str(folder))
    mp.setattr(ocr, "_engines", {})
    yield folder
    mp.undo()

WORDS = ["INVOICE", "TOTAL", "12.50"]


def folded(words) -> set:
    return {"".join(c for c in w.casefold() if c.isalnum() or c == ".") for w in words}


def text_image(lines=(("INVOICE", 25), ("TOTAL 12.50", 105)), size=(600, 200)):
    """An RGB PIL image with each (text, y) drawn in black at 44 px, left margin 30."""
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default(size=44)
    for text, y in lines:
        draw.text((30, y), text, fill="black", font=font)
    return im


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that says width x height and holds one empty row: refused from its header."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def encrypted_pdf() -> bytes:
    """A one-page PDF under the standard security handler with a user password that is not
    empty (its /U does not match the empty password): pdfium asks for the password."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
            b"<< /Filter /Standard /V 1 /R 2 /O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> /P -4 >>"]
    return pdf_from_objects(objs, b"/Encrypt 4 0 R /ID [<00112233445566778899aabbccddeeff>"
                                  b"<00112233445566778899aabbccddeeff>]")


# -- always: no engine needed ----------------------------------------------------------------

def test_pixel_bounds_name_the_file_and_the_limit():
    with pytest.raises(ocr.OcrError, match=r"scan\.png: 20000 x 20000 pixels is more than"):
        ocr.check_pixels(20000, 20000, "scan.png")
    with pytest.raises(ocr.OcrError, match=r"dot\.png: 1 x 1 pixels is too small"):
        ocr.check_pixels(1, 1, "dot.png")
    ocr.check_pixels(2480, 3508, "a4-300dpi.png")  # an A4 page at 300 dpi passes


def test_not_an_image_and_wrong_extension_are_named_before_any_decoding():
    with pytest.raises(ocr.OcrError, match=r"notes\.png: not an image"):
        ocr.read_image_bytes(b"hello, world", "notes.png", ".png")
    with pytest.raises(ocr.OcrError, match=r"photo\.png: the file is a JPEG image, not PNG as its extension says"):
        ocr.read_image_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 20, "photo.png", ".png")
    with pytest.raises(ocr.OcrError, match=r"doc\.jpg: a PDF file"):
        ocr.read_image_bytes(b"%PDF-1.4\n", "doc.jpg", ".jpg")


def test_unknown_engine_is_refused():
    with pytest.raises(ocr.OcrError, match="unknown OCR engine 'abbyy'"):
        ocr.get_engine("abbyy")


def _chars(text: str, width: float = 10.0, gap: float = 1.0):
    """A recognised line's characters and quads, each `width` wide, `gap` apart."""
    quads, x = [], 0.0
    for _ in text:
        quads.append([[x, 0.0], [x + width, 0.0], [x + width, 20.0], [x, 20.0]])
        x += width + gap
    return list(text), quads


def test_line_words_split_after_a_colon_but_never_inside_a_time():
    # the data set's OCR (SROIE) gives "13:16:21" as one word and "Date:" apart from the date
    words = ocr._line_words_from_chars(*_chars("Date:25/12/2018 13:16:21 TOTAL:8.60"))
    assert [w.text for w in words] == ["Date:", "25/12/2018", "13:16:21", "TOTAL:", "8.60"]
    first, second = words[0].box, words[1].box
    assert first[2] < second[0]  # each word's box is its own characters'
    # a gap wider than WORD_GAP of a character ends a word, a time's colons or not
    chars, quads = _chars("12:30")
    for q in quads[3:]:
        for pt in q:
            pt[0] += 10.0
    assert [w.text for w in ocr._line_words_from_chars(chars, quads)] == ["12:", "30"]
    assert [w.text for w in ocr._line_words_from_chars(*_chars("12:30PM"))] == ["12:30PM"]
    assert [w.text for w in ocr._line_words_from_chars(*_chars("RM:5"))] == ["RM:", "5"]
    assert [w.text for w in ocr._line_words_from_chars(*_chars("10:x"))] == ["10:", "x"]


def test_an_amount_run_into_its_currency_is_two_words():
    from dxstudio.engine.page import Word

    def split(text):
        return [(w.text, w.box) for w in ocr.split_amount_suffix([Word(text, (10.0, 5.0, 70.0, 25.0))])]

    assert split("5.00RH") == [("5.00", (10.0, 5.0, 50.0, 25.0)), ("RH", (50.0, 5.0, 70.0, 25.0))]
    assert [t for t, _ in split("1,234.50MYR")] == ["1,234.50", "MYR"]
    for kept in ("RM5.00", "1.5OR", "A4RM", "12.505RM", "10.00", "12.50abcd", "0.02-"):
        assert split(kept) == [(kept, (10.0, 5.0, 70.0, 25.0))]


def test_words_the_recogniser_ran_together_are_split_at_a_capital():
    """A capitalised word run into a lower-case letter ("NetTotal") is two words, as the data
    set's OCR gives it, so grounding sees the field's name ("Total") before the amount; a dollar
    sign read as S before an amount is the dollar sign. Nothing else changes."""
    from dxstudio.engine.page import Word

    def split(text, box=(0.0, 5.0, 120.0, 25.0)):
        return [(w.text, w.box) for w in ocr.split_joined_words([Word(text, box)])]

    assert split("NetTotal", (0.0, 5.0, 80.0, 25.0)) == [("Net", (0.0, 5.0, 30.0, 25.0)),
                                                         ("Total", (30.0, 5.0, 80.0, 25.0))]
    assert [t for t, _ in split("TotalInclGsT")] == ["Total", "Incl", "GsT"]
    assert [t for t, _ in split("NetTotalRounded(MYR):")] == ["Net", "Total", "Rounded(MYR):"]
    assert split("S8.20") == [("$8.20", (0.0, 5.0, 120.0, 25.0))]
    assert [t for t, _ in split("S1,208.20")] == ["$1,208.20"]
    assert [t for t, _ in split("McDonald'sTotal")] == ["McDonald's", "Total"]
    for kept in ("McDonald's", "MacArthur", "(McDonald)", "TOTAL", "Total:", "iPhone", "eWallet", "SST", "S8", "S8.2", "S8.205", "GST)", "aB", "12.50"):
        assert split(kept) == [(kept, (0.0, 5.0, 120.0, 25.0))], kept
    # the last piece keeps the word's right edge exactly
    assert split("JohorBahruJohor")[-1][1][2] == 120.0


def test_a_comma_ends_a_word_before_a_letter_but_never_between_two_digits():
    """The recogniser often drops the space after a comma in an address ("Cheras,Selangor"); the
    data set's OCR gives the words apart. A comma inside a number stays."""
    def words(text):
        return [w.text for w in ocr._line_words_from_chars(*_chars(text))]

    assert words("Cheras,Selangor") == ["Cheras,", "Selangor"]
    assert words("No.2,Jalan") == ["No.2,", "Jalan"]
    assert words("Perdana,40150") == ["Perdana,", "40150"]  # a letter, then a number
    assert words("47301,PETALING") == ["47301,", "PETALING"]
    for kept in ("1,234.50", "SS21/39,47400", "12,50", ",abc", "Cheras,"):
        assert words(kept) == [kept], kept


def _row(*texts, gap=5.0):
    from dxstudio.engine.page import Word

    out, x = [], 0.0
    for t in texts:
        out.append(Word(t, (x, 0.0, x + 10.0 * len(t), 20.0)))
        x += 10.0 * len(t) + gap
    return out


def test_dates_run_into_the_time_or_cut_at_a_gap_are_words_of_their_own():
    """split_dates: the forms the recogniser gave on SROIE receipts, each the data set's words
    after it; the near misses are left as they are."""
    def split(*texts, gap=5.0):
        return [w.text for w in ocr.split_dates(_row(*texts, gap=gap))]

    assert split("29/06/20188:26:57AM") == ["29/06/2018", "8:26:57AM"]  # a year of 4 digits, then 8:26
    assert split("01-03-185:23:26PM") == ["01-03-18", "5:23:26PM"]  # of 2 digits, then 5:23
    assert split("25-03-201809:42") == ["25-03-2018", "09:42"]
    assert split("05Mar201818:24") == ["05", "Mar", "2018", "18:24"]
    assert split("Mar201818:26") == ["Mar", "2018", "18:26"]
    assert split("Mar2018") == ["Mar", "2018"]
    assert split("15Jun18") == ["15", "Jun", "18"]
    assert split("25/12/20", "18", "Cashier") == ["25/12/2018", "Cashier"]
    assert split("03/05/20", "1820:24") == ["03/05/2018", "20:24"]
    for kept in (("12/2018",), ("10:30",), ("2018-03-23",), ("SH01",), ("Mar",), ("01-03-2018",),
                 ("1.50", "18"), ("25/12/20", "18:30"), ("UPTOWN3",), ("Jan1899",), ("0A1E",)):
        assert split(*kept) == list(kept), kept
    assert split("25/12/20", "18", gap=200.0) == ["25/12/20", "18"]  # not one after the other
    # the boxes: cut in proportion, the last part keeps the word's right edge, joined spans both
    [d, t] = ocr.split_dates(_row("29/06/20188:26:57AM"))
    assert d.box[0] == 0.0 and d.box[2] == t.box[0] and t.box[2] == 190.0
    [j] = ocr.split_dates(_row("25/12/20", "18"))
    assert j.box == (0.0, 0.0, 105.0, 20.0)


def test_a_postcode_run_into_the_town_is_two_words():
    """split_digits_letters: 3 digits or more meeting 3 letters or more (the postcode and the
    town, "81200Johor"); codes with shorter runs stay as printed."""
    def split(text):
        return [w.text for w in ocr.split_digits_letters(_row(text))]

    assert split("81200Johor") == ["81200", "Johor"]
    assert split("Tampoi81200Johor") == ["Tampoi", "81200", "Johor"]
    assert split("40170BANDAR,") == ["40170", "BANDAR,"]
    for kept in ("UPTOWN3", "SH01", "5.00RM", "JM0325955-V", "PJU6A", "CS00031663", "12345", "Ab123", "1237-TMN"):
        assert split(kept) == [kept], kept
    [a, b] = ocr.split_digits_letters(_row("81200Johor"))
    assert a.box == (0.0, 0.0, 50.0, 20.0) and b.box == (50.0, 0.0, 100.0, 20.0)


def test_grounding_labels_the_date_alone_once_it_is_apart_from_the_time():
    """The reason for split_dates: run into the time, the date is labelled as the whole word
    (grounding's date-time tier), a label the data set's pages never give; apart, as printed."""
    from dxstudio.engine.page import Page
    from dxstudio.grounding import ground_value

    words = _row("Date", ":", "29/06/20188:26:57AM", "Cashier")
    joined = Page("p", 400.0, 100.0, tuple(words))
    apart = Page("p", 400.0, 100.0, tuple(ocr.page_words([ocr.Line((0.0, 0.0, 400.0, 20.0), words)], 400, 100)))
    g = ground_value(joined, "29/06/2018")
    assert g.words == (2,) and g.reason.startswith("OCR:")
    g = ground_value(apart, "29/06/2018")
    assert [apart.words[i].text for i in g.words] == ["29/06/2018"] and not g.reason.startswith("OCR:")
    named = Page("p", 400.0, 100.0, tuple(ocr.split_dates(_row("05Mar201818:24"))))
    assert [named.words[i].text for i in ground_value(named, "05 MAR 2018").words] == ["05", "Mar", "2018"]


def test_grounding_finds_the_total_after_its_name_once_the_words_are_apart():
    """The reason for the split: "NetTotal 21.20 Rounding 0.00 Cash 21.20" grounds the total on
    the last 21.20 (no word names the field); split, on the one after "Total", as on the data
    set's OCR."""
    from dxstudio.engine.page import Page, Word
    from dxstudio.grounding import ground_value

    texts = ["NetTotal", "21.20", "Rounding", "0.00", "Cash", "21.20"]
    words = [Word(t, (10.0 + 60 * i, 10.0, 60.0 + 60 * i, 30.0)) for i, t in enumerate(texts)]
    joined = Page("p", 400.0, 100.0, tuple(words))
    apart = Page("p", 400.0, 100.0, tuple(ocr.split_joined_words(words)))
    assert [apart.words[i].text for i in ground_value(apart, "21.20", field="total").words] == ["21.20"]
    assert ground_value(joined, "21.20", field="total").words == (5,)
    assert ground_value(apart, "21.20", field="total").words == (2,)  # Net Total [21.20] ... Cash 21.20


def test_an_encrypted_pdf_is_named_alike_by_import_extract_and_the_page_reader(tmp_path):
    """One message for an encrypted PDF (importers.pdf_pages), whichever path reads it:
    `import pdf`, document_pages (the app's Extract tab) and extract's page items."""
    from dxstudio.importers import document_pages
    from dxstudio.scale.pages import page_items

    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypted_pdf())
    report = import_pages("pdf", path, Project.create(tmp_path / "proj", "x"))
    with pytest.raises(SourceError) as e:
        document_pages(str(path), path.read_bytes())
    [(label, raw, error)] = list(page_items([str(path)]))
    for said in (report.errors[0][1], str(e.value), error):
        assert said == f"{path}: an encrypted (password-protected) PDF; not read: save an unprotected copy to read it"
    assert raw is None and label == str(path)


def test_missing_extra_names_it(monkeypatch, tmp_path):
    """With the engine missing, import images fails at once, naming the extra, and leaves no
    project behind."""
    monkeypatch.setattr(ocr, "available", lambda name="rapidocr": ocr.INSTALL_HINT)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(png_header_only(10, 10))
    rc = cli.main(["import", "images", str(tmp_path / "in"), str(tmp_path / "proj")])
    assert rc == 2
    assert not (tmp_path / "proj").exists()
    assert 'pip install "dxstudio[ocr]"' in ocr.INSTALL_HINT


def _onnx_missing():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


_ONNX_MISSING = _onnx_missing()
needs_onnx = pytest.mark.skipif(_ONNX_MISSING is not None,
                                reason=f"the ocr extra's onnx and onnxruntime are not installed: {_ONNX_MISSING}")


def _affine_model(path):
    """A small ONNX model written as PP-OCRv4's layers are (dxstudio/ocr_graph.py): a conv, an
    affine block (x*s + b), hard-swish in four operators, another affine block, then a 1 x 1 conv
    (the affine folds into it) and a padded 3 x 3 conv (it must not), with Constant nodes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    nodes = []

    def const(name, value):
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.asarray(value, np.float32), name)))
        return name

    def affine(x, tag, s, b):
        nodes.append(helper.make_node("Mul", [const(tag + "s", [s]), x], [tag + "m"]))
        nodes.append(helper.make_node("Add", [tag + "m", const(tag + "b", [b])], [tag + "a"]))
        return tag + "a"

    def hswish(x, tag):
        nodes.append(helper.make_node("Add", [x, const(tag + "3", [3.0])], [tag + "p"]))
        nodes.append(helper.make_node("Clip", [tag + "p", const(tag + "lo", 0.0), const(tag + "hi", 6.0)], [tag + "c"]))
        nodes.append(helper.make_node("Mul", [x, tag + "c"], [tag + "x"]))
        nodes.append(helper.make_node("Div", [tag + "x", const(tag + "6", [6.0])], [tag + "h"]))
        return tag + "h"

    def conv(x, tag, cin, cout, k):
        w = const(tag + "w", rng.normal(0, 0.5, (cout, cin, k, k)))
        b = const(tag + "bias", rng.normal(0, 0.1, cout))
        nodes.append(helper.make_node("Conv", [x, w, b], [tag + "o"], kernel_shape=[k, k], pads=[k // 2] * 4))
        return tag + "o"

    h = hswish(affine(conv("x", "c1", 3, 8, 3), "a1", 1.7, 0.4), "h1")
    h = affine(h, "a2", 0.6, -0.2)
    h = hswish(affine(conv(h, "c2", 8, 8, 1), "a3", 2.1, 1.0), "h2")  # the affine a4 folds forward
    h = affine(h, "a4", 0.8, 0.3)
    h = affine(conv(h, "c3", 8, 8, 1), "a5", 1.3, -0.5)
    h = affine(h, "a6", 0.9, -0.25)
    y = conv(h, "c4", 8, 4, 3)  # padded: a6 stays before it
    graph = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 20])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 4, 12, 20])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@needs_onnx
def test_folded_model_computes_the_same_with_fewer_operators(tmp_path):
    import collections

    import numpy as np
    import onnx
    import onnxruntime

    from dxstudio import ocr_graph

    src = _affine_model(tmp_path / "m.onnx")
    folded = ocr_graph.fold_model(onnx.load(str(src)))
    ops = collections.Counter(n.op_type for n in folded.graph.node)
    # 3 conv affines and 1 forward affine folded (a6 before the padded conv stays), 2 hard-swishes
    assert ops == {"Conv": 4, "HardSigmoid": 2, "Mul": 2 + 1, "Add": 1}, ops
    assert folded.SerializeToString() == ocr_graph.fold_model(onnx.load(str(src))).SerializeToString()
    x = np.random.default_rng(0).normal(0, 1.5, (1, 3, 12, 20)).astype(np.float32)
    opts = ocr.session_options(onnxruntime)
    a = onnxruntime.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    b = onnxruntime.InferenceSession(folded.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert a.shape == b.shape == (1, 4, 12, 20)
    assert np.allclose(a, b, rtol=1e-4, atol=1e-4), float(np.abs(a - b).max())
    assert not np.array_equal(a, np.zeros_like(a))


@needs_onnx
def test_folded_model_cache_is_made_once_and_remade_when_its_digest_differs(tmp_path):
    from dxstudio import ocr_graph

    src = _affine_model(tmp_path / "m.onnx")
    cache = tmp_path / "cache"
    path, note = ocr_graph.folded_model_path(src, cache)
    assert note == "made" and path.parent == cache and path.is_file()
    first = path.read_bytes()
    assert ocr_graph.folded_model_path(src, cache) == (path, "cached")
    path.write_bytes(first[:-1] + bytes([first[-1] ^ 1]))  # one bit of the cached model changed
    again, note = ocr_graph.folded_model_path(src, cache)
    assert (again, note) == (path, "made") and path.read_bytes() == first  # refused, made again
    path.write_bytes(b"")
    assert ocr_graph.folded_model_path(src, cache)[1] == "made" and path.read_bytes() == first
    record = path.with_suffix(".json")
    record.write_text("{not json")  # the record that holds the digest broken: made again
    assert ocr_graph.folded_model_path(src, cache)[1] == "made" and path.read_bytes() == first
    import onnx

    model = onnx.load(str(src))  # another source (here: another producer) is another file
    model.producer_name = "another"
    onnx.save(model, str(tmp_path / "n.onnx"))
    assert ocr_graph.folded_model_path(tmp_path / "n.onnx", cache)[0] not in (None, path)
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".json", ".onnx", ".onnx"]  # no temporary left


def test_without_onnx_the_models_run_unfolded_and_say_why(monkeypatch, tmp_path):
    import sys

    from dxstudio import ocr_graph

    src = tmp_path / "m.onnx"
    src.write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "onnx", None)
    path, note = ocr_graph.folded_model_path(src, tmp_path / "cache")
    assert path is None and "onnx package is not installed" in note
    assert not (tmp_path / "cache").exists()


@needs_onnx
def test_a_model_that_cannot_be_folded_runs_as_it_comes(tmp_path):
    from dxstudio import ocr_graph

    src = tmp_path / "m.onnx"
    src.write_bytes(b"\x08\x07not a model")
    path, note = ocr_graph.folded_model_path(src, tmp_path / "cache")
    assert path is None and "m.onnx could not be folded" in note and "run unfolded" in note


# -- with the ocr extra ------------------------------------------------------------------------

@needs_ocr
def test_the_tests_fold_the_models_into_a_temporary_cache(ocr_model_cache):
    from dxstudio.ocr_graph import cache_dir

    eng = ocr.get_engine("rapidocr")
    assert cache_dir() == ocr_model_cache
    if eng.folded:
        assert all(Path(w.session._model_path).parent == ocr_model_cache
                   for w in (eng.ocr.text_det.infer, eng.ocr.text_cls.infer, eng.ocr.text_rec.session))



@needs_ocr
def test_rapidocr_reads_rendered_words_in_reading_order():
    import numpy as np

    r = ocr.ocr_image(np.asarray(text_image()), "rapidocr")
    texts = [w.text for w in r.words]
    assert folded(WORDS) <= folded(texts), texts
    assert r.rotation == 0 and (r.width, r.height) == (600, 200)
    assert r.engine == "rapidocr" and "rapidocr-onnxruntime 1.4.4" in r.version
    # reading order: INVOICE (top row) first, then TOTAL before 12.50 on the second row
    order = [t.casefold() for t in texts]
    assert order.index("invoice") < order.index("total") < order.index("12.50")
    for w in r.words:  # boxes in the image's pixels, around the drawn text
        x0, y0, x1, y1 = w.box
        assert 0 <= x0 < x1 <= 600 and 0 <= y0 < y1 <= 200


@needs_ocr
def test_faster_steps_give_rapidocrs_numbers(monkeypatch):
    """The speed-ups that must not change a word: the character boxes (_char_boxes against
    rapidocr's CalRecBoxes: the same extent of every character, on a level and a tilted line) and
    the detector input looked up in a table (the same float32 values as rapidocr's arithmetic)."""
    import numpy as np

    from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

    eng = ocr.get_engine("rapidocr")
    level = np.asarray(text_image((("INVOICE 4471", 25), ("TOTAL 12.50 RM", 105))))
    tilted = np.asarray(text_image((("TOTAL 12.50 RM", 80),)).rotate(4, fillcolor="white", expand=True))
    for rgb in (level, tilted):
        o = eng.ocr
        img, _, _ = o.preprocess(np.ascontiguousarray(rgb[:, :, ::-1]))
        boxes, _ = o.auto_text_det(img)
        crops = o.get_crop_img_list(img, boxes)
        rec, _ = o.text_rec(crops, True)
        ours = ocr._char_boxes(crops, boxes, [list(r) for r in rec])
        theirs = o.cal_rec_boxes(crops, boxes, [list(r) for r in rec])
        assert len(ours) == len(theirs) >= 1
        for a, b in zip(ours, theirs):
            assert a[0] == b[0] and a[3] == b[3] and len(a[2]) == len(b[2]) >= 3
            extent = [(min(x for x, _ in q), min(y for _, y in q), max(x for x, _ in q), max(y for _, y in q))
                      for q in a[2]]
            assert extent == [(min(x for x, _ in q), min(y for _, y in q), max(x for x, _ in q), max(y for _, y in q))
                              for q in b[2]]
    pre = DetPreProcess(736, "min")
    own = pre.normalize(level.copy())
    ocr._table_normalize(pre)
    fast = pre.normalize(level.copy())
    assert fast.dtype == np.float32 and np.array_equal(own.astype(np.float32), fast)


@needs_ocr
def test_rapidocr_sessions_run_with_the_options_and_the_folded_models(monkeypatch, tmp_path):
    """session_options on all three sessions (one thread, sequential, every graph optimisation,
    the memory arena); the folded models where onnx is installed or they are cached (under the
    user's cache folder, the version says so), and they read the rendered words exactly as the
    models as they come."""
    import numpy as np
    import onnxruntime

    eng = ocr.get_engine("rapidocr")
    wrappers = (eng.ocr.text_det.infer, eng.ocr.text_cls.infer, eng.ocr.text_rec.session)
    for w in wrappers:
        o = w.session.get_session_options()
        assert (o.intra_op_num_threads, o.inter_op_num_threads) == (1, 1)
        assert o.execution_mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        assert o.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        assert o.enable_cpu_mem_arena
    if not eng.folded:  # only without onnx and with nothing cached (onnx makes them, a cache serves them)
        assert _ONNX_MISSING is not None and "onnx package is not installed" in eng.fold_note
        assert "folded" not in eng.version
        return
    assert ", folded v1" in eng.version
    from dxstudio.ocr_graph import cache_dir

    assert all(Path(w.session._model_path).parent == cache_dir() for w in wrappers)
    monkeypatch.setattr(ocr, "FOLD_MODELS", False)
    plain = ocr.RapidEngine()
    assert not plain.folded and "folded" not in plain.version
    assert all(Path(w.session._model_path).parent != cache_dir()
               for w in (plain.ocr.text_det.infer, plain.ocr.text_rec.session))
    rgb = np.asarray(text_image((("INVOICE 4471", 25), ("TOTAL 12.50 RM", 105))))
    assert [(w.text, w.box) for ln in eng.lines(rgb) for w in ln.words] == \
        [(w.text, w.box) for ln in plain.lines(rgb) for w in ln.words]


def _record_inputs(monkeypatch, session, seen: list, of) -> None:
    """Each run of the onnxruntime `session` appends of(its input's shape) to `seen`."""
    run = session.run
    monkeypatch.setattr(session, "run", lambda out, feed: seen.append(of(next(iter(feed.values())).shape))
                        or run(out, feed))


def _read_enlarged(eng, rgb) -> str:
    """The words of `rgb` read enlarged as small print, joined and case-folded."""
    return "".join(w.text for ln in eng.lines_scaled(rgb, ocr.SMALL_TEXT_SCALE) for w in ln.words).casefold()


@needs_ocr
def test_the_recogniser_reads_lines_at_rec_height_and_the_version_says_so(monkeypatch):
    """REC_HEIGHT: every line reaches the recogniser REC_HEIGHT pixels high (padded to at least
    REC_MIN_WIDTH), the page's provenance names the size where it is not rapidocr's 48, and the
    rendered words read the same at 40 as at rapidocr's 48, with rapidocr's detector (736: at 576
    the 48-high read of this small page's 44-pixel letters cuts `TO` `TAL`; docs/ocr.md, "Tenth
    round")."""
    import numpy as np

    monkeypatch.setattr(ocr, "DET_MIN_SIDE", 736)
    rgb = np.asarray(text_image((("INVOICE 4471", 25), ("TOTAL 12.50 RM", 105))))
    read = {}
    for height, width in ((40, 136), (48, 160)):
        monkeypatch.setattr(ocr, "REC_HEIGHT", height)
        monkeypatch.setattr(ocr, "REC_MIN_WIDTH", width)
        eng = ocr.RapidEngine()
        shapes = []
        _record_inputs(monkeypatch, eng.ocr.text_rec.session.session, shapes, lambda shape: shape)
        read[height] = [w.text for ln in eng.lines(rgb) for w in ln.words]
        assert len(shapes) >= 2 and all(s[2] == height and s[3] >= width for s in shapes), shapes
        assert ("recogniser 40 high" in eng.version) == (height == 40), eng.version
    assert folded(["TOTAL", "12.50"]) <= folded(read[40]) and read[40] == read[48], read


@needs_ocr
def test_small_print_is_recognised_at_rec_height_small_print(monkeypatch):
    """REC_HEIGHT_SMALL_PRINT: a page read enlarged as small print has its lines recognised that
    high, whatever REC_HEIGHT is; the engine's own height is back after it."""
    import numpy as np

    monkeypatch.setattr(ocr, "REC_HEIGHT", 40)
    monkeypatch.setattr(ocr, "REC_MIN_WIDTH", 136)
    eng = ocr.RapidEngine()
    assert "recogniser 40 high (48 on small print)" in eng.version
    heights = []
    _record_inputs(monkeypatch, eng.ocr.text_rec.session.session, heights, lambda shape: shape[2:])
    rgb = np.asarray(_small_print())
    joined = _read_enlarged(eng, rgb)
    assert "total12.50" in joined and "cash20.00" in joined, joined
    assert len(heights) >= 3 and all(h == ocr.REC_HEIGHT_SMALL_PRINT == 48 and w >= 163 for h, w in heights), heights
    assert eng.ocr.text_rec.rec_image_shape == [3, 40, 136]
    heights.clear()
    eng.lines(rgb)
    assert heights and all(h == 40 and w >= 136 for h, w in heights), heights


@needs_ocr
def test_small_print_is_detected_at_small_text_det_min_side(monkeypatch):
    """SMALL_TEXT_DET_MIN_SIDE: a page read enlarged as small print is detected with the
    detector's shorter side at least that, whatever DET_MIN_SIDE is (the detector's own side is
    back after it), and the version names both where they are not rapidocr's 736."""
    import numpy as np

    monkeypatch.setattr(ocr, "DET_MIN_SIDE", 576)
    eng = ocr.RapidEngine()
    assert "detector 576 (736 on small print)" in eng.version
    sides = []
    _record_inputs(monkeypatch, eng.ocr.text_det.infer.session, sides, lambda shape: min(shape[2:]))
    rgb = np.asarray(_small_print())  # 400 x 160: the detector enlarges it to its side
    eng.lines(rgb)
    assert sides == [576], sides
    sides.clear()
    joined = _read_enlarged(eng, rgb)
    assert "total12.50" in joined and "cash20.00" in joined, joined
    assert sides == [ocr.SMALL_TEXT_DET_MIN_SIDE] and eng.ocr.text_det.limit_side_len == 576, sides


@needs_ocr
def test_the_classifier_reads_a_sample_of_an_upright_page_and_every_line_of_a_turned_one(monkeypatch):
    """CLS_SAMPLE: on an upright page the 0/180 classifier sees only the longest lines; a page
    upside down is classified line by line, as rapidocr does, and still turned upright."""
    import numpy as np

    eng = ocr.get_engine("rapidocr")
    rows = tuple((f"LINE {k} TOTAL {k}.50", 10 + 40 * k) for k in range(12))
    rgb = np.asarray(text_image(rows, size=(600, 500)))
    seen = []
    real = eng.ocr.text_cls
    monkeypatch.setattr(eng.ocr, "text_cls", lambda crops: seen.append(len(crops)) or real(crops))
    monkeypatch.setattr(eng, "cls_sample", 4)
    lines = eng.lines(rgb)
    assert len(lines) >= 8 and seen == [4]
    seen.clear()
    r = ocr.ocr_image(np.ascontiguousarray(np.rot90(rgb, 2)), "rapidocr")
    assert r.rotation == 180 and seen[0] == 4 and seen[1] >= 8 and seen[2:] == [4]  # then upright: a sample
    assert "total3.50" in "".join(w.text for w in r.words).casefold()


@needs_ocr
def test_small_print_is_read_again_enlarged_with_boxes_in_the_page_pixels(monkeypatch):
    """Text whose lines are under SMALL_TEXT_PX high is read again at twice the size; the words'
    boxes come back in the page's own pixels. Text of ordinary size is read once."""
    import numpy as np

    from PIL import Image, ImageDraw, ImageFont

    eng = ocr.get_engine("rapidocr")
    im = Image.new("RGB", (400, 160), "white")
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default(size=11)
    rows = [("INVOICE 4471", 20), ("TOTAL 12.50", 60), ("CASH 20.00", 100)]
    for text, y in rows:
        draw.text((30, y), text, fill="black", font=font)
    rgb = np.asarray(im)
    first = eng.lines(rgb)
    assert eng.small_text_scale(first, rgb) == ocr.SMALL_TEXT_SCALE
    assert eng.small_text_scale(eng.lines(np.asarray(text_image())), np.asarray(text_image())) is None
    calls = []
    real = eng.lines_scaled
    monkeypatch.setattr(eng, "lines_scaled", lambda img, scale: calls.append(scale) or real(img, scale))
    r = ocr.ocr_image(rgb, "rapidocr")
    assert calls == [ocr.SMALL_TEXT_SCALE] and (r.width, r.height) == (400, 160)
    joined = "".join(w.text for w in r.words).casefold()
    assert "total12.50" in joined and "cash20.00" in joined, [w.text for w in r.words]
    for w in r.words:  # in the page's pixels: on the row it was drawn on, not twice as low
        x0, y0, x1, y1 = w.box
        assert 0 <= x0 < x1 <= 400 and 0 <= y0 < y1 <= 160
        assert any(y - 8 <= (y0 + y1) / 2 <= y + 20 for _, y in rows), (w.text, w.box)


def _small_print():
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (400, 160), "white")
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default(size=11)
    for text, y in (("INVOICE 4471", 20), ("TOTAL 12.50", 60), ("CASH 20.00", 100)):
        draw.text((30, y), text, fill="black", font=font)
    return im


@needs_ocr
def test_small_print_seen_by_the_detector_is_read_enlarged_at_once(monkeypatch):
    """EARLY_SMALL_TEXT: a page the detector's boxes show as small print is recognised once, at
    twice the size, not first at its own size to be read again: the same words with one
    recognition pass instead of two. A page of ordinary print is recognised once either way."""
    import numpy as np

    eng = ocr.get_engine("rapidocr")
    calls = []
    real = eng.ocr.text_rec
    monkeypatch.setattr(eng.ocr, "text_rec", lambda crops, *a: calls.append(len(crops)) or real(crops, *a))
    for rgb, passes in ((np.asarray(_small_print()), 2), (np.asarray(text_image()), 1)):
        seen = {}
        for early in (False, True):
            monkeypatch.setattr(ocr, "EARLY_SMALL_TEXT", early)
            calls.clear()
            r = ocr.ocr_image(rgb, "rapidocr")
            seen[early] = ([(w.text, w.box) for w in r.words], len(calls))
        assert seen[True][0] == seen[False][0] and seen[True][0]
        assert seen[False][1] == passes and seen[True][1] == 1


@needs_ocr
def test_small_print_without_a_second_detection_cuts_the_first_boxes_from_the_enlarged_page(monkeypatch):
    """SMALL_TEXT_REDETECT False: a small-print page is detected once, at its own size; those
    line boxes, enlarged, are cut from the enlarged page and recognised there (the same
    lines, read at twice the size), the words' boxes in the page's pixels. True (the default):
    the enlarged page is detected again. A page of ordinary print is detected once either way."""
    import numpy as np

    eng = ocr.get_engine("rapidocr")
    dets, recs = [], []
    real_det, real_rec = eng.ocr.auto_text_det, eng.ocr.text_rec
    monkeypatch.setattr(eng.ocr, "auto_text_det", lambda img: dets.append(img.shape[:2]) or real_det(img))
    monkeypatch.setattr(eng.ocr, "text_rec", lambda crops, *a: recs.append([c.shape[0] for c in crops])
                        or real_rec(crops, *a))
    rgb = np.asarray(_small_print())
    out = {}
    for redetect in (True, False):
        monkeypatch.setattr(ocr, "SMALL_TEXT_REDETECT", redetect)
        dets.clear()
        recs.clear()
        r = ocr.ocr_image(rgb, "rapidocr")
        out[redetect] = r
        assert len(dets) == (2 if redetect else 1) and dets[0] == (160, 400)
        assert len(recs) == 1  # recognised once, enlarged
        joined = "".join(w.text for w in r.words).casefold()
        assert "total12.50" in joined and "cash20.00" in joined, [w.text for w in r.words]
        for w in r.words:  # in the page's pixels, on the row it was drawn on
            x0, y0, x1, y1 = w.box
            assert 0 <= x0 < x1 <= 400 and 0 <= y0 < y1 <= 160
            assert any(y - 8 <= (y0 + y1) / 2 <= y + 20 for y in (20, 60, 100)), (w.text, w.box)
    # the crops recognised without a second detection are the first boxes at twice the size
    first = [q[:, 1].max() - q[:, 1].min() for q in eng.small_quads]
    assert len(recs[0]) == len(first)
    assert all(abs(a - b) <= 2 for a, b in zip(sorted(recs[0]), sorted(h * ocr.SMALL_TEXT_SCALE for h in first)))
    dets.clear()
    ocr.ocr_image(np.asarray(text_image()), "rapidocr")
    assert len(dets) == 1


@needs_ocr
@pytest.mark.parametrize("turn", [90, 180, pytest.param(270, marks=pytest.mark.heavy)])
def test_rotated_pages_are_turned_upright(turn):
    import numpy as np

    rgb = np.asarray(text_image().rotate(turn, expand=True))  # PIL turns counter-clockwise
    r = ocr.ocr_image(rgb, "rapidocr")
    assert (r.rotation + turn) % 360 == 0, (turn, r.rotation)
    assert (r.width, r.height) == (600, 200)
    assert folded(WORDS) <= folded(w.text for w in r.words)


@needs_ocr
def test_exif_orientation_is_applied(tmp_path):
    im = text_image().rotate(90, expand=True)  # stored on its side, EXIF says turn it back
    exif = im.getexif()
    exif[0x0112] = 6  # orientation 6: turn the stored picture 90 degrees clockwise to view it
    path = tmp_path / "phone.jpg"
    im.save(path, "JPEG", quality=95, exif=exif)
    [(number, rgb)] = ocr.read_image_file(path)
    assert number == 1 and rgb.shape[:2] == (200, 600)  # upright: wide, not tall
    r = ocr.ocr_image(rgb)
    assert r.rotation == 0 and folded(WORDS) <= folded(w.text for w in r.words)


@needs_tesseract
def test_tesseract_reads_the_same_words():
    import numpy as np

    r = ocr.ocr_image(np.asarray(text_image()), "tesseract")
    assert folded(WORDS) <= folded(w.text for w in r.words)
    assert r.engine == "tesseract" and r.version.startswith("tesseract ")


def _bad_inputs(folder: Path) -> dict:
    """The hostile files of one folder, by name: what each error must say."""
    good = io.BytesIO()
    text_image().save(good, "JPEG", quality=90)
    data = good.getvalue()
    (folder / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (folder / "dot.png").write_bytes(_png_bytes((1, 1)))
    (folder / "huge.png").write_bytes(png_header_only(20000, 20000))
    (folder / "jpeg-named.png").write_bytes(data)
    (folder / "text.webp").write_bytes(b"plain text, not an image")
    return {"truncated.jpg": "truncated", "dot.png": "1 x 1 pixels is too small",
            "huge.png": "20000 x 20000 pixels is more than", "jpeg-named.png": "JPEG image, not PNG",
            "text.webp": "not an image"}


def _png_bytes(size) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, "white").save(buf, "PNG")
    return buf.getvalue()


@needs_ocr
def test_import_images_folder_with_bad_files_and_a_multipage_tiff(tmp_path):
    src = tmp_path / "scans"
    src.mkdir()
    text_image().save(src / "receipt 1.png")
    frames = [text_image(), text_image((("TOTAL 7.25", 70),))]
    frames[0].save(src / "fax.tiff", save_all=True, append_images=frames[1:])
    expect = _bad_inputs(src)
    project = Project.create(tmp_path / "proj", "scans")
    seen = []
    report = import_pages("images", src, project, progress=lambda d, t: seen.append((d, t)))
    errors = {Path(f).name: m for f, m in report.errors}
    assert set(errors) == set(expect), errors
    for name, what in expect.items():
        assert name in errors[name] and what in errors[name], (name, errors[name])
    assert sorted(report.added) == ["fax-p1", "fax-p2", "receipt_1"]
    assert seen[-1] == (7, 7)  # progress over the seven files
    # nothing of a bad file is left: one image for each page, no temporary files
    images = sorted(p.name for p in (project.pages_dir / "images").iterdir())
    assert images == ["fax-p1.png", "fax-p2.png", "receipt_1.png"]
    assert sorted(p.name for p in project.pages_dir.iterdir()) == ["fax-p1.json", "fax-p2.json", "images",
                                                                    "receipt_1.json"]
    page = project.load_page("fax-p2")
    assert page.image == "images/fax-p2.png" and page.ocr["engine"] == "rapidocr"
    assert "rapidocr-onnxruntime" in page.ocr["version"] and page.ocr["rotation"] == 0
    assert {"total", "7.25"} <= folded(w.text for w in page.words)
    d = json.loads(project.page_path("receipt_1").read_text())
    assert d["ocr"]["engine"] == "rapidocr" and d["width"] == 600.0
    # imported again: unchanged, nothing added
    again = import_pages("images", src, project)
    assert sorted(again.unchanged) == ["fax-p1", "fax-p2", "receipt_1"] and not again.added


@needs_ocr
def test_import_images_cli_single_bad_file_leaves_no_project(tmp_path, capsys):
    (tmp_path / "huge.png").write_bytes(png_header_only(20000, 20000))
    rc = cli.main(["import", "images", str(tmp_path / "huge.png"), str(tmp_path / "proj")])
    assert rc == 2
    assert "huge.png: 20000 x 20000 pixels" in capsys.readouterr().err
    assert not (tmp_path / "proj").exists()


@needs_ocr
def test_import_images_workers_give_the_same_pages(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    text_image().save(src / "a.png")
    text_image((("TOTAL 7.25", 70),)).save(src / "b.png")
    (src / "c.png").write_bytes(b"not a png")
    assert cli.main(["import", "images", str(src), str(tmp_path / "one")]) == 1
    assert cli.main(["import", "images", str(src), str(tmp_path / "two"), "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert err.count("c.png: not an image") == 2
    for name in ("a", "b"):
        one = tmp_path / "one" / "pages"
        two = tmp_path / "two" / "pages"
        assert (one / f"{name}.json").read_bytes() == (two / f"{name}.json").read_bytes()
        assert (one / "images" / f"{name}.png").read_bytes() == (two / "images" / f"{name}.png").read_bytes()


def _scan_pdf(path: Path, images) -> None:
    images[0].save(path, "PDF", resolution=100, save_all=True, append_images=list(images[1:]))


@needs_ocr
def test_import_pdf_reads_pages_without_a_text_layer_by_ocr(tmp_path):
    from tests.test_importers import minimal_pdf

    src = tmp_path / "docs"
    src.mkdir()
    _scan_pdf(src / "fax.pdf", [text_image(), text_image((("TOTAL 7.25", 70),))])
    (src / "typed.pdf").write_bytes(minimal_pdf([(72, 700, "Invoice 42")]))
    (src / "locked.pdf").write_bytes(encrypted_pdf())
    project = Project.create(tmp_path / "proj", "pdfs")
    report = import_pages("pdf", src, project)
    assert sorted(report.added) == ["fax-p1", "fax-p2", "typed"]
    errors = {Path(f).name: m for f, m in report.errors}
    assert list(errors) == ["locked.pdf"] and "encrypted (password-protected) PDF" in errors["locked.pdf"]
    page = project.load_page("fax-p2")
    assert page.ocr["engine"] == "rapidocr" and page.image == "images/fax-p2.png"
    assert {"total", "7.25"} <= folded(w.text for w in page.words)
    # the page is in the pixels of its OCR image (OCR_PDF_DPI), not in points
    assert page.width == pytest.approx(600 * ocr.OCR_PDF_DPI / 100, abs=2)
    assert project.load_page("typed").ocr is None  # a text layer is read as it is
    assert not any(p.name.startswith("locked") for p in project.pages_dir.rglob("*"))


def test_import_pdf_scan_without_the_extra_names_it(tmp_path, monkeypatch):
    """A scanned page without the OCR engine: the file is named with the extra to install;
    its pages with a text layer still come in."""
    pytest.importorskip("PIL")
    from PIL import Image

    monkeypatch.setattr(ocr, "available", lambda name="rapidocr": ocr.INSTALL_HINT)
    src = tmp_path / "docs"
    src.mkdir()
    Image.new("RGB", (300, 300), "white").save(src / "scan.pdf", "PDF", resolution=100)
    project = Project.create(tmp_path / "proj", "pdfs")
    report = import_pages("pdf", src, project)
    [(where, message)] = report.errors
    assert where.endswith("scan.pdf") and "no text layer" in message and "dxstudio[ocr]" in message
    assert not report.added


@needs_ocr
def test_extract_reads_images_and_scanned_pdfs(tmp_path, capsys):
    model = tmp_path / "m.safetensors"
    assert cli.main(["new-model", "--size", "tiny", "--seed", "3", str(model)]) == 0
    text_image().save(tmp_path / "photo.png")
    _scan_pdf(tmp_path / "fax.pdf", [text_image(), text_image((("TOTAL 7.25", 70),))])
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    capsys.readouterr()
    files = [str(tmp_path / "photo.png"), str(tmp_path / "fax.pdf"), str(tmp_path / "broken.jpg")]
    rc = cli.main(["extract", str(model), *files])  # a scanned PDF of two pages is one document
    out, err = capsys.readouterr()
    assert rc == 1
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in records] == ["photo", "fax"] and records[1]["pages"] == ["fax-p1", "fax-p2"]
    rc = cli.main(["extract", str(model), "--pages", *files])  # a line per page
    out, err = capsys.readouterr()
    assert rc == 1
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in records] == ["photo", "fax-p1", "fax-p2"]
    assert [r.get("page_number") for r in records] == [None, 1, 2]
    assert all(r["ocr"]["engine"] == "rapidocr" for r in records)
    assert folded(WORDS) <= folded(w["text"] for w in records[0]["page"]["words"])
    for r in records:
        n = len(r["page"]["words"])
        assert all(0 <= i < n for f in r["fields"].values() for i in f["words"])
    assert "broken.jpg" in err


def test_ocr_options_stop_when_the_engine_is_missing(monkeypatch):
    """A worker without the engine answers "missing" for each file: the import stops with the
    message instead of naming every file."""
    opts = OcrOptions("rapidocr", map=lambda batches: ((b, [("missing", "no engine here")] * len(b)) for b in batches))
    with pytest.raises(SourceError, match="no engine here"):
        list(opts.results([("a.png", ".png", b"")]))
