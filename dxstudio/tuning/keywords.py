"""A field's keywords: the words that name it where it is printed, for the "printing" reading.

    kw = field_keywords(schema, train_pages, source)   # {"source": S, "fields": [[key, ...], ...]}
    by_name = reading_keywords(kw, field_names)        # engine/extract.py: {field: frozenset} for predict_page, or None

The "printing" reading (engine/extract.py printings_by_rule) moves each value to the printing
of it that follows the field's keywords. Setting `keywords` says where they come from:

  name     the seed's rule: the field's name and its parts of three letters or more, on the
           value's row (nothing stored in the model: its bytes are those of before the setting)
  schema   the name split into words (snake_case, camelCase; abbreviations such as num, no, amt,
           qty, addr, tel read as the words they stand for) and the description's words, on the
           value's row or the row just above it (grounding.name_keywords, description_keywords)
  learned  schema's, and the printed words beside or above the field's labelled values on the
           run's training pages (only those: after the split, the fold and the early-stop carve)
           that name the labelled printing more than the value's other printings

A learnt word counts once per page. It is kept when it names the labelled printing on at least
LEARN_MIN_PAGES pages and LEARN_MIN_SHARE of the field's labelled pages, and on at least
LEARN_MIN_PRECISION of the pages where it names a printing of the value (the labelled one, or
another printing of the same value); the LEARN_MAX most frequent stay. A schema word the pages
contradict (it names another printing of the value on two pages or more, and more often than
the labelled one) is dropped. A word that is exactly another field's name, or is learnt for
another field on more pages, names that field, not this one. Deterministic: sorted keys,
counts over the pages in their given order, ties broken by the key.

With learned keywords the model also stores, per field, how often the key rule alone would have
read the training pages' labels and how many of their values hold a digit (keyed_counts:
"keyed": [[hits, seen, digits, values, near, beside, colon], ...]), for the "keyed_learned" reading
(engine/extract.py key_rules) and the "keyed_layout" reading's fields named where they are printed
(near_keys), read inside their keyed run (inside_keys) and keyed with a colon (colon_keys).
"""
from __future__ import annotations

import math

from dxstudio.engine.extract import (KEYWORD_DECODINGS, LEARNED_DECODINGS, colon_keys, inside_keys, key_rules, longer_keys,
                                     near_keys)
from dxstudio.grounding import (KEYWORD_SOURCES, _ground, _hint_keys, canonical_number, context_words, description_keywords,
                                after_part_of_a_key, key_beside, key_with_colon, keyed_extents, keyword_near, name_keywords, split_name, word_key)

LEARN_MIN_PAGES = 2
LEARN_MIN_SHARE = 0.1
LEARN_MIN_PRECISION = 0.75
LEARN_MAX = 8


def _label_like(key: str) -> bool:
    """A key that can name a field: two letters or more, not a number."""
    return sum(c.isalpha() for c in key) >= 2 and canonical_number(key) is None


def schema_keywords(fld) -> set:
    """The keys a schema field's name and description give (grounding.name_keywords,
    description_keywords)."""
    return name_keywords(fld.name) | description_keywords(getattr(fld, "description", ""))


def field_keywords(schema, train_pages, source: str) -> dict | None:
    """{"source": source, "fields": [sorted keys of each schema field, in schema order]}, or None
    for source "name" (the seed's rule: nothing stored). train_pages: (page id, Page,
    PageTargets) of the run's training pages; only "learned" reads them."""
    if source not in KEYWORD_SOURCES:
        raise ValueError(f"keywords must be one of {', '.join(KEYWORD_SOURCES)}, not {source!r}")
    if source == "name":
        return None
    names = [f.name for f in schema]
    own = {f.name: schema_keywords(f) for f in schema}
    # a word that is exactly another field's (one-word) name names that field ("total" for sub_total)
    whole = {}
    for f in schema:
        w = split_name(f.name)
        if len(w) == 1 and word_key(w[0]):
            whole[word_key(w[0])] = f.name
    for n in names:
        own[n] = {k for k in own[n] if whole.get(k, n) == n}
    if source == "schema":
        return {"source": source, "fields": [sorted(own[n]) for n in names]}
    pos = {n: {} for n in names}
    neg = {n: {} for n in names}
    labelled = {n: 0 for n in names}
    for _, page, t in train_pages:
        words = page.words
        keys = [word_key(w.text) for w in words]
        value_words = set()
        for n in names:
            value_words.update(t.field_words.get(n, ()))
        for n in names:
            fw = sorted(t.field_words.get(n, ()))
            if not fw or n in t.unscored:
                continue
            labelled[n] += 1
            here = {keys[k] for k in context_words(words, fw[0]) if k not in value_words and _label_like(keys[k])}
            _, runs, _ = _ground(page, " ".join(words[i].text for i in fw))
            other = set()
            for a, b in runs:
                if a <= fw[-1] and fw[0] <= b:  # the labelled printing (or one overlapping it)
                    continue
                other.update(keys[k] for k in context_words(words, a)
                             if k not in value_words and _label_like(keys[k]))
            for k in here:
                pos[n][k] = pos[n].get(k, 0) + 1
            for k in other:
                neg[n][k] = neg[n].get(k, 0) + 1
    learnt = {}
    for n in names:
        need = max(LEARN_MIN_PAGES, math.ceil(LEARN_MIN_SHARE * labelled[n]))
        ok = [(c, k) for k, c in pos[n].items()
              if c >= need and c / (c + neg[n].get(k, 0)) >= LEARN_MIN_PRECISION and whole.get(k, n) == n]
        ok.sort(key=lambda ck: (-ck[0], ck[1]))
        learnt[n] = {k: c for c, k in ok[:LEARN_MAX]}
    out = []
    for n in names:
        keep = {k for k in own[n] if not (neg[n].get(k, 0) >= 2 and neg[n].get(k, 0) > pos[n].get(k, 0))}
        for k, c in learnt[n].items():
            # learnt for several fields: it names the one it was learnt on most often (the first on a tie)
            best = max(names, key=lambda m: (learnt[m].get(k, 0), -names.index(m)))
            if best == n:
                keep.add(k)
        out.append(sorted(keep))
    return {"source": source, "fields": out,
            "keyed": keyed_counts(names, train_pages, {n: set(ks) for n, ks in zip(names, out)})}


