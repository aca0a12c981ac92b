"""`dxstudio route MODEL PAGES... --project PROJECT`: LocalFirst routing.

Every field value at or above the model's stored threshold (the field's own, else the pooled
one; --threshold overrides both) is answered locally; a page with any other field (below the
threshold, or no value) is sent to the project's labelling model with the same client, cache
and retries as `dxstudio label`, at most --concurrency pages at a time, and its asked fields
take that model's answers. Extraction runs in this process, on --workers local processes or
on a Ray cluster (--ray), as `dxstudio extract` does.

Standard output: one JSON line per page, in input order,
    {"id", "fields": {name: {"value", "source": "local" | "labelling model", "confidence"}}}
(a page whose asked fields could not be answered also has "error" and those fields have
"source": null), then one line {"summary": {...}}: values and pages answered locally, values
and pages asked, labelling requests made (retries included) and answers taken from the cache.
"""
from __future__ import annotations

from collections import deque

from dxstudio.cli.common import FAILED, OK, PARTIAL, emit_json, fail, progress, warn
from dxstudio.cli.model import add_scale_arguments, open_backend

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
    p.add_argument("--kernels", choices=["reference", "fast"], default="fast", help="(default fast)")
    add_scale_arguments(p)


def is_local(field: str, value: dict, thresholds) -> bool:
    """The rule of the engine's extract.route, on an output record's field."""
    from dxstudio.engine.extract import field_threshold

    t = field_threshold(field, thresholds)
    return value["value"] is not None and t is not None and value["confidence"] >= t


def run(name, args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from dxstudio.engine.container import ModelFileError, load_model
    from dxstudio.engine.extract import model_decoding
    from dxstudio.engine.model import to_runtime
    from dxstudio.labelling import LabelClient, LabellingError
    from dxstudio.project import Project, ProjectError
    from dxstudio.scale import ScaleError
    from dxstudio.scale.ordered import ordered_map
    from dxstudio.scale.pages import chunks, count_pages, extract_chunk, load_item, page_items

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
    thresholds = ({"pooled": args.threshold, "fields": {}, "decoding": model_decoding(model.thresholds)}
                  if args.threshold is not None else model.thresholds)
    if not thresholds:
        warn(f"{args.model} stores no LocalFirst threshold (tune it, or give --threshold): every page is asked")
    try:
        client = LabelClient.from_project(project, timeout=args.timeout, retries=args.retries)
    except LabellingError as e:
        fail(e)

    counts = {"values_local": 0, "values_asked": 0, "pages_local": 0, "pages_asked": 0,
              "pages_failed": 0, "cache_hits": 0}

    def ask(page):
        hit = client.cached(page, ask_schema) is not None
        return hit, client.ask(page, ask_schema)

    def finish(record, asked, future):
        fields = {}
        error = None
        answers = None
        if future is not None:
            try:
                hit, answers = future.result()
                counts["cache_hits"] += hit
            except LabellingError as e:
                error = str(e)
        for f, v in record["fields"].items():
            if f not in asked:
                fields[f] = {"value": v["value"], "source": "local", "confidence": v["confidence"]}
            elif answers is not None:
                fields[f] = {"value": answers.get(f), "source": LABELLING, "confidence": v["confidence"]}
            else:
                fields[f] = {"value": None, "source": None, "confidence": v["confidence"]}
        out = {"id": record["id"], "fields": fields}
        if error:
            out["error"] = error
            warn(error)
            counts["pages_failed"] += 1
        emit_json(out)

    total = count_pages(args.pages)
    shared = (model.cfg, to_runtime(model.params), None)
    backend, close = open_backend(args, extract_chunk, shared, args.kernels)
    done = bad = 0
    pending = deque()  # (record, asked fields, future or None), in input order
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
                    asked = [f for f, v in record["fields"].items() if not is_local(f, v, thresholds)]
                    counts["values_local"] += len(record["fields"]) - len(asked)
                    counts["values_asked"] += len(asked)
                    future = None
                    if asked:
                        counts["pages_asked"] += 1
                        future = pool.submit(ask, load_item(label, raw))
                    else:
                        counts["pages_local"] += 1
                    pending.append((record, asked, future))
                    while len(pending) > 2 * args.concurrency or (pending and (
                            pending[0][2] is None or pending[0][2].done())):
                        finish(*pending.popleft())
                        bar.show(done - len(pending))
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
    emit_json({"summary": counts})
    warn(f"{counts['values_local']} values answered locally, {counts['values_asked']} asked; "
         f"{counts['pages_local']} pages wholly local, {counts['pages_asked']} asked "
         f"({counts['cache_hits']} from the cache, {counts['requests']} requests); "
         f"{bad + counts['pages_failed']} failed")
    failed = bad + counts["pages_failed"]
    if failed == done:
        return FAILED
    return PARTIAL if failed else OK
