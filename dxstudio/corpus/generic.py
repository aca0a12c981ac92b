"""The generic field classes the base model's tag head predicts, and how a schema's field finds
the class it means.

Every source names its fields its own way (CORD's total.total_price, invoice2data's amount,
our generator's total); each converter maps them onto these shared classes, so one tag head
learns from all sources. A project's field is matched to a class by its name (then by its
description) when fine-tuning starts from the base: the matched class's B-/I- rows of the
base's tag head become the field's starting rows (docs/base-model.md).
"""
from __future__ import annotations

import re

GENERIC_FIELDS = (
    "company",          # the issuer: store, vendor, merchant, restaurant, seller
    "address",          # the issuer's address
    "phone",
    "date",             # the document's date
    "time",
    "invoice_number",   # invoice, receipt, bill or order number
    "customer",         # the buyer's name (bill to)
    "subtotal",
    "tax",
    "discount",
    "total",            # the amount to pay
    "paid",             # cash, card or other amount tendered
    "change",
    "item_name",
    "item_quantity",
    "item_unit_price",
    "item_price",       # a line item's amount
)

# (class, pattern) in priority order: the first pattern found in the field's name (words joined
# by single spaces, lower case) decides. Specific names come before the general ones they
# contain ("subtotal" before "total", "item price" before "price", "invoice date" is a date).
_RULES = [
    ("item_unit_price", r"\b(unit ?price|price ?per|rate)\b"),
    ("item_quantity", r"\b(qty|quantity|count|cnt)\b"),
    ("item_price", r"\b(item|line|menu|product|article) ?(price|amount|total|cost)\b|\bline ?total\b"),
    ("item_name", r"\b(item|line|menu|product|article|description|goods)\b"),
    ("subtotal", r"\b(sub ?total|net ?amount|amount ?untaxed|untaxed|before ?tax|net ?total)\b"),
    ("tax", r"\b(tax|vat|gst|sst|ppn|mwst|tva|iva|btw)\b"),
    ("discount", r"\b(discount|rebate|reduction)\b"),
    ("change", r"\b(change|kembali)\b"),
    ("paid", r"\b(cash|paid|tender(ed)?|payment|card)\b"),
    ("total", r"\b(total|amount ?due|grand ?total|amount|sum|balance)\b"),
    ("date", r"\bdate\b|\bdated\b|\bday\b"),
    ("time", r"\btime\b|\bhour\b"),
    ("invoice_number", r"\b(invoice|receipt|bill|order|document|doc|inv|ref(erence)?) ?(no|nr|num|number|id|#)\b|\binvoice\b"),
    ("phone", r"\b(phone|tel|telephone|mobile|fax|contact ?number)\b"),
    ("address", r"\b(address|addr|location|street)\b"),
    ("customer", r"\b(customer|client|buyer|bill ?to|recipient|partner|purchaser)\b"),
    ("company", r"\b(company|store|shop|vendor|merchant|seller|supplier|issuer|business|restaurant|"
                r"retailer|brand|organi[sz]ation|firm)\b"),
]
_COMPILED = [(c, re.compile(p)) for c, p in _RULES]


def _words(text: str) -> str:
    """'Invoice_Number' -> 'invoice number'; camelCase is split too."""
    t = re.sub(r"([a-z])([A-Z])", r"\1 \2", text or "")
    return " ".join(re.sub(r"[^0-9a-z#]+", " ", t.lower()).split())


def match_field(name: str, description: str = "") -> str | None:
    """The generic class a schema field means, by its name first and then its description, or
    None when neither names one."""
    for text in (name, description):
        words = _words(text)
        if not words:
            continue
        if words.replace(" ", "_") in GENERIC_FIELDS:
            return words.replace(" ", "_")
        for cls, pat in _COMPILED:
            if pat.search(words):
                return cls
    return None


def tag_of(field: str, begin: bool) -> str:
    return ("B-" if begin else "I-") + field


def transfer_tag_head(base_cfg, base_params, schema, weight, bias):
    """A project's new tag head (weight (1 + 2K, d), bias (1 + 2K,), freshly drawn) started from
    a base model's generic classes: the O row and, for each schema field that names a class of
    the base (match_field), that class's B- and I- rows are copied; the other fields keep their
    drawn rows. Returns (weight, bias, {field: class}). `schema` holds objects with .name and
    .description (project Fields) or plain names."""
    import numpy as np

    w = np.array(weight, np.float32, copy=True)
    b = np.array(bias, np.float32, copy=True)
    bw = np.asarray(base_params["tag_head.weight"], np.float32)
    bb = np.asarray(base_params["tag_head.bias"], np.float32)
    if bw.shape[1] != w.shape[1]:
        return w, b, {}
    base_fields = list(base_cfg.fields)
    w[0], b[0] = bw[0], bb[0]
    matched = {}
    for c, f in enumerate(schema):
        name = getattr(f, "name", f)
        cls = match_field(name, getattr(f, "description", "") or "")
        if cls is None or cls not in base_fields:
            continue
        g = base_fields.index(cls)
        for off in (1, 2):  # B-, I-
            w[off + 2 * c], b[off + 2 * c] = bw[off + 2 * g], bb[off + 2 * g]
        matched[name] = cls
    return w, b, matched
