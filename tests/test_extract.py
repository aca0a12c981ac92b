"""`dxstudio new-model` and `dxstudio extract`: JSON lines, exact floats, one error line per bad page."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dxstudio.cli import main as cli_main
from dxstudio.engine.config import size_config
from dxstudio.engine.extract import fields_from_tags, spans
from dxstudio.engine.page import Page, Word


def page_dict(pid, n, width=600, height=800):
    words = []
    for i in range(n):
        x, y = 20 + (i % 6) * 90, 20 + (i // 6) * 24
        words.append({"text": ["Total", "12.50", "INVOICE", "No:", "2019-03-01", "ACME"][i % 6], "box": [x, y, x + 80, y + 18]})
    return {"id": pid, "width": width, "height": height, "words": words}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "tiny.safetensors"
    assert cli_main(["new-model", "--seed", "7", "--size", "tiny", str(path)]) == 0
    return path


def test_new_model_is_reproducible(tmp_path, capsys):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert cli_main(["new-model", "--seed", "3", "--size", "tiny", str(a)]) == 0
    assert cli_main(["new-model", "--seed", "3", "--size", "tiny", "--fields", "vendor,date,total,invoice_number", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    c = tmp_path / "c.safetensors"
    assert cli_main(["new-model", "--seed", "4", "--size", "tiny", str(c)]) == 0
    assert c.read_bytes() != a.read_bytes()
    d = tmp_path / "d.safetensors"
    assert cli_main(["new-model", "--seed", "3", "--size", "tiny", "--input-layout", "1", str(d)]) == 0
    out = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    # layout 2 (the default) reads 45 more word features: 32 x 45 more projection weights
    assert out[0]["parameters"] == 38157 + 32 * 45
    assert out[-1]["parameters"] == 38157


def test_extract_prints_one_line_per_page_and_one_error_per_bad_file(tiny_model, tmp_path, capsys):
    good1, good2 = tmp_path / "p1.json", tmp_path / "p2.json"
    good1.write_text(json.dumps(page_dict("p1", 14)))
    good2.write_text(json.dumps(page_dict("p2", 3)))
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    nan_box = tmp_path / "nan.json"
    d = page_dict("nan", 2)
    d["words"][1]["box"][0] = float("nan")
    nan_box.write_text(json.dumps(d))
    inverted = tmp_path / "inv.json"
    d = page_dict("inv", 2)
    d["words"][0]["box"] = [50, 10, 10, 20]
    inverted.write_text(json.dumps(d))
    empty_text = tmp_path / "empty.json"
    d = page_dict("empty", 2)
    d["words"][0]["text"] = "  "
    empty_text.write_text(json.dumps(d))
    no_words = tmp_path / "nowords.json"
    no_words.write_text(json.dumps({"id": "x", "width": 10, "height": 10}))
    files = [good1, bad_json, nan_box, good2, inverted, empty_text, no_words]
    rc = cli_main(["extract", str(tiny_model)] + [str(f) for f in files])
    assert rc == 1
    cap = capsys.readouterr()
    lines = [json.loads(l) for l in cap.out.splitlines()]
    assert [l["id"] for l in lines] == ["p1", "p2"]
    errors = cap.err.strip().splitlines()
    summary = errors.pop()  # the routes' summary line comes last
    assert "0 values answered locally" in summary and "stores no LocalFirst threshold" in summary
    assert len(errors) == 5
    for f, e in zip([bad_json, nan_box, inverted, empty_text, no_words], errors):
        assert str(f) in e
    assert "not JSON" in errors[0] and "not finite" in errors[1] and "inverted" in errors[2]
    assert "empty text" in errors[3] and "words" in errors[4]
    for rec in lines:
        assert set(rec["fields"]) == {"vendor", "date", "total", "invoice_number"}
        for v in rec["fields"].values():
            if v["value"] is not None:
                # binary64 confidences (tag_confidence); no stored threshold: every value is asked
                c = v["confidence"]
                assert isinstance(c, float) and 0 < c <= 1 and v["words"] == sorted(v["words"])
                assert v["route"] == "ask"


def test_extract_paths_agree_and_long_pages_use_windows(tiny_model, tmp_path, capsys):
    long_page = tmp_path / "long.json"
    long_page.write_text(json.dumps(page_dict("long", 530, height=4000)))
    outs = []
    for k in ("reference", "fast"):
        assert cli_main(["extract", str(tiny_model), str(long_page), "--kernels", k]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


def test_bad_model_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "m.safetensors"
    bad.write_bytes(b"hello")
    page = tmp_path / "p.json"
    page.write_text(json.dumps(page_dict("p", 2)))
    assert cli_main(["extract", str(bad), str(page)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]


def test_spans_follow_the_bio_rules():
    # fields a (B=1, I=2), b (B=3, I=4)
    tags = [0, 1, 2, 2, 0, 2, 2, 3, 4, 1, 4]
    assert spans(tags, 2) == [(0, 1, 3), (0, 5, 6), (1, 7, 8), (0, 9, 9), (1, 10, 10)]
    page = Page("p", 100, 100, tuple(Word(f"w{i}", (0, 0, 1, 1)) for i in range(11)))
    probs = np.array([0.9, 0.8, 0.7, 0.9, 0.9, 0.95, 0.6, 0.5, 0.9, 0.99, 0.3], np.float32)
    fields = fields_from_tags(page, ["a", "b"], tags, probs)
    # a: spans (1-3: min .7), (5-6: .6), (9: .99) -> the most confident is word 9
    assert fields["a"].words == (9,) and fields["a"].text == "w9"
    assert fields["b"].words == (7, 8) and fields["b"].text == "w7 w8"
    assert fields["b"].confidence == float(np.float32(0.5))
