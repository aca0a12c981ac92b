"""`dxstudio new-model` and `dxstudio extract`."""
from __future__ import annotations

import json
import sys


def configure(name, p):
    if name == "new-model":
        p.add_argument("out", help="model file to write (.safetensors)")
        p.add_argument("--seed", type=int, default=0, help="SplitMix64 seed (default 0)")
        p.add_argument("--size", choices=["tiny", "base"], default="base")
        p.add_argument("--fields", help="comma-separated schema fields (default: vendor,date,total,invoice_number)")
        p.add_argument("--kernels", choices=["reference", "fast"], default="fast", help="(accepted for symmetry; a new model does no arithmetic)")
    else:
        p.add_argument("model", help="model file (.safetensors)")
        p.add_argument("pages", nargs="+", help="page JSON files")
        p.add_argument("--kernels", choices=["reference", "fast"], default="fast")


def run(name, args) -> int:
    if name == "new-model":
        return _new_model(args)
    return _extract(args)


def _new_model(args) -> int:
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    fields = [f.strip() for f in args.fields.split(",")] if args.fields else None
    try:
        cfg = size_config(args.size, fields)
        cfg.validate()
        params = new_params(cfg, args.seed)
        save_model(args.out, cfg, params)
    except (ValueError, OSError) as e:
        print(f"dxstudio new-model: {e}", file=sys.stderr)
        return 2
    n = sum(v.size for v in params.values())
    print(json.dumps({"model": args.out, "size": args.size, "seed": args.seed, "parameters": n,
                      "fields": list(cfg.fields)}))
    return 0


def _extract(args) -> int:
    from dxstudio.engine.container import ModelFileError, load_model
    from dxstudio.engine.extract import predict_page, prediction_json
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.page import PageError, load_page
    from dxstudio.progress import ProgressBar

    try:
        model = load_model(args.model)
    except ModelFileError as e:
        print(f"dxstudio extract: {e}", file=sys.stderr)
        return 2
    params = to_runtime(model.params)
    failed = 0
    routes = {"local": 0, "ask": 0, "empty": 0}
    with ProgressBar(len(args.pages), "extract", enabled=None if len(args.pages) > 1 else False) as bar:
        for path in args.pages:
            try:
                page = load_page(path)
                pred = predict_page(model.cfg, params, page, args.kernels)
            except PageError as e:
                print(f"dxstudio extract: {e}", file=sys.stderr)
                failed += 1
            else:
                rec = prediction_json(pred, model.thresholds)
                for v in rec["fields"].values():
                    routes["empty" if v["value"] is None else v["route"]] += 1
                sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
                sys.stdout.flush()
            bar.update()
    print(f"dxstudio extract: {routes['local']} value{'s' if routes['local'] != 1 else ''} answered locally, "
          f"{routes['ask']} to ask (below the threshold), {routes['empty']} field{'s' if routes['empty'] != 1 else ''} "
          f"with no value (ask){'' if model.thresholds else '; the model stores no LocalFirst threshold, so every value is asked'}",
          file=sys.stderr)
    if failed == len(args.pages):
        return 2
    return 1 if failed else 0
