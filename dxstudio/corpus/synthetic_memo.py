"""Memo-like documents for pretraining (issue 20): inter-office memos, fax cover sheets, routing
slips and internal letters with a header of TO / FROM / CC / DATE / RE lines, with the OCR-like
noise of the broader generator (synthetic_wide.py, whose page builder, names, layouts and noise
this module reuses).

    docs = generate(count=500, seed=1)      # corpus spec synthetic-memo:COUNT[:SEED]

What these pages teach that `synthetic-wide:N` does not: the parties are PEOPLE (a name, often
"Name, Title", "Name / Company" or a name over a department line), keys are short words (TO:,
FROM:, CC:, RE:, FAX NO.) left of their value or above it, in a column of keys or a grid of two
columns, a cc list of several names over several lines, and typewriter/fax pages (all capitals,
a fax machine's transmission line at the top, heavier noise).

Only the generic classes of the base's tag head are used (generic.py), mapped as the broader
generator maps them: the sender (FROM) is the issuer, class company; the addressee (TO) the
other party, class customer; the memo's date is date; a memo or fax reference number
invoice_number; the sender's fax or phone number phone. A cc list has no class: its names are
values linked to their CC key (role value, key link) but not customer, because customer is the
one addressee of a page (a generic class has one value per document) and cc names are other
people; tagging them customer would teach that a page has several customers. The subject line,
page count and a recipient's own fax number are values keyed to their labels, without a class.

Document i draws from random.Random(seed * 1_000_003 + i + 2 * 10**13) (a stream apart from
`synthetic:N`'s and `synthetic-wide:N`'s) and the broader generator's Faker instance of its
locale seeded from it, so a document does not depend on how many others are made, and the same
seed gives the same bytes in every process (for the same Faker version). Neither `synthetic:N`
nor `synthetic-wide:N` is changed by this module.
"""
from __future__ import annotations

import random
from datetime import date as Date, timedelta

from dxstudio.engine.page import Word

from .document import CorpusDoc
from .synthetic import LOCALES, Chunk, _kv
from .synthetic_wide import _faker, _long_company, _Page, _page_geom, noisy_doc

KINDS = ("memo", "fax_cover", "routing_slip", "internal_letter")
_WEIGHTS = (3, 3, 1, 2)
_OFFSET = 2 * 10**13
# English pages mostly (the kind is an English office's), names from every locale of the corpus.
_LOCALE_WEIGHTS = tuple(6 if loc.startswith("en") else 1 for loc, *_ in LOCALES)

WORDS = dict(
    memo=["MEMORANDUM", "Memorandum", "MEMO", "INTER-OFFICE MEMORANDUM", "INTEROFFICE MEMO", "M E M O R A N D U M"],
    fax=["FAX", "FACSIMILE TRANSMITTAL", "FAX COVER SHEET", "Facsimile Cover Sheet", "TELECOPY", "FAX TRANSMISSION"],
    routing=["ROUTING SLIP", "Routing Slip", "ROUTE SHEET", "ACTION SLIP", "TRANSMITTAL SLIP"],
    letter=["INTEROFFICE CORRESPONDENCE", "INTERNAL CORRESPONDENCE", "Internal Letter", "OFFICE CORRESPONDENCE"],
    to=["TO", "To", "TO:", "To:", "ATTN", "Attention"], frm=["FROM", "From", "FROM:", "From:"],
    cc=["CC", "cc", "CC:", "cc:", "Copies to", "COPY TO", "c:"], date=["DATE", "Date", "DATE:", "Date:"],
    subject=["RE", "Re", "RE:", "SUBJECT", "Subject", "SUBJ", "Reference"],
    fax_no=["FAX NO.", "Fax No.", "FAX #", "Fax Number", "Telecopier No.", "FAX"], phone=["PHONE", "Phone", "Tel", "TEL NO."],
    pages=["PAGES", "No. of pages", "Number of pages (including cover)", "TOTAL PAGES", "Pages incl. cover"],
    company=["COMPANY", "Company", "FIRM", "Organization"], memo_no=["Memo No.", "No.", "REF", "File", "Our Ref"],
    route=["ROUTE TO", "Route to", "TO", "Please route to"], action=["Approve", "Comment", "Review", "File", "Sign",
                                                                     "Note and return", "Per conversation", "Information"],
    urgent=["URGENT", "CONFIDENTIAL", "PERSONAL", "Please deliver immediately", "If you do not receive all pages, call"],
)
TITLES = ["Manager", "Director", "Vice President", "VP Marketing", "Sales Manager", "Brand Manager", "Secretary", "Counsel",
          "Senior Scientist", "Research Director", "Regional Manager", "Assistant", "Purchasing Agent", "Controller",
          "General Manager", "Project Leader", "Account Executive", "Chairman", "Treasurer", "Coordinator"]
