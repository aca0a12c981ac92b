"""One training step of the base model, fast path against PyTorch fp32, side by side.

    python bench/train_step.py [--repeats 9] [--sizes 50,150,400] [--seed 0]
    python bench/train_step.py --profile [--profile-size 150] [--repeats 9]
    python bench/train_step.py --threads 1 --clock cpu --no-compile --before   # + the layer-by-layer backward
    python bench/train_step.py --threads 1 --clock cpu --no-compile --main     # + the engine as main ran it
    python bench/train_step.py --threads 1 --clock cpu --against /tmp/head   # + another checkout's engine

A step is forward, backward and AdamW on one page (batch of one) with the tag loss and
backbone_scale 1, so every tensor the tag loss reaches trains (all but the role, document and
pointer heads). Ours: dxstudio.engine.training.train_step with the fast kernels. PyTorch: the
same model from training/parity/docextract_backward.py, loss.backward() and
torch.optim.AdamW with the same settings and the same decay groups. Both start from the same
weights and keep training, step after step, interleaved; medians are quoted. Numba and
PyTorch use the same number of threads (--threads, default 2). GFLOP/s counts the matrix products of the step
analytically (bench/common.py: 2*M*K*N each, forward and backward). The last line of the
output is one JSON object of the figures.

--before adds a contestant "ours_before": the same engine with the backward's compiled
sections switched off for its steps (BACKWARD_SECTIONS: the block backward, the pair MLP's
backward, the position tables' gradients, the heads with the final layer norm and the embedding
with the characters run layer by layer, each layer's kernel through the registry, as before
issue 26's item 2), interleaved with the others: the before / after of those sections in one
run, with the same bytes (its loss is checked against ours at the first and the last step).
--main adds "ours_main": the engine as main (b960b07) ran it, i.e. NEW_SECTIONS switched off and
AdamW as one compiled call per tensor (69 at the base size) instead of one call for all.

--against CHECKOUT adds "ours_against": another checkout's engine (a copy of its dxstudio package
loaded beside this one, bench.common.engine_copy) on the same page from the same weights: a
change's before / after in one run, its loss checked bit for bit against ours at the first and
the last step.

--profile runs cProfile over our steps at one size and prints the top functions by own time
and by cumulative time, for whoever optimises the engine.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common as C  # noqa: E402
from dxstudio.engine.config import size_config  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.params import decays, new_params, param_spec  # noqa: E402
from dxstudio.engine.training import (Example, Targets, TrainSettings, TrainState,  # noqa: E402
                                      train_step, trainable_scales)

LR = 1e-3
SETTINGS = dict(backbone_scale=1.0, loss_tag=1.0, weight_decay=0.01, beta1=0.9, beta2=0.999,
                eps=1e-8, degree=1, kernels="fast", clip=None)


class OurStep:
    """The engine's training step on one example, state kept from step to step."""

    def __init__(self, cfg, params, inp, tags):
        self.settings = TrainSettings(tag_class_weights=C.tag_class_weights(cfg), **SETTINGS)
        self.state = TrainState.start(cfg, params, self.settings)
        self.examples = [Example(inp, Targets(tags=tags))]
        self.loss = None

    def __call__(self):
        self.loss = train_step(self.state, self.examples, LR).loss


# the registry entries of the backward's compiled sections (issue 26, item 2): --before runs them
# on their reference code (which still calls every layer's compiled kernel through the registry)
BACKWARD_SECTIONS = ("transformer_block_backward", "pair_bias_backward_section", "position_tables_section",
                     "heads_backward_section", "embed_backward_section")
# the sections this branch adds to main (b960b07): --main runs them as main did (the heads, final
# layer norm, embedding and characters layer by layer; AdamW one compiled call per tensor)
NEW_SECTIONS = ("heads_backward_section", "embed_backward_section")


