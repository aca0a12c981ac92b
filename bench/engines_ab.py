"""Two checkouts' engines in one process (bench.common.engine_copy): a training step and the
lean forward (extract's) on the same page from the same weights, interleaved, CPU clock, one thread.

    python bench/engines_ab.py A_CHECKOUT B_CHECKOUT [--words 50] [--repeats 300] [--tags ab_a,ab_b]

The engine loaded second ran 30-60% slower here (Zen 5, 7-8 December; identical code through
train_step.py --against: 0.82), so run it twice with the checkouts swapped and take the geometric
mean of B/A over both orders: the load-order factor cancels where it multiplies. The losses after
the timed steps and the forward's outputs must be the same bits (checked). Last line: JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402
from bench.train_step import OurStepAgainst  # noqa: E402

MODULES = ("config", "inputs", "page", "params", "training", "model", "layers")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--words", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--tags", default="ab_a,ab_b",
                    help="the copies' names (engine_copy's tag: a copy's compiled kernels are kept by tag and sources)")
    args = ap.parse_args(argv)
    C.set_threads(1)
    C.CLOCK = "cpu"
    ta, tb = args.tags.split(",")
    engines = {"a": C.engine_copy(args.a, ta, MODULES), "b": C.engine_copy(args.b, tb, MODULES)}
    pages, _ = C.bench_pages((args.words,))
    page = pages[args.words]
    n = len(page.words)
    steps, fwds = {}, {}
    for name, e in engines.items():
        cfg = e["config"].size_config("base")
        steps[name] = OurStepAgainst(e, page, n, C.tag_targets(cfg, n), C.MODEL_SEED)
        rt = e["model"].to_runtime(e["params"].new_params(cfg, C.MODEL_SEED))
        inp = e["inputs"].window_inputs(e["page"].page_from_dict(page.to_dict()), cfg, 0, n)
        ops = e["layers"].Ops("fast")
        fwds[name] = (lambda cfg=cfg, rt=rt, inp=inp, ops=ops, f=e["model"].forward: f(cfg, rt, inp, ops))
    for _ in range(3):  # warm-up
        for run in (*steps.values(), *fwds.values()):
            run()
    ts = C.interleaved(steps, args.repeats)
    tf = C.interleaved(fwds, args.repeats)
    if steps["a"].loss != steps["b"].loss:
        raise C.BenchError(f"the losses differ: {steps['a'].loss!r} vs {steps['b'].loss!r}")
    oa, ob = fwds["a"](), fwds["b"]()
    for k in ("tag_logits", "role_logits", "doc_logits"):
        if not np.array_equal(getattr(oa, k), getattr(ob, k)):
            raise C.BenchError(f"the forward's {k} differ")
    out = {"words": n, "loaded_first": args.a}
    for label, t in (("step", ts), ("forward", tf)):
        ma, mb = C.median(t["a"]) * 1e3, C.median(t["b"]) * 1e3
        print(f"{label}: A {ma:.3f} ms, B {mb:.3f} ms, B/A {mb / ma:.3f} (same bits)")
        out[f"{label}_a_ms"], out[f"{label}_b_ms"], out[f"{label}_b_over_a"] = ma, mb, mb / ma
    print(C.json_line(out))
    return 0


if __name__ == "__main__":
    C.run_main(main, "engines_ab")
