"""The project folder, read and written by this module only.

    PROJECT/
      dxproject.json     {"name", "schema": [{"name", "description", "weight"}],
                          "labelling": {"url", "model", "api_key_env"}, "settings": {...},
                          "model": optional path}
      pages/<id>.json    one page each (dxstudio.engine.page)
      labels/<id>.json   the labelling model's answers, the grounding report, the review
      runs/<run>/        training runs (written by the tuner)
      .cache/            labelling answers cached by page and schema hash

Every write is atomic (dxstudio.fsutil). Every file is validated when it is read, and a
problem raises ProjectError, PageError or LabelError whose message names the file and
what is wrong; one bad page or label file never stops the rest of the project from
loading. Unknown keys in dxproject.json and in label files are kept on save, so a newer
version's settings survive an older version's save. See docs/project.md.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

from dxstudio.engine.page import PAGE_ID, PAGE_ID_RULE, Page, PageError, is_page_id, load_page as _load_page_file, page_from_dict
from dxstudio.fsutil import parse_json, read_file_bytes, read_json, remove_orphan_tmp, write_json_atomic

PROJECT_FILE = "dxproject.json"
DEFAULT_WEIGHT = 3.0
DEFAULT_API_KEY_ENV = "DXSTUDIO_LABEL_API_KEY"

# A page id is its file name: the one rule of dxstudio.engine.page (PAGE_ID), for every command.
_SAFE_ID = PAGE_ID
# A field name ends up in tag names (B-name) and in JSON keys asked of the labelling model.
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

# other_page: the value of the page's document is printed on another of its pages ("page" names it)
GROUNDING_STATUSES = ("exact", "normalized", "computed", "absent", "null", "other_page")
REVIEW_STATES = ("unreviewed", "accepted", "excluded")


class ProjectError(ValueError):
    """A project folder or dxproject.json that cannot be used; str() names the file."""


class LabelError(ValueError):
    """A label file that cannot be used; str() names the file and the problem."""


def is_safe_page_id(page_id) -> bool:
    return is_page_id(page_id)


def safe_page_id(text: str) -> str:
    """Turn any name (a file stem, a document title) into a valid page id."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._-")
    s = re.sub(r"\.{2,}", ".", s)[:120]
    return s or "page"


def check_page_id(page_id, source: str = "page id") -> str:
    if not is_safe_page_id(page_id):
        shown = repr(page_id[:60]) + ("..." if len(page_id) > 60 else "") if isinstance(page_id, str) else repr(page_id)
        raise ProjectError(f"{source}: {shown} is not a valid page id ({PAGE_ID_RULE})")
    return page_id


@dataclass(frozen=True)
class Field:
    name: str
    description: str = ""
    weight: float = DEFAULT_WEIGHT

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "weight": self.weight}


def field_from(obj, source: str = "schema") -> Field:
    """A Field from a Field, a bare name or a {"name", "description", "weight"} dict."""
    if isinstance(obj, Field):
        f = obj
    elif isinstance(obj, str):
        f = Field(obj)
    elif isinstance(obj, dict):
        unknown = set(obj) - {"name", "description", "weight"}
        if unknown:
            raise ProjectError(f"{source}: field {obj.get('name')!r} has unknown keys {sorted(unknown)}")
        name = obj.get("name")
        desc = obj.get("description", "")
        weight = obj.get("weight", DEFAULT_WEIGHT)
        if not isinstance(desc, str):
            raise ProjectError(f"{source}: field {name!r}: 'description' must be text")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or weight != weight \
                or weight == float("inf"):
            raise ProjectError(f"{source}: field {name!r}: 'weight' must be a positive number, not {weight!r}")
        f = Field(name, desc, float(weight))
    else:
        raise ProjectError(f"{source}: a schema field must be an object with a name, not {obj!r}")
    if not isinstance(f.name, str) or not _FIELD_NAME.fullmatch(f.name):
        raise ProjectError(f"{source}: field name {f.name!r} must start with a letter or '_' and hold only "
                           f"letters, digits and '_' (at most 64)")
    return f


def parse_schema(items, source: str = "schema") -> list[Field]:
    if not isinstance(items, list):
        raise ProjectError(f"{source}: 'schema' must be a list of fields")
    fields = [field_from(x, source) for x in items]
    seen = set()
    for f in fields:
        if f.name in seen:
            raise ProjectError(f"{source}: field {f.name!r} appears twice in the schema")
        seen.add(f.name)
    return fields


