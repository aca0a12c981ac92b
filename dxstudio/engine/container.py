"""The docextract-v0 model file: one safetensors file with canonical bytes.

We write the safetensors layout ourselves instead of calling the safetensors library because
the library orders the `__metadata__` keys differently in every process; the same model must
give the same bytes everywhere (the tuner compares model bytes). The layout (docs/container.md):

    8 bytes   header length N, unsigned little-endian
    N bytes   header JSON: sorted keys, no spaces, ASCII escapes, padded with spaces to a multiple of 8
    rest      tensor data, binary32 little-endian, row-major, in param_spec order, no gaps

Loading validates everything and raises ModelFileError, a one-line message naming the file and
the problem. Safetensors holds no code: loading a model never runs anything.
"""
from __future__ import annotations

import json
import math
import struct
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dxstudio.fsutil import JSONInputError, loads_json, read_regular_file, write_bytes_atomic

from .config import FORMAT, ModelConfig
from .params import param_spec

HEADER_LENGTH_BYTES = 8
HEADER_ALIGNMENT = 8
# The safetensors library refuses headers above 100 MB; ours are a few kB.
MAX_HEADER_BYTES = 100_000_000
# A base model is a few MB; nothing larger is read (docs/security.md).
MAX_MODEL_BYTES = 1 << 30
METADATA_KEY = "__metadata__"
METADATA_KEYS = ("config", "format", "keywords", "summary", "thresholds")
KEYWORD_SOURCES = ("schema", "learned")  # what a stored "keywords" says it came from (tuning/keywords.py)
MAX_KEYWORDS_PER_FIELD = 64
TENSOR_DTYPE = "F32"
_LITTLE_F32 = np.dtype("<f4")
# Every dtype name the safetensors format knows, so a foreign dtype is reported as such.
_SAFETENSORS_DTYPES = {"BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "I32", "F32",
                       "U64", "I64", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
                       "F6_E3M2", "C64"}


class ModelFileError(ValueError):
    """A model file that cannot be used. str() is one line: '<path>: <problem>'."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = " ".join(str(problem).split())  # one line, whatever the cause said
        super().__init__(f"{self.path}: {self.problem}")


@dataclass
class LoadedModel:
    cfg: ModelConfig
    params: "OrderedDict[str, np.ndarray]"
    summary: dict | None
    path: Path
    # {"pooled": float | None, "fields": {name: float | None}, "share", "min_values"} of a tuned
    # model (check_thresholds), None for a model that was never tuned
    thresholds: dict | None = None
    # {"source": "schema" | "learned", "fields": [[key, ...] per field, in cfg.fields order]}: the
    # words the "printing" reading places each field's value after (check_keywords); None: its name
    keywords: dict | None = None


# -- writing ----------------------------------------------------------------------------------

def canonical_json(obj) -> str:
    """Sorted keys, no spaces, ASCII escapes, no NaN/Infinity: the same text in every process."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _checked_tensors(cfg: ModelConfig, params) -> list[tuple[str, np.ndarray]]:
    """The tensors in param_spec order, checked against the config (ValueError otherwise)."""
    spec = param_spec(cfg)
    expected = [name for name, _, _ in spec]
    missing = [n for n in expected if n not in params]
    unexpected = [n for n in params if n not in set(expected)]
    if missing:
        raise ValueError(f"cannot write the model: tensor {missing[0]!r} is missing ({len(missing)} missing)")
    if unexpected:
        raise ValueError(f"cannot write the model: unexpected tensor {unexpected[0]!r}")
    out = []
    for name, shape, _ in spec:
        arr = np.asarray(params[name])
        if arr.dtype != np.float32:
            raise ValueError(f"cannot write the model: tensor {name!r} is {arr.dtype}, not float32")
        if tuple(arr.shape) != tuple(shape):
            raise ValueError(f"cannot write the model: tensor {name!r} has shape {tuple(arr.shape)}, "
                             f"expected {tuple(shape)}")
        if not np.isfinite(arr).all():
            raise ValueError(f"cannot write the model: tensor {name!r} has non-finite values")
        out.append((name, arr))
    return out


