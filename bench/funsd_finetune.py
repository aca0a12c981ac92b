"""Did the backbone learn forms? Fine-tune roles and key-value links on FUNSD, then score them.

    python bench/funsd_finetune.py --model BASE.safetensors [--steps 300] [--lr 0.001]
        [--backbone-scale 1] [--batch 8] [--warmup 30] [--seed 1] [--degree 1] [--out RUN.safetensors]
    python bench/funsd_finetune.py --new [--size base] ...   # a new random model, layout 2

FUNSD is research-only data: fine for a benchmark, never for anything shipped. The starting
model's role head and key-value pointer head, and its backbone, are trained on the FUNSD
training forms (question = key, answer = value, header, other; a linked answer's words point
at their question's first word, every other word at itself, as the pretraining corpus does:
dxstudio/corpus/document.py) with the engine's training step, the way `dxstudio pretrain`
calls it (dxstudio.engine.training.train_step: loss terms in binary64, batch gradients summed
in example order, AdamW, deterministic at any degree). FUNSD has no field tags: the tag loss
is 0, so the tag head is not trained; the role and pointer heads train at the backbone's
scale (the engine's rule: a head whose loss is on trains at BackboneScale), hence a
BackboneScale of 0 is refused. The batch stream and learning rate (warm-up, then linear decay
to 10%) are the tuning schedule's (dxstudio/tuning/schedule.py) over the training forms'
windows.

The tuned model is then scored on the testing forms exactly as bench/funsd_roles.py scores an
untuned one (its funsd_form and score): role accuracy and per-role recall over the first
max_words words of each form, and key-value pointer accuracy over the linked answer words.
The starting model is scored too ("start"), so one line gives before and after. Prints a
summary and ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from funsd_roles import funsd_form, score  # noqa: E402

from dxstudio.corpus.document import CorpusDoc, doc_targets, doc_windows  # noqa: E402
from dxstudio.corpus.generic import GENERIC_FIELDS  # noqa: E402
from dxstudio.engine.config import size_config  # noqa: E402
from dxstudio.tuning.settings import SIZE_CHOICES  # noqa: E402
from dxstudio.engine.container import load_model, save_model  # noqa: E402
from dxstudio.engine.inputs import window_inputs  # noqa: E402
from dxstudio.engine.params import new_params  # noqa: E402
from dxstudio.engine.training import Example, TrainSettings, TrainState, train_step  # noqa: E402
from dxstudio.tuning import schedule  # noqa: E402


def form_doc(path: Path) -> CorpusDoc:
    """A FUNSD form as a pretraining-corpus document: roles, key-value pointers, type form."""
    page, roles, kv = funsd_form(path)
    ptr = tuple(j if j >= 0 else i for i, j in enumerate(kv))  # unlinked words point at themselves
    return CorpusDoc("funsd", page, roles=tuple(roles), kv=ptr, doc_type="form").validate()


def read_forms(folder: Path, what):
    """(items, errors): what(path) of every annotation file; a bad file is named and skipped."""
    items, errors = [], []
    for p in sorted(folder.glob("*.json")):
        try:
            items.append(what(p))
        except (ValueError, KeyError, TypeError, OSError) as e:  # json errors are ValueErrors
            errors.append(f"{p}: {type(e).__name__}: {e}")
    return items, errors


def start_model(args):
    """(cfg, container params, description) of the starting model."""
    if args.new:
        cfg = size_config(args.size, GENERIC_FIELDS, input_layout=args.input_layout)
        return cfg, new_params(cfg, args.seed), f"new random model ({args.size}, layout {args.input_layout}, seed {args.seed})"
    m = load_model(args.model)
    return m.cfg, m.params, args.model


def finetune(cfg, params, docs, args, on_step=None):
    """Train the role and key-value pointer heads and the backbone; (TrainState, losses)."""
    window = min(args.window or cfg.max_words, cfg.max_words)
    windows = [(k, a, b) for k, d in enumerate(docs) for a, b in doc_windows(d, window)]
    settings = TrainSettings(backbone_scale=float(args.backbone_scale), loss_tag=0.0, loss_role=float(args.loss_role),
                             loss_doc=0.0, loss_items=0.0, loss_kv=float(args.loss_kv),
                             weight_decay=float(args.weight_decay), clip=args.clip, degree=args.degree,
                             kernels="fast")
    state = TrainState.start(cfg, params, settings)
    n = len(windows)
    epochs = max(1, -(-args.steps * args.batch // n))
    losses = []
    for step in range(args.steps):
        idx = schedule.batch_for_step(n, args.seed, args.batch, epochs, step)
        lr = schedule.learning_rate(step, args.steps, args.warmup, float(args.lr))
        examples = []
        for w in idx:
            k, a, b = windows[w]
            examples.append(Example(window_inputs(docs[k].page, cfg, a, b), doc_targets(docs[k], cfg, a, b)))
        res = train_step(state, examples, lr)
        losses.append(float(res.loss))
        if on_step:
            on_step(step + 1, args.steps, res.loss)
    return state, losses, len(windows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    start = ap.add_mutually_exclusive_group(required=True)
    start.add_argument("--model", help="starting model file (.safetensors): a base, or any docextract-v0 model")
    start.add_argument("--new", action="store_true", help="start from a new random model of --size (generic fields)")
    ap.add_argument("--size", choices=SIZE_CHOICES, default="base", help="size of --new (default base)")
    ap.add_argument("--input-layout", type=int, choices=[1, 2], default=2, help="input layout of --new (default 2)")
    ap.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    ap.add_argument("--batch", type=int, default=8, help="windows per step (default 8)")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 0.001)")
    ap.add_argument("--warmup", type=int, default=30, help="warm-up steps (default 30)")
    ap.add_argument("--backbone-scale", type=float, default=1.0,
                    help="learning-rate scale of the backbone and of the role and pointer heads (default 1; > 0)")
    ap.add_argument("--loss-role", type=float, default=1.0, help="role loss weight (default 1)")
    ap.add_argument("--loss-kv", type=float, default=1.0, help="key-value pointer loss weight (default 1)")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0, help="global-norm clipping (default 1)")
    ap.add_argument("--window", type=int, help="words per training example (default: the model's max_words)")
    ap.add_argument("--seed", type=int, default=1, help="batch order (and --new's weights) (default 1)")
    ap.add_argument("--degree", type=int, default=1, help="examples in parallel (the bytes do not depend on it)")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "funsd"),
                    help="FUNSD folder with training_data/ and testing_data/ (default ../shared/data/funsd)")
    ap.add_argument("--out", help="write the tuned model here (default: a temporary file, removed)")
    ap.add_argument("--report", help="also write the JSON report to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    a = ap.parse_args(argv)
    for name in ("steps", "batch", "degree"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.warmup < 0 or a.lr <= 0 or a.backbone_scale <= 0 or a.loss_role < 0 or a.loss_kv < 0 or a.loss_role + a.loss_kv <= 0:
        ap.error("--warmup must be >= 0, --lr and --backbone-scale > 0, the loss weights >= 0 and not both 0")
    train_dir = Path(a.data) / "training_data" / "annotations"
    test_dir = Path(a.data) / "testing_data" / "annotations"
    for d in (train_dir, test_dir):
        if not d.is_dir():
            print(f"funsd_finetune: {d} is not here", file=sys.stderr)
            return 2
    docs, errors = read_forms(train_dir, form_doc)
    forms, test_errors = read_forms(test_dir, funsd_form)
    for e in errors + test_errors:
        print(f"funsd_finetune: skipped {e}", file=sys.stderr)
    if not docs or not forms:
        print(f"funsd_finetune: no usable {'training' if not docs else 'testing'} form", file=sys.stderr)
        return 2
    try:
        cfg, params, what = start_model(a)
    except Exception as e:  # a bad model file: one line naming it
        print(f"funsd_finetune: {a.model}: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        start_path = Path(tmp) / "start.safetensors"
        save_model(start_path, cfg, params)
        before = score(start_path, forms)
        t0 = time.monotonic()

        def progress(step, total, loss):
            if not a.quiet and (step == 1 or step % 25 == 0 or step == total):
                print(f"step {step}/{total} loss {loss:.4f} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)

        state, losses, n_windows = finetune(cfg, params, docs, a, progress)
        wall = time.monotonic() - t0
        out = Path(a.out) if a.out else Path(tmp) / "tuned.safetensors"
        save_model(out, cfg, state.container_params(), {"funsd_finetune": True, "steps": a.steps})
        after = score(out, forms)
    tail = losses[-min(25, len(losses)):]
    report = {"start": what, "input_layout": cfg.input_layout, "training_forms": len(docs), "windows": n_windows,
              "testing_forms": len(forms), "skipped": errors + test_errors,
              "settings": {k: getattr(a, k) for k in ("steps", "batch", "lr", "warmup", "backbone_scale", "loss_role",
                                                      "loss_kv", "weight_decay", "clip", "seed", "degree")},
              "first_loss": round(losses[0], 6), "final_loss": round(sum(tail) / len(tail), 6),
              "last_loss": round(losses[-1], 6),
              "train_seconds": round(wall, 1), "before": before, "after": after}
    for k in ("before", "after"):
        report[k].pop("model", None)
    if a.out:
        report["model"] = str(a.out)
    for k in ("before", "after"):
        r = report[k]
        rec = " ".join(f"{n} {v:.3f}" for n, v in r["role_recall"].items() if v is not None)
        print(f"{what} {k}: role accuracy {r['role_accuracy']:.3f} ({rec}); key-value pointer "
              f"{r['kv_accuracy']} over {r['kv_links']} linked answer words")
    print(f"{a.steps} steps of {a.batch} in {wall:.0f} s; loss {report['first_loss']:.4f} -> {report['final_loss']:.4f}")
    line = json.dumps(report)
    if a.report:
        Path(a.report).write_text(line + "\n", encoding="utf-8")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
