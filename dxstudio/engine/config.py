"""Model configuration: every size of docextract-v0, the alphabet, the schema and the label names.

The config is stored in the container (as canonical JSON) and checked against its tensors.
"""
from __future__ import annotations

import dataclasses
import json
import unicodedata
from dataclasses import dataclass

from .blocks import block_names

# Printable ASCII, common Latin-1 letters and currency signs. Character id = index + 2
# (0 = padding, 1 = unknown). Stored in every container, so this default only seeds new models.
_LATIN1_LETTERS = "".join(chr(c) for c in range(0xC0, 0x100) if chr(c) not in "\u00d7\u00f7")
DEFAULT_ALPHABET = "".join(chr(c) for c in range(0x20, 0x7F)) + _LATIN1_LETTERS + "\u00a2\u00a3\u00a5\u20ac\u20b9\u20a9\u00b0\u00a7\u00b5"

DEFAULT_FIELDS = ("vendor", "date", "total", "invoice_number")
DEFAULT_ROLES = ("other", "key", "value", "header")
DEFAULT_DOC_TYPES = ("other", "form", "receipt", "invoice")

FORMAT = "docextract-v0"

# Input layouts (docs/inputs.md): which word features a model reads. A model file records its
# layout in its config (`input_layout`; a file without the key is layout 1, so files written
# before layout 2 keep their bytes) and its inputs are always built with that layout, so a
# model never reads another layout's features. New models use NEW_MODEL_INPUT_LAYOUT.
WORD_FEATURES_OF_LAYOUT = {1: 16, 2: 61}
NEW_MODEL_INPUT_LAYOUT = 2

# Upper bounds on the sizes a config may name (a model file is untrusted input: max_chars
# 1e12 or max_words 1e9 would exhaust memory before anything else failed). The pair
# features of one window take max_words^2 x 8 floats: 4096 words is 537 MB.
MAX_SIZE = 65536
SIZE_LIMITS = {"max_chars": 256, "max_words": 4096, "pos_buckets": 4096, "layers": 64, "heads": 256}
MAX_ALPHABET = 65536
MAX_NAMES = 1024  # fields, roles, doc types


