"""Page to model inputs (dxstudio/engine/inputs.py, docs/inputs.md)."""
from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from dxstudio.engine.config import ModelConfig, size_config
from dxstudio.engine.inputs import (
    PAIR_FEATURE_NAMES, WORD_FEATURE_NAMES, WindowInputs, bucket, char_ids, page_inputs,
    pair_features, quantize, quantize_box, text_features, window_inputs, window_ranges,
    word_features,
)
from dxstudio.engine.page import Page, PageError, Word, page_from_dict

CFG = ModelConfig()
FUNSD = Path(__file__).resolve().parents[2] / "shared" / "data" / "funsd"  # ../shared beside the repo
SAMPLE_PAGES = Path(__file__).resolve().parents[1] / "resources" / "sample" / "pages"
F = {name: k for k, name in enumerate(WORD_FEATURE_NAMES)}


def make_page(words, width=1000.0, height=1000.0, pid="p") -> Page:
    return page_from_dict({"id": pid, "width": width, "height": height,
                           "words": [{"text": t, "box": list(b)} for t, b in words]})


def flags(text: str) -> dict[str, float]:
    return dict(zip(WORD_FEATURE_NAMES, text_features(text)))


# -- character ids ---------------------------------------------------------------------------
def test_char_ids_alphabet_index_plus_two_and_unknown_is_one():
    ids = char_ids("Ab1 ", CFG)
    assert ids.dtype == np.int32
    expected = [CFG.alphabet.index(c) + 2 for c in "Ab1 "]
    assert ids.tolist() == expected
    assert ids.tolist()[:2] == [ord("A") - 0x20 + 2, ord("b") - 0x20 + 2]  # alphabet starts at ' '
    # \u4e2d (CJK) and \u2603 (snowman) are not in the alphabet.
    assert char_ids("a\u4e2d\u2603", CFG).tolist() == [CFG.alphabet.index("a") + 2, 1, 1]
    assert char_ids("\u20ac", CFG).tolist() == [CFG.alphabet.index("\u20ac") + 2]
    assert char_ids("", CFG).shape == (0,)


def test_char_ids_are_nfc_normalized():
    decomposed = "e\u0301"  # e + combining acute
    assert char_ids(decomposed, CFG).tolist() == [CFG.alphabet.index("\u00e9") + 2]
    assert char_ids(decomposed, CFG).tolist() == char_ids("\u00e9", CFG).tolist()
    # The normalized text also drives the features: one character, a letter.
    assert flags(decomposed)["length"] == 1 / 24


def test_char_ids_truncate_to_max_chars():
    text = "abcdefghijklmnopqrstuvwxyz0123"  # 30 characters
    ids = char_ids(text, CFG)
    assert len(ids) == 24
    assert ids.tolist() == [CFG.alphabet.index(c) + 2 for c in text[:24]]
    small = ModelConfig(max_chars=5)
    assert char_ids(text, small).tolist() == ids.tolist()[:5]
    # Truncation counts characters after NFC: 24 decomposed e-acutes are 24 characters.
    assert len(char_ids("e\u0301" * 24, CFG)) == 24


def test_char_ids_with_a_custom_alphabet():
    cfg = ModelConfig(alphabet="xyz")
    assert char_ids("zyxw", cfg).tolist() == [4, 3, 2, 1]


# -- coordinates -----------------------------------------------------------------------------
def test_quantize_edges_and_clamping():
    assert quantize(0, 612) == 0
    assert quantize(612, 612) == 1000  # v = extent is exactly 1000 (division first)
    assert quantize(700, 612) == 1000  # past the page edge: clamped
    assert quantize(-5, 612) == 0
    assert quantize(306, 612) == 500
    assert quantize(0.6119, 612) == 0  # floor, not round
    assert quantize(0.612, 612) == 1
    # The division-first order gives 1000 at v = extent for every extent; the product-first
    # order (1000 * v) / extent gives 999 for some of these.
    rng = np.random.default_rng(3)
    extents = rng.uniform(1, 5000, 2000)
    assert all(quantize(float(e), float(e)) == 1000 for e in extents)
    assert any(math.floor(1000 * float(e) / float(e)) == 999 for e in extents)


