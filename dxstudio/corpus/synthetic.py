"""Our own labelled documents: receipts, invoices and forms in several languages, layouts and
formats of dates and amounts, with every word's field, role, key and line item known.

    docs = generate(count=500, seed=1)      # the same documents for the same seed and Faker

Document i draws from random.Random(seed * 1_000_003 + i) and a Faker instance seeded from it,
so a document does not depend on how many others are made. Names, companies, addresses and
phone numbers come from Faker (MIT) in the document's locale; the amounts add up (subtotal +
tax - discount = total, paid - total = change). The same seed gives the same bytes only with
the same Faker version (its data lists change between releases): the corpus digest in the
run's fingerprint tells.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date as Date, timedelta

from dxstudio.engine.page import Page, Word

from .document import CorpusDoc
from .generic import tag_of

# Keywords per language: total, subtotal, tax names, discount, paid, change, date, time,
# invoice number, receipt number, phone, customer, quantity, description, price, amount,
# receipt titles, invoice title, thanks, due date, form titles, name, signature, email.
KEYWORDS = {
    "en": dict(total=["TOTAL", "Total", "Grand Total", "Total Due", "Amount Due", "TOTAL AMOUNT", "Total (RM)"],
               subtotal=["Subtotal", "Sub Total", "SUBTOTAL", "Total Excl. Tax"], tax=["Tax", "VAT", "GST", "Sales Tax", "SST"],
               discount=["Discount", "Rounding"], paid=["Cash", "CASH", "Paid", "Card", "Tendered"], change=["Change", "CHANGE"],
               date=["Date", "Date:", "DATE"], time=["Time", "Time:"], invoice=["Invoice No", "Invoice #", "Invoice Number", "Inv No."],
               receipt=["Receipt No", "Receipt #", "Bill No", "Doc No", "Trans No"], phone=["Tel", "Phone", "Tel.", "TEL"],
               customer=["Bill To", "Customer", "Sold To"], qty=["Qty", "QTY"], desc=["Description", "Item"],
               price=["Price", "Unit Price", "Rate"], amount=["Amount", "Total"],
               receipt_title=["RECEIPT", "SALES RECEIPT", "TAX INVOICE", "CASH RECEIPT", "SIMPLIFIED TAX INVOICE"],
               invoice_title=["INVOICE", "Invoice", "TAX INVOICE"], thanks=["Thank you!", "Thank you for shopping with us", "Please come again"],
               due=["Due Date", "Payment due"], form_title=["APPLICATION FORM", "REGISTRATION FORM", "CHANGE OF ADDRESS"],
               name=["Name", "Full name", "Applicant"], signature=["Signature"], email=["Email", "E-mail"],
               company=["Company", "Employer", "Organization"], address=["Address", "Street address"]),
    "de": dict(total=["SUMME", "Summe", "Gesamt", "Gesamtbetrag", "Zu zahlen"], subtotal=["Zwischensumme", "Netto", "Nettobetrag"],
               tax=["MwSt", "MwSt.", "USt"], discount=["Rabatt"], paid=["Bar", "Gegeben", "EC-Karte"], change=["Rückgeld", "Zurück"],
               date=["Datum", "Datum:"], time=["Uhrzeit", "Zeit"], invoice=["Rechnung Nr.", "Rechnungsnummer", "Rechnungs-Nr."],
               receipt=["Beleg-Nr.", "Bon-Nr.", "Bon"], phone=["Tel.", "Telefon"], customer=["Kunde", "Rechnungsempfänger"],
               qty=["Menge", "Anz."], desc=["Artikel", "Bezeichnung"], price=["Preis", "Einzelpreis"], amount=["Betrag", "Gesamt"],
               receipt_title=["KASSENBON", "QUITTUNG", "Beleg"], invoice_title=["RECHNUNG", "Rechnung"],
               thanks=["Vielen Dank für Ihren Einkauf!", "Danke und auf Wiedersehen"], due=["Fällig am", "Zahlbar bis"],
               form_title=["ANTRAG", "ANMELDUNG"], name=["Name", "Vor- und Nachname"], signature=["Unterschrift"],
               email=["E-Mail"], company=["Firma", "Arbeitgeber"], address=["Anschrift", "Adresse"]),
    "fr": dict(total=["TOTAL", "Total TTC", "TOTAL TTC", "Net à payer"], subtotal=["Sous-total", "Total HT", "Montant HT"],
               tax=["TVA"], discount=["Remise"], paid=["Espèces", "CB", "Payé"], change=["Rendu", "Monnaie rendue"],
               date=["Date", "Date :"], time=["Heure"], invoice=["Facture N°", "N° de facture", "Facture n°"],
               receipt=["Ticket N°", "N° ticket"], phone=["Tél", "Tél.", "Téléphone"], customer=["Client", "Facturé à"],
               qty=["Qté", "Quantité"], desc=["Désignation", "Description"], price=["Prix unit.", "P.U."], amount=["Montant", "Total"],
               receipt_title=["TICKET DE CAISSE", "REÇU"], invoice_title=["FACTURE", "Facture"],
               thanks=["Merci de votre visite", "À bientôt"], due=["Échéance", "Date d'échéance"],
               form_title=["FORMULAIRE D'INSCRIPTION", "DEMANDE"], name=["Nom", "Nom et prénom"], signature=["Signature"],
               email=["Courriel", "E-mail"], company=["Société", "Employeur"], address=["Adresse"]),
    "es": dict(total=["TOTAL", "Total", "Total a pagar", "Importe total"], subtotal=["Subtotal", "Base imponible"],
               tax=["IVA"], discount=["Descuento"], paid=["Efectivo", "Entregado", "Tarjeta"], change=["Cambio", "Devolución"],
               date=["Fecha", "Fecha:"], time=["Hora"], invoice=["Factura Nº", "Nº Factura", "Número de factura"],
               receipt=["Ticket Nº", "Nº Ticket"], phone=["Tel.", "Teléfono"], customer=["Cliente", "Facturar a"],
               qty=["Cant.", "Cantidad"], desc=["Descripción", "Artículo"], price=["Precio", "P. unit."], amount=["Importe", "Total"],
               receipt_title=["TICKET", "FACTURA SIMPLIFICADA"], invoice_title=["FACTURA", "Factura"],
               thanks=["¡Gracias por su compra!", "Vuelva pronto"], due=["Vencimiento", "Fecha de vencimiento"],
               form_title=["SOLICITUD", "FORMULARIO DE REGISTRO"], name=["Nombre", "Nombre y apellidos"], signature=["Firma"],
               email=["Correo", "E-mail"], company=["Empresa"], address=["Dirección", "Domicilio"]),
    "nl": dict(total=["TOTAAL", "Totaal", "Te betalen"], subtotal=["Subtotaal", "Totaal excl. BTW"], tax=["BTW"],
               discount=["Korting"], paid=["Contant", "Pin", "Betaald"], change=["Wisselgeld", "Terug"],
               date=["Datum", "Datum:"], time=["Tijd"], invoice=["Factuurnummer", "Factuur nr."], receipt=["Bonnr.", "Bon nr."],
               phone=["Tel.", "Telefoon"], customer=["Klant", "Factuuradres"], qty=["Aantal"], desc=["Omschrijving", "Artikel"],
               price=["Prijs", "Stukprijs"], amount=["Bedrag", "Totaal"], receipt_title=["KASSABON", "BON"],
               invoice_title=["FACTUUR", "Factuur"], thanks=["Bedankt en tot ziens!"], due=["Vervaldatum"],
               form_title=["AANVRAAGFORMULIER", "INSCHRIJFFORMULIER"], name=["Naam"], signature=["Handtekening"],
               email=["E-mail"], company=["Bedrijf", "Werkgever"], address=["Adres"]),
    "id": dict(total=["TOTAL", "Total", "Grand Total", "TOTAL BAYAR"], subtotal=["Subtotal", "SUB TOTAL", "Jumlah"],
               tax=["PPN", "Pajak", "Tax", "PB1"], discount=["Diskon", "Potongan"], paid=["Tunai", "CASH", "Bayar", "Debit"],
               change=["Kembali", "Kembalian", "CHANGE"], date=["Tanggal", "Tgl"], time=["Jam", "Waktu"],
               invoice=["No. Faktur", "Nomor Faktur"], receipt=["No. Struk", "No", "Bill"], phone=["Telp", "Telp.", "HP"],
               customer=["Pelanggan", "Kepada"], qty=["Qty", "Jml"], desc=["Nama Barang", "Item"], price=["Harga", "Harga Satuan"],
               amount=["Jumlah", "Total"], receipt_title=["STRUK", "BUKTI PEMBAYARAN"], invoice_title=["FAKTUR", "INVOICE"],
               thanks=["Terima kasih", "Terima kasih atas kunjungan Anda"], due=["Jatuh Tempo"],
               form_title=["FORMULIR PENDAFTARAN", "FORMULIR"], name=["Nama", "Nama Lengkap"], signature=["Tanda Tangan"],
               email=["Email", "Surel"], company=["Perusahaan"], address=["Alamat"]),
    "it": dict(total=["TOTALE", "Totale", "Totale da pagare"], subtotal=["Subtotale", "Imponibile"], tax=["IVA"],
               discount=["Sconto"], paid=["Contanti", "Pagato", "Bancomat"], change=["Resto"], date=["Data", "Data:"],
               time=["Ora"], invoice=["Fattura N.", "Numero fattura"], receipt=["Scontrino N.", "Doc. N."], phone=["Tel.", "Telefono"],
               customer=["Cliente", "Destinatario"], qty=["Qtà", "Quantità"], desc=["Descrizione", "Articolo"],
               price=["Prezzo", "Prezzo unit."], amount=["Importo", "Totale"], receipt_title=["SCONTRINO", "DOCUMENTO COMMERCIALE"],
               invoice_title=["FATTURA", "Fattura"], thanks=["Grazie e arrivederci"], due=["Scadenza"],
               form_title=["MODULO DI ISCRIZIONE", "DOMANDA"], name=["Nome", "Nome e cognome"], signature=["Firma"],
               email=["Email"], company=["Azienda", "Datore di lavoro"], address=["Indirizzo"]),
}
# (Faker locale, language, currency signs, amount style, date formats)
LOCALES = [
    ("en_US", "en", ["$", "USD", ""], "1,234.56", ["%m/%d/%Y", "%m/%d/%y", "%b %d, %Y", "%Y-%m-%d", "%B %d, %Y"]),
    ("en_GB", "en", ["£", "GBP", ""], "1,234.56", ["%d/%m/%Y", "%d %b %Y", "%d-%m-%Y", "%d %B %Y"]),
    ("en_MY", "en", ["RM", ""], "1,234.56", ["%d/%m/%Y", "%d-%m-%Y", "%d/%m/%y", "%d-%b-%Y", "%d.%m.%Y", "%Y-%m-%d"]),
    ("de_DE", "de", ["€", "EUR", ""], "1.234,56", ["%d.%m.%Y", "%d.%m.%y", "%Y-%m-%d"]),
    ("fr_FR", "fr", ["€", "EUR", ""], "1 234,56", ["%d/%m/%Y", "%d/%m/%y", "%d-%m-%Y"]),
    ("es_ES", "es", ["€", ""], "1.234,56", ["%d/%m/%Y", "%d-%m-%Y", "%d/%m/%y"]),
    ("nl_NL", "nl", ["€", "EUR", ""], "1.234,56", ["%d-%m-%Y", "%d/%m/%Y", "%d.%m.%Y"]),
    ("id_ID", "id", ["Rp", "Rp.", "IDR", ""], "1.234", ["%d/%m/%Y", "%d-%m-%Y", "%d/%m/%y", "%d %b %Y"]),
    ("it_IT", "it", ["€", "EUR", ""], "1.234,56", ["%d/%m/%Y", "%d-%m-%Y", "%d.%m.%Y"]),
]
_FAKER_LOCALE = {"en_MY": "en_GB"}
_fakers = {}


def _faker(locale: str):
    from faker import Faker

    loc = _FAKER_LOCALE.get(locale, locale)
    if loc not in _fakers:
        _fakers[loc] = Faker(loc)
    return _fakers[loc]


def fmt_amount(value: float, style: str, rng: random.Random) -> str:
    cents = round(value * 100)
    whole, frac = divmod(abs(cents), 100)
    if style == "1.234":  # rupiah: thousands only
        whole = abs(round(value))
        groups = f"{whole:,}".replace(",", rng.choice([".", ","]))
        return ("-" if value < 0 else "") + groups
    sep_thousands, sep_dec = {"1,234.56": (",", "."), "1.234,56": (".", ","), "1 234,56": (" ", ",")}[style]
    if rng.random() < 0.3:
        sep_thousands = ""
    text = f"{whole:,}".replace(",", sep_thousands) + sep_dec + f"{frac:02d}"
    return ("-" if value < 0 else "") + text


@dataclass
class Chunk:
    """A run of words on one line: its text, generic class (None: O), role, span key (a new key
    starts a new B- span), the key chunk it belongs to and its line item."""
    text: str
    cls: str | None = None
    role: str = "other"
    span: object = None
    key: object = None  # for a key chunk: its own id; for a value chunk: its key's id
    is_key: bool = False
    item: object = None
    x: float | None = None  # left edge as a fraction of the text width; None: after the previous
    right: bool = False  # right-aligned at the right margin


class _Builder:
    def __init__(self, rng: random.Random, width: float, height: float, cw: float, lh: float, margin: float):
        self.rng, self.width, self.height, self.cw, self.lh, self.margin = rng, width, height, cw, lh, margin
        self.y = margin
        self.words, self.meta = [], []  # meta: (cls, role, span, key, is_key, item)

    def line(self, chunks, gap: float = 1.0):
        rng, cw = self.rng, self.cw
        if self.y + self.lh > self.height - self.margin:
            return False
        x = self.margin
        inner = self.width - 2 * self.margin
        for ch in chunks:
            n = len(ch.text)
            if ch.right:
                x = self.width - self.margin - n * cw
            elif ch.x is not None:
                x = max(x, self.margin + ch.x * inner)
            pos = 0
            for token in ch.text.split():
                start = ch.text.index(token, pos)
                pos = start + len(token)
                jitter = rng.uniform(-0.15, 0.15) * cw
                x0 = x + start * cw + jitter
                x1 = x0 + len(token) * cw
                y0 = self.y + rng.uniform(-0.05, 0.05) * self.lh
                box = (max(0.0, x0), max(0.0, y0), min(self.width, x1), min(self.height, y0 + self.lh * 0.75))
                if box[2] <= box[0]:
                    continue
                self.words.append(Word(token, box))
                self.meta.append((ch.cls, ch.role, ch.span, ch.key, ch.is_key, ch.item))
            x = x + (n + 1) * cw
        self.y += self.lh * gap
        return True

    def skip(self, lines: float):
        self.y += self.lh * lines

    def doc(self, pid: str, doc_type: str, fit: bool = False) -> CorpusDoc:
        """The document; `fit` cuts the page below the last line (a receipt's paper roll)."""
        tags, roles, prev = [], [], None
        for cls, role, span, *_ in self.meta:
            if cls is None:
                tags.append("O")
                prev = None
            else:
                tags.append(tag_of(cls, (cls, span) != prev))
                prev = (cls, span)
            roles.append(role)
        first_key, first_item = {}, {}
        for i, (_, _, _, key, is_key, item) in enumerate(self.meta):
            if is_key:
                first_key.setdefault(key, i)
            if item is not None:
                first_item.setdefault(item, i)
        kv = tuple(first_key.get(key, i) if (key is not None and not is_key) else i
                   for i, (_, _, _, key, is_key, _) in enumerate(self.meta))
        items = tuple(first_item[item] if item is not None else i for i, (*_, item) in enumerate(self.meta))
        height = min(self.height, max(w.box[3] for w in self.words) + self.margin) if fit else self.height
        page = Page(pid, self.width, height, tuple(self.words))
        return CorpusDoc("synthetic", page, tuple(tags), tuple(roles), kv, items, doc_type)


def _kv(label: str, value: str, cls, ident, rng, value_right=False, value_x=None, colon=None):
    if colon is None:
        colon = rng.random() < 0.6
    if colon and not label.endswith(":"):
        label += rng.choice([":", " :"])
    return [Chunk(label, None, "key", key=ident, is_key=True),
            Chunk(value, cls, "value", span=ident, key=ident, right=value_right, x=value_x)]


def _money(rng, style, cur):
    def f(v):
        s = fmt_amount(v, style, rng)
        if cur and rng.random() < 0.35:
            return rng.choice([f"{cur}{s}", f"{cur} {s}", f"{s} {cur}"])
        return s
    return f


def _amounts(rng, style, n_items):
    scale = 1000 if style == "1.234" else 1
    items = []
    for _ in range(n_items):
        qty = rng.choice([1, 1, 1, 2, 2, 3, 4, 5, 10])
        unit = round(rng.choice([rng.uniform(0.5, 15), rng.uniform(5, 80), rng.uniform(50, 900)]) * scale, 0 if scale > 1 else 2)
        items.append((qty, unit, round(qty * unit, 2)))
    sub = round(sum(it[2] for it in items), 2)
    rate = rng.choice([0, 5, 6, 7, 8, 10, 11, 19, 20, 21, 22])
    tax = round(sub * rate / 100, 0 if scale > 1 else 2)
    disc = round(sub * rng.choice([0.05, 0.1]), 0 if scale > 1 else 2) if rng.random() < 0.15 else 0.0
    total = round(sub + tax - disc, 2)
    paid = total if rng.random() < 0.4 else (int(total / (10 * scale)) + 1) * 10 * scale
    return items, sub, rate, tax, disc, total, round(paid - total, 2)


def _when(rng, fmts):
    d = Date(2015, 1, 1) + timedelta(days=rng.randrange(0, 4000))
    return d, rng.choice(fmts)


def _receipt(rng, fk, locale, lang, curs, style, dfmts, pid):
    kw = KEYWORDS[lang]
    cw = rng.uniform(5.5, 9.0)
    cols = rng.randint(32, 48)
    width = cols * cw + 2 * rng.uniform(10, 30)
    b = _Builder(rng, width, rng.uniform(900, 2000), cw, cw * rng.uniform(1.6, 2.2), rng.uniform(10, 30))
    money = _money(rng, style, rng.choice(curs))
    company = fk.company()
    if locale == "en_MY" and rng.random() < 0.7:
        company = company.upper().replace(" AND ", " & ") + rng.choice([" SDN BHD", " SDN. BHD.", " ENTERPRISE", " TRADING"])
    elif rng.random() < 0.4:
        company = company.upper()
    if rng.random() < 0.3:
        b.line([Chunk(rng.choice(kw["receipt_title"]), role="header", x=0.3)])
    b.line([Chunk(company, "company", "header", span="c", x=rng.choice([0.0, 0.1, 0.2]))])
    if rng.random() < 0.3:
        b.line([Chunk(f"({rng.randint(100000, 999999)}-{rng.choice('ABCDKPTUVWX')})", role="other")])
    addr = fk.address().replace("\n", ", " if rng.random() < 0.3 else "\n")
    for part in addr.split("\n"):
        b.line([Chunk(part.upper() if rng.random() < 0.3 else part, "address", "value", span="a", x=0.05)])
    if rng.random() < 0.75:
        b.line(_kv(rng.choice(kw["phone"]), fk.phone_number(), "phone", "ph", rng))
    if rng.random() < 0.3:
        b.line([Chunk(rng.choice(["GST ID:", "GST Reg No:", "NPWP:", "USt-IdNr.", "SIRET", "NIF:", "P.IVA"]), role="key", key="g", is_key=True),
                Chunk(str(rng.randint(10**9, 10**12)), role="value", key="g")])
    if rng.random() < 0.5:
        b.line([Chunk(rng.choice(kw["receipt_title"]), role="header", x=0.3)])
    d, df = _when(rng, dfmts)
    dt = d.strftime(df)
    tm = f"{rng.randint(7, 22):02d}:{rng.randint(0, 59):02d}" + (f":{rng.randint(0, 59):02d}" if rng.random() < 0.4 else "")
    if rng.random() < 0.7:
        b.line(_kv(rng.choice(kw["receipt"]), str(rng.randint(1, 10**rng.randint(3, 8))), "invoice_number", "no", rng))
    style_dt = rng.random()
    if style_dt < 0.4:
        b.line(_kv(rng.choice(kw["date"]), dt, "date", "d", rng) + _kv(rng.choice(kw["time"]), tm, "time", "t", rng))
    elif style_dt < 0.7:
        b.line(_kv(rng.choice(kw["date"]), dt, "date", "d", rng))
        b.line(_kv(rng.choice(kw["time"]), tm, "time", "t", rng))
    else:
        b.line([Chunk(dt, "date", "value", span="d"), Chunk(tm, "time", "value", span="t", x=rng.uniform(0.3, 0.6))])
    if rng.random() < 0.5:
        b.line([Chunk(rng.choice(["Cashier", "Kasir", "Kassierer", "Caissier", "Cajero", "Server", "Table"]) + ":", role="key", key="k", is_key=True),
                Chunk(fk.first_name(), role="value", key="k")])
    sep = rng.choice(["-", "=", "*", "."]) * cols
    b.line([Chunk(sep)])
    items, sub, rate, tax, disc, total, change = _amounts(rng, style, rng.randint(1, 8))
    layout = rng.randrange(3)
    for k, (qty, unit, amt) in enumerate(items):
        name = " ".join(fk.words(rng.randint(1, 3))).upper() if rng.random() < 0.5 else " ".join(fk.words(rng.randint(1, 3))).title()
        it = f"i{k}"
        if layout == 0:
            b.line([Chunk(name, "item_name", "value", span=it, item=it), Chunk(money(amt), "item_price", "value", span=it, item=it, right=True)])
            if qty > 1:
                b.line([Chunk(str(qty), "item_quantity", "value", span=it, item=it, x=0.05), Chunk("x", item=it),
                        Chunk(money(unit), "item_unit_price", "value", span=it, item=it)])
        elif layout == 1:
            b.line([Chunk(str(qty), "item_quantity", "value", span=it, item=it), Chunk(name, "item_name", "value", span=it, item=it, x=0.1),
                    Chunk(money(amt), "item_price", "value", span=it, item=it, right=True)])
        else:
            b.line([Chunk(name, "item_name", "value", span=it, item=it)])
            b.line([Chunk(str(qty), "item_quantity", "value", span=it, item=it, x=0.1), Chunk(money(unit), "item_unit_price", "value", span=it, item=it, x=0.35),
                    Chunk(money(amt), "item_price", "value", span=it, item=it, right=True)])
    b.line([Chunk(sep)])

    def total_line(label, value, cls, ident):
        chunks = _kv(label, money(value), cls, ident, rng, value_right=True, colon=rng.random() < 0.3)
        b.line(chunks)

    if rng.random() < 0.8 or tax:
        total_line(rng.choice(kw["subtotal"]), sub, "subtotal", "st")
    if tax:
        label = rng.choice(kw["tax"]) + (f" {rate}%" if rng.random() < 0.6 else "")
        total_line(label, tax, "tax", "tx")
    if disc:
        total_line(rng.choice(kw["discount"]), -disc if rng.random() < 0.5 else disc, "discount", "ds")
    total_line(rng.choice(kw["total"]), total, "total", "tt")
    if rng.random() < 0.7:
        total_line(rng.choice(kw["paid"]), total + change, "paid", "pd")
        total_line(rng.choice(kw["change"]), change, "change", "ch")
    b.skip(rng.uniform(0.3, 1.5))
    b.line([Chunk(rng.choice(kw["thanks"]), x=0.1)])
    return b.doc(pid, "receipt", fit=True)


def _invoice(rng, fk, locale, lang, curs, style, dfmts, pid):
    kw = KEYWORDS[lang]
    width, height = rng.choice([(612.0, 792.0), (595.0, 842.0)])
    cw = rng.uniform(4.2, 6.0)
    b = _Builder(rng, width, height, cw, cw * rng.uniform(2.0, 2.8), rng.uniform(30, 60))
    money = _money(rng, style, rng.choice(curs))
    title = rng.choice(kw["invoice_title"])
    if rng.random() < 0.5:
        b.line([Chunk(title, role="header", x=0.6)])
    b.line([Chunk(fk.company(), "company", "header", span="c")])
    for part in fk.address().split("\n"):
        b.line([Chunk(part, "address", "value", span="a")])
    if rng.random() < 0.7:
        b.line(_kv(rng.choice(kw["phone"]), fk.phone_number(), "phone", "ph", rng))
    if rng.random() < 0.4:
        b.line(_kv(rng.choice(kw["email"]), fk.company_email(), None, "em", rng))
    b.skip(1)
    d, df = _when(rng, dfmts)
    number = rng.choice([str(rng.randint(1000, 999999)), f"INV-{rng.randint(1, 99999):05d}", f"{d.year}-{rng.randint(1, 9999):04d}"])
    b.line(_kv(rng.choice(kw["invoice"]), number, "invoice_number", "no", rng, value_x=0.75) if rng.random() < 0.5
           else [Chunk(title, role="header")] + _kv(rng.choice(kw["invoice"]), number, "invoice_number", "no", rng, value_x=0.75))
    b.line(_kv(rng.choice(kw["date"]), d.strftime(df), "date", "d", rng, value_x=0.75))
    if rng.random() < 0.5:
        b.line(_kv(rng.choice(kw["due"]), (d + timedelta(days=rng.choice([14, 30, 60]))).strftime(df), None, "due", rng, value_x=0.75))
    b.skip(1)
    b.line([Chunk(rng.choice(kw["customer"]) + ":", role="key", key="cu", is_key=True)])
    b.line([Chunk(fk.name() if rng.random() < 0.5 else fk.company(), "customer", "value", span="cu", key="cu")])
    for part in fk.address().split("\n"):
        b.line([Chunk(part, None, "value", key="cu")])
    b.skip(1)
    cols = [0.0, 0.55, 0.68, 0.84]
    b.line([Chunk(rng.choice(kw["desc"]), role="header", x=cols[0]), Chunk(rng.choice(kw["qty"]), role="header", x=cols[1]),
            Chunk(rng.choice(kw["price"]), role="header", x=cols[2]), Chunk(rng.choice(kw["amount"]), role="header", x=cols[3])])
    items, sub, rate, tax, disc, total, _ = _amounts(rng, style, rng.randint(1, 10))
    for k, (qty, unit, amt) in enumerate(items):
        it = f"i{k}"
        b.line([Chunk(fk.catch_phrase() if lang == "en" else " ".join(fk.words(rng.randint(1, 4))).capitalize(), "item_name", "value", span=it, item=it),
                Chunk(str(qty), "item_quantity", "value", span=it, item=it, x=cols[1]),
                Chunk(money(unit), "item_unit_price", "value", span=it, item=it, x=cols[2]),
                Chunk(money(amt), "item_price", "value", span=it, item=it, x=cols[3])])
    b.skip(1)
    b.line(_kv(rng.choice(kw["subtotal"]), money(sub), "subtotal", "st", rng, value_x=0.84))
    if disc:
        b.line(_kv(rng.choice(kw["discount"]), money(disc), "discount", "ds", rng, value_x=0.84))
    b.line(_kv(rng.choice(kw["tax"]) + f" {rate}%", money(tax), "tax", "tx", rng, value_x=0.84))
    b.line(_kv(rng.choice(kw["total"]), money(total), "total", "tt", rng, value_x=0.84))
    b.skip(1.5)
    b.line([Chunk(fk.sentence(nb_words=rng.randint(6, 12)))])
    if rng.random() < 0.5:
        b.line([Chunk("IBAN", role="key", key="ib", is_key=True), Chunk(fk.iban(), role="value", key="ib")])
    return b.doc(pid, "invoice")


def _form(rng, fk, locale, lang, curs, style, dfmts, pid):
    kw = KEYWORDS[lang]
    width, height = rng.choice([(612.0, 792.0), (595.0, 842.0), (1700.0, 2200.0)])
    cw = width / rng.uniform(90, 130)
    b = _Builder(rng, width, height, cw, cw * rng.uniform(2.2, 3.2), width * 0.07)
    b.line([Chunk(rng.choice(kw["form_title"]), role="header", x=rng.choice([0.0, 0.25]))], gap=1.5)
    b.line([Chunk(fk.sentence(nb_words=rng.randint(8, 16)))])
    d, df = _when(rng, dfmts)
    pairs = [(rng.choice(kw["name"]), fk.name(), None), (rng.choice(kw["company"]), fk.company(), "company"),
             (rng.choice(kw["address"]), fk.address().replace("\n", ", "), "address"),
             (rng.choice(kw["phone"]), fk.phone_number(), "phone"), (rng.choice(kw["email"]), fk.email(), None),
             (rng.choice(kw["date"]), d.strftime(df), "date")]
    rng.shuffle(pairs)
    two_cols = rng.random() < 0.4
    below = rng.random() < 0.3
    for k, (label, value, cls) in enumerate(pairs):
        ident = f"p{k}"
        if below:
            b.line([Chunk(label, role="key", key=ident, is_key=True)])
            b.line([Chunk(value, cls, "value", span=ident, key=ident, x=0.02)], gap=1.3)
        elif two_cols and k % 2 == 0 and k + 1 < len(pairs):
            l2, v2, c2 = pairs[k + 1]
            pairs[k + 1] = (None, None, None)
            b.line(_kv(label, value, cls, ident, rng, value_x=0.2) +
                   [Chunk(l2 + ":", role="key", key=ident + "b", is_key=True, x=0.55),
                    Chunk(v2, c2, "value", span=ident + "b", key=ident + "b", x=0.72)])
        elif label is not None:
            b.line(_kv(label, value, cls, ident, rng, value_x=rng.choice([None, 0.25])))
    b.skip(1)
    b.line([Chunk(fk.sentence(nb_words=rng.randint(8, 16)))])
    b.line(_kv(rng.choice(kw["signature"]), fk.name(), None, "sig", rng, value_x=0.3))
    return b.doc(pid, "form")


def generate_one(index: int, seed: int = 1) -> CorpusDoc:
    rng = random.Random(seed * 1_000_003 + index)
    locale, lang, curs, style, dfmts = LOCALES[rng.randrange(len(LOCALES))]
    fk = _faker(locale)
    fk.seed_instance(rng.getrandbits(32))
    kind = rng.choices(["receipt", "invoice", "form"], weights=[5, 3, 2])[0]
    make = {"receipt": _receipt, "invoice": _invoice, "form": _form}[kind]
    return make(rng, fk, locale, lang, curs, style, dfmts, f"synth-{seed}-{index:06d}-{kind}-{locale}").validate()


def generate(count: int, seed: int = 1) -> list[CorpusDoc]:
    return [generate_one(i, seed) for i in range(count)]
