"""`dxstudio new-model` and `dxstudio extract`."""
from __future__ import annotations


from dxstudio.cli.common import FAILED, OK, PARTIAL, emit_json, fail, progress, warn

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
        p.add_argument("--size", choices=["tiny", "base"], default="base", help="(default base)")
        p.add_argument("--fields", help="comma-separated schema fields (default: vendor,date,total,invoice_number)")
        p.add_argument("--kernels", choices=["reference", "fast"], default="fast", help="(accepted for symmetry; a new model does no arithmetic)")
    else:
        p.add_argument("model", help="model file (.safetensors)")
        p.add_argument("pages", nargs="+", help="page JSON files")
        p.add_argument("--kernels", choices=["reference", "fast"], default="fast", help="(default fast)")


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
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    fields = parse_fields(args.fields)
    try:
        cfg = size_config(args.size, fields)
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


def _extract(args) -> int:
    from dxstudio.engine.container import ModelFileError, load_model
    from dxstudio.engine.extract import predict_page, prediction_json
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.page import PageError, load_page

    try:
        model = load_model(args.model)
    except ModelFileError as e:
        fail(e)
    params = to_runtime(model.params)
    failed = 0
    routes = {"local": 0, "ask": 0, "empty": 0}
    with progress(len(args.pages), "extract", show=len(args.pages) > 1) as bar:
        for path in args.pages:
            try:
                page = load_page(path)
                pred = predict_page(model.cfg, params, page, args.kernels)
            except PageError as e:
                warn(e)
                failed += 1
            else:
                rec = prediction_json(pred, model.thresholds)
                for v in rec["fields"].values():
                    routes["empty" if v["value"] is None else v["route"]] += 1
                emit_json(rec)
            bar.update()
    warn(f"{routes['local']} value{'s' if routes['local'] != 1 else ''} answered locally, "
         f"{routes['ask']} to ask (below the threshold), {routes['empty']} field{'s' if routes['empty'] != 1 else ''} "
         f"with no value (ask){'' if model.thresholds else '; the model stores no LocalFirst threshold, so every value is asked'}")
    if failed == len(args.pages):
        return FAILED
    return PARTIAL if failed else OK