# ---------------------------------------------------------------------------------------
# Label files

def _empty_review() -> dict:
    return {"state": "unreviewed", "fixes": {}, "history": []}


@dataclass
class LabelFile:
    """labels/<id>.json. `answers` is None until the page has been labelled.

    grounding: {field: {"status", "words": [word indices], "reason"}}
    review:    {"state": "unreviewed"|"accepted"|"excluded", "fixes": {field: [word indices]},
                "history": [...], optional "reason" (why the page was excluded)}
    `extra` keeps keys this version does not know, so a save does not drop them.
    """
    page: str
    answers: dict | None = None
    answer_source: str | None = None
    grounding: dict = field(default_factory=dict)
    review: dict = field(default_factory=_empty_review)
    extra: dict = field(default_factory=dict)

    @property
    def labelled(self) -> bool:
        return self.answers is not None

    @property
    def fixes(self) -> dict:
        return self.review.get("fixes", {})

    @property
    def state(self) -> str:
        return self.review.get("state", "unreviewed")

    def to_dict(self) -> dict:
        d = {"page": self.page}
        if self.answers is not None:
            d["answers"] = dict(self.answers)
            if self.answer_source is not None:
                d["answer_source"] = self.answer_source
        d["grounding"] = copy.deepcopy(self.grounding)
        d["review"] = copy.deepcopy(self.review)
        for k, v in self.extra.items():
            d.setdefault(k, copy.deepcopy(v))
        return d


def _word_index_list(v, what: str, source: str) -> list[int]:
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in v):
        raise LabelError(f"{source}: {what} must be a list of word indices (integers >= 0), not {v!r}")
    if len(set(v)) != len(v):
        raise LabelError(f"{source}: {what} lists a word twice ({v!r})")
    return list(v)


def label_from_dict(d, source: str = "<labels>", page_id: str | None = None) -> LabelFile:
    """Validate a parsed label file. Field names are not checked against the schema here:
    a field removed from the schema keeps its saved answers, and grounding ignores it."""
    if not isinstance(d, dict):
        raise LabelError(f"{source}: a label file must be a JSON object")
    pid = d.get("page")
    if not isinstance(pid, str):
        raise LabelError(f"{source}: missing 'page' (the page id)")
    if page_id is not None and pid != page_id:
        raise LabelError(f"{source}: 'page' is {pid!r} but the file belongs to page {page_id!r}")
    answers = d.get("answers")
    if answers is not None:
        if not isinstance(answers, dict):
            raise LabelError(f"{source}: 'answers' must be an object {{field: text or null}}")
        for k, v in answers.items():
            if v is not None and not isinstance(v, str):
                raise LabelError(f"{source}: answer for {k!r} must be text or null, not {v!r}")
    src = d.get("answer_source")
    if src is not None and not isinstance(src, str):
        raise LabelError(f"{source}: 'answer_source' must be text")
    grounding = d.get("grounding", {})
    if not isinstance(grounding, dict):
        raise LabelError(f"{source}: 'grounding' must be an object {{field: report}}")
    for k, g in grounding.items():
        if not isinstance(g, dict):
            raise LabelError(f"{source}: grounding of {k!r} must be an object")
        if g.get("status") not in GROUNDING_STATUSES:
            raise LabelError(f"{source}: grounding of {k!r} has status {g.get('status')!r}; "
                             f"expected one of {', '.join(GROUNDING_STATUSES)}")
        _word_index_list(g.get("words", []), f"grounding of {k!r}: 'words'", source)
        if not isinstance(g.get("reason", ""), str):
            raise LabelError(f"{source}: grounding of {k!r}: 'reason' must be text")
    review = d.get("review", _empty_review())
    if not isinstance(review, dict):
        raise LabelError(f"{source}: 'review' must be an object")
    review = dict(review)
    state = review.setdefault("state", "unreviewed")
    if state not in REVIEW_STATES:
        raise LabelError(f"{source}: review state {state!r}; expected one of {', '.join(REVIEW_STATES)}")
    fixes = review.setdefault("fixes", {})
    if not isinstance(fixes, dict):
        raise LabelError(f"{source}: review 'fixes' must be an object {{field: [word indices]}}")
    for k, v in fixes.items():
        _word_index_list(v, f"fix of {k!r}", source)
    if not isinstance(review.setdefault("history", []), list):
        raise LabelError(f"{source}: review 'history' must be a list")
    if not isinstance(review.get("reason", ""), str):
        raise LabelError(f"{source}: review 'reason' must be text")
    known = {"page", "answers", "answer_source", "grounding", "review"}
    extra = {k: v for k, v in d.items() if k not in known}
    return LabelFile(pid, None if answers is None else dict(answers), src, dict(grounding), review, extra)


