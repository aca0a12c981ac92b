"""One labelled document of a pretraining corpus and the training examples it gives.

A CorpusDoc is a Page with what its source knows about each word, each list as long as the
page's words (or None when the source says nothing of that kind):

    tags   "O", "B-<class>" or "I-<class>" over the generic classes (generic.py), None per
           word where the source does not know (the word is ignored by the tag loss)
    roles  "other", "key", "value" or "header", None per word where unknown
    kv     the index of the word's key word; a word without a key points at itself
    items  the index of the word's line-item anchor (the item's first word); a word in no
           item points at itself
    doc_type  "other", "form", "receipt" or "invoice", or None

A document longer than the model's window gives several examples of consecutive words; a
pointer whose target lies in another window is ignored (target -1).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from dxstudio.engine.config import DEFAULT_DOC_TYPES, DEFAULT_ROLES, tag_names
from dxstudio.engine.page import Page

from .generic import GENERIC_FIELDS


class CorpusError(ValueError):
    """A corpus file or document that cannot be used; str() names the file and the problem."""


@dataclass(frozen=True)
class CorpusDoc:
    source: str  # cord, naf, docbank, invoice2data, synthetic
    page: Page
    tags: tuple | None = None
    roles: tuple | None = None
    kv: tuple | None = None
    items: tuple | None = None
    doc_type: str | None = None

    @property
    def id(self) -> str:
        return f"{self.source}/{self.page.id}"

    def validate(self, fields=GENERIC_FIELDS) -> "CorpusDoc":
        n = len(self.page.words)
        where = self.id
        known_tags = set(tag_names(fields))
        for name in ("tags", "roles", "kv", "items"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise CorpusError(f"{where}: {len(v)} {name} for {n} words")
        for i, t in enumerate(self.tags or ()):
            if t is not None and t not in known_tags:
                raise CorpusError(f"{where}: word {i} has the unknown tag {t!r}")
        for i, r in enumerate(self.roles or ()):
            if r is not None and r not in DEFAULT_ROLES:
                raise CorpusError(f"{where}: word {i} has the unknown role {r!r}")
        for name in ("kv", "items"):
            for i, j in enumerate(getattr(self, name) or ()):
                if not isinstance(j, int) or not -1 <= j < n:
                    raise CorpusError(f"{where}: word {i}'s {name} pointer {j!r} is not a word of the page")
        if self.doc_type is not None and self.doc_type not in DEFAULT_DOC_TYPES:
            raise CorpusError(f"{where}: unknown document type {self.doc_type!r}")
        return self

    def to_dict(self) -> dict:
        return {"source": self.source, "page": self.page.to_dict(), "tags": _list(self.tags),
                "roles": _list(self.roles), "kv": _list(self.kv), "items": _list(self.items),
                "doc_type": self.doc_type}


def _list(v):
    return None if v is None else list(v)


def corpus_digest(docs) -> str:
    """SHA-256 over every document's canonical JSON, in corpus order: what the run's
    fingerprint holds for the corpus (a changed source file or converter changes it)."""
    from dxstudio.engine.container import canonical_json

    h = hashlib.sha256()
    for d in docs:
        h.update(canonical_json(d.to_dict()).encode() + b"\n")
    return h.hexdigest()


def doc_targets(doc: CorpusDoc, cfg, start: int, stop: int):
    """Targets (dxstudio.engine.training.Targets) of words [start, stop) of the document."""
    from dxstudio.engine.training import Targets

    n = stop - start
    tag_index = {t: i for i, t in enumerate(cfg.tags)}
    role_index = {r: i for i, r in enumerate(cfg.roles)}
    tags = np.full(n, -1, np.int64)
    if doc.tags is not None:
        for k, t in enumerate(doc.tags[start:stop]):
            if t is not None:
                tags[k] = tag_index.get(t, -1)
    roles = None
    if doc.roles is not None:
        roles = np.array([role_index.get(r, -1) if r is not None else -1 for r in doc.roles[start:stop]], np.int64)

    def pointers(v):
        if v is None:
            return None
        return np.array([j - start if start <= j < stop else -1 for j in v[start:stop]], np.int64)

    dt = list(cfg.doc_types).index(doc.doc_type) if doc.doc_type in cfg.doc_types else -1
    return Targets(tags=tags, roles=roles, doc=dt, items=pointers(doc.items), kv=pointers(doc.kv))


def doc_windows(doc: CorpusDoc, max_words: int) -> list[tuple[int, int]]:
    n = len(doc.page.words)
    return [(s, min(s + max_words, n)) for s in range(0, n, max_words)]
