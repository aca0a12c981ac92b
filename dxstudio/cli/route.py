"""`dxstudio route MODEL PAGES... --project PROJECT`: LocalFirst routing.

Every field value at or above its field's own stored threshold (--threshold: one threshold for
every field instead) is answered locally; a field with no threshold of its own is always asked
(the pooled threshold is never used for it); a page with any other field (below the
threshold, no threshold, or no value) is sent to the project's labelling model with the same client, cache
and retries as `dxstudio label`, at most --concurrency pages at a time, and its asked fields
take that model's answers. Extraction runs in this process, on --workers local processes or
on a Ray cluster (--ray), as `dxstudio extract` does.

Standard output: one JSON line per page, in input order,
    {"id", "fields": {name: {"value", "source": "local" | "labelling model", "confidence"}}}
or, for the pages of a multi-page document (consecutive in the input; a PDF's pages), one line
per document {"id": document, "pages": [...], "fields": {name: {..., "page"}}} whose fields are
the document's (the most confident page's value): only the fields not local are asked, once,
with all the document's pages (LabelClient.ask_document); "pages_asked" counts documents then.
An asked field also has "grounding" ("exact", "normalized", "computed", "absent", "null": the
labelling model's answer grounded on the page, or on the document's pages, as `label` grounds
it); an "absent" answer is not printed there and is no answer: "value" is null and the model's
text is in "model_value". Every asked field has "why": "below threshold", "no threshold" or
"no value". A page whose asked fields could not be answered also has "error" and
those fields have "source": null. After STOP_AFTER_FAILURES (3) pages or documents fail in a
row the endpoint is not asked again (as `label` stops): those left are not asked, listed in
the summary's "not_asked". Then one line {"summary": {...}}: values and pages answered
locally, values and pages asked, labelling requests made (retries included), answers taken
from the cache, and per field ("fields") how many values were local and how many asked for
each reason.
"""
from __future__ import annotations

from collections import deque

from dxstudio.cli.common import FAILED, OK, PARTIAL, emit_json, fail, progress, warn
from dxstudio.cli.model import add_scale_arguments, open_backend, why_text
from dxstudio.tuning.settings import DEFAULT_KERNELS, KERNEL_CHOICES

LABELLING = "labelling model"


def configure(name, p):
    p.add_argument("model", help="model file (.safetensors), ideally with stored thresholds (a tuned model)")
    p.add_argument("pages", nargs="+", help="page JSON files, folders of them, JSON-lines files "
                   "(.jsonl, one page a line), or - for JSON lines on standard input")
    p.add_argument("--project", required=True, help="project folder: its labelling endpoint, schema and cache")
    p.add_argument("--threshold", type=float, metavar="T",
                   help="route at this confidence for every field instead of the model's stored thresholds")
    p.add_argument("--concurrency", type=int, default=4, metavar="N",
                   help="labelling requests in flight at once (default 4)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer (default 60)")
    p.add_argument("--retries", type=int, default=3, help="tries after the first on timeouts, 429, 5xx (default 3)")
    p.add_argument("--kernels", choices=KERNEL_CHOICES, default=DEFAULT_KERNELS, help="(default fast)")
    add_scale_arguments(p)


def ask_reason(field: str, value: dict, thresholds) -> str | None:
    """The rule of the engine's extract.route_reason, on an output record's field: None when
    local, else why it is asked."""
    from dxstudio.engine.extract import route_reason

    return route_reason(field, None if value["value"] is None else value["confidence"], thresholds)


def is_local(field: str, value: dict, thresholds) -> bool:
    """The rule of the engine's extract.route, on an output record's field."""
    return ask_reason(field, value, thresholds) is None


GROUNDED = ("exact", "normalized", "computed")  # an answer found on the page (as label grounds it)


def grounded_field(answer, status: str, confidence) -> dict:
    """An asked field's output: the labelling model's answer where it is on the page (or
    computed from printed numbers), grounded as `label` grounds it; an answer that is not on
    the page ("absent") is no answer: value null, the model's text kept apart as "model_value"."""
    out = {"value": answer if status in GROUNDED else None, "source": LABELLING, "grounding": status,
           "confidence": confidence}
    if status == "absent":
        out["model_value"] = answer
    return out


class NotAsked(Exception):
    """A page the circuit breaker kept from the endpoint; str() says why."""


