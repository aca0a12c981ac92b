"""Documents: the pages of one file (a PDF, a multi-page TIFF) taken together as one record.

A page JSON may name its document and its number in it ({"document": id, "page_number": n},
dxstudio/engine/page.py). A page that names none is a document of one page whose id is the
page's id, so a project made before documents existed is a project of one-page documents and
loads, splits, trains and scores exactly as before. A document has no file of its own: it exists
because its pages name it. Rules (docs/project.md "Documents"):

* pages are ordered by page_number; numbers need not be consecutive (a PDF page without text is
  skipped at import, so a document may hold pages 1 and 3), but two pages of one document with
  the same number are an error naming both pages, and the document is left out (DocumentProblem);
* a document id that is also the id of a page that is not part of it (page "inv" on its own,
  pages "inv-p1", "inv-p2" naming document "inv") is an error: the one-page document "inv" and
  the document "inv" would be one id for two records; both are left out;
* a document has at most MAX_PAGES_PER_DOCUMENT pages (a larger PDF is refused at import);
* pages of one document may differ in size (an A3 fold-out in a Letter contract): each page
  keeps its own width, height and boxes, and the model reads each page on its own.

`bind_document` is what an importer calls to make the pages of one file one document.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from dxstudio.engine.page import MAX_PAGES_PER_DOCUMENT, Page
from dxstudio.project import is_safe_page_id


class DocumentError(ValueError):
    """A document that cannot be used; str() names the document, its pages and the problem."""


@dataclass(frozen=True)
class Document:
    id: str
    pages: tuple  # page ids in page order
    numbers: tuple  # their page numbers (1-based), ascending

    def __len__(self) -> int:
        return len(self.pages)

    def number_of(self, page_id: str) -> int:
        return self.numbers[self.pages.index(page_id)]

    def to_dict(self) -> dict:
        return {"id": self.id, "pages": list(self.pages), "page_numbers": list(self.numbers)}


@dataclass
class Documents:
    """The documents of a set of pages: `documents` sorted by id, `problems` [(document id,
    message)] of the documents left out, `of_page` {page id: document id} of the pages kept."""
    documents: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    of_page: dict = field(default_factory=dict)

    def get(self, document_id: str) -> Document | None:
        for d in self.documents:
            if d.id == document_id:
                return d
        return None

    @property
    def multi_page(self) -> list:
        return [d for d in self.documents if len(d) > 1]


def check_page_count(n: int, source: str) -> int:
    """n when a document may have n pages; DocumentError naming `source` and the bound otherwise."""
    if n > MAX_PAGES_PER_DOCUMENT:
        raise DocumentError(f"{source}: {n} pages, more than the {MAX_PAGES_PER_DOCUMENT} one document may have "
                            f"(MAX_PAGES_PER_DOCUMENT); split the file into its documents first")
    return n


def bind_document(document_id: str, numbered_pages, file_pages: int, source: str = "<document>") -> list[Page]:
    """The pages of one file as one document: [(page number, Page)] -> pages carrying
    `document` and `page_number`. A file of one page gives its page unchanged (a document of one
    page is the page itself), so re-importing it gives the same page JSON as before documents.
    file_pages: the pages the file has (some may have been skipped, e.g. no text);
    DocumentError when it is over MAX_PAGES_PER_DOCUMENT or two pages share a number."""
    check_page_count(file_pages, source)
    items = list(numbered_pages)
    if file_pages == 1:
        return [p for _, p in items]
    if not is_safe_page_id(document_id):
        raise DocumentError(f"{source}: {document_id!r} is not a valid document id")
    seen = {}
    out = []
    for number, page in items:
        if number in seen:
            raise DocumentError(f"{source}: pages {seen[number]} and {page.id} both have page number {number}")
        seen[number] = page.id
        out.append(replace(page, document=document_id, page_number=int(number)))
    return out


def group_documents(pages) -> Documents:
    """The documents of `pages` (Page objects, any order), with the problems of those left out."""
    by_doc: dict = {}
    own_ids = set()
    for p in pages:
        by_doc.setdefault(p.document_id, []).append(p)
        if p.document is None:
            own_ids.add(p.id)
    out = Documents()
    for doc_id in sorted(by_doc):
        members = by_doc[doc_id]
        named = [p for p in members if p.document is not None]
        if named and len(named) != len(members):
            alone = [p.id for p in members if p.document is None]
            out.problems.append((doc_id, f"document {doc_id!r}: its id is also the id of page {alone[0]}, which "
                                         f"is not part of it (pages {', '.join(p.id for p in named)} name it); "
                                         f"give the document or the page another id"))
            continue
        members.sort(key=lambda p: (p.number, p.id))
        dup = [(a, b) for a, b in zip(members, members[1:]) if a.number == b.number]
        if dup:
            a, b = dup[0]
            out.problems.append((doc_id, f"document {doc_id!r}: pages {a.id} and {b.id} both have page number "
                                         f"{a.number}; renumber one of them"))
            continue
        if len(members) > MAX_PAGES_PER_DOCUMENT:
            out.problems.append((doc_id, f"document {doc_id!r}: {len(members)} pages, more than the "
                                         f"{MAX_PAGES_PER_DOCUMENT} allowed (MAX_PAGES_PER_DOCUMENT)"))
            continue
        doc = Document(doc_id, tuple(p.id for p in members), tuple(p.number for p in members))
        out.documents.append(doc)
        for p in members:
            out.of_page[p.id] = doc_id
    return out


def page_marker(number: int, total: int) -> str:
    """The line that opens a page's text in a document's prompt."""
    return f"=== Page {number} of {total} ==="
