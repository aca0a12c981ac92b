"""The docextract-v0 container: canonical bytes, library compatibility, one-line errors for bad files."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dxstudio.engine.config import size_config
from dxstudio.engine.container import ModelFileError, load_model, model_bytes, save_model
from dxstudio.engine.params import new_params, param_spec

REPO = Path(__file__).resolve().parents[1]
SUMMARY = {
    "fingerprint": "9f2c" * 16,
    "threshold": 0.8123456789012345,
    "scores": {"vendor": {"recall": 1 / 3, "agreement": 0.75}, "total": {"recall": 1.0, "agreement": None}},
    "note": "caf\u00e9 \u20ac",
    "held_out": 7,
}


@pytest.fixture(scope="module")
def tiny():
    cfg = size_config("tiny")
    return cfg, new_params(cfg, 7)


def split_file(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def join_file(header: dict, body: bytes) -> bytes:
    """A file with an edited header, laid out as the format says (so only the edit is wrong)."""
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


# -- canonical bytes ------------------------------------------------------------------------

def test_round_trip_gives_identical_bytes(tmp_path, tiny):
    cfg, params = tiny
    for summary in (None, SUMMARY):
        first = tmp_path / "first.safetensors"
        save_model(first, cfg, params, summary)
        loaded = load_model(first)
        assert loaded.cfg == cfg
        assert loaded.path == first
        assert list(loaded.params) == [name for name, _, _ in param_spec(cfg)]
        for name, arr in params.items():
            assert loaded.params[name].dtype == np.float32
            assert np.array_equal(loaded.params[name], arr), name
        assert loaded.summary == (None if summary is None else json.loads(json.dumps(SUMMARY)))
        second = tmp_path / "second.safetensors"
        save_model(second, loaded.cfg, loaded.params, loaded.summary)
        assert second.read_bytes() == first.read_bytes() == model_bytes(cfg, params, summary)


def test_layout_is_the_documented_one(tiny):
    cfg, params = tiny
    data = model_bytes(cfg, params, SUMMARY)
    (n,) = struct.unpack("<Q", data[:8])
    raw = data[8:8 + n]
    assert n % 8 == 0 and raw[:1] == b"{"
    text = raw.rstrip(b" ").decode("ascii")
    header = json.loads(text)
    # sorted keys, no spaces: re-serializing canonically gives the same text
    assert text == json.dumps(header, sort_keys=True, separators=(",", ":"))
    assert header["__metadata__"] == {"format": "docextract-v0", "config": cfg.to_json(),
                                      "summary": json.dumps(SUMMARY, sort_keys=True, separators=(",", ":"))}
    # tensors tile the data section in param_spec order, little-endian binary32
    position = 0
    for name, shape, _ in param_spec(cfg):
        entry = header[name]
        assert entry["dtype"] == "F32" and tuple(entry["shape"]) == shape
        begin, end = entry["data_offsets"]
        assert begin == position and end - begin == 4 * int(np.prod(shape))
        stored = np.frombuffer(data[8 + n + begin:8 + n + end], dtype="<f4").reshape(shape)
        assert np.array_equal(stored, params[name])
        position = end
    assert 8 + n + position == len(data)


def test_summary_changes_the_bytes_and_metadata_order_does_not_matter(tiny):
    cfg, params = tiny
    reordered = dict(reversed(list(SUMMARY.items())))
    assert model_bytes(cfg, params, reordered) == model_bytes(cfg, params, SUMMARY)
    assert model_bytes(cfg, params, SUMMARY) != model_bytes(cfg, params)
    changed = dict(params)
    changed["tag_head.bias"] = params["tag_head.bias"] + np.float32(1e-7)
    assert model_bytes(cfg, changed) != model_bytes(cfg, params)


_WRITER = """
import sys
from dxstudio.engine.config import size_config
from dxstudio.engine.container import save_model
from dxstudio.engine.params import new_params
import json
cfg = size_config("tiny")
params = new_params(cfg, 7)
save_model(sys.argv[1], cfg, params)
save_model(sys.argv[2], cfg, params, json.loads(sys.argv[3]))
"""


def test_two_processes_write_identical_bytes(tmp_path, tiny):
    cfg, params = tiny
    outputs = []
    for run, hash_seed in enumerate(("1", "12345")):  # different string hashing, different dict/set orders
        plain, tuned = tmp_path / f"plain{run}.safetensors", tmp_path / f"tuned{run}.safetensors"
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO))
        subprocess.run([sys.executable, "-c", _WRITER, str(plain), str(tuned), json.dumps(SUMMARY)],
                       check=True, env=env, cwd=tmp_path, timeout=60)
        outputs.append((plain.read_bytes(), tuned.read_bytes()))
    assert outputs[0] == outputs[1]
    assert outputs[0] == (model_bytes(cfg, params), model_bytes(cfg, params, SUMMARY))


def test_save_is_atomic_and_replaces(tmp_path, tiny):
    cfg, params = tiny
    path = tmp_path / "models" / "m.safetensors"
    save_model(path, cfg, params)
    save_model(path, cfg, params, SUMMARY)
    assert load_model(path).summary is not None
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.safetensors"]  # no temp file left


# -- the safetensors library reads our files, and we read its files ------------------------

def test_safetensors_library_reads_our_file(tmp_path, tiny):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    cfg, params = tiny
    path = tmp_path / "m.safetensors"
    save_model(path, cfg, params, SUMMARY)
    tensors = load_file(str(path))
    assert set(tensors) == set(params)
    for name, arr in params.items():
        assert tensors[name].dtype == np.float32 and np.array_equal(tensors[name], arr), name
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata()
        assert set(f.keys()) == set(params)
        assert np.array_equal(f.get_tensor("blocks.1.fc2.weight"), params["blocks.1.fc2.weight"])
    assert meta == {"format": "docextract-v0", "config": cfg.to_json(),
                    "summary": json.dumps(SUMMARY, sort_keys=True, separators=(",", ":"))}
    assert json.loads(meta["summary"]) == json.loads(json.dumps(SUMMARY))


def test_we_read_a_file_the_library_wrote(tmp_path, tiny):
    from safetensors.numpy import save_file

    cfg, params = tiny
    path = tmp_path / "lib.safetensors"
    save_file(dict(params), str(path), metadata={"format": "docextract-v0", "config": cfg.to_json()})
    loaded = load_model(path)  # the library's own tensor order and key order
    assert loaded.cfg == cfg and loaded.summary is None
    assert model_bytes(loaded.cfg, loaded.params) == model_bytes(cfg, params)


# -- refusing to write a bad model ------------------------------------------------------------

def test_save_refuses_bad_params(tmp_path, tiny):
    cfg, params = tiny
    path = tmp_path / "m.safetensors"
    cases = [
        ({k: v for k, v in params.items() if k != "rel_k.bias"}, None, "'rel_k.bias' is missing"),
        ({**params, "extra": np.zeros(3, np.float32)}, None, "unexpected tensor 'extra'"),
        ({**params, "char_emb": params["char_emb"].astype(np.float64)}, None, "float64, not float32"),
        ({**params, "char_proj.bias": np.zeros(5, np.float32)}, None, "shape (5,), expected (32,)"),
        ({**params, "pos_x0": np.full(params["pos_x0"].shape, np.inf, np.float32)}, None, "non-finite"),
        (params, {"threshold": float("nan")}, "summary is not plain JSON"),
        (params, {"threshold": np.float32(0.5)}, "summary is not plain JSON"),
        (params, ["not", "a", "dict"], "summary must be a dict"),
    ]
    for bad_params, summary, message in cases:
        with pytest.raises(ValueError) as err:
            save_model(path, cfg, bad_params, summary)
        assert message in str(err.value)
        assert not path.exists()


# -- bad files: one line naming the file and the problem ------------------------------------

def _edit_header(edit):
    def make(good: bytes) -> bytes:
        header, body = split_file(good)
        body = edit(header, body)
        return join_file(header, body)
    return make


def _set_meta(key, value):
    def edit(header, body):
        header["__metadata__"][key] = value
        return body
    return edit


def _config_edit(change):
    def edit(header, body):
        config = json.loads(header["__metadata__"]["config"])
        change(config)
        header["__metadata__"]["config"] = json.dumps(config)
        return body
    return edit


def _drop_tensor(name):
    def edit(header, body):
        del header[name]
        return body
    return edit


def _set_entry(name, key, value):
    def edit(header, body):
        header[name][key] = value
        return body
    return edit


def _poison(name, value):
    def edit(header, body):
        begin, _ = header[name]["data_offsets"]
        return body[:begin + 8] + struct.pack("<f", value) + body[begin + 12:]
    return edit


def _last_tensor(header):
    return max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])


def _out_of_range(header, body):
    name = _last_tensor(header)
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + 400, end + 400]
    return body


def _overlap(header, body):
    begin, end = header["char_conv.bias"]["data_offsets"]
    header["char_conv.bias"]["data_offsets"] = [begin - 4, end - 4]
    return body


def _gap(header, body):
    for name, _, _ in param_spec(size_config("tiny")):
        header[name]["data_offsets"] = [v + 16 for v in header[name]["data_offsets"]]
    return bytes(16) + body


def _duplicate_key(good: bytes) -> bytes:
    header, body = split_file(good)
    raw = json.dumps(header, sort_keys=True, separators=(",", ":"))
    raw = raw.replace('{"__metadata__":', '{"char_emb":{},"__metadata__":', 1).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


BAD_FILES = [
    ("empty file", lambda good: b"", "the file is empty"),
    ("seven bytes", lambda good: good[:7], "too short to be a safetensors model file"),
    ("garbage", lambda good: bytes(range(256)) * 4, "header length"),
    ("json file", lambda good: json.dumps({"format": "docextract-v0", "d_model": 32}).encode(), "JSON file"),
    ("truncated in the data", lambda good: good[:-100], "truncated"),
    ("truncated in the header", lambda good: good[:200], "truncated"),
    ("absurd header length", lambda good: struct.pack("<Q", 2**40) + good[8:], "header length 1099511627776 is absurd"),
    ("header not JSON", lambda good: struct.pack("<Q", 16) + b"{not json here!}" + good[8:], "header is not valid JSON"),
    ("header not an object", lambda good: struct.pack("<Q", 8) + b"[1,2,3] " + good[8:], "not a JSON object"),
    ("duplicate header key", _duplicate_key, "duplicate key 'char_emb'"),
    ("no metadata", _edit_header(lambda h, b: (h.pop("__metadata__"), b)[1]), "no __metadata__"),
    ("wrong format", _edit_header(_set_meta("format", "docextract-v1")), "format is 'docextract-v1', expected 'docextract-v0'"),
    ("no format", _edit_header(lambda h, b: (h["__metadata__"].pop("format"), b)[1]), "format is None"),
    ("unknown metadata", _edit_header(_set_meta("author", "me")), "unknown keys ['author']"),
    ("non-string metadata", _edit_header(_set_meta("summary", {"a": 1})), "map names to strings"),
    ("config not JSON", _edit_header(_set_meta("config", "{d_model: 32")), "config is not valid JSON"),
    ("config inconsistent", _edit_header(_config_edit(lambda c: c.update(d_model=33))),
     "invalid config: config: d_model 33 is not a multiple of heads 2"),
    ("config tags mismatch", _edit_header(_config_edit(lambda c: c.update(tags=["O"]))), "tags do not match the fields"),
    ("config ln_eps zero", _edit_header(_config_edit(lambda c: c.update(ln_eps=0.0))), "ln_eps must be a positive number"),
    ("config ln_eps NaN", _edit_header(_set_meta("config", "{\"ln_eps\":NaN}")), "config is not valid JSON"),
    ("config lacks a key", _edit_header(_config_edit(lambda c: c.pop("ffn"))), "lacks keys ['ffn']"),
    ("config disagrees with tensors", _edit_header(_config_edit(lambda c: c.update(fields=["total"], tags=["O", "B-total", "I-total"]))),
     "tensor 'tag_head.weight' has shape (9, 32), expected (3, 32)"),
    ("summary not JSON", _edit_header(_set_meta("summary", "{oops")), "training summary is not valid JSON"),
    ("summary NaN", _edit_header(_set_meta("summary", '{"threshold":NaN}')), "training summary is not valid JSON"),
    ("summary not object", _edit_header(_set_meta("summary", "[1]")), "summary is not a JSON object"),
    ("missing tensor", _edit_header(_drop_tensor("blocks.1.ln2.bias")), "tensor 'blocks.1.ln2.bias' is missing"),
    ("unexpected tensor", _edit_header(lambda h, b: (h.update(extra={"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}), b)[1]),
     "unexpected tensor 'extra'"),
    ("wrong shape", _edit_header(_set_entry("char_conv.weight", "shape", [16, 3, 8])),
     "tensor 'char_conv.weight' has shape (16, 3, 8), expected (16, 8, 3)"),
    ("wrong dtype", _edit_header(_set_entry("pos_y1", "dtype", "F64")), "tensor 'pos_y1' has dtype 'F64', expected 'F32'"),
    ("unknown dtype", _edit_header(_set_entry("pos_y1", "dtype", "Q7")), "unknown dtype 'Q7'"),
    ("bad shape entry", _edit_header(_set_entry("pos_y1", "shape", "128x32")), "is not a list of sizes"),
    ("bad offsets entry", _edit_header(_set_entry("pos_y1", "data_offsets", [5])), "are not two byte positions"),
    ("offsets too short", _edit_header(lambda h, b: (h["emb_ln.bias"].update(data_offsets=[h["emb_ln.bias"]["data_offsets"][0]] * 2), b)[1]),
     "hold 0 bytes, shape (32,) of F32 needs 128"),
    ("overlapping offsets", _edit_header(_overlap), "overlaps tensor"),
    ("out-of-range offsets", _edit_header(_out_of_range), "is out of range"),
    ("gap before the first tensor", _edit_header(_gap), "gap in the data section before tensor 'char_emb'"),
    ("trailing bytes", lambda good: good + bytes(8), "8 unexplained bytes after the last tensor"),
    ("NaN value", _edit_header(_poison("blocks.0.fc1.weight", float("nan"))), "tensor 'blocks.0.fc1.weight' has 1 non-finite values (first at index (0, 2)"),
    ("infinite value", _edit_header(_poison("final_ln.weight", float("-inf"))), "tensor 'final_ln.weight' has 1 non-finite values"),
]


@pytest.mark.parametrize("make_bad, message", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_file_gives_one_line_error(tmp_path, tiny, make_bad, message):
    cfg, params = tiny
    good = model_bytes(cfg, params, SUMMARY)
    path = tmp_path / "bad model.safetensors"
    path.write_bytes(make_bad(good))
    _assert_one_line_error(path, message)


def test_unexpected_tensor_is_named(tmp_path, tiny):
    # The config says one block; the file holds two, so the second block's tensors are unexpected.
    cfg, params = tiny
    header, body = split_file(model_bytes(cfg, params))
    config = json.loads(header["__metadata__"]["config"])
    config["layers"] = 1
    header["__metadata__"]["config"] = json.dumps(config)
    path = tmp_path / "m.safetensors"
    path.write_bytes(join_file(header, body))
    # reported in name order, with a count of the rest (12 tensors per block)
    _assert_one_line_error(path, "unexpected tensor 'blocks.1.fc1.bias' and 11 more")


def test_missing_file_and_folder(tmp_path):
    _assert_one_line_error(tmp_path / "nowhere.safetensors", "no such model file")
    _assert_one_line_error(tmp_path, "is a folder, not a model file")


def _assert_one_line_error(path, message):
    with pytest.raises(ModelFileError) as err:
        load_model(path)
    text = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "\n" not in text
    assert text.startswith(f"{path}: "), text
    assert message in text, text
    # no chained low-level exception to print as a deep traceback
    assert err.value.__cause__ is None
    assert err.value.__context__ is None or err.value.__suppress_context__