def load_label_file(path, page_id: str | None = None) -> LabelFile:
    return label_from_dict(read_json(path, LabelError), str(path), page_id)


# ---------------------------------------------------------------------------------------
# The project

def _read_project_json(path: Path) -> dict:
    if not path.exists():
        raise ProjectError(f"{path}: not found (is {path.parent} a dxstudio project folder?)")
    d = read_json(path, ProjectError)
    if not isinstance(d, dict):
        raise ProjectError(f"{path}: must be a JSON object")
    return d


def _check_labelling(v, source: str) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ProjectError(f"{source}: 'labelling' must be an object {{url, model, api_key_env}}")
    for k in ("url", "model", "api_key_env"):
        if k in v and v[k] is not None and not isinstance(v[k], str):
            raise ProjectError(f"{source}: labelling '{k}' must be text")
    if "api_key" in v:
        raise ProjectError(f"{source}: do not store the API key itself; name the environment variable that "
                           f"holds it in labelling 'api_key_env'")
    return dict(v)


def copy_project(src, dst) -> Path:
    """A scratch copy of a project folder: everything but its runs and cache."""
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("runs", ".cache"))
    return Path(dst)


class ProjectLayout:
    """The names of a project folder's files and folders, for a folder that is not open (or not
    yet a project): Project is one, and nothing else spells these names.

        PROJECT/dxproject.json   pages/  pages/images/  labels/  runs/  .cache/
        .cache/app-state.json    .cache/model-answers/<model sha>.json    .cache/labels/
    """
    PAGES, LABELS, RUNS, CACHE, IMAGES = "pages", "labels", "runs", ".cache", "images"
    NOT_COPIED = (RUNS, CACHE)  # what a copy of a project (the sample) leaves out: made again

    def __init__(self, root):
        self.root = Path(root)

    @property
    def project_file(self) -> Path:
        return self.root / PROJECT_FILE

    @property
    def pages_dir(self) -> Path:
        return self.root / self.PAGES

    @property
    def images_dir(self) -> Path:
        """The page images a project holds (a page's "image" is relative to pages_dir)."""
        return self.pages_dir / self.IMAGES

    @property
    def labels_dir(self) -> Path:
        return self.root / self.LABELS

    @property
    def runs_dir(self) -> Path:
        return self.root / self.RUNS

    @property
    def labels_cache_dir(self) -> Path:
        """The labelling client's cache of answers (dxstudio/labelling.py)."""
        return self.cache_dir / self.LABELS

    @property
    def cache_dir(self) -> Path:
        return self.root / self.CACHE

    @property
    def app_state_file(self) -> Path:
        """The app's state of this project (the page shown last)."""
        return self.cache_dir / "app-state.json"

    def answers_cache_file(self, model_sha: str) -> Path:
        """The app's cache of a model's answers on the pages (ui/model_answers.py), by its SHA-256."""
        return self.cache_dir / "model-answers" / f"{model_sha}.json"

    @property
    def reviewed_export(self) -> Path:
        """Where the app offers to export the reviewed labels first."""
        return self.root / "reviewed.jsonl"

    @property
    def extracted_export(self) -> Path:
        """Where the app offers to save the Extract tab's results first."""
        return self.root / "extracted.jsonl"


