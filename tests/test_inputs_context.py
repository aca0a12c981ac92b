"""Input layout 2: the context word features (dxstudio/engine/inputs.py, docs/inputs.md
"Context features") and how a model records its layout (dxstudio/engine/config.py)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from dxstudio.engine.config import (
    WORD_FEATURES_OF_LAYOUT, ModelConfig, size_config,
)
from dxstudio.engine.container import ModelFileError, load_model, model_bytes, save_model
from dxstudio.engine.inputs import (
    CONTEXT_FEATURE_NAMES, WORD_FEATURE_NAMES, amount_cents, context_features, keyword_group,
    KEYWORD_GROUP_NAMES, quantize_box, window_inputs,
)
from dxstudio.engine.page import page_from_dict
from dxstudio.engine.params import new_params

NAMES = WORD_FEATURE_NAMES + CONTEXT_FEATURE_NAMES
RECEIPT = [
    ("SUBTOTAL", (10, 100, 80, 110)), ("12.50", (200, 100, 240, 110)),
    ("TAX:", (10, 120, 50, 130)), ("0.75", (200, 120, 240, 130)),
    ("TOTAL", (10, 140, 60, 150)), ("13.25", (200, 140, 240, 150)),
    ("CASH", (10, 160, 50, 170)), ("20.00", (200, 160, 240, 170)),
    ("CHANGE", (10, 180, 60, 190)), ("6.75", (200, 180, 240, 190)),
    ("Date", (10, 20, 40, 30)), ("12/03/2019", (10, 32, 80, 42)), ("10:45", (100, 32, 130, 42)),
    ("Tel:", (10, 50, 30, 60)), ("03-1234 5678", (35, 50, 100, 60)),
]


def make_page(words, width=300.0, height=300.0):
    return page_from_dict({"id": "p", "width": width, "height": height,
                           "words": [{"text": t, "box": list(b)} for t, b in words]})


def features_of(words, layout=2):
    page = make_page(words)
    cfg = size_config("tiny", input_layout=layout)
    return window_inputs(page, cfg, 0, len(words)).word_feats


def on(row) -> set[str]:
    return {n for n, v in zip(NAMES, row) if v != 0 and n in CONTEXT_FEATURE_NAMES}


def test_layout_sizes_and_names():
    assert len(WORD_FEATURE_NAMES) == WORD_FEATURES_OF_LAYOUT[1] == 16
    assert len(WORD_FEATURE_NAMES) + len(CONTEXT_FEATURE_NAMES) == WORD_FEATURES_OF_LAYOUT[2]
    assert len(set(NAMES)) == len(NAMES)


def test_context_features_of_a_receipt():
    f = features_of(RECEIPT)
    assert f.shape == (len(RECEIPT), 61) and f.dtype == np.float32
    rows = {t: on(f[k]) for k, (t, _) in enumerate(RECEIPT)}
    assert rows["SUBTOTAL"] == {"kw_subtotal"}
    assert rows["12.50"] == {"left_kw_subtotal", "amount_rank", "amount_part", "line_last"}
    assert rows["TAX:"] == {"kw_tax", "above_kw_subtotal"}
    assert rows["0.75"] == {"left_kw_tax", "amount_rank", "amount_part", "line_last", "left_colon"}
    # 13.25 = 12.50 + 0.75, and 20.00 = 13.25 + 6.75: sums; 13.25 is also a part of 20.00
    assert rows["13.25"] == {"left_kw_total", "amount_rank", "amount_sum", "amount_part", "line_last"}
    assert rows["20.00"] == {"left_kw_paid", "amount_rank", "amount_largest", "amount_sum", "line_last"}
    assert rows["12/03/2019"] == {"above_kw_date"}
    assert rows["10:45"] == {"time", "line_last"}
    assert rows["03-1234 5678"] == {"phone", "left_kw_phone", "line_last", "left_colon"}
    rank = NAMES.index("amount_rank")
    # distinct values descending: 20.00, 13.25, 12.50, 6.75, 0.75 -> 1, 1/2, 1/3, 1/4, 1/5
    got = {t: float(f[k, rank]) for k, (t, _) in enumerate(RECEIPT) if f[k, rank]}
    assert got == {"20.00": 1.0, "13.25": np.float32(1 / 2), "12.50": np.float32(1 / 3),
                   "6.75": 0.25, "0.75": np.float32(1 / 5)}


def test_layout_2_starts_with_layout_1():
    f1, f2 = features_of(RECEIPT, 1), features_of(RECEIPT, 2)
    assert f1.shape == (len(RECEIPT), 16)
    assert f2[:, :16].tobytes() == f1.tobytes()


def test_repeats_and_no_amounts():
    words = [("TOTAL", (10, 10, 50, 20)), ("5.00", (100, 10, 140, 20)),
             ("CASH", (10, 30, 50, 40)), ("5.00", (100, 30, 140, 40)), ("thanks", (10, 60, 60, 70))]
    f = features_of(words)
    rep, part, summ = (NAMES.index(n) for n in ("amount_repeats", "amount_part", "amount_sum"))
    assert f[1, rep] == np.float32(1 / 3) and f[3, rep] == np.float32(1 / 3)
    # 5.00 + 5.00 = 10.00 is on no word, and a value is not a part of itself
    assert f[1, part] == 0 and f[1, summ] == 0
    assert f[4, NAMES.index("amount_rank")] == 0
    assert not on(features_of([("hello", (10, 10, 50, 20))])[0]) - {"line_last"}


def test_keywords_and_amount_values():
    assert KEYWORD_GROUP_NAMES[keyword_group("Total:")] == "total"
    assert KEYWORD_GROUP_NAMES[keyword_group("(GST)")] == "tax"
    assert KEYWORD_GROUP_NAMES[keyword_group("Rückgeld")] == "change"
    assert KEYWORD_GROUP_NAMES[keyword_group("No.")] == "number"
    assert keyword_group("Totally") == -1
    assert amount_cents("1.234,56") == 123456
    assert amount_cents("1,234.56") == 123456
    assert amount_cents("25.000") == 2500000
    assert amount_cents("RM5") == 500
    assert amount_cents("(12.50)") == 1250
    assert amount_cents("2019") is None and amount_cents("12.5") is None


def test_context_features_are_exact_and_match_a_loop():
    rng = np.random.default_rng(3)
    texts = ["TOTAL", "12.50", "Tax", "1.25", "x", "13.75", "Date:", "01/02/19", "CASH", "20.00"]
    boxes = []
    for _ in texts:
        x0, y0 = int(rng.integers(0, 900)), int(rng.integers(0, 950))
        boxes.append((x0, y0, x0 + int(rng.integers(1, 90)), y0 + int(rng.integers(5, 30))))
    q = np.array([quantize_box(b, 1000, 1000) for b in boxes])
    out = context_features(texts, q)
    # a plain loop over pairs for the neighbour keyword features
    g = len(KEYWORD_GROUP_NAMES)
    for i in range(len(texts)):
        left, above = set(), set()
        for j in range(len(texts)):
            if i == j or keyword_group(texts[j]) < 0:
                continue
            a, b = q[i], q[j]
            ov = min(a[3], b[3]) - max(a[1], b[1])
            same = ov >= 0 and 2 * ov >= min(a[3] - a[1], b[3] - b[1])
            if same and b[0] + b[2] < a[0] + a[2]:
                left.add(keyword_group(texts[j]))
            if (not same and a[1] - b[3] >= 0 and min(a[2], b[2]) - max(a[0], b[0]) >= 0
                    and 2 * (a[1] - b[3]) <= 3 * (a[3] - a[1])):
                above.add(keyword_group(texts[j]))
        assert {k for k in range(g) if out[i, 2 + g + k]} == left
        assert {k for k in range(g) if out[i, 2 + 2 * g + k]} == above


LAYOUT2_DIGEST = "468012366fdd8dce8db60f654a0f02e9913fbd6f6bfd1134cfaf80aa48448b12"


def test_layout_2_inputs_are_deterministic_bytes():
    page = make_page(RECEIPT, width=913.7, height=1187.3)
    win = window_inputs(page, size_config("base", input_layout=2), 0, len(RECEIPT))
    h = hashlib.sha256(win.word_feats.tobytes()).hexdigest()
    # Recorded once from this code; another digest means layout 2 changed (a new layout instead)
    assert h == LAYOUT2_DIGEST


# -- the layout in the model file ----------------------------------------------------------
def test_config_json_records_layout_2_and_omits_layout_1():
    c1 = size_config("tiny", input_layout=1)
    c2 = size_config("tiny", input_layout=2)
    assert "input_layout" not in json.loads(c1.to_json())  # files before layout 2: same bytes
    assert json.loads(c2.to_json())["input_layout"] == 2 and c2.word_features == 61
    assert ModelConfig.from_dict(json.loads(c1.to_json())) == c1
    assert ModelConfig.from_dict(json.loads(c2.to_json())) == c2
    d = json.loads(c2.to_json())
    d["word_features"] = 16
    with pytest.raises(ValueError, match="input layout 2 has word_features 61"):
        ModelConfig.from_dict(d)
    d = json.loads(c2.to_json())
    d["input_layout"] = 3
    with pytest.raises(ValueError, match="input_layout must be one of"):
        ModelConfig.from_dict(d)
    assert size_config("base").input_layout == 2  # new models read the context


def test_a_file_cannot_mix_layouts(tmp_path):
    c2 = size_config("tiny", input_layout=2)
    p2 = new_params(c2, 5)
    path = tmp_path / "m2.safetensors"
    save_model(path, c2, p2)
    loaded = load_model(path)
    assert loaded.cfg.input_layout == 2 and loaded.params["feat_proj.weight"].shape[1] == 61
    # a layout-2 config over a layout-1 model's tensors is refused by the shape check
    c1 = size_config("tiny", input_layout=1)
    p1 = new_params(c1, 5)
    raw = model_bytes(c1, p1)
    meta_1 = c1.to_json().encode()
    meta_2 = c2.to_json().encode()
    hdr_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + hdr_len])
    header["__metadata__"]["config"] = meta_2.decode()
    new_header = json.dumps(header, separators=(",", ":")).encode()
    new_header += b" " * (-len(new_header) % 8)
    bad = tmp_path / "mixed.safetensors"
    bad.write_bytes(len(new_header).to_bytes(8, "little") + new_header + raw[8 + hdr_len:])
    assert meta_1 != meta_2
    with pytest.raises(ModelFileError, match="mixed.safetensors"):
        load_model(bad)
