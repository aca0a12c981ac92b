"""A broader generator for pretraining (issue 20 item 1): documents of many more kinds and
layouts than `synthetic:N`, with OCR-like noise, every word's generic class, role, key and
line item known.

    docs = generate(count=500, seed=1)      # corpus spec synthetic-wide:COUNT[:SEED]

Kinds (KINDS): order forms, purchase orders, delivery notes, account statements, contracts,
letters, tax forms, invoices with wide tables (6 to 9 columns) and two-column pages. Layouts:
label left of the value, label above the value, value above its label (a signature line),
key-value grids, running text with values inside it (contracts, letters), long company names
and addresses over several lines (one span in reading order), date ranges (a period: its two
dates are values keyed to the period's label, not the document's date), amounts in words
(English locales: a value keyed to its label, the figures carry the class).

Only the generic classes of the base's tag head are used (generic.py): company is the issuer
(supplier, provider, sender), customer the other party (buyer, client, recipient), date the
document's date, invoice_number its number (order, PO, delivery note, contract, reference).

OCR-like noise (`ocr_noise`, a level drawn per document, a quarter of documents clean): words
split in two or merged with the next word of the same value, character confusions (O/0, l/1,
S/5, rn/m, ...), case changes, box jitter, a slight rotation of the page (at most 1.5 degrees)
and neighbouring lines out of order. It works on the words before the tags are made, so a
split word's second piece is an I- tag of the same span, a merged word keeps the span, and
lines out of order re-derive B-/I- from the new order: tags always align with words.

Document i draws from random.Random(seed * 1_000_003 + i + 10**13) (a stream apart from
`synthetic:N`'s) and a Faker instance seeded from it, so a document does not depend on how
many others are made; coordinates are rounded to 0.01. As with `synthetic:N`, the same seed
gives the same bytes for the same Faker version. `synthetic:N` is not changed by this module.
"""
from __future__ import annotations

import dataclasses
import math
import random
from datetime import timedelta

from dxstudio.engine.page import Word

from .document import CorpusDoc
from .synthetic import _FAKER_LOCALE, KEYWORDS, LOCALES, Chunk, _Builder, _amounts, _kv, _money, _when

KINDS = ("order_form", "purchase_order", "delivery_note", "statement", "contract", "letter", "tax_form",
         "wide_table", "two_column")
_WEIGHTS = (2, 2, 1, 1, 1, 1, 1, 2, 1)
_OFFSET = 10**13

