"""Generated multi-page invoices: the total printed only on the last page (issue 28).

    python bench/multipage_invoices.py OUT --docs 40 --seed 1 [--singles 0]

writes OUT/pages/<doc>-p<n>.json (page JSON with "document" and "page_number") and
OUT/answers.jsonl (one line per document: {"id": doc, "answers": {vendor, invoice_number,
total}}), ready for `dxstudio import json OUT/pages P` and `dxstudio label P --jsonl
OUT/answers.jsonl`. Every page repeats the header (vendor, invoice number, "Page k of n"), the
line items run over the pages, each page but the last ends with "Carried forward <subtotal so
far>", and only the last page prints the total ("TOTAL DUE"), after a subtotal and a tax line.
So a page-level question asked of page 1 must answer null for the total, and the vendor and the
invoice number are printed on every page (the repeated-printing rule across pages takes the
first). Deterministic for a seed (random.Random); nothing here reads ../shared/data.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dxstudio.engine.page import Page, Word  # noqa: E402

VENDORS = ["Acme Supplies Ltd", "Globex Corporation", "Initech GmbH", "Umbrella Trading Co",
           "Stark Industrial", "Wayne Logistics", "Hooli Office", "Vandelay Imports", "Soylent Foods",
           "Cyberdyne Parts", "Tyrell Components", "Wonka Packaging"]
ITEMS = ["Paper A4 box", "Toner cartridge", "Desk lamp", "USB cable", "Office chair", "Stapler",
         "Whiteboard markers", "Monitor stand", "Ethernet switch", "Label printer", "Notebook pack",
         "Shipping boxes", "Cleaning service", "Consulting hours", "Delivery fee"]
W, H = 612.0, 792.0
CHAR = 5.4  # points per character at the page's type size
ROW = 15.0


def _money(d: Decimal) -> str:
    return f"{d:,.2f}"


class _Writer:
    def __init__(self):
        self.words: list[Word] = []
        self.y = 40.0

    def line(self, *cells):
        """cells: (x, text) pairs; each text's words get boxes from its character positions."""
        for x, text in cells:
            pos = 0
            for token in text.split():
                start = text.index(token, pos)
                pos = start + len(token)
                x0 = x + start * CHAR
                self.words.append(Word(token, (x0, self.y, x0 + len(token) * CHAR, self.y + 10.0)))
        self.y += ROW


def invoice(rng: random.Random, doc_id: str, n_pages: int | None = None) -> tuple[list[Page], dict]:
    """One invoice of 2-4 pages: (pages with document fields, its answers)."""
    n_pages = n_pages or rng.choice([2, 2, 3, 3, 4])
    vendor = rng.choice(VENDORS)
    number = f"INV-{rng.randrange(1000, 99999)}"
    items_per_page = [rng.randrange(8, 16) for _ in range(n_pages)]
    items_per_page[-1] = rng.randrange(2, 7)
    pages, running = [], Decimal(0)
    for k in range(1, n_pages + 1):
        w = _Writer()
        w.line((40, vendor), (430, f"Page {k} of {n_pages}"))
        w.line((40, "Invoice No"), (110, number))
        if k == 1:
            w.line((40, "Date"), (110, f"{rng.randrange(1, 29):02d}.{rng.randrange(1, 13):02d}.2024"))
            w.line((40, "Bill to"), (110, f"Customer {rng.randrange(100, 999)} Main Street {rng.randrange(1, 99)}"))
        w.line((40, "Description"), (330, "Qty"), (390, "Price"), (480, "Amount"))
        for _ in range(items_per_page[k - 1]):
            qty = rng.randrange(1, 12)
            price = Decimal(rng.randrange(150, 25000)) / 100
            amount = price * qty
            running += amount
            w.line((40, rng.choice(ITEMS)), (330, str(qty)), (390, _money(price)), (480, _money(amount)))
        if k < n_pages:
            w.line((330, "Carried forward"), (480, _money(running)))
        else:
            tax = (running * Decimal("0.2")).quantize(Decimal("0.01"))
            total = running + tax
            w.line((330, "Subtotal"), (480, _money(running)))
            w.line((330, "VAT 20%"), (480, _money(tax)))
            w.line((330, "TOTAL DUE"), (480, _money(total)))
            w.line((40, "Thank you for your business"))
        pages.append(Page(f"{doc_id}-p{k}", W, H, tuple(w.words), None, doc_id, k))
    return pages, {"vendor": vendor, "invoice_number": number, "total": _money(total)}


def generate(n_docs: int, seed: int, prefix: str = "gen") -> list[tuple[list[Page], dict]]:
    rng = random.Random(seed)
    return [invoice(rng, f"{prefix}{seed}-{i:03d}") for i in range(n_docs)]


def write(out: Path, docs) -> None:
    (out / "pages").mkdir(parents=True, exist_ok=True)
    lines = []
    for pages, answers in docs:
        for p in pages:
            (out / "pages" / f"{p.id}.json").write_text(json.dumps(p.to_dict()))
        lines.append(json.dumps({"id": pages[0].document, "answers": answers}))
    (out / "answers.jsonl").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    docs = generate(args.docs, args.seed)
    write(Path(args.out), docs)
    print(json.dumps({"documents": len(docs), "pages": sum(len(p) for p, _ in docs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