class Breaker:
    """Stops asking after `limit` pages fail in a row (in the order they fail), as label does;
    thread-safe (the asks run on --concurrency threads)."""

    def __init__(self, limit: int):
        import threading

        self.limit, self.in_row, self.tripped = limit, 0, None
        self._lock = threading.Lock()

    def failed(self, e) -> None:
        with self._lock:
            self.in_row += 1
            if self.in_row >= self.limit and self.tripped is None:
                self.tripped = f"stopped asking the labelling model after {self.in_row} pages failed in a row ({e})"

    def succeeded(self) -> None:
        with self._lock:
            self.in_row = 0


def run(name, args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from dxstudio.engine.container import ModelFileError, load_model
    from dxstudio.engine.extract import model_decoding
    from dxstudio.engine.model import to_runtime
    from dxstudio.grounding import ground_answers, ground_document
    from dxstudio.labelling import STOP_AFTER_FAILURES, LabelClient, LabellingError
    from dxstudio.project import Project, ProjectError
    from dxstudio.scale import ScaleError
    from dxstudio.scale.ordered import ordered_map
    from dxstudio.engine.extract import document_json
    from dxstudio.scale.pages import DocumentGroups, chunks, count_pages, extract_chunk, load_item, page_items

    if args.concurrency < 1:
        fail(f"--concurrency must be at least 1, not {args.concurrency}")
    if args.threshold is not None and not 0.0 <= args.threshold <= 1.0:
        fail(f"--threshold must be in [0, 1], not {args.threshold}")
    try:
        project = Project.open(args.project)
    except (ProjectError, OSError) as e:
        fail(e)
    try:
        model = load_model(args.model)
    except ModelFileError as e:
        fail(e)
    schema = {f.name: f for f in project.schema}
    missing = [f for f in model.cfg.fields if f not in schema]
    if missing:
        fail(f"{args.model}: the fields {missing} are not in the schema of {project.project_file}; "
             f"the labelling model could not be asked for them")
    ask_schema = [schema[f] for f in model.cfg.fields]
    # --threshold keeps the model's own reading of the tags (engine/extract.py model_decoding)
    thresholds = ({"pooled": args.threshold, "fields": {f: args.threshold for f in model.cfg.fields},
                   "decoding": model_decoding(model.thresholds)}
                  if args.threshold is not None else model.thresholds)
    if not thresholds:
        warn(f"{args.model} stores no LocalFirst threshold (tune it, or give --threshold): every page is asked")
    try:
        client = LabelClient.from_project(project, timeout=args.timeout, retries=args.retries)
    except LabellingError as e:
        fail(e)

    counts = {"values_local": 0, "values_asked": 0, "pages_local": 0, "pages_asked": 0,
              "pages_failed": 0, "cache_hits": 0, "values_not_on_page": 0}
    not_asked = []  # ids of pages the circuit breaker kept from the endpoint
    breaker = Breaker(STOP_AFTER_FAILURES)

    def ask(page):
        if breaker.tripped:
            raise NotAsked(breaker.tripped)
        hit = client.cached(page, ask_schema) is not None
        try:
            answers = client.ask(page, ask_schema)
        except LabellingError as e:
            breaker.failed(e)
            raise
        breaker.succeeded()
        return hit, answers, ground_answers(page, answers, [f.name for f in ask_schema])

    def ask_document(pages):  # the document's pages, asked once (labelling.LabelClient.ask_document)
        if breaker.tripped:
            raise NotAsked(breaker.tripped)
        hit = client.cached_document(pages, ask_schema) is not None
        try:
            answers = client.ask_document(pages, ask_schema)
        except LabellingError as e:
            breaker.failed(e)
            raise
        breaker.succeeded()
        names = [f.name for f in ask_schema]
        reports = ground_document(pages, answers, names)
        # a field's grounding in the document: where it is printed (other_page elsewhere)
        grounding = {}
        for n in names:
            statuses = [r[n]["status"] for r in reports.values()]
            best = next((s for s in GROUNDED if s in statuses), statuses[0] if statuses else "null")
            grounding[n] = {"status": "absent" if best == "other_page" else best}
        return hit, answers, grounding

    why_counts: dict = {}  # field -> {"local" or the reason asked: count}

    def finish(record, asked, future):
        fields = {}
        error = None
        answers = grounding = None
        if future is not None:
            try:
                hit, answers, grounding = future.result()
                counts["cache_hits"] += hit
            except NotAsked as e:
                error = f"{record['id']}: not asked: {e}"
                not_asked.append(record["id"])
            except LabellingError as e:
                error = str(e)
        for f, v in record["fields"].items():
            tally = why_counts.setdefault(f, {})
            key = asked.get(f) or "local"
            tally[key] = tally.get(key, 0) + 1
            if f not in asked:
                fields[f] = {"value": v["value"], "source": "local", "confidence": v["confidence"]}
            elif answers is not None:
                fields[f] = grounded_field(answers.get(f), grounding[f]["status"], v["confidence"])
                fields[f]["why"] = asked[f]
                counts["values_not_on_page"] += fields[f]["grounding"] == "absent"
            else:
                fields[f] = {"value": None, "source": None, "confidence": v["confidence"], "why": asked[f]}
            if "pages" in record:  # a document's line: the page of a local value
                fields[f]["page"] = v["page"] if f not in asked else None
        out = {"id": record["id"], "fields": fields}
        if "pages" in record:
            out = {"id": record["id"], "pages": record["pages"], "fields": fields}
        if error:
            out["error"] = error
            warn(error)
            counts["pages_failed"] += 1
        emit_json(out)

    total = count_pages(args.pages)
    shared = (model.cfg, to_runtime(model.params), None)
    from dxstudio.cli.model import engine_ready
    backend, close = open_backend(args, extract_chunk, shared, engine_ready(args.kernels, total))
    done = bad = 0
    pending = deque()  # (record, asked fields, future or None), in input order
    groups = DocumentGroups()

    def queue(finished):
        """Route each finished document (a page of its own: as before): its fields below the
        threshold are asked of the labelling model once, with all the document's pages."""
        for doc, items in finished:
            if doc is None:
                record, (label, raw) = items[0]
                load = (ask, load_item(label, raw))
            else:
                record = document_json(doc, [r for r, _ in items])
                load = (ask_document, [load_item(label, raw) for _, (label, raw) in items])
            asked = {f: why for f, v in record["fields"].items()
                     if (why := ask_reason(f, v, thresholds)) is not None}
            counts["values_local"] += len(record["fields"]) - len(asked)
            counts["values_asked"] += len(asked)
            future = None
            if asked:
                counts["pages_asked"] += 1
                future = pool.submit(*load)
            else:
                counts["pages_local"] += 1
            pending.append((record, asked, future))
        for problem in groups.problems:
            warn(problem)
        groups.problems.clear()

    try:
        with progress(total or 0, "route", show=total is None or total > 1) as bar, backend, \
                ThreadPoolExecutor(args.concurrency) as pool:
            for chunk, results in ordered_map(backend, chunks(page_items(args.pages), args.chunk), with_chunks=True):
                for (label, raw, _), (kind, record) in zip(chunk, results):
                    done += 1
                    if kind != "ok":
                        warn(record)
                        bad += 1
                        continue
                    queue(groups.add(record, (label, raw)))  # after a trip: NotAsked at once
                    while len(pending) > 2 * args.concurrency or (pending and (
                            pending[0][2] is None or pending[0][2].done())):
                        finish(*pending.popleft())
                        bar.show(done - len(pending))
            queue(groups.close())
            while pending:
                finish(*pending.popleft())
                bar.show(done - len(pending))
    except ScaleError as e:
        fail(e)
    finally:
        close()
    if done == 0:
        fail("no pages given")
    counts["requests"] = client.requests
    counts["pages"] = done
    counts["pages_bad"] = bad
    counts["pages_not_asked"] = len(not_asked)
    counts["not_asked"] = not_asked
    if not_asked:
        counts["stopped"] = breaker.tripped
        warn(f"{breaker.tripped}; {len(not_asked)} pages were not asked: {', '.join(not_asked[:20])}"
             f"{' ...' if len(not_asked) > 20 else ''}")
    counts["fields"] = why_counts
    emit_json({"summary": counts})
    warn(f"{counts['values_local']} values answered locally, {counts['values_asked']} asked; "
         f"{counts['pages_local']} pages wholly local, {counts['pages_asked']} asked "
         f"({counts['cache_hits']} from the cache, {counts['requests']} requests); "
         f"{bad + counts['pages_failed']} failed" + (f"; per field: {why_text(why_counts)}" if why_counts else ""))
    failed = bad + counts["pages_failed"]
    if failed == done:
        return FAILED
    return PARTIAL if failed else OK