# Words of the new kinds per language (English where a language has none of its own).
EXTRA = {
    "en": dict(order_form=["ORDER FORM", "Order Form", "SALES ORDER"], order_no=["Order No", "Order #", "Order Number"],
               po=["PURCHASE ORDER", "Purchase Order"], po_no=["PO Number", "P.O. No.", "PO #"],
               delivery=["DELIVERY NOTE", "Delivery Note", "PACKING SLIP"], delivery_no=["Delivery No", "DN No.", "Note No"],
               statement=["STATEMENT OF ACCOUNT", "Account Statement", "MONTHLY STATEMENT"], account=["Account No", "Account Number"],
               contract=["SERVICE AGREEMENT", "CONTRACT", "SUPPLY CONTRACT", "LEASE AGREEMENT"], contract_no=["Contract No", "Agreement No", "Ref."],
               letter_ref=["Our ref", "Reference", "Ref"], tax_form=["TAX RETURN", "VAT RETURN", "TAX DECLARATION"],
               taxpayer=["Taxpayer", "Name of taxpayer", "Taxpayer name"], tax_id=["Tax ID", "TIN", "VAT Reg. No."],
               period=["Period", "Billing period", "Term", "Tax period"], range_from=["From", "from"], range_to=["to", "until", "-"],
               supplier=["Supplier", "Vendor", "Seller", "From"], buyer=["Buyer", "Customer", "Ship To", "Bill To", "Client"],
               deliver_to=["Deliver to", "Ship to", "Delivery address"], ordered=["Ordered", "Qty ordered"], delivered=["Delivered", "Qty shipped"],
               code=["Code", "Item No", "SKU", "Ref"], unit=["Unit", "UoM"], words=["Amount in words", "Say", "In words"],
               balance=["Balance due", "Closing balance", "Amount due"], opening=["Opening balance", "Previous balance"],
               between=["This agreement is made on {date} between", "This contract dated {date} is entered into by"],
               and_=["and", "AND"], dear=["Dear", "Dear Sir or Madam,"], regards=["Yours sincerely", "Kind regards", "Best regards"],
               taxable=["Taxable amount", "Net amount", "Taxable supplies"], tax_due=["Tax due", "Output tax"],
               total_due=["Total payable", "Net tax payable", "Total due"], value=["Contract value", "Total price", "Fee"],
               received=["Received by", "Signature of receiver"], page=["Page 1 of 1", "Page 1"]),
    "de": dict(order_form=["BESTELLFORMULAR", "Bestellung"], order_no=["Bestell-Nr.", "Bestellnummer"], po=["BESTELLUNG", "Auftrag"],
               po_no=["Auftrags-Nr.", "Bestell-Nr."], delivery=["LIEFERSCHEIN", "Lieferschein"], delivery_no=["Lieferschein-Nr.", "LS-Nr."],
               statement=["KONTOAUSZUG", "Kontoübersicht"], account=["Konto-Nr.", "Kundennummer"], contract=["VERTRAG", "DIENSTLEISTUNGSVERTRAG"],
               contract_no=["Vertrags-Nr.", "Vertragsnummer"], letter_ref=["Unser Zeichen", "Aktenzeichen"], tax_form=["STEUERERKLÄRUNG", "UMSATZSTEUER-VORANMELDUNG"],
               taxpayer=["Steuerpflichtiger", "Name"], tax_id=["Steuernummer", "USt-IdNr."], period=["Zeitraum", "Leistungszeitraum", "Laufzeit"],
               range_from=["vom", "von"], range_to=["bis", "-"], supplier=["Lieferant", "Verkäufer"], buyer=["Kunde", "Käufer", "Lieferadresse"],
               deliver_to=["Lieferanschrift", "Lieferadresse"], ordered=["Bestellt"], delivered=["Geliefert"], code=["Art.-Nr.", "Pos."],
               unit=["Einheit", "ME"], balance=["Offener Betrag", "Saldo"], opening=["Vortrag", "Anfangssaldo"],
               between=["Dieser Vertrag wird am {date} geschlossen zwischen", "Vertrag vom {date} zwischen"], and_=["und"],
               dear=["Sehr geehrte Damen und Herren,", "Sehr geehrter Herr"], regards=["Mit freundlichen Grüßen"],
               taxable=["Steuerpflichtiger Umsatz", "Bemessungsgrundlage"], tax_due=["Steuer"], total_due=["Zahllast", "Zu zahlen"],
               value=["Vertragswert", "Vergütung"], received=["Empfangen von", "Unterschrift Empfänger"], page=["Seite 1 von 1"]),
    "fr": dict(order_form=["BON DE COMMANDE"], order_no=["N° de commande", "Commande n°"], po=["BON DE COMMANDE", "Commande"],
               po_no=["N° commande", "Réf. commande"], delivery=["BON DE LIVRAISON"], delivery_no=["N° BL", "Bon n°"],
               statement=["RELEVÉ DE COMPTE"], account=["N° de compte", "Compte client"], contract=["CONTRAT", "CONTRAT DE PRESTATION"],
               contract_no=["Contrat n°", "Réf."], letter_ref=["Nos réf.", "Référence"], tax_form=["DÉCLARATION DE TVA", "DÉCLARATION FISCALE"],
               taxpayer=["Contribuable", "Nom"], tax_id=["N° TVA", "SIRET"], period=["Période", "Durée"], range_from=["du"], range_to=["au", "-"],
               supplier=["Fournisseur", "Vendeur"], buyer=["Client", "Acheteur", "Livré à"], deliver_to=["Adresse de livraison", "Livrer à"],
               ordered=["Commandé"], delivered=["Livré"], code=["Réf.", "Code"], unit=["Unité"], balance=["Solde dû", "Solde"],
               opening=["Solde précédent"], between=["Le présent contrat est conclu le {date} entre"], and_=["et"],
               dear=["Madame, Monsieur,"], regards=["Cordialement", "Veuillez agréer nos salutations distinguées"],
               taxable=["Base imposable"], tax_due=["TVA due"], total_due=["Net à payer", "Total dû"], value=["Montant du contrat", "Prix"],
               received=["Reçu par"], page=["Page 1/1"]),
    "es": dict(order_form=["HOJA DE PEDIDO"], order_no=["Nº de pedido", "Pedido"], po=["ORDEN DE COMPRA"], po_no=["Nº orden", "OC Nº"],
               delivery=["ALBARÁN", "NOTA DE ENTREGA"], delivery_no=["Albarán Nº"], statement=["EXTRACTO DE CUENTA"], account=["Nº de cuenta"],
               contract=["CONTRATO", "CONTRATO DE SERVICIOS"], contract_no=["Contrato Nº"], letter_ref=["Nuestra ref.", "Referencia"],
               tax_form=["DECLARACIÓN DE IVA", "MODELO 303"], taxpayer=["Contribuyente", "Nombre"], tax_id=["NIF", "CIF"],
               period=["Periodo", "Vigencia"], range_from=["del", "desde"], range_to=["al", "hasta", "-"], supplier=["Proveedor", "Vendedor"],
               buyer=["Cliente", "Comprador"], deliver_to=["Dirección de entrega", "Entregar a"], ordered=["Pedido"], delivered=["Entregado"],
               code=["Código", "Ref."], unit=["Unidad"], balance=["Saldo pendiente", "Saldo"], opening=["Saldo anterior"],
               between=["El presente contrato se celebra el {date} entre"], and_=["y"], dear=["Estimados señores:"], regards=["Atentamente"],
               taxable=["Base imponible"], tax_due=["Cuota"], total_due=["Resultado a ingresar", "Total a pagar"], value=["Importe del contrato"],
               received=["Recibido por"], page=["Página 1 de 1"]),
    "nl": dict(order_form=["BESTELFORMULIER"], order_no=["Ordernummer", "Bestelnr."], po=["INKOOPORDER"], po_no=["Inkoopordernr."],
               delivery=["PAKBON", "AFLEVERBON"], delivery_no=["Pakbonnr."], statement=["REKENINGOVERZICHT"], account=["Rekeningnummer", "Klantnr."],
               contract=["OVEREENKOMST", "CONTRACT"], contract_no=["Contractnr."], letter_ref=["Ons kenmerk", "Kenmerk"],
               tax_form=["BTW-AANGIFTE", "BELASTINGAANGIFTE"], taxpayer=["Belastingplichtige", "Naam"], tax_id=["BTW-nummer", "KvK"],
               period=["Periode", "Looptijd"], range_from=["van"], range_to=["tot", "t/m", "-"], supplier=["Leverancier"], buyer=["Klant", "Afnemer"],
               deliver_to=["Afleveradres"], ordered=["Besteld"], delivered=["Geleverd"], code=["Artikelnr.", "Code"], unit=["Eenheid"],
               balance=["Openstaand saldo", "Saldo"], opening=["Vorig saldo"], between=["Deze overeenkomst is op {date} gesloten tussen"],
               and_=["en"], dear=["Geachte heer, mevrouw,"], regards=["Met vriendelijke groet"], taxable=["Omzet belast"],
               tax_due=["Verschuldigde btw"], total_due=["Te betalen"], value=["Contractwaarde"], received=["Ontvangen door"], page=["Pagina 1 van 1"]),
    "id": dict(order_form=["FORMULIR PEMESANAN"], order_no=["No. Pesanan"], po=["PURCHASE ORDER", "PESANAN PEMBELIAN"], po_no=["No. PO"],
               delivery=["SURAT JALAN", "DELIVERY ORDER"], delivery_no=["No. Surat Jalan", "No. DO"], statement=["LAPORAN REKENING"],
               account=["No. Rekening"], contract=["PERJANJIAN", "KONTRAK KERJA"], contract_no=["No. Kontrak"], letter_ref=["Nomor", "No. Ref"],
               tax_form=["SPT MASA PPN", "SURAT PEMBERITAHUAN"], taxpayer=["Nama Wajib Pajak", "Wajib Pajak"], tax_id=["NPWP"],
               period=["Masa Pajak", "Periode", "Jangka Waktu"], range_from=["dari", "tanggal"], range_to=["s/d", "sampai", "-"],
               supplier=["Pemasok", "Penjual"], buyer=["Pembeli", "Kepada"], deliver_to=["Alamat Kirim", "Dikirim ke"], ordered=["Dipesan"],
               delivered=["Dikirim"], code=["Kode"], unit=["Satuan"], balance=["Saldo Akhir", "Sisa Tagihan"], opening=["Saldo Awal"],
               between=["Perjanjian ini dibuat pada tanggal {date} antara"], and_=["dan"], dear=["Dengan hormat,"], regards=["Hormat kami"],
               taxable=["Dasar Pengenaan Pajak", "DPP"], tax_due=["PPN Terutang"], total_due=["Kurang Bayar", "Jumlah yang harus dibayar"],
               value=["Nilai Kontrak"], received=["Diterima oleh"], page=["Halaman 1"]),
    "it": dict(order_form=["MODULO D'ORDINE"], order_no=["N. ordine", "Ordine n."], po=["ORDINE DI ACQUISTO"], po_no=["N. ordine acquisto"],
               delivery=["DOCUMENTO DI TRASPORTO", "DDT"], delivery_no=["DDT n.", "N. documento"], statement=["ESTRATTO CONTO"],
               account=["N. conto", "Codice cliente"], contract=["CONTRATTO", "CONTRATTO DI SERVIZIO"], contract_no=["Contratto n."],
               letter_ref=["Ns. rif.", "Riferimento"], tax_form=["DICHIARAZIONE IVA"], taxpayer=["Contribuente", "Denominazione"],
               tax_id=["P.IVA", "Codice fiscale"], period=["Periodo", "Durata"], range_from=["dal"], range_to=["al", "-"], supplier=["Fornitore"],
               buyer=["Cliente", "Destinatario"], deliver_to=["Luogo di consegna"], ordered=["Ordinato"], delivered=["Consegnato"],
               code=["Codice", "Cod."], unit=["U.M."], balance=["Saldo dovuto", "Saldo"], opening=["Saldo precedente"],
               between=["Il presente contratto è stipulato il {date} tra"], and_=["e"], dear=["Spettabile ditta,", "Gentile cliente,"],
               regards=["Distinti saluti", "Cordiali saluti"], taxable=["Imponibile"], tax_due=["Imposta dovuta"], total_due=["Totale da versare"],
               value=["Valore del contratto"], received=["Ricevuto da"], page=["Pagina 1 di 1"]),
}

