"""`dxstudio new-model` and `dxstudio extract`."""
from __future__ import annotations


from dxstudio.cli.common import FAILED, OK, PARTIAL, emit_json, fail, progress, warn
from dxstudio.engine import readiness
from dxstudio.engine.config import size_config
from dxstudio.scale import ScaleError
from dxstudio.scale.ordered import Processes, Serial, ordered_map
from dxstudio.scale.pages import DocumentGroups, chunks, count_pages, extract_chunk, page_items
from dxstudio.tuning.settings import DEFAULT_KERNELS, KERNEL_CHOICES, SIZE_CHOICES

MAX_SEED = (1 << 64) - 1


def _seed(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2^64), not {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2^64), not {text} (it would wrap)")
    return value


def configure(name, p):
    if name == "new-model":
        p.add_argument("out", help="model file to write (.safetensors)")
        p.add_argument("--seed", type=_seed, default=0, help="SplitMix64 seed, 0 to 2^64-1 (default 0)")
        p.add_argument("--size", choices=SIZE_CHOICES, default="base", help="(default base)")
        p.add_argument("--input-layout", type=int, choices=[1, 2], default=2,
                       help="word features the model reads (docs/inputs.md; default 2)")
        p.add_argument("--fields", help="comma-separated schema fields (default: vendor,date,total,invoice_number)")
        p.add_argument("--kernels", choices=KERNEL_CHOICES, default=DEFAULT_KERNELS, help="(accepted for symmetry; a new model does no arithmetic)")
    else:
        p.add_argument("model", help="model file (.safetensors)")
        p.add_argument("pages", nargs="+", help="page JSON files, folders of them, JSON-lines files "
                       "(.jsonl, one page a line), - for JSON lines on standard input, PDFs (one document "
                       "each: their text layer, pages without one by OCR), or images (PNG, JPEG, TIFF, WebP: "
                       "read by OCR)")
        p.add_argument("--pages", dest="per_page", action="store_true",
                       help="one line per page, not per document (the pages of a multi-page document "
                       "give one line by default)")
        p.add_argument("--kernels", choices=KERNEL_CHOICES, default=DEFAULT_KERNELS, help="(default fast)")
        if name == "extract":
            p.add_argument("--ocr", choices=("rapidocr", "tesseract"), default="rapidocr", metavar="ENGINE",
                           help='images and scanned PDF pages: the OCR engine, rapidocr (default) or tesseract; '
                                'needs the ocr extra: pip install "dxstudio[ocr]"')
        add_scale_arguments(p)


def add_scale_arguments(p):
    """--workers and --ray (extract and route): the same output bytes as one process."""
    p.add_argument("--workers", type=int, metavar="N", help="pages on N local worker processes "
                   "(with --ray local: the CPUs of the Ray instance started here)")
    p.add_argument("--ray", metavar="ADDRESS", help="pages as tasks on the Ray cluster at ADDRESS "
                   "(host:port, ray://host:port, auto), or 'local' to start one on this machine; "
                   'needs the cluster extra: pip install "dxstudio[cluster]"')
    p.add_argument("--chunk", type=int, default=8, metavar="PAGES", help="pages per task (default 8)")


def run(name, args) -> int:
    if name == "new-model":
        return _new_model(args)
    return _extract(args)


def parse_fields(text: str | None) -> list[str] | None:
    """--fields: None when not given; a given list must name at least one field, none empty."""
    if text is None:
        return None
    fields = [f.strip() for f in text.split(",")]
    if not any(fields):
        fail(f"--fields {text!r} names no field; give comma-separated names (or leave --fields out "
             f"for the default schema)")
    if not all(fields):
        fail(f"--fields {text!r} has an empty name between commas")
    return fields


def _new_model(args) -> int:
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    fields = parse_fields(args.fields)
    try:
        cfg = size_config(args.size, fields, input_layout=args.input_layout)
        cfg.validate()
        params = new_params(cfg, args.seed)
        save_model(args.out, cfg, params)
    except ValueError as e:
        fail(e)
    except OSError as e:
        fail(f"{args.out}: cannot write ({e.strerror or e})")
    n = sum(v.size for v in params.values())
    emit_json({"model": args.out, "size": args.size, "seed": args.seed, "parameters": n, "fields": list(cfg.fields)})
    return OK


def open_backend(args, fn, shared, *fn_args):
    """The ordered-map backend --workers / --ray ask for (dxstudio/scale), and a closer that
    shuts down a Ray instance this command started."""
    if args.chunk < 1:
        fail(f"--chunk must be at least 1, not {args.chunk}")
    if args.workers is not None and args.workers < 1:
        fail(f"--workers must be at least 1, not {args.workers}")
    if args.ray:
        try:
            from dxstudio.scale import cluster
        except ScaleError as e:
            fail(f"--ray: {e}")
        try:
            started = cluster.connect(args.ray, args.workers if args.ray == "local" else None)
        except ScaleError as e:
            fail(e)
        return cluster.RayTasks(fn, shared, *fn_args), (cluster.shutdown if started else (lambda: None))
    if args.workers:  # even 1: one worker process (the driver only reads and writes)
        return Processes(args.workers, fn, shared, *fn_args), (lambda: None)
    return Serial(fn, shared, *fn_args), (lambda: None)