DEPARTMENTS = ["Marketing", "Legal Department", "Research & Development", "Sales", "Finance", "Public Affairs",
               "Purchasing", "Human Resources", "Quality Assurance", "Corporate Affairs", "Operations", "Accounting"]
SUBJECTS = ["{w} Program", "{w} Budget Review", "{w} Test Results", "Meeting of {d}", "{w} Project Status",
            "Proposed {w} Changes", "Your letter of {d}", "{w} Promotion", "Revised {w} Schedule", "{w} Contract"]


def _w(name: str, rng: random.Random) -> str:
    return rng.choice(WORDS[name])


def _when(rng: random.Random, dfmts) -> tuple[Date, str]:
    """A date of 1975 to 2026 (memos and faxes of many decades) in one of the locale's formats or
    a typewriter's long form."""
    d = Date(1975, 1, 1) + timedelta(days=rng.randrange(0, 18600))
    return d, rng.choice(list(dfmts) + ["%B %d, %Y", "%B %d, %Y", "%d %B %Y", "%m/%d/%y"])


def _person_lines(fk, rng) -> list[str]:
    """A party as a person: a name, "Name, Title", "Name / Company", initials, or a name over a
    title or department line (one span in reading order)."""
    name = fk.name() if rng.random() < 0.8 else f"{fk.first_name()[0]}. {fk.last_name()}"
    r = rng.random()
    if r < 0.35:
        return [name]
    if r < 0.55:
        return [f"{name}, {rng.choice(TITLES)}"]
    if r < 0.7:
        return [f"{name} / {fk.company()}"]
    if r < 0.8:
        return [f"{name} - {rng.choice(DEPARTMENTS)}"]
    if r < 0.9:
        return [name, rng.choice(TITLES + DEPARTMENTS)]
    return [name, fk.company()]


def _names_list(fk, rng, n) -> list[str]:
    """A cc list: n names, one a line or several a line separated by commas."""
    names = [fk.name() if rng.random() < 0.7 else f"{fk.first_name()[0]}. {fk.last_name()}" for _ in range(n)]
    if rng.random() < 0.3:
        per = rng.randint(2, 3)
        return [", ".join(names[k:k + per]) for k in range(0, n, per)]
    return names


def _subject(fk, rng, d, df) -> str:
    return rng.choice(SUBJECTS).format(w=fk.word().capitalize(), d=d.strftime(df))


def _value_lines(b, label, lines, cls, ident, rng, layout, value_x):
    """A key and its value of one or more lines: left of the value (later lines under the first)
    or above it; a class's value is one span over its lines."""
    span = ident if cls else None
    if layout == "above":
        b.line([Chunk(label, None, "key", key=ident, is_key=True)])
        for v in lines:
            b.line([Chunk(v, cls, "value", span=span, key=ident, x=0.02)])
        return
    b.line(_kv(label, lines[0], cls, ident, rng, value_x=value_x))
    for v in lines[1:]:
        b.line([Chunk(v, cls, "value", span=span, key=ident, x=value_x)])


def _fax_line(b, fk, rng, d):
    """A fax machine's transmission line at the top of the page: its words are O."""
    stamp = d.strftime(rng.choice(["%b %d '%y", "%m/%d/%y", "%d.%m.%y"])).upper()
    parts = [stamp, f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}", rng.choice(["FROM", "FR", ""]),
             fk.company().upper()[:22], rng.choice(["TO", ""]), str(rng.randint(10**9, 10**10 - 1)),
             f"P.{rng.randint(1, 9):02d}" if rng.random() < 0.5 else f"PAGE {rng.randint(1, 9)}"]
    b.line([Chunk(" ".join(p for p in parts if p), None, "other")], gap=1.6)