def test_quantize_rejects_bad_numbers():
    with pytest.raises(ValueError, match="not finite"):
        quantize(float("nan"), 100)
    with pytest.raises(ValueError, match="extent"):
        quantize(1, 0)
    with pytest.raises(ValueError, match="extent"):
        quantize(1, float("inf"))


def test_bucket_edges():
    assert bucket(0, 128) == 0
    assert bucket(1000, 128) == 127  # 128000 // 1001
    assert bucket(7, 128) == 0 and bucket(8, 128) == 1  # 8*128 = 1024 >= 1001
    assert bucket(500, 128) == 64000 // 1001 == 63
    assert bucket(1000, 1001) == 1000
    assert [bucket(q, 128) for q in range(1001)] == sorted(bucket(q, 128) for q in range(1001))
    assert {bucket(q, 128) for q in range(1001)} == set(range(128))  # every bucket is used
    with pytest.raises(ValueError, match="outside"):
        bucket(1001, 128)


def test_quantize_box_uses_width_for_x_and_height_for_y():
    assert quantize_box((100, 100, 200, 300), 400, 1000) == (250, 100, 500, 300)


# -- word features ---------------------------------------------------------------------------
EXPECTED_FLAGS = {
    # text: (has_digit, all_digits, has_letter, all_upper, title, currency, amount, date,
    #        punctuation, ends_with_colon)
    "12.50": (1, 0, 0, 0, 0, 0, 1, 0, 0, 0),
    "$3": (1, 0, 0, 0, 0, 1, 1, 0, 0, 0),
    "2019-03-01": (1, 0, 0, 0, 0, 0, 0, 1, 0, 0),
    "03/01/19": (1, 0, 0, 0, 0, 0, 0, 1, 0, 0),
    "Total:": (0, 0, 1, 0, 1, 0, 0, 0, 0, 1),
    "ABC": (0, 0, 1, 1, 0, 0, 0, 0, 0, 0),
    "Hello": (0, 0, 1, 0, 1, 0, 0, 0, 0, 0),
    ".": (0, 0, 0, 0, 0, 0, 0, 0, 1, 0),
    "2019": (1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
    "25.000": (1, 0, 0, 0, 0, 0, 1, 0, 0, 0),  # thousands group (rupiah)
    "1,234.56": (1, 0, 0, 0, 0, 0, 1, 0, 0, 0),
    "(12.50)": (1, 0, 0, 0, 0, 0, 1, 0, 0, 0),
    "12.50,": (1, 0, 0, 0, 0, 0, 1, 0, 0, 0),  # trailing comma stripped for the patterns
    "12.5": (1, 0, 0, 0, 0, 0, 0, 0, 0, 0),  # one decimal is not an amount
    "RM12.50": (1, 0, 1, 1, 0, 1, 1, 0, 0, 0),
    "Rp": (0, 0, 1, 0, 1, 1, 0, 0, 0, 0),
    "\u20ac": (0, 0, 0, 0, 0, 1, 0, 0, 1, 0),  # a lone sign: currency and punctuation
    "01-Mar-2019": (1, 0, 1, 0, 1, 0, 0, 1, 0, 0),
    "25MAR18": (1, 0, 1, 1, 0, 0, 0, 1, 0, 0),
    "Date:": (0, 0, 1, 0, 1, 0, 0, 0, 0, 1),
    "McDonald": (0, 0, 1, 0, 0, 0, 0, 0, 0, 0),
    "A": (0, 0, 1, 1, 0, 0, 0, 0, 0, 0),  # title case needs two letters
    "\u00c9t\u00e9": (0, 0, 1, 0, 1, 0, 0, 0, 0, 0),  # Latin-1 letters count
    "\u0661\u0662": (0, 0, 0, 0, 0, 0, 0, 0, 1, 0),  # Arabic-Indic digits are not ASCII digits
    "--": (0, 0, 0, 0, 0, 0, 0, 0, 1, 0),
    "No.\uff1a": (0, 0, 1, 0, 1, 0, 0, 0, 0, 1),  # fullwidth colon
}


@pytest.mark.parametrize("text", sorted(EXPECTED_FLAGS))
def test_binary_word_features(text):
    got = text_features(text)[:10]
    assert tuple(int(v) for v in got) == EXPECTED_FLAGS[text], text
    assert all(v in (0.0, 1.0) for v in got)


def test_length_and_digit_fraction():
    f = flags("12.50")
    assert f["length"] == 5 / 24 and f["digit_fraction"] == 4 / 5
    f = flags("x" * 30)
    assert f["length"] == 1.0 and f["digit_fraction"] == 0.0
    assert flags("2019")["digit_fraction"] == 1.0
    assert flags("a1")["digit_fraction"] == 0.5


def test_word_features_box_and_dtype():
    page = make_page([("Total:", (100, 50, 300, 80))], width=2000, height=1000)
    w = word_features(page.words[0], page)
    assert w.dtype == np.float32 and w.shape == (16,)
    # q = (50, 50, 150, 80)
    assert w[F["box_width"]] == np.float32(100 / 1000)
    assert w[F["box_height"]] == np.float32(30 / 1000)
    assert w[F["centre_x"]] == np.float32(200 / 2000)
    assert w[F["centre_y"]] == np.float32(130 / 2000)
    assert w[F["ends_with_colon"]] == 1 and w[F["title_case"]] == 1
    assert w[F["length"]] == np.float32(6 / 24)


def test_word_features_box_past_the_edge_is_clamped():
    page = make_page([("x", (900, 950, 1200, 1100))])
    w = word_features(page.words[0], page)
    assert w[F["box_width"]] == np.float32(0.1) and w[F["box_height"]] == np.float32(0.05)
    assert w[F["centre_x"]] == np.float32(0.95) and w[F["centre_y"]] == np.float32(0.975)


def test_word_features_reject_a_bad_box_with_the_page_named():
    page = Page("bad-page", 100.0, 100.0, (Word("x", (10.0, 10.0, 5.0, 20.0)),))
    with pytest.raises(PageError, match="bad-page.*inverted"):
        word_features(page.words[0], page)
    page = Page("nan-page", 100.0, 100.0, (Word("x", (float("nan"), 1.0, 5.0, 20.0)),))
    with pytest.raises(PageError, match="nan-page.*not finite"):
        window_inputs(page, CFG, 0, 1)


# -- pair features ---------------------------------------------------------------------------
def test_pair_features_three_words_by_hand():
    # Page 1000 x 1000, so the quantized coordinates are the box coordinates.
    page = make_page([
        ("Total:", (100, 100, 200, 120)),   # 0
        ("12.50", (250, 105, 300, 125)),    # 1: same line as 0 (overlap 15 >= 20/2)
        ("Thanks", (150, 110, 400, 140)),   # 2: overlaps 0 by 10 of min height 20 -> same line
    ])
    win = window_inputs(page, CFG, 0, 3)
    p = win.pair_feats.reshape(3, 3, 8)
    assert win.pair_feats.dtype == np.float32 and win.pair_feats.shape == (9, 8)

    def f32(*vals):
        return np.array(vals, dtype=np.float32)

    # (0, 1): centres (150, 110), (275, 115); x gap 250 - 200 = 50; y gap 105 - 120 = -15.
    np.testing.assert_array_equal(p[0, 1], f32(125 / 1000, 5 / 1000, 0.05, -0.015, 1, 1, 1 / 64, 0))
    # (1, 0): the mirror image: dx, dy, sign and rel change sign, gaps and same line do not.
    np.testing.assert_array_equal(p[1, 0], f32(-125 / 1000, -5 / 1000, 0.05, -0.015, 1, -1, -1 / 64, 0))
    # (0, 2): centres (150, 110), (275, 125); x overlap 200 - 150 = 50; y overlap 120 - 110 = 10.
    np.testing.assert_array_equal(p[0, 2], f32(0.125, 0.015, -0.05, -0.01, 1, 1, 2 / 64, 0))
    # (1, 2): x overlap 300 - 250 = 50, y overlap 125 - 110 = 15 >= min(20, 30) / 2.
    np.testing.assert_array_equal(p[1, 2], f32(0, 0.01, -0.05, -0.015, 1, 1, 1 / 64, 0))
    # (i, i): no offset, the gaps are minus the word's own width and height.
    np.testing.assert_array_equal(p[2, 2], f32(0, 0, -0.25, -0.03, 1, 0, 0, 1))
    assert PAIR_FEATURE_NAMES == ("dx", "dy", "gap_x", "gap_y", "same_line", "sign", "rel", "self")


def test_pair_same_line_threshold():
    # heights 20 and 40: same line iff vertical overlap >= 10.
    q_overlap_10 = [(0, 0, 10, 20), (20, 10, 30, 50)]
    q_overlap_9 = [(0, 0, 10, 20), (20, 11, 30, 51)]
    q_below = [(0, 0, 10, 20), (20, 30, 30, 70)]
    assert pair_features(q_overlap_10)[1, 4] == 1
    assert pair_features(q_overlap_9)[1, 4] == 0
    assert pair_features(q_below)[1, 4] == 0
    assert pair_features(q_below)[1, 3] == np.float32(0.01)  # positive gap below
    # Zero-height boxes (quantized to one line): same line iff they touch or overlap.
    assert pair_features([(0, 5, 1, 5), (2, 5, 3, 5)])[1, 4] == 1
    assert pair_features([(0, 5, 1, 5), (2, 6, 3, 6)])[1, 4] == 0


def test_pair_rel_clamps_at_64_words():
    q = np.zeros((70, 4), dtype=np.int64)
    p = pair_features(q).reshape(70, 70, 8)
    assert p[0, 64, 6] == 1.0 and p[0, 69, 6] == 1.0 and p[69, 0, 6] == -1.0
    assert p[0, 32, 6] == 0.5 and p[40, 8, 6] == -0.5
    assert p[0, 69, 5] == 1 and p[69, 0, 5] == -1
    assert np.array_equal(p[:, :, 7], np.eye(70, dtype=np.float32))


def test_pair_features_reject_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        pair_features(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="0..1000"):
        pair_features([(0, 0, 1001, 5)])


def test_pair_features_512_words_are_fast_and_match_a_loop():
    rng = np.random.default_rng(5)
    n = 512
    a = rng.integers(0, 1001, (n, 2, 2))
    lo, hi = a.min(axis=1), a.max(axis=1)
    q = np.stack([lo[:, 0], lo[:, 1], hi[:, 0], hi[:, 1]], axis=1)
    pair_features(q)  # warm up
    best = min(_timed(pair_features, q) for _ in range(3))
    print(f"pair_features 512 words: {best * 1000:.1f} ms of CPU")
    # CPU time, not wall time: on a busy machine the wall time of the same work was 254 ms (a
    # failure at 0.1 s); a loop over the 262,144 pairs in Python takes seconds of CPU
    assert best < 0.2
    p = pair_features(q)
    assert p.shape == (n * n, 8)
    # A plain Python loop on a sample of pairs gives the same bytes.
    for i, j in [(0, 0), (0, 1), (1, 0), (3, 500), (511, 2), (100, 164), (200, 100)]:
        assert p[i * n + j].tobytes() == _pair_loop(q[i], q[j], i, j).tobytes()


def _timed(fn, *args):
    """The CPU seconds of fn(*args) in this process (the same on a loaded machine)."""
    t = time.process_time()
    fn(*args)
    return time.process_time() - t


def _pair_loop(a, b, i, j):
    ax0, ay0, ax1, ay1 = (int(v) for v in a)
    bx0, by0, bx1, by1 = (int(v) for v in b)
    gap_y = max(ay0, by0) - min(ay1, by1)
    same = -gap_y >= 0 and -2 * gap_y >= min(ay1 - ay0, by1 - by0)
    return np.array([
        ((bx0 + bx1) - (ax0 + ax1)) / 2000, ((by0 + by1) - (ay0 + ay1)) / 2000,
        (max(ax0, bx0) - min(ax1, bx1)) / 1000, gap_y / 1000, float(same),
        float((j > i) - (j < i)), min(max((j - i) / 64, -1.0), 1.0), float(i == j),
    ], dtype=np.float32)


# -- windows ---------------------------------------------------------------------------------
def test_window_ranges():
    assert window_ranges(1, 512) == [(0, 1)]
    assert window_ranges(512, 512) == [(0, 512)]
    assert window_ranges(513, 512) == [(0, 512), (512, 513)]
    assert window_ranges(1100, 512) == [(0, 512), (512, 1024), (1024, 1100)]
    assert window_ranges(0, 512) == []
    with pytest.raises(ValueError, match="max_words"):
        window_ranges(10, 0)
    with pytest.raises(ValueError, match="n_words"):
        window_ranges(-1, 512)


def test_window_inputs_layout_and_padding():
    page = make_page([
        ("Invoice", (10, 10, 100, 30)),
        ("e\u0301t\u00e9", (110, 10, 160, 30)),
        ("x" * 30, (10, 40, 990, 60)),
        ("$3", (10, 70, 40, 90)),
    ], width=1000, height=500)
    win = window_inputs(page, CFG, 1, 4)
    assert isinstance(win, WindowInputs)
    assert (win.start, win.n) == (1, 3)
    assert win.char_ids.shape == (3, 24) and win.char_ids.dtype == np.int32
    assert win.char_len.tolist() == [3, 24, 2] and win.char_len.dtype == np.int32
    assert win.char_ids[0, :3].tolist() == char_ids("\u00e9t\u00e9", CFG).tolist()
    assert not win.char_ids[0, 3:].any() and not win.char_ids[2, 2:].any()
    assert win.buckets.dtype == np.int32 and win.buckets.shape == (3, 4)
    # word 1: box (110, 10, 160, 30) on 1000 x 500 -> q (110, 20, 160, 60)
    assert win.buckets[0].tolist() == [bucket(q, 128) for q in (110, 20, 160, 60)]
    assert win.word_feats.dtype == np.float32 and win.word_feats.shape == (3, 16)
    for k in range(3):
        assert win.word_feats[k].tobytes() == word_features(page.words[1 + k], page).tobytes()
    assert win.pair_feats.shape == (9, 8)


def test_window_inputs_reject_bad_windows():
    page = make_page([("a", (0, 0, 1, 1)), ("b", (0, 0, 1, 1))], pid="two-words")
    with pytest.raises(PageError, match="two-words"):
        window_inputs(page, CFG, 1, 3)
    with pytest.raises(PageError, match="two-words"):
        window_inputs(page, CFG, 1, 1)
    with pytest.raises(PageError, match="max_words = 1"):
        window_inputs(page, ModelConfig(max_words=1), 0, 2)


def test_page_inputs_cover_every_word_once():
    words = [(f"w{k}", (k % 50 * 20, k // 50 * 20, k % 50 * 20 + 15, k // 50 * 20 + 10))
             for k in range(23)]
    page = make_page(words)
    cfg = ModelConfig(max_words=10)
    wins = page_inputs(page, cfg)
    assert [(w.start, w.n) for w in wins] == [(0, 10), (10, 10), (20, 3)]
    assert wins[2].char_ids[0, :3].tolist() == char_ids("w20", cfg).tolist()
    assert wins[2].pair_feats.shape == (9, 8)


INPUTS_DIGEST = "f889fb6bee96a9abce0bef6d0e580d1b4445bc69c1c8b7a64abcce5d48d0dda4"


def test_inputs_are_deterministic_bytes():
    page = make_page([(t, (k * 37 % 900, k * 53 % 900, k * 37 % 900 + 60, k * 53 % 900 + 20))
                      for k, t in enumerate(sorted(EXPECTED_FLAGS))], width=913.7, height=1187.3)

    h = hashlib.sha256()
    for win in page_inputs(page, CFG):
        for a in (win.char_ids, win.char_len, win.buckets, win.word_feats, win.pair_feats):
            h.update(a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes())
    # Recorded once from this code. Another digest means the inputs of every page changed,
    # and so would every model's bytes: update it only with a documented change of docs/inputs.md.
    assert h.hexdigest() == INPUTS_DIGEST


# -- real pages: a bundled receipt, a FUNSD form -------------------------------------------
def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def funsd_page(stem: str) -> Page:
    base = FUNSD / "training_data"
    ann = json.loads((base / "annotations" / f"{stem}.json").read_text(encoding="utf-8"))
    width, height = _png_size(base / "images" / f"{stem}.png")
    words = [{"text": w["text"], "box": w["box"]}
             for entity in ann["form"] for w in entity["words"] if w["text"].strip()]
    return page_from_dict({"id": stem, "width": width, "height": height, "words": words},
                          str(base / "annotations" / f"{stem}.json"))


def check_real_page_windows(page, cfg):
    """Every window of a real page: finite features in range, ids and padding as specified."""
    wins = page_inputs(page, cfg)
    assert sum(w.n for w in wins) == len(page.words) > 50
    for win in wins:
        wf, pf = win.word_feats, win.pair_feats
        assert np.isfinite(wf).all() and np.isfinite(pf).all()
        assert ((wf >= 0) & (wf <= 1)).all()
        assert ((pf >= -1) & (pf <= 1)).all()
        binary = [F[name] for name in WORD_FEATURE_NAMES[:10]]
        assert np.isin(wf[:, binary], (0, 1)).all()
        assert ((win.buckets >= 0) & (win.buckets < cfg.pos_buckets)).all()
        assert ((win.char_ids >= 0) & (win.char_ids < cfg.vocab)).all()
        assert (win.char_len >= 1).all() and (win.char_len <= cfg.max_chars).all()
        # Real positions are never padding; padding is zero.
        pos = np.arange(cfg.max_chars)[None, :]
        assert (win.char_ids[pos < win.char_len[:, None]] > 0).all()
        assert (win.char_ids[pos >= win.char_len[:, None]] == 0).all()
        # Every word is on its own line, and the same-line relation is symmetric.
        p = pf.reshape(win.n, win.n, 8)
        assert (np.diagonal(p[:, :, 4]) == 1).all()
        assert np.array_equal(p[:, :, 4], p[:, :, 4].T)
    return wins


def test_receipt_page_features_are_finite_and_in_range():
    path = SAMPLE_PAGES / "receipt_00000.json"  # the bundled sample's first CORD receipt
    page = page_from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))
    wins = check_real_page_windows(page, size_config("tiny"))
    # Receipts have amounts ("75,000"), digits and upper-case words somewhere.
    wf = wins[0].word_feats
    assert wf[:, F["amount"]].any() and wf[:, F["has_digit"]].any()
    assert wf[:, F["all_upper"]].any()


@pytest.mark.shared_data("funsd")
def test_funsd_page_features_are_finite_and_in_range():
    wins = check_real_page_windows(funsd_page("0000971160"), size_config("tiny"))
    # Forms have keys ending in a colon, digits and title-case words somewhere.
    wf = wins[0].word_feats
    assert wf[:, F["ends_with_colon"]].any() and wf[:, F["has_digit"]].any()
    assert wf[:, F["title_case"]].any()


def test_every_currency_sign_makes_an_amount_and_nothing_else_does():
    from dxstudio.engine.inputs import CURRENCY_SIGNS
    for sign in sorted(CURRENCY_SIGNS):
        f = flags(sign + "3")
        assert f["currency_sign"] == 1 and f["amount"] == 1, hex(ord(sign))
    for other in ("#", "%", "\u00a6", "\u20d0", "x", "\u00a7"):
        f = flags(other + "3")
        assert f["currency_sign"] == 0 and f["amount"] == 0, hex(ord(other))


def test_patterns_are_ascii_only():
    # Fullwidth digits are not digits: no amount, no date. Non-ASCII case folding is off:
    # U+017F (long s) does not match the S of "USD".
    assert flags("\uff11\uff12.50")["amount"] == 0
    assert flags("\uff10\uff13/01/19")["date"] == 0
    assert flags("U\u017fD")["currency_sign"] == 0
    assert flags("usd")["currency_sign"] == 1