def _adamw_per_tensor(state, ps, gs, ms, vs, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps):
    """main's AdamW: fused.adamw_tensor once per tensor (69 calls at the base size)."""
    from dxstudio.engine.kernels import fused

    for p, g, m, v, d, wd, lr_b in zip(ps, gs, ms, vs, decay, wdf, lrb):
        fused.adamw_tensor(p, g, m, v, d, wd, b1, omb1, b2, omb2, sbc2, eps, lr_b)


class OurStepBefore(OurStep):
    """OurStep with the sections `off` switched off during its steps (their `applies` false) and
    AdamW as `adamw` (None: this branch's one call): an earlier backward, the same bytes."""

    off = BACKWARD_SECTIONS
    adamw = None

    def __call__(self):
        from dxstudio.engine.kernels.registry import REGISTRY

        saved = {name: REGISTRY[name].applies for name in self.off}
        saved_adamw = REGISTRY["adamw_update"].compiled
        try:
            for name in saved:
                REGISTRY[name].applies = lambda *a: False
            if self.adamw is not None:
                REGISTRY["adamw_update"].compiled = self.adamw
            super().__call__()
        finally:
            for name, rule in saved.items():
                REGISTRY[name].applies = rule
            REGISTRY["adamw_update"].compiled = saved_adamw


class OurStepMain(OurStepBefore):
    """The engine as main (b960b07) runs it: this branch's sections off, AdamW per tensor."""

    off = NEW_SECTIONS
    adamw = staticmethod(_adamw_per_tensor)


class OurStepAgainst:
    """Another checkout's engine (bench.common.engine_copy) taking the same step on the same page
    from the same weights: `--against CHECKOUT`, the before / after of a change in one run. Its
    losses must equal ours bit for bit (the same bytes)."""

    def __init__(self, engine, page, n, tags, seed):
        cfg = engine["config"].size_config("base")
        T = engine["training"]
        self.settings = T.TrainSettings(tag_class_weights=C.tag_class_weights(cfg), **SETTINGS)
        self.state = T.TrainState.start(cfg, engine["params"].new_params(cfg, seed), self.settings)
        inp = engine["inputs"].window_inputs(engine["page"].page_from_dict(page.to_dict()), cfg, 0, n)
        self.examples = [T.Example(inp, T.Targets(tags=tags))]
        self.train_step = T.train_step
        self.loss = None

    def __call__(self):
        self.loss = self.train_step(self.state, self.examples, LR).loss