class Project(ProjectLayout):
    def __init__(self, root: Path, data: dict, schema: list[Field]):
        self.root = Path(root)
        self._data = data  # the whole dxproject.json, unknown keys included
        self.schema = schema

    # -- opening and creating ------------------------------------------------------------
    @classmethod
    def create(cls, path, name: str | None = None, schema=()) -> "Project":
        root = Path(path)
        pf = root / PROJECT_FILE
        if pf.exists():
            raise ProjectError(f"{pf}: a project already exists here")
        if root.exists() and not root.is_dir():
            raise ProjectError(f"{root}: exists and is not a folder")
        name = name if name is not None else root.resolve().name
        if not isinstance(name, str) or not name.strip():
            raise ProjectError(f"{pf}: the project needs a name")
        fields = parse_schema(list(schema), str(pf))
        data = {"name": name, "schema": [], "labelling": {"url": None, "model": None,
                                                            "api_key_env": DEFAULT_API_KEY_ENV},
                "settings": {}}
        project = cls(root, data, fields)
        for folder in (project.pages_dir, project.labels_dir, project.runs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        project.save()
        return project

    @classmethod
    def open(cls, path) -> "Project":
        root = Path(path)
        pf = root / PROJECT_FILE
        if not root.is_dir():
            raise ProjectError(f"{root}: no such project folder")
        d = _read_project_json(pf)
        src = str(pf)
        name = d.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ProjectError(f"{src}: missing or empty 'name'")
        schema = parse_schema(d.get("schema", []), src)
        d["labelling"] = _check_labelling(d.get("labelling"), src)
        settings = d.setdefault("settings", {})
        if not isinstance(settings, dict):
            raise ProjectError(f"{src}: 'settings' must be an object")
        model = d.get("model")
        if model is not None and not isinstance(model, str):
            raise ProjectError(f"{src}: 'model' must be a file path")
        project = cls(root, d, schema)
        project.remove_orphan_tmp()
        return project

    def remove_orphan_tmp(self) -> list[Path]:
        """Remove the temp files that writers killed mid-save left in pages/, labels/ and the
        label cache (fsutil.remove_orphan_tmp: only those whose writer is gone)."""
        removed = []
        for folder in (self.pages_dir, self.labels_dir, self.labels_cache_dir):
            removed += remove_orphan_tmp(folder)
        return removed

    @classmethod
    def open_or_create(cls, path, name: str | None = None) -> "Project":
        if (Path(path) / PROJECT_FILE).exists():
            return cls.open(path)
        return cls.create(path, name)

    def save(self) -> None:
        d = dict(self._data)
        d["schema"] = [f.to_dict() for f in self.schema]
        write_json_atomic(self.project_file, d)

    # -- properties ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._data["name"]

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ProjectError(f"{self.project_file}: the project needs a name")
        self._data["name"] = value

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.schema]

    def field(self, name: str) -> Field:
        for f in self.schema:
            if f.name == name:
                return f
        raise KeyError(name)

    def set_schema(self, fields) -> None:
        self.schema = parse_schema(list(fields), str(self.project_file))

    def add_fields(self, fields) -> list[str]:
        """Append the fields the schema lacks (by name); returns the names added. Not saved."""
        have = set(self.field_names)
        new = [field_from(f, str(self.project_file)) for f in fields]
        new = [f for f in new if f.name not in have]
        self.schema = parse_schema(self.schema + new, str(self.project_file))
        return [f.name for f in new]

    # -- renamed fields: the model head mapping -----------------------------------------------
    @property
    def field_renames(self) -> dict:
        """{a model's field name: the schema's name now} for fields renamed in the schema
        (dxproject.json "field_renames"): a model trained before a rename still reads the field."""
        m = self._data.get("field_renames")
        return dict(m) if isinstance(m, dict) else {}

    @field_renames.setter
    def field_renames(self, mapping: dict) -> None:
        m = {str(k): str(v) for k, v in (mapping or {}).items() if k != v}
        if m:
            self._data["field_renames"] = m
        else:
            self._data.pop("field_renames", None)

    def record_renames(self, renames: dict) -> None:
        """Note renames {old: new} (applied together) in field_renames, chains folded."""
        m = {k: renames.get(v, v) for k, v in self.field_renames.items()}
        for old, new in renames.items():
            if old not in m:
                m[old] = new
        self.field_renames = m

    def model_field_names(self, model_fields) -> list[str]:
        """A model's field names as the schema calls them now: the model's own names when they
        are the schema's, else with the renames applied (a model from before a rename)."""
        model_fields = list(model_fields)
        if model_fields == self.field_names:
            return model_fields
        m = self.field_renames
        return [m.get(f, f) for f in model_fields]

    def rename_fields_in_labels(self, renames: dict) -> tuple[int, list]:
        """Rename fields {old: new} (together, so a swap works) in every label file: the
        labelling model's answers, their grounding and a person's fixes move to the new name.
        Each file is written atomically. Returns (files changed, [(file, problem)] of label files
        that could not be read or written: they are named and the rest go on)."""
        if not renames:
            return 0, []
        changed, problems = 0, []

        def moved(d):
            if not isinstance(d, dict):
                return d
            kept = {k: v for k, v in d.items() if k not in renames and k not in renames.values()}
            out = dict(kept)
            for k, v in d.items():
                if k in renames:
                    out[renames[k]] = v
            # a value left under a new name by a field deleted earlier gives way to the renamed field
            for k, v in d.items():
                if k in renames.values() and k not in out:
                    out[k] = v
            return out

        for pid in self.page_ids():
            path = self.label_path(pid)
            if not path.is_file():
                continue
            try:
                labels = self.load_labels(pid)
            except (LabelError, OSError) as e:
                problems.append((str(path), str(e)))
                continue
            touched = set(renames) & (set(labels.answers or {}) | set(labels.grounding) | set(labels.fixes))
            if not touched:
                continue
            if labels.answers is not None:
                labels.answers = moved(labels.answers)
            labels.grounding = moved(labels.grounding)
            labels.review["fixes"] = moved(labels.fixes)
            try:
                self.save_labels(pid, labels)
            except OSError as e:
                problems.append((str(path), f"not written: {e.strerror or e}"))
                continue
            changed += 1
        return changed, problems

    def field_usage(self, name: str) -> dict:
        """What the project holds for a field: {"answers": pages with the labelling model's
        answer, "values": pages with a value (answer or fix), "fixes": pages a person set it on,
        "accepted": accepted pages with it}. Unreadable label files are skipped."""
        c = {"answers": 0, "values": 0, "fixes": 0, "accepted": 0}
        for pid in self.page_ids():
            try:
                labels = self.load_labels(pid)
            except (LabelError, OSError):
                continue
            ans = (labels.answers or {}).get(name)
            has_ans = name in (labels.answers or {})
            fix = labels.fixes.get(name)
            c["answers"] += has_ans
            c["fixes"] += fix is not None
            if fix or (fix is None and ans is not None):
                c["values"] += 1
                c["accepted"] += labels.state == "accepted"
        return c

    @property
    def settings(self) -> dict:
        """Plain dict, saved as is (the tuner owns its keys)."""
        return self._data.setdefault("settings", {})

    @property
    def labelling(self) -> dict:
        return self._data.setdefault("labelling", {})

    @property
    def model(self) -> Path | None:
        m = self._data.get("model")
        if not m:
            return None
        p = Path(m)
        return p if p.is_absolute() else self.root / p

    @model.setter
    def model(self, path) -> None:
        if path is None:
            self._data.pop("model", None)
            return
        p = Path(path)
        try:
            p = p.resolve().relative_to(self.root.resolve())
        except ValueError:
            pass
        self._data["model"] = p.as_posix()

    # -- pages ---------------------------------------------------------------------------
    def page_ids(self) -> list[str]:
        """Ids of every pages/<id>.json, sorted. Files whose names are not valid ids are skipped
        (temporary files of an interrupted atomic write start with '.')."""
        if not self.pages_dir.is_dir():
            return []
        return sorted(p.stem for p in self.pages_dir.glob("*.json") if is_safe_page_id(p.stem))

    def page_path(self, page_id: str) -> Path:
        return self.pages_dir / f"{check_page_id(page_id)}.json"

    def label_path(self, page_id: str) -> Path:
        return self.labels_dir / f"{check_page_id(page_id)}.json"

    def has_page(self, page_id: str) -> bool:
        return self.page_path(page_id).is_file()

    def load_page(self, page_id: str) -> Page:
        return self.read_page(page_id)[0]

    def read_page(self, page_id: str) -> tuple[Page, bytes]:
        """The page and the bytes it was parsed from (the tuner hashes exactly what it read)."""
        path = self.page_path(page_id)
        raw = read_file_bytes(path, PageError)
        page = page_from_dict(parse_json(raw, path, PageError), str(path))
        if page.id != page_id:
            raise PageError(f"{path}: 'id' is {page.id!r} but the file name says {page_id!r}")
        return page, raw

    def add_page(self, page: Page) -> str:
        """Save a page. Returns "added", or "unchanged" when the same page is already there.
        A different page under an existing id is refused: its label file's word indices
        refer to the old words, and nothing already saved may be lost."""
        check_page_id(page.id, f"page {page.id!r}")
        path = self.page_path(page.id)
        new = page.to_dict()
        if path.exists():
            try:
                old = _load_page_file(path).to_dict()
            except PageError:
                old = None
            if old == new:
                return "unchanged"
            if old is not None:
                raise ProjectError(f"{path}: a different page with id {page.id!r} is already in the project; "
                                   f"remove it (and labels/{page.id}.json) first to replace it")
            # the saved file is unreadable: replacing it loses nothing usable
        write_json_atomic(path, new)
        return "added"

    def set_document(self, page_id: str, document: str | None, page_number: int | None) -> Page:
        """Rewrite a saved page with another document and page number, nothing else changed (its
        words, hence its label file's word indices, stay as they are). Returns the new page."""
        from dataclasses import replace

        page = self.load_page(page_id)
        new = replace(page, document=document, page_number=page_number)
        new = page_from_dict(new.to_dict(), str(self.page_path(page_id)))  # the same checks as a read
        write_json_atomic(self.page_path(page_id), new.to_dict())
        return new

    # -- documents -----------------------------------------------------------------------
    def documents(self):
        """The project's documents (dxstudio.documents.Documents): each document's pages in
        page order, documents sorted by id; a page that names no document is a document of one
        page under its own id. Pages that do not load, and documents with a problem (two pages
        with one number, an id that is another page's), are in `problems` and left out."""
        from dxstudio.documents import group_documents

        pages, errors = [], []
        for pid in self.page_ids():
            try:
                pages.append(self.load_page(pid))
            except PageError as e:
                errors.append((pid, str(e)))
        docs = group_documents(pages)
        docs.problems = errors + docs.problems
        return docs

    def document_pages(self, document_id: str) -> list:
        """The pages (Page objects) of one document in page order. A page id of a page of its
        own is a document id too. ProjectError when no document has this id, or it has a problem."""
        docs = self.documents()
        doc = docs.get(document_id)
        if doc is None:
            why = [m for d, m in docs.problems if d == document_id]
            raise ProjectError(why[0] if why else f"{self.root}: no document or page {document_id!r} in the project")
        return [self.load_page(pid) for pid in doc.pages]

    # -- labels --------------------------------------------------------------------------
    def load_labels(self, page_id: str) -> LabelFile:
        return self.read_labels(page_id)[0]

    def read_labels(self, page_id: str) -> tuple[LabelFile, bytes]:
        """The label file and the bytes it was parsed from (b"" when the page has none yet)."""
        path = self.label_path(page_id)
        if not path.exists():
            return LabelFile(page=page_id), b""
        raw = read_file_bytes(path, LabelError)
        return label_from_dict(parse_json(raw, path, LabelError), str(path), page_id), raw

    def save_labels(self, page_id: str, labels: LabelFile) -> None:
        if labels.page != page_id:
            raise LabelError(f"{self.label_path(page_id)}: label file is for page {labels.page!r}, not {page_id!r}")
        write_json_atomic(self.label_path(page_id), labels.to_dict())

    def label_files(self) -> list[Path]:
        """Every training label file (labels/<id>.json of a page in the project), sorted by id."""
        return [p for p in (self.label_path(i) for i in self.page_ids()) if p.is_file()]

    def discard_new(self, root_existed: bool) -> None:
        """Undo a create() whose first use failed (an import that added nothing): remove
        dxproject.json and the folders create() made, only where they are still empty, and the
        project folder itself only if it did not exist before. Nothing with content is removed."""
        if self.page_ids():
            return
        try:
            self.project_file.unlink()
        except FileNotFoundError:
            pass
        for sub in (self.pages_dir, self.labels_dir, self.runs_dir, self.cache_dir):
            try:
                sub.rmdir()
            except OSError:  # missing or not empty: keep
                pass
        if not root_existed:
            try:
                self.root.rmdir()
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"Project({str(self.root)!r}, name={self.name!r}, fields={self.field_names})"
