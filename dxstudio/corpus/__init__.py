"""Pretraining corpora, free of Qt: generic field classes (generic.py), one labelled document
(document.py), converters for the permissive public sources (sources.py) and a generator of
our own receipts, invoices and forms (synthetic.py). docs/base-model.md describes the design."""