class FastTorchStep:
    """The same step as a speed-minded PyTorch engineer writes it (bench/torch_fast.py): batched
    character CNN with a mask, SDPA with the pair bias, the tag loss, loss.backward(), AdamW
    with foreach or fused; optionally the forward and the loss under torch.compile."""

    def __init__(self, cfg, params, inp, tags, trained: set, impl: str, compiled: bool):
        import torch
        import torch.nn.functional as F

        from bench.torch_fast import FastTorchModel, TorchBatch, make_adamw

        self.torch = torch
        self.inp = inp
        self.model = FastTorchModel(cfg, params)
        self.args = TorchBatch.of(inp).args()
        self.opt = make_adamw(cfg, self.model, trained, LR, SETTINGS, impl)
        targets = torch.as_tensor(tags.astype("int64"))
        weight = torch.tensor(C.tag_class_weights(cfg), dtype=torch.float32)
        model = self.model

        def loss_fn(*args):
            return F.cross_entropy(model(*args)["tag_logits"], targets, weight=weight, ignore_index=-1)

        self.loss_fn = torch.compile(loss_fn) if compiled else loss_fn
        self.loss = None

    def __call__(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(*self.args)
        loss.backward()
        self.opt.step()
        self.loss = float(loss.detach())

    def trained(self) -> set:
        return {name for name, t in self.model.named_tensors() if t.grad is not None}


def torch_variants(cfg, params, inp, tags, trained: set, compile_ok: bool) -> dict:
    """{name: step} of the honest anchor's variants (the mirror is timed beside them)."""
    out = {"eager_foreach": FastTorchStep(cfg, params, inp, tags, trained, "foreach", False),
           "eager_fused": FastTorchStep(cfg, params, inp, tags, trained, "fused", False)}
    if compile_ok:
        out["compiled"] = FastTorchStep(cfg, params, inp, tags, trained, "fused", True)
    return out


class TorchStep:
    """The same step in PyTorch fp32: torch_forward of the mirror, the tag loss (class weights,
    ignore_index -1, mean), loss.backward(), torch.optim.AdamW (default implementation)."""

    def __init__(self, cfg, params, inp, tags):
        import torch

        self.torch = torch
        self.mirror = C.load_torch_mirror()
        self.cfg, self.inp, self.tags = cfg, inp, tags
        self.weights = C.tag_class_weights(cfg)
        self.P = C.torch_leaf_params(params, requires_grad=True)
        kinds = {name: kind for name, _, kind in param_spec(cfg)}
        groups = [
            {"params": [t for n, t in self.P.items() if decays(kinds[n])], "weight_decay": SETTINGS["weight_decay"]},
            {"params": [t for n, t in self.P.items() if not decays(kinds[n])], "weight_decay": 0.0},
        ]
        self.opt = torch.optim.AdamW(groups, lr=LR, betas=(SETTINGS["beta1"], SETTINGS["beta2"]),
                                     eps=SETTINGS["eps"])
        self.first_max = None
        self.loss = None

    def prepare(self):
        """Untimed: where each character channel peaks under the current weights (adapter)."""
        self.first_max = C.torch_first_max(self.cfg, self.P, self.inp)

    def __call__(self):
        torch = self.torch
        self.opt.zero_grad(set_to_none=True)
        out = self.mirror.torch_forward(self.cfg, self.P, self.inp, self.first_max, torch.float32)
        loss = self.mirror.loss_term(out["tag_logits"], self.tags, self.weights)
        loss.backward()
        self.opt.step()
        self.loss = float(loss.detach())

    def trained(self) -> set:
        return {name for name, t in self.P.items() if t.grad is not None}


def first_steps(cfg, ours: OurStep, theirs: TorchStep) -> tuple[float, float]:
    """The untimed warm-up step of each, from the same weights: the losses must agree (same
    model, same loss) and the same tensors must train. Returns both first-step losses."""
    ours()
    theirs.prepare()
    theirs()
    rel = abs(ours.loss - theirs.loss) / max(abs(theirs.loss), 1e-30)
    if not rel < 1e-4:
        raise C.BenchError(f"{theirs.inp.n} words: first-step loss {ours.loss!r} (ours) against "
                           f"{theirs.loss!r} (PyTorch): not the same model or loss")
    ours_trained = set(trainable_scales(cfg, ours.settings))
    if ours_trained != theirs.trained():
        raise C.BenchError(f"different tensors train: ours only {sorted(ours_trained - theirs.trained())}, "
                           f"PyTorch only {sorted(theirs.trained() - ours_trained)}")
    return ours.loss, theirs.loss


def compare(cfg, params, pages, repeats: int, compile_ok: bool, before: bool = False,
            main: bool = False, against=None, seed: int = C.MODEL_SEED) -> tuple[dict, list[str]]:
    """Ours, the mirror and the anchor's variants, interleaved, per size. ratio_N = ours / the
    fastest PyTorch variant (mirror included); every variant's loss is checked against the
    mirror's at the first step (same weights, same page) and shown after the last."""
    figures, lines = {}, []
    for n, page in pages.items():
        inp = window_inputs(page, cfg, 0, n)
        tags = C.tag_targets(cfg, n)
        ours, mirror = OurStep(cfg, params, inp, tags), TorchStep(cfg, params, inp, tags)
        first_ours, first_torch = first_steps(cfg, ours, mirror)
        trained = set(trainable_scales(cfg, ours.settings))
        variants = torch_variants(cfg, params, inp, tags, trained, compile_ok)
        first = {}
        for name, step in variants.items():  # warm-up (and for torch.compile: the compile) + check
            t0 = time.perf_counter()
            step()
            first[name] = (step.loss, time.perf_counter() - t0)
            rel = abs(step.loss - first_torch) / max(abs(first_torch), 1e-30)
            if not rel < 1e-4:
                raise C.BenchError(f"{n} words: {name}'s first-step loss {step.loss!r} differs from the "
                                   f"mirror's {first_torch!r}: not the same model")
            if step.trained() != trained:
                raise C.BenchError(f"{n} words: {name} trains {sorted(step.trained() ^ trained)} differently")
        contestants = {"ours": ours, "mirror": mirror, **variants}
        earlier = {}
        if main:
            earlier["ours_main"] = OurStepMain(cfg, params, inp, tags)
        if before:
            earlier["ours_before"] = OurStepBefore(cfg, params, inp, tags)
        if against is not None:
            earlier["ours_against"] = OurStepAgainst(against, page, n, tags, seed)
        for name, old in earlier.items():
            old()
            if old.loss != first_ours:
                raise C.BenchError(f"{n} words: {name} gives loss {old.loss!r}, ours {first_ours!r}: "
                                   "not the same bytes")
        contestants = {"ours": ours, **earlier, "mirror": mirror, **variants}
        times = C.interleaved(contestants, repeats, prepare={"mirror": mirror.prepare})
        med = {k: 1e3 * C.median(v) for k, v in times.items()}
        torch_names = [k for k in contestants if not k.startswith("ours")]
        fastest = min(torch_names, key=lambda k: med[k])
        gflop = C.train_step_flops(cfg, inp) / 1e9
        for k in contestants:
            figures[f"ms_{k}_{n}"] = med[k]
        figures.update({f"ms_torch_{n}": med[fastest], f"fastest_torch_{n}": fastest,
                        f"ratio_{n}": med["ours"] / med[fastest], f"ratio_mirror_{n}": med["ours"] / med["mirror"],
                        f"gflops_{n}": gflop / (med["ours"] / 1e3), f"gflops_torch_{n}": gflop / (med[fastest] / 1e3)})
        lines.append(f"{n} words ({gflop:.2f} GFLOP per step; loss at step 1: ours {first_ours:.6f}, mirror "
                     f"{first_torch:.6f}, " + ", ".join(f"{k} {v[0]:.6f}" for k, v in first.items()) + ")")
        for k in contestants:
            last = contestants[k].loss
            lines.append(f"  {k:14s} {C.spread(times[k])}  {gflop / (med[k] / 1e3):6.2f} GFLOP/s  "
                         f"loss after step {repeats + 1}: {last:.6f}")
        if "compiled" in first:
            lines.append(f"  (torch.compile's first call, compiling: {first['compiled'][1]:.1f} s)")
        lines.append(f"  ratio ours / fastest PyTorch ({fastest}): {figures[f'ratio_{n}']:.3f}; "
                     f"ours / mirror: {figures[f'ratio_mirror_{n}']:.3f}")
        for name, old in earlier.items():
            tag = name[len("ours_"):]
            figures[f"ratio_{tag}_{n}"] = med[name] / med[fastest]
            if ours.loss != old.loss:
                raise C.BenchError(f"{n} words: after {repeats + 1} steps {name}'s loss {old.loss!r} "
                                   f"differs from ours {ours.loss!r}: not the same bytes")
            lines.append(f"  ratio {name} / fastest PyTorch: {figures[f'ratio_{tag}_{n}']:.3f}; "
                         f"ours / {name}: {med['ours'] / med[name]:.3f} (the same loss, bit for bit)")
    return figures, lines


def profile(cfg, params, page, steps: int, top: int = 25) -> dict:
    """cProfile over `steps` of our training steps (after one warm-up step) at one size."""
    n = len(page.words)
    inp = window_inputs(page, cfg, 0, n)
    ours = OurStep(cfg, params, inp, C.tag_targets(cfg, n))
    ours()  # warm-up: the compiled kernels load outside the profile
    # the CPU clock (--clock cpu) leaves out the time the process waits for a core (a shared machine)
    prof = cProfile.Profile(time.process_time) if C.CLOCK == "cpu" else cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        ours()
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    print(f"cProfile ({C.CLOCK} clock): {steps} training steps, {n} words: {1e3 * total / steps:.1f} ms per step "
          "under the profiler (which inflates Python-heavy code)")
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        body = buf.getvalue()
        body = body[body.find("   ncalls"):]  # drop pstats' preamble
        print(f"--- top {top} functions by {title} ---\n{body.rstrip()}")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:10]
    return {"profile_words": n, "profile_steps": steps, "ms_per_step_profiled": 1e3 * total / steps,
            "top_own_ms_per_step": {f"{Path(f).name}:{line}({fn})": 1e3 * v[2] / steps
                                    for (f, line, fn), v in rows}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9, help="interleaved steps per size (default 9)")
    ap.add_argument("--sizes", default=",".join(map(str, C.DEFAULT_SIZES)),
                    help="page sizes in words (default 50,150,400)")
    ap.add_argument("--seed", type=int, default=C.MODEL_SEED, help="model seed (default 0)")
    ap.add_argument("--threads", type=int, default=C.THREADS,
                    help="threads of Numba and of PyTorch alike (default 2, the core count)")
    ap.add_argument("--clock", choices=sorted(C.CLOCKS), default="wall",
                    help="wall: elapsed time (default); cpu: the process's CPU time (a shared machine)")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variant")
    ap.add_argument("--before", action="store_true",
                    help="add ours_before: the backward without its compiled sections, side by side")
    ap.add_argument("--main", action="store_true",
                    help="add ours_main: the engine as main (b960b07) ran it (the heads, final layer norm, "
                         "embedding and characters' backward layer by layer, AdamW per tensor), side by side")
    ap.add_argument("--against", metavar="CHECKOUT",
                    help="add ours_against: another checkout's engine (e.g. a copy of an earlier commit), "
                         "side by side, its losses checked bit for bit against ours")
    ap.add_argument("--profile", action="store_true", help="profile our step (cProfile) instead of comparing")
    ap.add_argument("--profile-size", type=int, default=150, help="page size for --profile (default 150)")
    args = ap.parse_args(argv)
    C.CLOCK = args.clock
    try:
        sizes = (C.parse_sizes(str(args.profile_size)) if args.profile else C.parse_sizes(args.sizes))
        if args.threads < 1:
            raise C.BenchError("--threads must be >= 1")
        if args.repeats < 1:
            raise C.BenchError("--repeats must be >= 1")
        threads = C.set_threads(args.threads, torch_too=not args.profile)
        cfg = size_config("base")
        params = new_params(cfg, args.seed)
        pages, source = C.bench_pages(sizes)
        print(f"docextract-v0 base, seed {args.seed}; tag loss, backbone_scale 1, AdamW lr {LR}; one page per step")
        print(f"pages: {source}")
        print(C.target_line())
        if args.profile:
            print(f"threads: Numba {threads['numba']}")
            figures = profile(cfg, params, pages[sizes[0]], args.repeats)
        else:
            print(f"threads: Numba {threads['numba']}, PyTorch {threads['torch']} (set equal)")
            print(f"{args.repeats} interleaved steps each; median (min-max) per step, {args.clock} clock")
            against = None
            if args.against:
                against = C.engine_copy(args.against, "against")
                print(f"ours_against: the engine of {args.against} (as {against['training'].__name__})")
            figures, lines = compare(cfg, params, pages, args.repeats, not args.no_compile, args.before, args.main,
                                     against, args.seed)
            print("\n".join(lines))
    except C.BenchError as e:
        print(f"bench/train_step.py: {e}", file=sys.stderr)
        return 2
    figures.update(threads=args.threads, repeats=args.repeats, clock=args.clock, tile=C.target_tile())
    print(C.json_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