_fakers = {}


def _faker(locale: str):
    """This generator's own Faker instance of a locale (not synthetic.py's: nothing here may
    change `synthetic:N`), with every list of a provider that Faker builds from a set put in
    sorted order: Faker 40's it_IT cities are `list({...})`, whose order follows the process's
    string hash seed (PYTHONHASHSEED), so the same seed gave other cities in another process."""
    from faker import Faker

    loc = _FAKER_LOCALE.get(locale, locale)
    if loc not in _fakers:
        fk = Faker(loc)
        for prov in fk.get_providers():
            for name in ("cities",):
                v = getattr(type(prov), name, None)
                if isinstance(v, list) and all(isinstance(x, str) for x in v):
                    setattr(prov, name, sorted(v))
        _fakers[loc] = fk
    return _fakers[loc]


_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n: int) -> str:
    """An integer (0 <= n < 10**12) in English words: 1234 -> 'one thousand two hundred thirty-four'."""
    if not 0 <= n < 10**12:
        raise ValueError(f"number_words: {n} is out of range")
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _ONES[n % 10])
    if n < 1000:
        return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + number_words(n % 100))
    for size, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= size:
            return number_words(n // size) + " " + name + ("" if n % size == 0 else " " + number_words(n % size))
    raise AssertionError(n)


def amount_words(value: float, rng: random.Random, currency: str = "") -> str:
    cents = round(abs(value) * 100)
    whole, frac = divmod(cents, 100)
    text = number_words(whole)
    unit = currency or rng.choice(["dollars", "ringgit", "euros", ""])
    text += f" {unit}" if unit else ""
    if frac:
        text += rng.choice([f" and {frac:02d}/100", f" and {number_words(frac)} cents", f" and cents {number_words(frac)}"])
    text += rng.choice([" only", "", " ONLY"])
    return rng.choice([text.upper(), text.capitalize(), text.title()])


def _kw(lang: str, name: str, rng: random.Random) -> str:
    return rng.choice(EXTRA.get(lang, EXTRA["en"]).get(name) or EXTRA["en"][name])


class _Page(_Builder):
    """The generator's page builder with column bounds and each word's line number (the noise
    moves whole lines)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.line_of = []
        self.n_lines = 0
        self.left, self.right = self.margin, self.width - self.margin

    def line(self, chunks, gap: float = 1.0):
        rng, cw = self.rng, self.cw
        if self.y + self.lh > self.height - self.margin:
            return False
        x = self.left
        inner = self.right - self.left
        for ch in chunks:
            n = len(ch.text)
            if ch.right:
                x = self.right - n * cw
            elif ch.x is not None:
                x = max(x, self.left + ch.x * inner)
            pos = 0
            for token in ch.text.split():
                start = ch.text.index(token, pos)
                pos = start + len(token)
                x0 = x + start * cw + rng.uniform(-0.15, 0.15) * cw
                x1 = x0 + len(token) * cw
                y0 = self.y + rng.uniform(-0.05, 0.05) * self.lh
                box = (max(0.0, x0), max(0.0, y0), min(self.width, x1), min(self.height, y0 + self.lh * 0.75))
                if box[2] <= box[0]:
                    continue
                self.words.append(Word(token, box))
                self.meta.append((ch.cls, ch.role, ch.span, ch.key, ch.is_key, ch.item))
                self.line_of.append(self.n_lines)
            x = x + (n + 1) * cw
        self.n_lines += 1
        self.y += self.lh * gap
        return True

    def column(self, left: float, right: float) -> None:
        """Lay out the next lines between these fractions of the page's text width."""
        inner = self.width - 2 * self.margin
        self.left, self.right = self.margin + left * inner, self.margin + right * inner

    def field(self, label: str, values, cls, ident, layout: str, value_x=None):
        """A labelled value of one or more lines: label left of it, above it, or below it
        (a signature line); every value line is one span."""
        rng = self.rng
        if isinstance(values, str):
            values = [values]
        if layout == "above":
            self.line([Chunk(label, None, "key", key=ident, is_key=True)])
            for v in values:
                self.line([Chunk(v, cls, "value", span=ident, key=ident, x=0.02)])
        elif layout == "below":
            for v in values:
                self.line([Chunk(v, cls, "value", span=ident, key=ident, x=0.02)])
            self.line([Chunk("_" * rng.randint(12, 24), None, "other")], gap=0.6)
            self.line([Chunk(label, None, "key", key=ident, is_key=True, x=0.02)])
        else:
            vx = value_x if value_x is not None else rng.choice([None, 0.3, 0.35])
            self.line(_kv(label, values[0], cls, ident, rng, value_x=vx))
            for v in values[1:]:
                self.line([Chunk(v, cls, "value", span=ident, key=ident, x=vx if vx is not None else 0.3)])


def _long_company(fk, rng) -> list[str]:
    """A company name of one to three lines (a long legal name, a trading name, a division)."""
    name = fk.company()
    r = rng.random()
    if r < 0.35:
        return [name]
    if r < 0.7:
        return [f"{name} {fk.company_suffix()}", rng.choice(["Holdings", "International", "Group", "Services", "Logistics",
                                                                "Trading", "Manufacturing"]) + " " + fk.company_suffix()]
    return [f"{fk.last_name()}, {fk.last_name()} & {fk.last_name()}", rng.choice(["Consulting Engineers", "Partners",
                                                                                 "Associates", "Solicitors"]),
            rng.choice(["Division", "Department", "Branch"]) + " " + fk.city()]


def _long_address(fk, rng) -> list[str]:
    lines = fk.address().split("\n")
    if rng.random() < 0.4:
        lines.insert(0, rng.choice(["Building", "Block", "Unit", "Suite", "Floor"]) + f" {rng.randint(1, 40)}, "
                     + fk.last_name() + rng.choice([" House", " Tower", " Plaza", " Centre"]))
    if rng.random() < 0.3:
        lines.append(fk.country())
    if rng.random() < 0.2:
        lines = [", ".join(lines)]
    return lines


def _person(fk, rng) -> list[str]:
    """A person's name (sometimes with a title), one line."""
    if rng.random() < 0.3 and hasattr(fk, "prefix"):
        return [f"{fk.prefix()} {fk.name()}"]
    return [fk.name()]


def _number(rng, prefix_choices, d) -> str:
    p = rng.choice(prefix_choices)
    return rng.choice([f"{p}{rng.randint(1000, 99999)}", f"{p}-{d.year}-{rng.randint(1, 9999):04d}", str(rng.randint(10**4, 10**8)),
                       f"{p}/{rng.randint(10, 99)}/{rng.randint(100, 999)}"])


def _range(rng, d, df):
    start = d - timedelta(days=rng.choice([30, 31, 90, 365]))
    return start.strftime(df), (d - timedelta(days=1)).strftime(df) if rng.random() < 0.5 else d.strftime(df)


def _layout(rng) -> str:
    return rng.choices(["left", "above"], weights=[3, 2])[0]


def _page_geom(rng):
    width, height = rng.choice([(612.0, 792.0), (595.0, 842.0), (1240.0, 1754.0)])
    cw = width / rng.uniform(95, 125)
    return width, height, cw, cw * rng.uniform(2.0, 2.8), width * rng.uniform(0.05, 0.09)


def _header_block(b, fk, rng, kw, ex, company_lines, layout):
    """The issuer: company (one span over its lines), address lines (one span), phone."""
    x = rng.choice([0.0, 0.0, 0.55])
    for k, part in enumerate(company_lines):
        b.line([Chunk(part, "company", "header" if k == 0 else "value", span="c", x=x)])
    for part in _long_address(fk, rng):
        b.line([Chunk(part, "address", "value", span="a", x=x)])
    if rng.random() < 0.7:
        b.line(_kv(rng.choice(kw["phone"]), fk.phone_number(), "phone", "ph", rng, value_x=None))


def _table(b, rng, fk, kw, ex, lang, money, style, n_cols, prices=True, qty2=False):
    """An item table of 3 to 9 columns; returns (sub, rate, tax, disc, total)."""
    items, sub, rate, tax, disc, total, _ = _amounts(rng, style, rng.randint(1, 9))
    heads = [("code", 0.0)] if n_cols >= 6 else []
    desc_x = 0.12 if heads else 0.0
    heads.append(("desc", desc_x))
    rest = ["qty"] + (["delivered"] if qty2 else []) + (["unit"] if n_cols >= 7 else []) + \
           (["price"] if prices else []) + (["disc"] if n_cols >= 8 and prices else []) + \
           (["taxr"] if n_cols >= 9 and prices else []) + (["amount"] if prices else [])
    start, step = 0.5 if len(rest) <= 3 else 0.42, (0.98 - (0.5 if len(rest) <= 3 else 0.42)) / max(1, len(rest))
    for k, name in enumerate(rest):
        heads.append((name, start + k * step))
    label = {"code": _kw(lang, "code", rng), "desc": rng.choice(kw["desc"]), "qty": rng.choice(kw["qty"]) if not qty2 else _kw(lang, "ordered", rng),
             "delivered": _kw(lang, "delivered", rng), "unit": _kw(lang, "unit", rng), "price": rng.choice(kw["price"]),
             "disc": rng.choice(kw["discount"]), "taxr": rng.choice(kw["tax"]) + " %", "amount": rng.choice(kw["amount"])}
    b.line([Chunk(label[h], role="header", x=x) for h, x in heads])
    for k, (qty, unit, amt) in enumerate(items):
        it = f"i{k}"
        name = fk.catch_phrase() if lang == "en" and rng.random() < 0.5 else " ".join(fk.words(rng.randint(1, 4))).capitalize()
        cells = []
        for h, x in heads:
            if h == "code":
                cells.append(Chunk(f"{rng.choice('ABCDEFKMPX')}{rng.randint(100, 99999)}", None, "value", item=it, x=x))
            elif h == "desc":
                cells.append(Chunk(name, "item_name", "value", span=it, item=it, x=x))
            elif h == "qty":
                cells.append(Chunk(str(qty), "item_quantity", "value", span=it, item=it, x=x))
            elif h == "delivered":
                cells.append(Chunk(str(max(0, qty - rng.choice([0, 0, 0, 1]))), None, "value", item=it, x=x))
            elif h == "unit":
                cells.append(Chunk(rng.choice(["pcs", "pc", "ea", "kg", "box", "set", "m", "h"]), None, "value", item=it, x=x))
            elif h == "price":
                cells.append(Chunk(money(unit), "item_unit_price", "value", span=it, item=it, x=x))
            elif h == "disc":
                cells.append(Chunk(rng.choice(["0%", "5%", "-", "10%"]), None, "value", item=it, x=x))
            elif h == "taxr":
                cells.append(Chunk(f"{rate}%", None, "value", item=it, x=x))
            else:
                cells.append(Chunk(money(amt), "item_price", "value", span=it, item=it, x=x))
        b.line(cells)
    return sub, rate, tax, disc, total


def _totals(b, rng, kw, money, sub, rate, tax, disc, total, x=0.7):
    vx = min(0.86, x + 0.16)
    b.line([Chunk(rng.choice(kw["subtotal"]), None, "key", key="st", is_key=True, x=x),
            Chunk(money(sub), "subtotal", "value", span="st", key="st", x=vx)])
    if disc:
        b.line([Chunk(rng.choice(kw["discount"]), None, "key", key="ds", is_key=True, x=x),
                Chunk(money(disc), "discount", "value", span="ds", key="ds", x=vx)])
    b.line([Chunk(rng.choice(kw["tax"]) + (f" {rate}%" if rng.random() < 0.6 else ""), None, "key", key="tx", is_key=True, x=x),
            Chunk(money(tax), "tax", "value", span="tx", key="tx", x=vx)])
    b.line([Chunk(rng.choice(kw["total"]), None, "key", key="tt", is_key=True, x=x),
            Chunk(money(total), "total", "value", span="tt", key="tt", x=vx)])


def _words_line(b, rng, lang, ex_label, total, x=0.0):
    if lang == "en":
        b.line([Chunk(ex_label + ":", None, "key", key="aw", is_key=True, x=x),
                Chunk(amount_words(total, rng), None, "value", key="aw")])


# ---- the kinds ------------------------------------------------------------------------------
def _order_form(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin, purchase=False):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    title = _kw(lang, "po" if purchase else "order_form", rng)
    if rng.random() < 0.5:
        b.line([Chunk(title, role="header", x=rng.choice([0.0, 0.3, 0.6]))], gap=1.4)
    layout = _layout(rng)
    supplier, buyer = _long_company(fk, rng), (_long_company(fk, rng) if rng.random() < 0.6 else _person(fk, rng))
    if purchase:  # the buyer issues a purchase order: the issuer is the buyer's letterhead
        _header_block(b, fk, rng, kw, ex, supplier, layout)
    else:
        _header_block(b, fk, rng, kw, ex, supplier, layout)
    if rng.random() >= 0.5:
        b.line([Chunk(title, role="header", x=rng.choice([0.0, 0.3]))], gap=1.4)
    b.skip(0.5)
    number = _number(rng, ["PO", "SO", "ORD", ""], d)
    b.field(_kw(lang, "po_no" if purchase else "order_no", rng), number, "invoice_number", "no", "left", value_x=rng.choice([0.3, 0.7]))
    b.field(rng.choice(kw["date"]), d.strftime(df), "date", "d", "left", value_x=rng.choice([0.3, 0.7]))
    if rng.random() < 0.6:
        a, z = _range(rng, d + timedelta(days=rng.randint(7, 60)), df)
        b.line([Chunk(_kw(lang, "period", rng) + ":", None, "key", key="pr", is_key=True),
                Chunk(a, None, "value", key="pr", x=0.3), Chunk(_kw(lang, "range_to", rng), None, "other"),
                Chunk(z, None, "value", key="pr")])
    b.skip(0.5)
    b.field(_kw(lang, "buyer", rng), buyer, "customer", "cu", layout)
    for part in _long_address(fk, rng):
        b.line([Chunk(part, None, "value", key="cu", x=0.02 if layout == "above" else 0.3)])
    if rng.random() < 0.5:
        b.field(_kw(lang, "deliver_to", rng), _long_address(fk, rng), None, "dl", _layout(rng))
    b.skip(0.7)
    sub, rate, tax, disc, total = _table(b, rng, fk, kw, ex, lang, money, style, rng.choice([4, 5, 6, 7, 8, 9]))
    b.skip(0.5)
    _totals(b, rng, kw, money, sub, rate, tax, disc, total)
    if rng.random() < 0.5:
        _words_line(b, rng, lang, _kw(lang, "words", rng), total)
    b.skip(1)
    b.field(rng.choice(kw["signature"]), fk.name(), None, "sig", "below")
    return b, "invoice" if purchase else "form"


def _delivery_note(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    b.line([Chunk(_kw(lang, "delivery", rng), role="header", x=rng.choice([0.0, 0.5]))], gap=1.4)
    _header_block(b, fk, rng, kw, ex, _long_company(fk, rng), _layout(rng))
    b.skip(0.5)
    b.field(_kw(lang, "delivery_no", rng), _number(rng, ["DN", "LS", "DO", ""], d), "invoice_number", "no", _layout(rng))
    b.field(rng.choice(kw["date"]), d.strftime(df), "date", "d", "left")
    if rng.random() < 0.5:
        b.field(_kw(lang, "order_no", rng), _number(rng, ["PO", "ORD"], d), None, "ref", "left")
    layout = _layout(rng)
    b.field(_kw(lang, "deliver_to", rng), _long_company(fk, rng) if rng.random() < 0.5 else _person(fk, rng), "customer", "cu", layout)
    for part in _long_address(fk, rng):
        b.line([Chunk(part, None, "value", key="cu", x=0.02 if layout == "above" else 0.3)])
    b.skip(0.7)
    _table(b, rng, fk, kw, ex, lang, money, style, rng.choice([3, 6, 7]), prices=False, qty2=rng.random() < 0.6)
    b.skip(1)
    b.field(_kw(lang, "received", rng), fk.name(), None, "rc", "below")
    return b, "other"


def _statement(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    _header_block(b, fk, rng, kw, ex, _long_company(fk, rng), "left")
    b.line([Chunk(_kw(lang, "statement", rng), role="header", x=rng.choice([0.0, 0.4]))], gap=1.4)
    b.field(_kw(lang, "account", rng), str(rng.randint(10**6, 10**10)), None, "ac", "left")
    b.field(rng.choice(kw["date"]), d.strftime(df), "date", "d", "left")
    a, z = _range(rng, d, df)
    b.line([Chunk(_kw(lang, "period", rng) + ":", None, "key", key="pr", is_key=True), Chunk(_kw(lang, "range_from", rng), None, "other"),
            Chunk(a, None, "value", key="pr"), Chunk(_kw(lang, "range_to", rng), None, "other"), Chunk(z, None, "value", key="pr")])
    b.field(rng.choice(kw["customer"]), _person(fk, rng) if rng.random() < 0.5 else _long_company(fk, rng), "customer", "cu", _layout(rng))
    b.skip(0.7)
    cols = [0.0, 0.18, 0.55, 0.7, 0.85]
    b.line([Chunk(h, role="header", x=x) for h, x in zip([rng.choice(kw["date"]).rstrip(":"), rng.choice(kw["desc"]),
                                                            "Debit", "Credit", "Balance"], cols)])
    scale = 1000 if style == "1.234" else 1
    bal = round(rng.uniform(0, 2000) * scale, 2)
    b.line([Chunk(_kw(lang, "opening", rng), None, "other", x=cols[1]), Chunk(money(bal), None, "value", x=cols[4])])
    day = d - timedelta(days=30)
    for k in range(rng.randint(2, 10)):
        day += timedelta(days=rng.randint(0, 3))
        amt = round(rng.uniform(5, 900) * scale, 2)
        debit = rng.random() < 0.6
        bal = round(bal + (amt if debit else -amt), 2)
        b.line([Chunk(day.strftime(df), None, "value", x=cols[0]),
                Chunk(rng.choice(["Invoice", "Payment", "Credit note", "Transfer"]) + f" {rng.randint(1000, 99999)}", None, "value", x=cols[1]),
                Chunk(money(amt), None, "value", x=cols[2] if debit else cols[3]), Chunk(money(bal), None, "value", x=cols[4])])
    b.skip(0.5)
    b.line([Chunk(_kw(lang, "balance", rng), None, "key", key="tt", is_key=True, x=0.55),
            Chunk(money(bal), "total", "value", span="tt", key="tt", x=cols[4])])
    return b, "invoice"


def _contract(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    b.line([Chunk(_kw(lang, "contract", rng), role="header", x=0.3)], gap=1.5)
    b.field(_kw(lang, "contract_no", rng), _number(rng, ["C", "AGR", "K", ""], d), "invoice_number", "no", "left", value_x=None)
    opening = _kw(lang, "between", rng).format(date="\x00")
    head, _, tail = opening.partition("\x00")
    b.line([Chunk(head.strip(), None, "other"), Chunk(d.strftime(df), "date", "value", span="d")] +
           ([Chunk(tail.strip(), None, "other")] if tail.strip() else []))
    for k, part in enumerate(_long_company(fk, rng)):
        b.line([Chunk(part, "company", "value", span="c", x=0.05)])
    for part in _long_address(fk, rng):
        b.line([Chunk(part, "address", "value", span="a", x=0.05)])
    b.line([Chunk(rng.choice(['(the "Provider")', '(hereinafter "Supplier")', "(1)"]), None, "other", x=0.05)])
    b.line([Chunk(_kw(lang, "and_", rng), None, "other")])
    for part in (_long_company(fk, rng) if rng.random() < 0.6 else _person(fk, rng)):
        b.line([Chunk(part, "customer", "value", span="cu", x=0.05)])
    for part in _long_address(fk, rng):
        b.line([Chunk(part, None, "value", x=0.05)])
    b.line([Chunk(rng.choice(['(the "Client")', '(hereinafter "Customer")', "(2)"]), None, "other", x=0.05)])
    b.skip(0.5)
    for _ in range(rng.randint(1, 3)):
        b.line([Chunk(fk.sentence(nb_words=rng.randint(9, 15)))])
    a, z = _range(rng, d + timedelta(days=rng.randint(10, 400)), df)
    b.line([Chunk(_kw(lang, "period", rng) + ":", None, "key", key="pr", is_key=True), Chunk(_kw(lang, "range_from", rng), None, "other"),
            Chunk(a, None, "value", key="pr"), Chunk(_kw(lang, "range_to", rng), None, "other"), Chunk(z, None, "value", key="pr")])
    scale = 1000 if style == "1.234" else 1
    value = round(rng.uniform(500, 90000) * scale, 2)
    b.field(_kw(lang, "value", rng), money(value), "total", "tt", "left")
    if rng.random() < 0.7:
        _words_line(b, rng, lang, _kw(lang, "words", rng), value)
    for _ in range(rng.randint(1, 3)):
        b.line([Chunk(fk.sentence(nb_words=rng.randint(9, 15)))])
    b.skip(1)
    y0 = b.y
    b.column(0.0, 0.45)
    b.field(rng.choice(kw["signature"]), fk.name(), None, "s1", "below")
    b.y = y0
    b.column(0.55, 1.0)
    b.field(rng.choice(kw["signature"]), fk.name(), None, "s2", "below")
    b.column(0.0, 1.0)
    return b, "other"


def _letter(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    _header_block(b, fk, rng, kw, ex, _long_company(fk, rng), "left")
    b.skip(1)
    for k, part in enumerate(_person(fk, rng) + (_long_company(fk, rng) if rng.random() < 0.5 else [])):
        b.line([Chunk(part, "customer" if k == 0 else None, "value", span="cu" if k == 0 else None)])
    for part in _long_address(fk, rng):
        b.line([Chunk(part, None, "value")])
    b.skip(0.5)
    b.line([Chunk(d.strftime(df), "date", "value", span="d", x=rng.choice([0.0, 0.65]))])
    if rng.random() < 0.7:
        b.field(_kw(lang, "letter_ref", rng), _number(rng, ["REF", "L", ""], d), "invoice_number", "no", "left", value_x=None)
    b.skip(0.5)
    b.line([Chunk(_kw(lang, "dear", rng), None, "other")])
    for _ in range(rng.randint(2, 5)):
        b.line([Chunk(fk.sentence(nb_words=rng.randint(10, 16)))])
    if rng.random() < 0.6:
        scale = 1000 if style == "1.234" else 1
        amt = round(rng.uniform(20, 5000) * scale, 2)
        b.line([Chunk(rng.choice(["The amount of", "We confirm the sum of", "Balance:"]), None, "key", key="tt", is_key=True),
                Chunk(money(amt), "total", "value", span="tt", key="tt"), Chunk(fk.sentence(nb_words=rng.randint(4, 8)))])
    b.skip(0.5)
    b.line([Chunk(_kw(lang, "regards", rng), None, "other")])
    b.skip(1)
    b.line([Chunk(fk.name(), None, "other")])
    return b, "other"


def _tax_form(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    b.line([Chunk(_kw(lang, "tax_form", rng), role="header", x=0.25)], gap=1.5)
    b.line([Chunk(fk.sentence(nb_words=rng.randint(8, 14)))])
    layout = _layout(rng)
    grid = rng.random() < 0.5
    a, z = _range(rng, d, df)
    scale = 1000 if style == "1.234" else 1
    sub = round(rng.uniform(1000, 90000) * scale, 2)
    rate = rng.choice([5, 6, 10, 19, 20, 21, 22])
    tax = round(sub * rate / 100, 2)
    pairs = [(_kw(lang, "taxpayer", rng), _long_company(fk, rng) if rng.random() < 0.6 else _person(fk, rng), "customer"),
             (_kw(lang, "tax_id", rng), [str(rng.randint(10**8, 10**11))], None),
             (rng.choice(kw["address"]), _long_address(fk, rng), None),
             (_kw(lang, "period", rng), [f"{a} - {z}"], None),
             (_kw(lang, "taxable", rng), [money(sub)], "subtotal"),
             (_kw(lang, "tax_due", rng) + f" ({rate}%)", [money(tax)], "tax"),
             (_kw(lang, "total_due", rng), [money(tax)], "total")]
    for k, (label, values, cls) in enumerate(pairs):
        ident = f"f{k}"
        if label is None:
            continue
        if grid and len(values) == 1 and k + 1 < len(pairs) and len(pairs[k + 1][1]) == 1 and k % 2 == 0:
            l2, v2, c2 = pairs[k + 1]
            pairs[k + 1] = (None, None, None)
            y0 = b.y
            b.column(0.0, 0.48)
            b.field(f"{k + 1}. {label}", values, cls, ident, layout, value_x=0.45)
            y1 = b.y
            b.y = y0
            b.column(0.52, 1.0)
            b.field(f"{k + 2}. {l2}", v2, c2, ident + "b", layout, value_x=0.45)
            b.y = max(b.y, y1)
            b.column(0.0, 1.0)
        else:
            b.field(f"{k + 1}. {label}", values, cls, ident, layout)
    b.skip(1)
    b.field(rng.choice(kw["date"]), d.strftime(df), "date", "d", "left")
    b.field(rng.choice(kw["signature"]), fk.name(), None, "sig", "below")
    return b, "form"


def _wide_table(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    width, height = max(width, height), min(width, height)  # landscape
    b = _Page(rng, width, height, width / rng.uniform(130, 170), lh * 0.8, margin)
    d, df = _when(rng, dfmts)
    y0 = b.y
    b.column(0.0, 0.5)
    _header_block(b, fk, rng, kw, ex, _long_company(fk, rng), "left")
    y1 = b.y
    b.y = y0
    b.column(0.55, 1.0)
    b.line([Chunk(rng.choice(kw["invoice_title"]), role="header")])
    b.field(rng.choice(kw["invoice"]), _number(rng, ["INV", ""], d), "invoice_number", "no", "left", value_x=0.45)
    b.field(rng.choice(kw["date"]), d.strftime(df), "date", "d", "left", value_x=0.45)
    b.field(rng.choice(kw["customer"]), _long_company(fk, rng), "customer", "cu", "left", value_x=0.45)
    b.y = max(b.y, y1)
    b.column(0.0, 1.0)
    b.skip(0.7)
    sub, rate, tax, disc, total = _table(b, rng, fk, kw, ex, lang, money, style, rng.choice([7, 8, 9]))
    b.skip(0.5)
    _totals(b, rng, kw, money, sub, rate, tax, disc, total, x=0.72)
    return b, "invoice"


def _two_column(rng, fk, lang, kw, ex, money, style, dfmts, width, height, cw, lh, margin):
    """Two columns of labelled blocks (supplier | customer, then details | totals), read
    column by column."""
    b = _Page(rng, width, height, cw, lh, margin)
    d, df = _when(rng, dfmts)
    b.line([Chunk(rng.choice(kw["invoice_title"] + EXTRA.get(lang, EXTRA["en"])["order_form"]), role="header", x=0.35)], gap=1.5)
    y0 = b.y
    b.column(0.0, 0.46)
    b.line([Chunk(_kw(lang, "supplier", rng) + ":", None, "key", key="sp", is_key=True)])
    for part in _long_company(fk, rng):
        b.line([Chunk(part, "company", "value", span="c", key="sp")])
    for part in _long_address(fk, rng):
        b.line([Chunk(part, "address", "value", span="a")])
    if rng.random() < 0.6:
        b.line(_kv(rng.choice(kw["phone"]), fk.phone_number(), "phone", "ph", rng))
    y1 = b.y
    b.y = y0
    b.column(0.54, 1.0)
    b.line([Chunk(_kw(lang, "buyer", rng) + ":", None, "key", key="cu", is_key=True)])
    for part in (_long_company(fk, rng) if rng.random() < 0.6 else _person(fk, rng)):
        b.line([Chunk(part, "customer", "value", span="cu", key="cu")])
    for part in _long_address(fk, rng):
        b.line([Chunk(part, None, "value", key="cu")])
    b.y = max(b.y, y1) + lh
    y0 = b.y
    b.column(0.0, 0.46)
    b.field(rng.choice(kw["invoice"] + EXTRA.get(lang, EXTRA["en"])["order_no"]), _number(rng, ["INV", "SO", ""], d), "invoice_number", "no", _layout(rng))
    b.field(rng.choice(kw["date"]), d.strftime(df), "date", "d", _layout(rng))
    if rng.random() < 0.6:
        b.field(rng.choice(kw["due"]), (d + timedelta(days=30)).strftime(df), None, "du", _layout(rng))
    for _ in range(rng.randint(1, 4)):
        b.line([Chunk(" ".join(fk.words(rng.randint(3, 6))), None, "other")])
    y1 = b.y
    b.y = y0
    b.column(0.54, 1.0)
    items, sub, rate, tax, disc, total, _ = _amounts(rng, style, 1)
    b.field(rng.choice(kw["subtotal"]), money(sub), "subtotal", "st", "left", value_x=0.6)
    b.field(rng.choice(kw["tax"]), money(tax), "tax", "tx", "left", value_x=0.6)
    b.field(rng.choice(kw["total"]), money(total), "total", "tt", "left", value_x=0.6)
    b.y = max(b.y, y1)
    b.column(0.0, 1.0)
    if rng.random() < 0.5:
        _words_line(b, rng, lang, _kw(lang, "words", rng), total)
    return b, "invoice"


_MAKERS = {"order_form": _order_form, "purchase_order": lambda *a: _order_form(*a, purchase=True),
           "delivery_note": _delivery_note, "statement": _statement, "contract": _contract, "letter": _letter,
           "tax_form": _tax_form, "wide_table": _wide_table, "two_column": _two_column}


# ---- OCR-like noise ---------------------------------------------------------------------------
CONFUSIONS = {"O": "0", "0": "O", "o": "0", "l": "1", "1": "l", "I": "1", "i": "l", "S": "5", "5": "S", "B": "8",
              "8": "B", "Z": "2", "2": "Z", "e": "c", "c": "e", ",": ".", ".": ",", "g": "9", "G": "6"}


def _confuse(text: str, rng: random.Random, rate: float) -> str:
    out = []
    for ch in text:
        if ch in CONFUSIONS and rng.random() < rate:
            out.append(CONFUSIONS[ch])
        else:
            out.append(ch)
    text = "".join(out)
    if "m" in text and rng.random() < rate:
        text = text.replace("m", "rn", 1)
    return text


def ocr_noise(words, meta, lines, rng: random.Random, level: float, width: float, height: float):
    """(words, meta, lines) with OCR-like noise of this level (0: none, 1: heavy). Each word's
    meta (class, role, span, key, is_key, item) goes with every piece of it, so the tags made
    from the result stay aligned with its words."""
    if level <= 0:
        return list(words), list(meta), list(lines)
    # lines out of order: swap some neighbouring lines (their words move together)
    order = sorted(set(lines))
    for k in range(len(order) - 1):
        if rng.random() < 0.06 * level:
            order[k], order[k + 1] = order[k + 1], order[k]
    rank = {ln: r for r, ln in enumerate(order)}
    idx = sorted(range(len(words)), key=lambda i: (rank[lines[i]], i))
    words, meta, lines = [words[i] for i in idx], [meta[i] for i in idx], [lines[i] for i in idx]
    # page rotation (about its centre) and box jitter
    angle = math.radians(rng.uniform(-1.5, 1.5) * level) if rng.random() < 0.5 else 0.0
    ca, sa = math.cos(angle), math.sin(angle)
    cx, cy = width / 2, height / 2
    jit = 0.08 * level

    def place(box):
        x0, y0, x1, y1 = box
        h = y1 - y0
        if jit:
            x0 += rng.uniform(-jit, jit) * h
            x1 += rng.uniform(-jit, jit) * h
            y0 += rng.uniform(-jit, jit) * h
            y1 += rng.uniform(-jit, jit) * h
        if angle:
            xs, ys = [], []
            for px, py in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
                dx, dy = px - cx, py - cy
                xs.append(cx + dx * ca - dy * sa)
                ys.append(cy + dx * sa + dy * ca)
            x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
        b = (round(min(max(x0, 0.0), width), 2), round(min(max(y0, 0.0), height), 2),
             round(min(max(x1, 0.0), width), 2), round(min(max(y1, 0.0), height), 2))
        return b if b[2] > b[0] and b[3] > b[1] else None

    out_w, out_m, out_l = [], [], []
    k = 0
    while k < len(words):
        w, m, ln = words[k], meta[k], lines[k]
        text = w.text
        r = rng.random()
        if r < 0.04 * level and k + 1 < len(words) and meta[k + 1] == m and lines[k + 1] == ln:
            nxt = words[k + 1]
            box = (min(w.box[0], nxt.box[0]), min(w.box[1], nxt.box[1]), max(w.box[2], nxt.box[2]), max(w.box[3], nxt.box[3]))
            pieces = [(text + nxt.text, box)]
            k += 1
        elif r < 0.08 * level and len(text) >= 4:
            cut = rng.randint(1, len(text) - 1)
            x0, y0, x1, y1 = w.box
            xm = x0 + (x1 - x0) * cut / len(text)
            pieces = [(text[:cut], (x0, y0, xm, y1)), (text[cut:], (xm, y0, x1, y1))]
        else:
            pieces = [(text, w.box)]
        for t, box in pieces:
            t = _confuse(t, rng, 0.03 * level)
            c = rng.random()
            if c < 0.03 * level:
                t = t.upper()
            elif c < 0.05 * level:
                t = t.lower()
            placed = place(box)
            if placed is None or not t.strip():
                continue
            out_w.append(Word(t, placed))
            out_m.append(m)
            out_l.append(ln)
        k += 1
    return out_w, out_m, out_l


def generate_one(index: int, seed: int = 1) -> CorpusDoc:
    rng = random.Random(seed * 1_000_003 + index + _OFFSET)
    locale, lang, curs, style, dfmts = LOCALES[rng.randrange(len(LOCALES))]
    fk = _faker(locale)
    fk.seed_instance(rng.getrandbits(32))
    kind = rng.choices(KINDS, weights=_WEIGHTS)[0]
    kw = KEYWORDS[lang]
    ex = EXTRA.get(lang, EXTRA["en"])
    money = _money(rng, style, rng.choice(curs))
    b, doc_type = _MAKERS[kind](rng, fk, lang, kw, ex, money, style, dfmts, *_page_geom(rng))
    level = 0.0 if rng.random() < 0.25 else rng.uniform(0.2, 1.0)
    return noisy_doc(b, rng, level, f"wide-{seed}-{index:06d}-{kind}-{locale}", doc_type, "synthetic-wide")


def noisy_doc(b: _Page, rng: random.Random, level: float, pid: str, doc_type: str, source: str) -> CorpusDoc:
    """The page built in b as a document of this source, with OCR-like noise of this level and its
    coordinates rounded to 0.01."""
    b.words, b.meta, b.line_of = ocr_noise(b.words, b.meta, b.line_of, rng, level, b.width, b.height)
    b.words = [Word(w.text, tuple(round(v, 2) for v in w.box)) for w in b.words]
    return dataclasses.replace(b.doc(pid, doc_type), source=source).validate()


def generate(count: int, seed: int = 1) -> list[CorpusDoc]:
    return [generate_one(i, seed) for i in range(count)]