def keyed_counts(names, train_pages, keywords: dict) -> list:
    """[[hits, seen, digits, values, near, beside, colon, longer], ...] per field, in `names` order, over the training
    pages where the field is scored and has a labelled value (values: their count; digits: those
    whose value holds a digit): seen = those of them that print one of its keywords with words
    after it on their row (the first run of grounding.keyed_extents), hits = those whose value is
    exactly that run's words; near = those with one of its keywords beside or above the value
    (grounding.keyword_near); beside = those with one among the three words before the value on its
    row (grounding.key_beside), colon = those of them whose key is printed with a colon
    (grounding.key_with_colon), longer = those of them whose key is part of a longer one ("Grand
    Total", grounding.after_part_of_a_key). The "keyed_learned" reading's rules (engine/extract.py key_rules)
    and the "keyed_layout" reading's fields named where they are printed (near_keys) and keyed
    with a colon (colon_keys)."""
    counts = {n: [0, 0, 0, 0, 0, 0, 0, 0] for n in names}
    for _, page, t in train_pages:
        runs = keyed_extents(page, names, keywords)
        for n in names:
            fw = sorted(t.field_words.get(n, ()))
            if n in t.unscored or not fw:
                continue
            c = counts[n]
            c[3] += 1
            c[2] += any(ch.isdigit() for i in fw for ch in page.words[i].text)
            c[4] += keyword_near(page, fw[0], keywords.get(n, ()))
            c[5] += key_beside(page, fw[0], keywords.get(n, ())) is not None
            c[6] += key_with_colon(page, fw[0], keywords.get(n, ()))
            c[7] += after_part_of_a_key(page, fw[0], keywords.get(n, ()))
            if runs.get(n):
                a, b = runs[n][0]
                c[1] += 1
                c[0] += fw == list(range(a, b + 1))
    return [counts[n] for n in names]


def reading_record(decoding: str, stored: dict | None, field_names) -> dict | None:
    """What a report says of the keywords its values were placed by: None unless the reading
    is one of KEYWORD_DECODINGS (no other reading uses them); else {"source": name, schema or learned,
    "fields": {field: [keys]}} (name: the name rule's keys, grounding._hint_keys); for "keyed_learned"
    and "keyed_layout" also "alone" and "digits": the fields read by their key alone, and those whose keyed values
    must hold a digit (key_rules; sorted; none without stored counts); for "keyed_layout" also
    "near": the fields it reads only beside or above their keywords (near_keys), and "inside": those
    it fills with the part of a keyed run the model reads best (inside_keys), and "colon": those it
    keys only where their keyword is printed with a colon (colon_keys)."""
    if decoding not in KEYWORD_DECODINGS:
        return None
    if not stored or stored.get("fields") is None:
        out = {"source": "name", "fields": {n: sorted(_hint_keys(n)) for n in field_names}}
    else:
        out = {"source": stored["source"], "fields": {n: list(ks) for n, ks in zip(field_names, stored["fields"])}}
    if decoding in LEARNED_DECODINGS:
        alone, digits = key_rules((stored or {}).get("keyed"), field_names)
        out["alone"], out["digits"] = sorted(alone), sorted(digits)
    if decoding == "keyed_layout":
        out["near"] = sorted(near_keys((stored or {}).get("keyed"), field_names))
        out["inside"] = sorted(inside_keys((stored or {}).get("keyed"), field_names))
        out["colon"] = sorted(colon_keys((stored or {}).get("keyed"), field_names))
        out["longer"] = sorted(longer_keys((stored or {}).get("keyed"), field_names))
    return out
