"""`dxstudio route MODEL PAGES... --project PROJECT`: LocalFirst routing.

Every field value at or above its field's own stored threshold (--threshold: one threshold for
every field instead) is answered locally; a field with no threshold of its own is always asked
(the pooled threshold is never used for it); a page with any other field (below the
threshold, no threshold, or no value) is sent to the project's labelling model with the same client, cache
and retries as `dxstudio label`, at most --concurrency pages at a time, and its asked fields
take that model's answers (the routing itself: dxstudio/routing.py, Router; this module is its
command line). Extraction runs in this process, on --workers local processes or
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

from concurrent.futures import ThreadPoolExecutor

from dxstudio.cli.common import FAILED, OK, PARTIAL, emit_json, fail, progress, warn
from dxstudio.cli.model import add_scale_arguments, engine_ready, open_backend, why_text
from dxstudio.labelling import STOP_AFTER_FAILURES, LabelClient, LabellingError
from dxstudio.project import Project, ProjectError
from dxstudio.scale import ScaleError
from dxstudio.scale.ordered import ordered_map
from dxstudio.scale.pages import DocumentGroups, chunks, count_pages, extract_chunk, load_item, page_items
from dxstudio.tuning.settings import DEFAULT_KERNELS, KERNEL_CHOICES


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


def run(name, args) -> int:
    # the engine (Numba) when the command runs, not when the command line is parsed
    from dxstudio.engine.container import ModelFileError, load_model
    from dxstudio.engine.extract import document_json, model_decoding, reading_keywords
    from dxstudio.engine.model import to_runtime
    from dxstudio.routing import Router

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

    total = count_pages(args.pages)
    shared = (model.cfg, to_runtime(model.params), None, reading_keywords(model.keywords, model.cfg.fields))
    backend, close = open_backend(args, extract_chunk, shared, engine_ready(args.kernels, total))
    done = bad = 0
    groups = DocumentGroups()

    def emit(lines, bar):
        for out in lines:
            if "error" in out:
                warn(out["error"])
            emit_json(out)
            bar.show(done - router.waiting)

    def submit(finished):
        """Route each finished document (a page of its own: as before): its fields below the
        threshold are asked of the labelling model once, with all the document's pages."""
        for doc, items in finished:
            if doc is None:
                record, (label, raw) = items[0]
                router.submit(record, [load_item(label, raw)])
            else:
                router.submit(document_json(doc, [r for r, _ in items]),
                              [load_item(label, raw) for _, (label, raw) in items], document=True)
        for problem in groups.problems:
            warn(problem)
        groups.problems.clear()

    try:
        with progress(total or 0, "route", show=total is None or total > 1) as bar, backend, \
                ThreadPoolExecutor(args.concurrency) as pool:
            router = Router(client, ask_schema, thresholds, pool, STOP_AFTER_FAILURES)
            for chunk, results in ordered_map(backend, chunks(page_items(args.pages), args.chunk), with_chunks=True):
                for (label, raw, _), (kind, record) in zip(chunk, results):
                    done += 1
                    if kind != "ok":
                        warn(record)
                        bad += 1
                        continue
                    submit(groups.add(record, (label, raw)))  # after a trip: NotAsked at once
                    emit(router.ready(keep=2 * args.concurrency), bar)
            submit(groups.close())
            emit(router.ready(wait=True), bar)
    except ScaleError as e:
        fail(e)
    finally:
        close()
    if done == 0:
        fail("no pages given")
    counts = router.summary(pages=done, bad=bad)
    not_asked = counts["not_asked"]
    if not_asked:
        warn(f"{counts['stopped']}; {len(not_asked)} pages were not asked: {', '.join(not_asked[:20])}"
             f"{' ...' if len(not_asked) > 20 else ''}")
    emit_json({"summary": counts})
    why_counts = counts["fields"]
    warn(f"{counts['values_local']} values answered locally, {counts['values_asked']} asked; "
         f"{counts['pages_local']} pages wholly local, {counts['pages_asked']} asked "
         f"({counts['cache_hits']} from the cache, {counts['requests']} requests); "
         f"{bad + counts['pages_failed']} failed" + (f"; per field: {why_text(why_counts)}" if why_counts else ""))
    failed = bad + counts["pages_failed"]
    if failed == done:
        return FAILED
    return PARTIAL if failed else OK