def _header_keys(fk, rng, d, df, with_cc):
    """The (label, lines, class, ident) rows of a memo header, in one of the usual orders."""
    rows = {"to": (_w("to", rng), _person_lines(fk, rng), "customer", "to"),
            "from": (_w("frm", rng), _person_lines(fk, rng), "company", "fr"),
            "date": (_w("date", rng), [d.strftime(df)], "date", "d"),
            "subject": (_w("subject", rng), [_subject(fk, rng, d, df)], None, "re")}
    if with_cc:
        rows["cc"] = (_w("cc", rng), _names_list(fk, rng, rng.randint(1, 5)), None, "cc")
    orders = [["to", "from", "date", "subject", "cc"], ["date", "to", "from", "cc", "subject"],
              ["to", "cc", "from", "date", "subject"], ["from", "to", "date", "subject", "cc"]]
    return [rows[k] for k in rng.choice(orders) if k in rows]


def _body(b, fk, rng, paragraphs):
    for _ in range(paragraphs):
        for _ in range(rng.randint(1, 4)):
            b.line([Chunk(fk.sentence(nb_words=rng.randint(8, 15)))])
        b.skip(0.5)


# ---- the kinds ------------------------------------------------------------------------------
def _memo(rng, fk, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    if rng.random() < 0.3:
        for part in _long_company(fk, rng)[:2]:
            b.line([Chunk(part, None, "other", x=rng.choice([0.0, 0.3]))])
    b.line([Chunk(_w("memo", rng), role="header", x=rng.choice([0.0, 0.3, 0.35]))], gap=1.6)
    layout = "above" if rng.random() < 0.15 else "left"
    value_x = rng.choice([0.1, 0.12, 0.15, 0.2])
    for label, lines, cls, ident in _header_keys(fk, rng, d, df, with_cc=rng.random() < 0.6):
        _value_lines(b, label, lines, cls, ident, rng, layout, value_x)
        b.skip(rng.choice([0.0, 0.3, 0.6]))
    if rng.random() < 0.5:
        b.line([Chunk("_" * rng.randint(40, 70), None, "other")], gap=0.8)
    b.skip(0.5)
    _body(b, fk, rng, rng.randint(1, 3))
    if rng.random() < 0.6:
        b.line([Chunk("".join(p[0] for p in fk.name().split()[:2]).upper() + rng.choice([":", "/"]) + fk.lexify("??").lower(),
                      None, "other")])
    return b, "other"


def _fax_cover(rng, fk, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    if rng.random() < 0.5:
        _fax_line(b, fk, rng, d)
    company = _long_company(fk, rng)[:2]
    for part in company:
        b.line([Chunk(part, None, "other", x=rng.choice([0.0, 0.3]))])
    b.line([Chunk(_w("fax", rng), role="header", x=rng.choice([0.0, 0.3]))], gap=1.6)
    to, frm = _person_lines(fk, rng), _person_lines(fk, rng)
    grid = rng.random() < 0.5
    left = [(_w("to", rng), to, "customer", "to"), (_w("company", rng), [fk.company()], None, "tco"),
            (_w("fax_no", rng), [fk.phone_number()], None, "tfx")]
    right = [(_w("frm", rng), frm, "company", "fr"), (_w("date", rng), [d.strftime(df)], "date", "d"),
             (_w("fax_no", rng) if rng.random() < 0.5 else _w("phone", rng), [fk.phone_number()], "phone", "ph")]
    tail = [(_w("pages", rng), [str(rng.randint(1, 12))], None, "pg"), (_w("subject", rng), [_subject(fk, rng, d, df)], None, "re")]
    if rng.random() < 0.4:
        tail.append((_w("cc", rng), _names_list(fk, rng, rng.randint(1, 4)), None, "cc"))
    layout = "above" if rng.random() < 0.3 else "left"
    if grid:  # keys in two columns: TO ... | FROM ...
        y0 = b.y
        b.column(0.0, 0.48)
        for label, lines, cls, ident in left:
            _value_lines(b, label, lines, cls, ident, rng, layout, 0.3)
        y1 = b.y
        b.y = y0
        b.column(0.52, 1.0)
        for label, lines, cls, ident in right:
            _value_lines(b, label, lines, cls, ident, rng, layout, 0.3)
        b.y = max(b.y, y1)
        b.column(0.0, 1.0)
    else:
        rows = left + right
        rng.shuffle(rows)
        for label, lines, cls, ident in rows:
            _value_lines(b, label, lines, cls, ident, rng, layout, rng.choice([0.2, 0.25]))
    b.skip(0.5)
    for label, lines, cls, ident in tail:
        _value_lines(b, label, lines, cls, ident, rng, "left", 0.25)
    b.skip(0.7)
    if rng.random() < 0.5:
        b.line([Chunk(_w("urgent", rng), None, "other")])
    _body(b, fk, rng, rng.randint(0, 2))
    return b, "form"


def _routing_slip(rng, fk, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    b.line([Chunk(_w("routing", rng), role="header", x=rng.choice([0.0, 0.3]))], gap=1.5)
    b.field(_w("date", rng), d.strftime(df), "date", "d", rng.choice(["left", "above"]), value_x=0.3)
    # the addressee first, then the rest of the route: one key, several people; only the first is customer
    b.line([Chunk(_w("route", rng) + ":", None, "key", key="rt", is_key=True)])
    names = [_person_lines(fk, rng)[0] for _ in range(rng.randint(2, 6))]
    for k, name in enumerate(names):
        b.line([Chunk(f"{k + 1}." if rng.random() < 0.5 else "___", None, "other", x=0.02),
                Chunk(name, "customer" if k == 0 else None, "value", span="to" if k == 0 else None, key="rt")])
    b.skip(0.5)
    acts = rng.sample(WORDS["action"], rng.randint(3, 6))
    for k in range(0, len(acts), 2):
        b.line([Chunk(("[X] " if rng.random() < 0.3 else "[ ] ") + a, None, "other", x=0.02 + 0.45 * j)
                for j, a in enumerate(acts[k:k + 2])])
    b.skip(0.5)
    b.field(_w("frm", rng), _person_lines(fk, rng), "company", "fr", rng.choice(["left", "above"]), value_x=0.3)
    if rng.random() < 0.6:
        b.field(_w("subject", rng), _subject(fk, rng, d, df), None, "re", "left", value_x=0.3)
    if rng.random() < 0.5:
        b.field(_w("phone", rng), fk.phone_number(), "phone", "ph", "left", value_x=0.3)
    _body(b, fk, rng, rng.randint(0, 1))
    return b, "form"


def _internal_letter(rng, fk, dfmts, width, height, cw, lh, margin):
    """A letter inside a company: a header of DATE / TO / FROM / SUBJECT, a body, the sender's
    name under it and the cc list at the foot."""
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    b.line([Chunk(fk.company(), None, "other", x=rng.choice([0.0, 0.3]))])
    b.line([Chunk(_w("letter", rng), role="header", x=rng.choice([0.0, 0.25]))], gap=1.5)
    frm = _person_lines(fk, rng)
    value_x = rng.choice([0.12, 0.15, 0.2])
    for label, lines, cls, ident in _header_keys(fk, rng, d, df, with_cc=False):
        if ident == "fr":
            lines = frm
        _value_lines(b, label, lines, cls, ident, rng, "left", value_x)
    if rng.random() < 0.5:
        _value_lines(b, _w("memo_no", rng), [f"{rng.choice(['M', 'F', ''])}{rng.randint(100, 9999)}"], "invoice_number", "no",
                     rng, "left", value_x)
    b.skip(0.7)
    _body(b, fk, rng, rng.randint(1, 3))
    b.line([Chunk(frm[0].split(",")[0].split(" / ")[0], None, "other", x=rng.choice([0.0, 0.5]))])
    b.skip(0.5)
    _value_lines(b, _w("cc", rng), _names_list(fk, rng, rng.randint(1, 6)), None, "cc", rng, "left", 0.08)
    return b, "other"


_MAKERS = {"memo": _memo, "fax_cover": _fax_cover, "routing_slip": _routing_slip, "internal_letter": _internal_letter}


def generate_one(index: int, seed: int = 1) -> CorpusDoc:
    rng = random.Random(seed * 1_000_003 + index + _OFFSET)
    locale, _lang, _curs, _style, dfmts = rng.choices(LOCALES, weights=_LOCALE_WEIGHTS)[0]
    fk = _faker(locale)
    fk.seed_instance(rng.getrandbits(32))
    kind = rng.choices(KINDS, weights=_WEIGHTS)[0]
    b, doc_type = _MAKERS[kind](rng, fk, dfmts, *_page_geom(rng))
    typewriter = rng.random() < 0.35  # a typewritten or faxed page: capitals, heavier noise
    if typewriter:
        b.words = [Word(w.text.upper(), w.box) for w in b.words]
    level = 0.0 if rng.random() < 0.2 else min(1.0, rng.uniform(0.2, 1.0) + (0.3 if typewriter else 0.0))
    return noisy_doc(b, rng, level, f"memo-{seed}-{index:06d}-{kind}-{locale}", doc_type, "synthetic-memo")


def generate(count: int, seed: int = 1) -> list[CorpusDoc]:
    return [generate_one(i, seed) for i in range(count)]