def tag_names(fields) -> list[str]:
    """Tag 0 = O, 1 + 2c = B-field, 2 + 2c = I-field."""
    names = ["O"]
    for f in fields:
        names += [f"B-{f}", f"I-{f}"]
    return names


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 128
    heads: int = 4
    layers: int = 4
    ffn: int = 512
    char_dim: int = 32  # Dc
    char_channels: int = 128  # C
    char_taps: int = 3
    max_chars: int = 24
    pos_buckets: int = 128  # B
    word_features: int = 16  # WORD_FEATURES_OF_LAYOUT[input_layout]
    pair_features: int = 8
    pair_hidden: int = 32  # Hp
    rel_dim: int = 32  # r
    max_words: int = 512
    ln_eps: float = 1e-5
    alphabet: str = DEFAULT_ALPHABET
    fields: tuple = DEFAULT_FIELDS
    roles: tuple = DEFAULT_ROLES
    doc_types: tuple = DEFAULT_DOC_TYPES
    input_layout: int = 1  # the dataclass default is the layout of files without the key
    block: str = "transformer"  # the block type (blocks/<block>.py); files without the key: transformer

    # -- derived sizes ------------------------------------------------------------------
    @property
    def vocab(self) -> int:
        return len(self.alphabet) + 2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def tags(self) -> list[str]:
        return tag_names(self.fields)

    @property
    def n_tags(self) -> int:
        return 1 + 2 * len(self.fields)

    def validate(self) -> None:
        ints = ["d_model", "heads", "layers", "ffn", "char_dim", "char_channels", "char_taps",
                "max_chars", "pos_buckets", "word_features", "pair_features", "pair_hidden",
                "rel_dim", "max_words"]
        for name in ints:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"config: {name} must be a positive integer, not {str(v)[:40]}")
            high = SIZE_LIMITS.get(name, MAX_SIZE)
            if v > high:  # sizes no tensor checks (max_chars, max_words) decide the memory used
                raise ValueError(f"config: {name} is {v}, more than the {high} allowed")
        if self.d_model % self.heads:
            raise ValueError(f"config: d_model {self.d_model} is not a multiple of heads {self.heads}")
        if self.char_taps != 3:
            raise ValueError("config: char_taps must be 3")
        if (isinstance(self.input_layout, bool) or not isinstance(self.input_layout, int)
                or self.input_layout not in WORD_FEATURES_OF_LAYOUT):
            raise ValueError(f"config: input_layout must be one of {sorted(WORD_FEATURES_OF_LAYOUT)}, "
                             f"not {str(self.input_layout)[:40]}")
        if self.block not in block_names():
            raise ValueError(f"config: block must be one of {block_names()}, not {str(self.block)[:40]}")
        expected = WORD_FEATURES_OF_LAYOUT[self.input_layout]
        if self.word_features != expected or self.pair_features != 8:
            raise ValueError(f"config: input layout {self.input_layout} has word_features {expected} "
                             f"and pair_features 8, not {self.word_features} and {self.pair_features}")
        if len(self.alphabet) > MAX_ALPHABET:
            raise ValueError(f"config: the alphabet has {len(self.alphabet)} characters, more than {MAX_ALPHABET}")
        if len(set(self.alphabet)) != len(self.alphabet) or not self.alphabet:
            raise ValueError("config: the alphabet must be non-empty with no repeated character")
        if unicodedata.normalize("NFC", self.alphabet) != self.alphabet:
            raise ValueError("config: the alphabet must be NFC-normalized")
        for name in ("fields", "roles", "doc_types"):
            vals = getattr(self, name)
            if not vals or len(set(vals)) != len(vals) or not all(isinstance(v, str) and v for v in vals):
                raise ValueError(f"config: {name} must be distinct non-empty names")
            if len(vals) > MAX_NAMES or any(len(v) > 200 for v in vals):
                raise ValueError(f"config: {name} must be at most {MAX_NAMES} names of at most 200 characters")

    def with_fields(self, fields) -> "ModelConfig":
        return dataclasses.replace(self, fields=tuple(fields))

    def with_input_layout(self, layout: int) -> "ModelConfig":
        if layout not in WORD_FEATURES_OF_LAYOUT:
            raise ValueError(f"unknown input layout {layout!r}; choose one of {sorted(WORD_FEATURES_OF_LAYOUT)}")
        return dataclasses.replace(self, input_layout=layout, word_features=WORD_FEATURES_OF_LAYOUT[layout])

    # -- JSON -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("fields", "roles", "doc_types"):
            d[k] = list(d[k])
        d["tags"] = self.tags
        if self.input_layout == 1:
            del d["input_layout"]  # layout 1 files predate the key: their bytes stay the same
        if self.block == "transformer":
            del d["block"]  # so do files of the first block type
        return d

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no spaces, ASCII escapes (same bytes in every process)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        if not isinstance(d, dict):
            raise ValueError("config is not a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known - {"tags"}
        if unknown:
            raise ValueError(f"config has unknown keys {sorted(unknown)}")
        missing = known - set(d) - {"input_layout", "block"}  # absent: layout 1, the transformer block
        if missing:
            raise ValueError(f"config lacks keys {sorted(missing)}")
        kw = {k: d[k] for k in known if k in d}
        for k in ("fields", "roles", "doc_types"):
            if not isinstance(kw[k], list):
                raise ValueError(f"config: {k} must be a list")
            kw[k] = tuple(kw[k])
        if not isinstance(kw["alphabet"], str):
            raise ValueError("config: alphabet must be a string")
        kw["ln_eps"] = float(kw["ln_eps"])
        cfg = cls(**kw)
        cfg.validate()
        if "tags" in d and list(d["tags"]) != cfg.tags:
            raise ValueError("config: tags do not match the fields")
        return cfg


SIZES = {
    "base": ModelConfig(),
    # "random-7" in the tests: seed 7 and this size. Small enough for fixtures.
    "tiny": ModelConfig(d_model=32, heads=2, layers=2, ffn=64, char_dim=8, char_channels=16,
                        pair_hidden=8, rel_dim=8),
}


def size_config(size: str, fields=None, input_layout: int = NEW_MODEL_INPUT_LAYOUT) -> ModelConfig:
    """The config of a new model of `size` (SIZES), with `fields` and `input_layout`."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    cfg = SIZES[size].with_input_layout(input_layout)
    return cfg.with_fields(fields) if fields else cfg