SMALL_JOB_PAGES = 4  # up to this many pages, a first use runs on the reference kernels


def engine_ready(kernels: str, total: int | None, small: int = SMALL_JOB_PAGES) -> str:
    """The kernel path to use now. With the compiled kernels not yet prepared on this machine
    (docs/numerics.md "First use"): a small job (a few pages) runs on the reference kernels, the
    same bytes with nothing to compile, while a detached process prepares the compiled ones;
    a larger one prepares them first, saying so, with progress. Either way it is said on stderr."""
    if kernels != "fast":
        return kernels

    if readiness.is_prepared():
        return kernels
    if total is not None and total <= small:
        background = readiness.start_background_prepare()
        warn(f"the engine's compiled kernels are not prepared on this machine yet; "
             f"{total} page{'s' if total != 1 else ''} on the reference kernels (the same bytes)"
             + ("; preparing the compiled ones in the background, once: about "
                f"{readiness.PREPARE_CPU_SECONDS} s of CPU" if background else ""))
        return "reference"
    warn(readiness.preparing_message() + " (then the pages)")
    with progress(len(readiness.STAGES), "preparing the engine") as bar:
        def step(done, total_stages, label):
            bar.show(done, suffix=label)
            if not bar.enabled:
                warn(f"prepared {label} ({done}/{total_stages})")
        seconds = readiness.prepare(step)
    warn(f"the engine is prepared for this CPU ({seconds:.0f} s of CPU); it is not asked again")
    return kernels


def why_text(why: dict) -> str:
    """{field: {"local" or a reason asked: count}} in words: "company 3 local, 2 asked (below
    threshold); date 5 asked (no threshold)"."""
    parts = []
    for f, tally in why.items():
        local = tally.get("local", 0)
        asked = [(k, n) for k, n in tally.items() if k != "local"]
        text = f"{f} {local} local"
        if asked:
            text += ", " + ", ".join(f"{n} asked ({k})" for k, n in asked)
        parts.append(text)
    return "; ".join(parts)


def _extract(args) -> int:
    from dxstudio.engine.container import ModelFileError, load_model
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.extract import document_json, reading_keywords

    try:
        model = load_model(args.model)
    except ModelFileError as e:
        fail(e)
    shared = (model.cfg, to_runtime(model.params), model.thresholds,
              reading_keywords(model.keywords, model.cfg.fields))
    total = count_pages(args.pages)
    kernels = engine_ready(args.kernels, total)
    backend, close = open_backend(args, extract_chunk, shared, kernels, args.ocr)
    done = failed = 0
    routes = {"local": 0, "ask": 0, "empty": 0}
    groups = DocumentGroups()

    def emit(finished):
        for doc, items in finished:
            records = [r for r, _ in items]
            line = records[0] if doc is None else document_json(doc, records)
            for f, v in line["fields"].items():
                routes["empty" if v["value"] is None else v["route"]] += 1
                tally = why.setdefault(f, {})
                key = v.get("why") or "local"
                tally[key] = tally.get(key, 0) + 1
            emit_json(line)
        for problem in groups.problems:
            warn(problem)
        groups.problems.clear()

    why: dict = {}  # field -> {"local" or the reason asked: count}
    try:
        with progress(total or 0, "extract", show=total is None or total > 1) as bar, backend:
            for results in ordered_map(backend, chunks(page_items(args.pages), args.chunk)):
                for kind, value in results:
                    if kind in ("ok", "pages"):  # a PDF or an image read by the worker: its pages
                        for record in (value if kind == "pages" else [value]):
                            if getattr(args, "per_page", False):
                                emit([(None, [(record, None)])])
                            else:
                                emit(groups.add(record))
                    else:
                        warn(value)
                        failed += 1
                    done += 1
                bar.show(done)
            emit(groups.close())
    except ScaleError as e:
        fail(e)
    finally:
        close()
    if done == 0:
        fail("no pages given")
    if failed == done:
        return FAILED  # each page's error is said; no "0 values answered" line after them
    warn(f"{routes['local']} value{'s' if routes['local'] != 1 else ''} answered locally, "
         f"{routes['ask']} to ask, {routes['empty']} field{'s' if routes['empty'] != 1 else ''} "
         f"with no value (ask){'' if model.thresholds else '; the model stores no LocalFirst threshold, so every value is asked'}"
         + (f"; per field: {why_text(why)}" if why else ""))
    return PARTIAL if failed else OK