def check_thresholds(value, fields) -> dict:
    """The stored LocalFirst thresholds, checked: {"pooled": T, "fields": {name: T}, "share": S,
    "min_values": N, "by": B, "rule": R, "decoding": D} with each T null or a number in [0, 1],
    field names from the schema, S in (0, 1] and N a positive integer (both may be null), B
    (optional) "words" or "value": what right meant when they were found, R (optional) "bound" or
    "seed": how they were chosen (tuning/scoring.py), D (optional) one of engine/extract.py DECODINGS: how the
    values were read off the tags (engine/extract.py DECODINGS). ValueError says what is wrong."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, not {type(value).__name__}")
    extra = sorted(set(value) - {"pooled", "fields", "share", "min_values", "by", "rule", "decoding"})
    if extra or "pooled" not in value or "fields" not in value:
        raise ValueError("must have exactly pooled, fields and optionally share, min_values, by, rule, decoding"
                         + (f" (unknown: {extra})" if extra else ""))

    def threshold(v, what):
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= 1):
            raise ValueError(f"{what} threshold {v!r} is not a number in [0, 1]")
        return float(v)

    pooled = threshold(value["pooled"], "the pooled")
    per_field = value["fields"]
    if not isinstance(per_field, dict):
        raise ValueError("fields must map field names to thresholds")
    unknown = sorted(set(per_field) - set(fields))
    if unknown:
        raise ValueError(f"fields names {unknown}, not in the model's schema {list(fields)}")
    checked = {name: threshold(per_field[name], f"field {name!r}") for name in fields if name in per_field}
    share, min_values = value.get("share"), value.get("min_values")
    if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                              or not (math.isfinite(share) and 0 < share <= 1)):
        raise ValueError(f"share {share!r} is not a number in (0, 1]")
    if min_values is not None and (isinstance(min_values, bool) or not isinstance(min_values, int) or min_values < 1):
        raise ValueError(f"min_values {min_values!r} is not a positive integer")
    by = value.get("by")
    if by is not None and by not in ("words", "value"):
        raise ValueError(f"by {by!r} is not words or value")
    rule = value.get("rule")
    if rule is not None and rule not in ("bound", "seed"):
        raise ValueError(f"rule {rule!r} is not bound or seed")
    decoding = value.get("decoding")
    from .extract import DECODINGS  # here: the container is read before the engine's kernels

    if decoding is not None and decoding not in DECODINGS:
        raise ValueError(f"decoding {decoding!r} is not {', '.join(DECODINGS[:-1])} or {DECODINGS[-1]}")
    out = {"pooled": pooled, "fields": checked, "share": share, "min_values": min_values}
    if by is not None:
        out["by"] = by
    if rule is not None:
        out["rule"] = rule
    if decoding is not None:
        out["decoding"] = decoding
    return out


def check_keywords(value, fields) -> dict:
    """The stored keywords, checked: {"source": "schema" or "learned", "fields": one list of
    distinct non-empty strings per field of the model, in its order[, "keyed": one [hits, seen,
    digits, values], [hits, seen, digits, values, near], [hits, seen, digits, values, near,
    beside, colon] or [..., colon, longer] per field (all of one length), integers, 0 <= hits <=
    seen <= values, 0 <= digits <= values, 0 <= near <= values, 0 <= colon <= beside <= values and
    0 <= longer <= beside (tuning/keywords.py keyed_counts; four, five or seven numbers: a model
    tuned before `near`, `colon` or `longer`)]}. ValueError says
    what is wrong."""
    if not isinstance(value, dict) or not {"source", "fields"} <= set(value) <= {"source", "fields", "keyed"}:
        raise ValueError("must be a JSON object with exactly source and fields (and optionally keyed)")
    if value["source"] not in KEYWORD_SOURCES:
        raise ValueError(f"source {value['source']!r} is not {' or '.join(KEYWORD_SOURCES)}")
    per = value["fields"]
    if not isinstance(per, list) or len(per) != len(fields):
        raise ValueError(f"fields must be a list of {len(fields)} lists (one per field of the model)")
    out = []
    for name, ks in zip(fields, per):
        if (not isinstance(ks, list) or len(ks) > MAX_KEYWORDS_PER_FIELD
                or not all(isinstance(k, str) and k and len(k) <= 100 for k in ks) or len(set(ks)) != len(ks)):
            raise ValueError(f"the keywords of field {name!r} must be a list of at most {MAX_KEYWORDS_PER_FIELD} "
                             f"distinct non-empty strings")
        out.append(sorted(ks))
    if "keyed" not in value:
        return {"source": value["source"], "fields": out}
    keyed = value["keyed"]
    if not isinstance(keyed, list) or len(keyed) != len(fields) or not all(
            isinstance(c, list) and len(c) in (4, 5, 7, 8) and len(c) == len(keyed[0]) and all(type(x) is int for x in c)
            and 0 <= c[0] <= c[1] <= c[3] and 0 <= c[2] <= c[3] and (len(c) == 4 or 0 <= c[4] <= c[3])
            and (len(c) < 7 or 0 <= c[6] <= c[5] <= c[3]) and (len(c) < 8 or 0 <= c[7] <= c[5])
            for c in keyed):
        raise ValueError(f"keyed must be a list of {len(fields)} [hits, seen, digits, values], [hits, seen, digits, "
                         f"values, near], [hits, seen, digits, values, near, beside, colon] or [..., colon, longer] lists "
                         f"of integers, all of one length, 0 <= hits <= seen <= values, 0 <= digits <= values, "
                         f"0 <= near <= values, 0 <= colon <= beside <= values, 0 <= longer <= beside (one per "
                         f"field of the model)")
    return {"source": value["source"], "fields": out, "keyed": [list(hs) for hs in keyed]}


def model_bytes(cfg: ModelConfig, params, summary: dict | None = None, thresholds: dict | None = None,
                keywords: dict | None = None) -> bytes:
    """The exact bytes save_model writes for this model (keywords None: none stored, the bytes of
    a model from before they were)."""
    cfg.validate()
    tensors = _checked_tensors(cfg, params)
    metadata = {"format": FORMAT, "config": cfg.to_json()}
    if keywords is not None:
        try:
            metadata["keywords"] = canonical_json(check_keywords(keywords, cfg.fields))
        except ValueError as e:
            raise ValueError(f"cannot write the model: the keywords {e}") from None
    if thresholds is not None:
        try:
            metadata["thresholds"] = canonical_json(check_thresholds(thresholds, cfg.fields))
        except ValueError as e:
            raise ValueError(f"cannot write the model: the thresholds {e}") from None
    if summary is not None:
        if not isinstance(summary, dict):
            raise ValueError(f"cannot write the model: the summary must be a dict, not {type(summary).__name__}")
        try:
            metadata["summary"] = canonical_json(summary)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot write the model: the summary is not plain JSON ({e})") from None

    header: dict = {METADATA_KEY: metadata}
    blobs = []
    offset = 0
    for name, arr in tensors:
        blob = np.ascontiguousarray(arr, dtype=_LITTLE_F32).tobytes()
        header[name] = {"dtype": TENSOR_DTYPE, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)

    header_bytes = canonical_json(header).encode("ascii")
    header_bytes += b" " * (-len(header_bytes) % HEADER_ALIGNMENT)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(blobs)


def save_model(path, cfg: ModelConfig, params, summary: dict | None = None, thresholds: dict | None = None,
               keywords: dict | None = None) -> None:
    """Write the model atomically: a crash leaves the old file or the new one, never a mix."""
    write_bytes_atomic(path, model_bytes(cfg, params, summary, thresholds, keywords))


# -- reading ----------------------------------------------------------------------------------

def _reject_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _looks_like_json(data: bytes) -> bool:
    try:
        loads_json(data)
    except ValueError:
        return data.lstrip()[:1] in (b"{", b"[")  # a JSON file cut short still reads as one
    return True


def _read_header(path: Path, data: bytes) -> tuple[dict, int]:
    """The parsed header and the offset where tensor data starts."""
    if not data:
        raise ModelFileError(path, "the file is empty, not a docextract-v0 model")
    if len(data) < HEADER_LENGTH_BYTES:
        raise ModelFileError(path, f"the file is {len(data)} bytes, too short to be a safetensors model file")
    (header_len,) = struct.unpack("<Q", data[:HEADER_LENGTH_BYTES])
    impossible = header_len == 0 or header_len > MAX_HEADER_BYTES
    # Only an impossible length is blamed on JSON text: the length's low byte may be '{' or a space.
    if (impossible or HEADER_LENGTH_BYTES + header_len > len(data)) and _looks_like_json(data):
        raise ModelFileError(path, "this is a JSON file, not a safetensors model file")
    if impossible:
        raise ModelFileError(path, f"not a safetensors model file (header length {header_len} is absurd)")
    if HEADER_LENGTH_BYTES + header_len > len(data):
        raise ModelFileError(path, f"the file is truncated: the header needs {header_len} bytes, "
                                   f"only {len(data) - HEADER_LENGTH_BYTES} follow the length field")
    raw = data[HEADER_LENGTH_BYTES:HEADER_LENGTH_BYTES + header_len]
    if raw[:1] != b"{":
        raise ModelFileError(path, "not a safetensors model file (the header is not a JSON object)")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFileError(path, "not a safetensors model file (the header is not UTF-8)") from None
    try:
        header = loads_json(raw, object_pairs_hook=_reject_duplicate_keys)
    except JSONInputError as e:
        raise ModelFileError(path, f"not a safetensors model file (the header is not valid JSON: {e})") from None
    if not isinstance(header, dict):
        raise ModelFileError(path, "not a safetensors model file (the header is not a JSON object)")
    return header, HEADER_LENGTH_BYTES + header_len


def _read_metadata(path: Path, header: dict) -> tuple[ModelConfig, dict | None, dict | None, dict | None]:
    meta = header.get(METADATA_KEY)
    if meta is None:
        raise ModelFileError(path, f"not a {FORMAT} model: the safetensors header has no __metadata__")
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ModelFileError(path, "__metadata__ must map names to strings")
    unknown = sorted(set(meta) - set(METADATA_KEYS))
    if "checkpoint" in unknown:  # a fine-tuning run's checkpoint.safetensors (weights and optimizer state)
        model = Path(path).parent / "model.safetensors"
        where = (f"the run's model is {model}" if model.is_file() else
                 f"the run's model will be {model} when the run finishes (continue it with "
                 f"dxstudio tune PROJECT --resume --out {Path(path).parent})")
        raise ModelFileError(path, f"this is a fine-tuning checkpoint (what --resume continues from), not a "
                                   f"model; {where}")
    if unknown:
        raise ModelFileError(path, f"__metadata__ has unknown keys {unknown}")
    fmt = meta.get("format")
    if fmt != FORMAT:
        raise ModelFileError(path, f"format is {fmt!r}, expected {FORMAT!r}")
    if "config" not in meta:
        raise ModelFileError(path, "__metadata__ has no config")
    try:
        config_dict = loads_json(meta["config"])
    except JSONInputError as e:
        raise ModelFileError(path, f"the config is not valid JSON ({e})") from None
    try:
        cfg = ModelConfig.from_dict(config_dict)
    except (ValueError, TypeError) as e:
        raise ModelFileError(path, f"invalid config: {e}") from None
    # ModelConfig.validate leaves ln_eps alone; a zero, negative or NaN eps would poison layer norm.
    if not (math.isfinite(cfg.ln_eps) and cfg.ln_eps > 0):
        raise ModelFileError(path, f"invalid config: ln_eps must be a positive number, not {cfg.ln_eps!r}")

    summary = None
    if "summary" in meta:
        try:
            summary = loads_json(meta["summary"])
        except JSONInputError as e:
            raise ModelFileError(path, f"the training summary is not valid JSON ({e})") from None
        if not isinstance(summary, dict):
            raise ModelFileError(path, "the training summary is not a JSON object")
    thresholds = None
    if "thresholds" in meta:
        try:
            thresholds = check_thresholds(loads_json(meta["thresholds"]), cfg.fields)
        except ValueError as e:  # JSONInputError is one
            raise ModelFileError(path, f"the stored thresholds are malformed: {e}") from None
    keywords = None
    if "keywords" in meta:
        try:
            keywords = check_keywords(loads_json(meta["keywords"]), cfg.fields)
        except ValueError as e:
            raise ModelFileError(path, f"the stored keywords are malformed: {e}") from None
    return cfg, summary, thresholds, keywords


def _check_tensor_entries(path: Path, header: dict, cfg: ModelConfig) -> list[tuple[str, tuple, int, int]]:
    """(name, shape, begin, end) in param_spec order; names, dtypes and shapes checked."""
    spec = param_spec(cfg)
    expected_names = [name for name, _, _ in spec]
    present = [k for k in header if k != METADATA_KEY]
    unexpected = sorted(k for k in present if k not in set(expected_names))
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        raise ModelFileError(path, f"unexpected tensor {unexpected[0]!r}{more} (not part of {FORMAT} with this config)")
    missing = [n for n in expected_names if n not in header]
    if missing:
        more = f" ({len(missing)} tensors missing)" if len(missing) > 1 else ""
        raise ModelFileError(path, f"tensor {missing[0]!r} is missing{more}")
    entries = []
    for name, shape, _ in spec:
        info = header[name]
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise ModelFileError(path, f"tensor {name!r}: the entry must have exactly dtype, shape and data_offsets")
        dtype = info["dtype"]
        if dtype != TENSOR_DTYPE:
            what = f"dtype {dtype!r}" if dtype in _SAFETENSORS_DTYPES else f"unknown dtype {dtype!r}"
            raise ModelFileError(path, f"tensor {name!r} has {what}, expected {TENSOR_DTYPE!r}")
        found = info["shape"]
        if not isinstance(found, list) or not all(_is_count(v) for v in found):
            raise ModelFileError(path, f"tensor {name!r}: shape {found!r} is not a list of sizes")
        if tuple(found) != tuple(shape):
            raise ModelFileError(path, f"tensor {name!r} has shape {tuple(found)}, expected {tuple(shape)}")
        offsets = info["data_offsets"]
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(v) for v in offsets)):
            raise ModelFileError(path, f"tensor {name!r}: data_offsets {offsets!r} are not two byte positions")
        begin, end = offsets
        if end < begin:
            raise ModelFileError(path, f"tensor {name!r}: data_offsets [{begin}, {end}] end before they begin")
        need = 4 * math.prod(shape)
        if end - begin != need:
            raise ModelFileError(path, f"tensor {name!r}: data_offsets [{begin}, {end}] hold {end - begin} bytes, "
                                       f"shape {tuple(shape)} of F32 needs {need}")
        entries.append((name, tuple(shape), begin, end))
    return entries


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_layout(path: Path, entries, data_len: int) -> None:
    """The tensors tile the data section exactly: no overlap, no gap, nothing out of range or left over."""
    end_of_tensors = max((end for _, _, _, end in entries), default=0)
    if end_of_tensors > data_len:
        worst = max(entries, key=lambda e: e[3])
        raise ModelFileError(path, f"the file is truncated or tensor {worst[0]!r} is out of range: its data ends "
                                   f"at byte {worst[3]} of the data section, which has only {data_len} bytes")
    position, previous = 0, None
    for name, _, begin, end in sorted(entries, key=lambda e: (e[2], e[3])):
        if begin < position:
            raise ModelFileError(path, f"tensor {name!r} data [{begin}, {end}] overlaps tensor {previous!r}")
        if begin > position:
            raise ModelFileError(path, f"gap in the data section before tensor {name!r} (bytes {position} to {begin})")
        position, previous = end, name
    if position != data_len:
        raise ModelFileError(path, f"{data_len - position} unexplained bytes after the last tensor")


def read_model_bytes(path) -> bytes:
    """The bytes of a model file: a regular file of at most MAX_MODEL_BYTES (ModelFileError otherwise)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ModelFileError(path, "no such model file")
    if path.is_dir():
        raise ModelFileError(path, "is a folder, not a model file")
    try:
        return read_regular_file(path, MAX_MODEL_BYTES, _ReadError)
    except _ReadError as e:
        raise ModelFileError(path, str(e).removeprefix(f"{path}: ")) from None


class _ReadError(ValueError):
    pass


def load_model(path) -> LoadedModel:
    """Read and validate a docextract-v0 model file; any problem raises ModelFileError."""
    path = Path(path)
    data = read_model_bytes(path)

    header, data_start = _read_header(path, data)
    cfg, summary, thresholds, keywords = _read_metadata(path, header)
    entries = _check_tensor_entries(path, header, cfg)
    body = memoryview(data)[data_start:]
    _check_layout(path, entries, len(body))

    params: "OrderedDict[str, np.ndarray]" = OrderedDict()
    for name, shape, begin, end in entries:
        arr = np.frombuffer(body[begin:end], dtype=_LITTLE_F32).reshape(shape).astype(np.float32)  # a copy
        bad = ~np.isfinite(arr)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ModelFileError(path, f"tensor {name!r} has {int(bad.sum())} non-finite values "
                                       f"(first at index {first}: {arr[first]})")
        params[name] = arr
    return LoadedModel(cfg=cfg, params=params, summary=summary, path=path, thresholds=thresholds, keywords=keywords)
