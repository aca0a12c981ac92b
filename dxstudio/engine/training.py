"""One training step: examples with their targets in, gradients and updated weights out.

    state = TrainState.start(cfg, container_params, settings)
    result = train_step(state, examples, lr)        # forward, backward, clipping, AdamW
    params = state.container_params()               # what a model file holds

Each example fills its own gradient set (optionally on `degree` threads); the sets are added
in example order with plain additions, so no reduction crosses threads and the bytes do not
depend on the degree. docs/training.md pins every formula.
"""
from __future__ import annotations

import functools
import math
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .config import ModelConfig
from .kernels import fused, runtime
from .kernels.registry import register
from .layers import Ops
from .losses import cross_entropy
from .model import OutputGrads, forward, backward, to_container, to_runtime
from .params import decays, param_spec

F32 = np.float32


@dataclass
class Targets:
    """Per-word targets of one window; a negative value is ignored by the loss."""
    tags: np.ndarray  # (n,) tag index 0 .. 2K
    roles: np.ndarray | None = None  # (n,) role index
    doc: int = -1  # document type of the page
    items: np.ndarray | None = None  # (n,) index of the word's line-item anchor word
    kv: np.ndarray | None = None  # (n,) index of the word's key word


@dataclass
class Example:
    inputs: object  # WindowInputs
    targets: Targets


@dataclass
class TrainSettings:
    """What one step needs to know. weight_decay, clip and kernels have no default here: they are
    settings of a run, and their defaults are the settings table's (dxstudio/tuning/settings.py),
    passed in by whoever trains."""
    weight_decay: float = field(kw_only=True)
    clip: float | None = field(kw_only=True)  # global-norm clipping threshold (None: no clipping)
    kernels: str = field(kw_only=True)  # "fast" or "reference": the same bytes
    backbone_scale: float = 0.0  # 0: head-only (tag head, tag loss)
    layer_decay: float = 1.0  # each backbone layer below the top one trains at this times the rate above it
    loss_tag: float = 1.0
    loss_role: float = 0.0
    loss_doc: float = 0.0
    loss_items: float = 0.0
    loss_kv: float = 0.0
    tag_class_weights: tuple | None = None  # (1 + 2K,) or None for all 1
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    degree: int = 1  # examples in parallel

    def loss_weights(self) -> dict:
        w = {"tag": self.loss_tag, "role": self.loss_role, "doc": self.loss_doc,
             "items": self.loss_items, "kv": self.loss_kv}
        if self.backbone_scale == 0:  # head-only: every loss but the tag loss is off
            w = {k: (v if k == "tag" else 0.0) for k, v in w.items()}
        return w


def trainable_scales(cfg: ModelConfig, settings: TrainSettings) -> "OrderedDict[str, float]":
    """Trainable tensors in the fixed order with their learning-rate scale.

    Head-only (BackboneScale 0): the tag head and its bias. A positive scale: the tag head at 1
    (with the tag loss on), every backbone tensor at the scale, and the role, document and
    pointer heads at the scale only when their own loss is on. With a layer decay d below 1 a
    backbone tensor's scale is also multiplied by d once for each layer between it and the top
    (layer_depth): the top block and the final norm d^0, the block under it d^1, ..., the word
    embeddings and the pair features d^layers."""
    return OrderedDict(_trainable_of(cfg, settings))


def _trainable_of(cfg: ModelConfig, settings: TrainSettings) -> tuple:
    return _memo(_trainable, cfg, float(settings.backbone_scale), tuple(settings.loss_weights().items()),
                 float(settings.layer_decay))


def _memo(cached, *args):
    """cached(*args) from its cache; computed afresh for arguments that cannot be a cache key (a
    configuration built with a list where a tuple belongs)."""
    try:
        hash(args)
    except TypeError:
        return cached.__wrapped__(*args)
    return cached(*args)


def layer_depth(cfg: ModelConfig, name: str) -> int:
    """Layers between a backbone tensor and the top of the backbone: 0 for the last block and the
    final norm, cfg.layers - 1 - i for block i, cfg.layers for the embeddings and pair features."""
    if name.startswith("blocks."):
        return cfg.layers - 1 - int(name.split(".")[1])
    return 0 if name.startswith("final_ln") else cfg.layers


@functools.lru_cache(maxsize=64)
def _trainable(cfg: ModelConfig, s: float, loss_weights: tuple, decay: float) -> tuple:
    """trainable_scales as ((name, scale), ...): worked out once per model shape and loss choice
    (every step asks, twice: the gradients wanted and AdamW's tensors)."""
    lw = dict(loss_weights)
    if s < 0:
        raise ValueError("backbone_scale must be >= 0")
    if not 0 < decay <= 1:
        raise ValueError("layer_decay must be > 0 and <= 1")
    out = []
    any_loss = any(v > 0 for v in lw.values())
    for name, _, _ in param_spec(cfg):
        if name.startswith("tag_head"):
            if lw["tag"] > 0:
                out.append((name, 1.0))
        elif name.startswith("role_head"):
            if lw["role"] > 0 and s > 0:
                out.append((name, s))
        elif name.startswith("doc_head"):
            if lw["doc"] > 0 and s > 0:
                out.append((name, s))
        elif name.startswith(("rel_q", "rel_k")):
            if (lw["items"] > 0 or lw["kv"] > 0) and s > 0:
                out.append((name, s))
        elif s > 0 and any_loss:
            # (decay 1, the default: 1.0 ** depth is 1.0, s itself, the rates and bytes of before it)
            out.append((name, s * decay ** layer_depth(cfg, name)))
    return tuple(out)


def _check_targets(cfg, ex: Example, idx: int):
    n = ex.inputs.n
    t = ex.targets

    def vec(name, v, hi, what):
        if v is None:
            return
        a = np.asarray(v)
        if a.shape != (n,):
            raise ValueError(f"example {idx}: {name} targets have length {a.shape}, the window has {n} words")
        if a.dtype.kind not in "iu":  # np.issubdtype(a.dtype, np.integer)
            raise ValueError(f"example {idx}: {name} targets must be integers")
        if a.size and a.max() >= hi:  # np.any(a >= hi), one reduction and no array of flags
            bad = int(a[a >= hi][0])
            raise ValueError(f"example {idx}: {name} target {bad} is outside the {hi} {what}")

    vec("tag", t.tags, cfg.n_tags, f"tags of the schema {list(cfg.fields)}")
    vec("role", t.roles, len(cfg.roles), "roles")
    vec("items", t.items, n, "words of the window")
    vec("kv", t.kv, n, "words of the window")
    if int(t.doc) >= len(cfg.doc_types):  # negative: no document-type target
        raise ValueError(f"example {idx}: document type {t.doc} is outside the {len(cfg.doc_types)} types")


def example_gradients(cfg, params, ex: Example, settings: TrainSettings, wanted, batch_size: int,
                      forward_kernels: str | None = None):
    """(loss of the example, gradients of the wanted tensors scaled by 1/batch_size).
    forward_kernels: the forward's kernel path where it is not the settings' (the same bytes
    either way; readiness.prepare_training runs the reference forward to compile only the rest)."""
    ops = Ops(settings.kernels)
    lw = settings.loss_weights()
    out = forward(cfg, params, ex.inputs, ops if forward_kernels is None else Ops(forward_kernels), keep=True)
    t = ex.targets
    go = OutputGrads()
    loss = 0.0
    k = settings.kernels
    scale = 1.0 / batch_size
    cw = None if settings.tag_class_weights is None else np.asarray(settings.tag_class_weights, np.float64)
    terms = []
    if lw["tag"] > 0:
        terms.append(("tag", out.tag_logits, t.tags, cw))
    if lw["role"] > 0 and t.roles is not None:
        terms.append(("role", out.role_logits, t.roles, None))
    if lw["doc"] > 0:
        terms.append(("doc", out.doc_logits[None, :], np.array([t.doc]), None))
    if lw["items"] > 0 and t.items is not None:
        terms.append(("items", out.item_scores, t.items, None))
    if lw["kv"] > 0 and t.kv is not None:
        terms.append(("kv", out.kv_scores, t.kv, None))
    for name, logits, targ, weight in terms:
        l, g = cross_entropy(logits, targ, weight, scale=lw[name] * scale, kernels=k)
        loss = loss + lw[name] * l
        setattr(go, name, g[0] if name == "doc" else g)
    grads = backward(cfg, params, ex.inputs, out, go, ops, wanted=_wanted_set(wanted))
    return loss, OrderedDict((n_, grads[n_]) for n_ in wanted if n_ in grads)


def _wanted_set(wanted) -> frozenset:
    """set(wanted), made once for a tuple of names (every step of a training passes the same one)."""
    return _frozen(wanted) if isinstance(wanted, tuple) else frozenset(wanted)  # names: always a key


@functools.lru_cache(maxsize=64)
def _frozen(names: tuple) -> frozenset:
    return frozenset(names)


def example_cost(ex: Example) -> int:
    """A step's relative cost of one example, for handing the longest out first: the products
    grow as n (the blocks, about 200 multiply-adds a word for each one a pair costs) and the
    pair MLP and attention as n squared. Only the order of hand-out depends on it, never a byte."""
    n = int(ex.inputs.n)
    return n * (200 + n)


# A pool of worker threads per degree and calling thread, kept while that thread lives: a step
# hands its examples to it instead of starting and joining threads every step. Trainings on
# different threads at once (the parts of a cross-validated run side by side, folds.py) have
# pools of their own, so one never waits for the other's examples; a pool whose thread has
# ended is collected and its workers exit.
_POOLS = threading.local()


def _pool(degree: int) -> ThreadPoolExecutor:
    pools = getattr(_POOLS, "pools", None)
    if pools is None:
        pools = _POOLS.pools = {}
    pool = pools.get(degree)
    if pool is None:
        pool = pools[degree] = ThreadPoolExecutor(max_workers=degree, thread_name_prefix=f"dx-degree{degree}")
    return pool


class _Slots:
    """Each example's (loss, gradient set) or exception, filled by the worker threads in any
    order; taken by the caller in example order as soon as each is ready."""

    def __init__(self, b: int):
        self.values = [None] * b
        self.errors = [None] * b
        self.ready = [threading.Event() for _ in range(b)]

    def take(self, i: int):
        self.ready[i].wait()
        if self.errors[i] is not None:
            raise self.errors[i]
        value, self.values[i] = self.values[i], None
        return value


def _threaded_results(one, examples, degree: int):
    """Yield one(ex) for each example in example order, computed on `degree` worker threads
    with the single-threaded kernels. The threads take the examples longest first (each free
    thread the next: the batch's end is not one long page on one core while the other idles);
    the caller sums each set as it comes, in example order, while the last ones still run."""
    b = len(examples)
    slots = _Slots(b)
    order = iter(sorted(range(b), key=lambda i: (-example_cost(examples[i]), i)))
    lock = threading.Lock()

    def worker():
        with runtime.serial_kernels():
            while True:
                with lock:
                    i = next(order, None)
                if i is None:
                    return
                try:
                    slots.values[i] = one(examples[i])
                except BaseException as e:  # given to the caller in example order
                    slots.errors[i] = e
                slots.ready[i].set()

    pool = _pool(degree)
    for _ in range(min(degree, b)):
        pool.submit(worker)
    for i in range(b):
        yield slots.take(i)


def batch_gradients(cfg, params, examples, settings: TrainSettings, wanted, runner=None):
    """Mean example loss and the batch gradient: example sets added in example order.

    `runner`, when given, computes the per-example (loss, gradient set) list elsewhere (e.g.
    on a Ray cluster, dxstudio/scale/cluster.py): runner(cfg, params, examples, settings,
    wanted, batch_size) -> [example_gradients(...) for each example, in order]; a runner whose
    attribute `sums` is true returns (loss sum, gradient sums) instead, added in example order
    with add_in_order (each Ray task continuing the sum of the examples before its own)."""
    if not examples:
        raise ValueError("a batch needs at least one example")
    for i, ex in enumerate(examples):
        _check_targets(cfg, ex, i)
    b = len(examples)

    def one(ex):
        return example_gradients(cfg, params, ex, settings, wanted, b)

    if runner is not None and getattr(runner, "sums", False):
        # the runner added the sets itself, in example order, with add_in_order (Ray: each task
        # onto the previous task's sum): its (loss sum, sums) are what the loop below gives
        loss, total = runner(cfg, params, examples, settings, wanted, b)
        return _mean_and_zeros(loss, OrderedDict(total), b, params, wanted)
    if runner is not None:
        results = list(runner(cfg, params, examples, settings, wanted, b))
        if len(results) != b:
            raise ValueError(f"the gradient runner gave {len(results)} gradient sets for {b} examples")
    elif settings.degree > 1 and b > 1:
        results = _threaded_results(one, examples, settings.degree)
    elif settings.degree > 1 and settings.kernels == "fast":
        with runtime.serial_kernels():  # a batch of one at degree > 1: as one of its threads would
            results = [one(examples[0])]
    else:
        results = [one(ex) for ex in examples]
    loss, total = add_in_order(0.0, OrderedDict(), results, wanted)
    return _mean_and_zeros(loss, total, b, params, wanted)


def add_in_order(loss, total, results, wanted):
    """(loss, total) with each (loss, gradient set) of `results` added, in their order, with plain
    additions: the one definition of a batch's sum (batch_gradients, and a Ray task continuing
    the sum of the examples before it, dxstudio/scale/cluster.py)."""
    for l, g in results:  # example order, plain additions
        loss = loss + l
        for name in wanted:
            if name in g:
                # the first example's array as it is: it is fresh (backward made it), and the
                # sums below make new arrays, so no copy is needed
                total[name] = g[name] if name not in total else total[name] + g[name]
    return loss, total


def _mean_and_zeros(loss, total, b, params, wanted):
    for name in wanted:  # a tensor no active loss reached: zero gradient
        if name not in total:
            total[name] = np.zeros_like(params[name])
    return loss / b, total


def global_norm(grads, kernels: str = "fast") -> float:
    """sqrt of the binary64 sum (fixed tensor order) of each gradient's dot16 with itself."""
    ops = Ops(kernels)
    total = 0.0
    for g in grads.values():
        flat = np.ascontiguousarray(g, F32).reshape(1, -1)
        total = total + float(ops.rowdot(flat, flat)[0])
    return math.sqrt(total)


@dataclass
class TrainState:
    cfg: ModelConfig
    params: "OrderedDict[str, np.ndarray]"  # runtime layout
    settings: TrainSettings
    m: dict = field(default_factory=dict)
    v: dict = field(default_factory=dict)
    step: int = 0  # AdamW steps taken
    runner: object = None  # optional: computes the per-example gradient sets (batch_gradients)

    @classmethod
    def start(cls, cfg, container_params, settings):
        params = OrderedDict((k, np.array(v, F32, copy=True)) for k, v in to_runtime(container_params).items())
        st = cls(cfg, params, settings)
        for name in trainable_scales(cfg, settings):
            st.m[name] = np.zeros_like(params[name])
            st.v[name] = np.zeros_like(params[name])
        return st

    def container_params(self):
        return to_container(self.params)


@dataclass
class StepResult:
    loss: float
    grad_norm: float | None
    grads: "OrderedDict[str, np.ndarray]"


# base^0, base^1, ... per base, each the previous times base: a step's bias corrections read
# their power instead of multiplying t times again (t grows to thousands over a training)
_POWERS: dict = {}
_POWERS_LOCK = threading.Lock()


def _power(base: float, t: int) -> float:
    """base^t by t binary64 multiplications from 1.0 (the C library's pow may differ by platform)."""
    with _POWERS_LOCK:
        powers = _POWERS.setdefault(base, [1.0])
        while len(powers) <= t:
            powers.append(powers[-1] * base)
        return powers[t]


def _adamw_ref(ops, state, ps, gs, ms, vs, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps) -> None:
    """AdamW per tensor in NumPy (the definition): in place on ps[t], ms[t], vs[t]."""
    for p, g, m, v, d, wd, lr_b in zip(ps, gs, ms, vs, decay, wdf, lrb):
        if d:
            p *= wd
        m[...] = b1 * m + omb1 * g
        v[...] = b2 * v + omb2 * (g * g)
        denom = np.sqrt(v) / sbc2 + eps
        p -= lr_b * (m / denom)


# the tensors' addresses of fused.adamw_all, per training state (by id, the state held weakly):
# built once, kept while the state trains the same arrays; a copied state builds its own
_ADAMW_TABLES: dict = {}


def _adamw_table(state, ps, ms, vs):
    key = id(state)
    entry = _ADAMW_TABLES.get(key)
    if entry is not None and entry[0]() is state and entry[1].holds(ps, ms, vs):
        return entry[1]
    table = fused.AdamWTable(ps, ms, vs)
    _ADAMW_TABLES[key] = (weakref.ref(state, lambda _r, key=key: _ADAMW_TABLES.pop(key, None)), table)
    return table


def _adamw_compiled(state, ps, gs, ms, vs, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps) -> None:
    fused.adamw_all(_adamw_table(state, ps, ms, vs), gs, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps)


def _contiguous32(arrays) -> bool:
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


def _adamw_applies(state, ps, gs, ms, vs, *scalars) -> bool:
    """Every gradient binary32 and C-contiguous, and so every weight and moment (asked only when
    the state's table does not already hold them)."""
    if not _contiguous32(gs):
        return False
    entry = _ADAMW_TABLES.get(id(state))
    if entry is not None and entry[0]() is state and entry[1].holds(ps, ms, vs):
        return True
    return _contiguous32(ps) and _contiguous32(ms) and _contiguous32(vs)


# AdamW over every trainable tensor: one compiled call (fused.adamw_all) on the fast path
ADAMW = register("adamw_update", _adamw_ref, _adamw_compiled, _adamw_applies)


@functools.lru_cache(maxsize=64)
def _adamw_plan(cfg: ModelConfig, trainable: tuple, weight_decay: float) -> tuple:
    """(names, learning-rate scales (binary64), decay flags) of AdamW's tensors, in order: worked
    out once per model shape, loss choice and weight decay, not at every step (read only)."""
    kinds = {name: kind for name, _, kind in param_spec(cfg)}
    names = tuple(name for name, _ in trainable)
    scales = np.array([scale for _, scale in trainable], np.float64)
    decay = np.array([bool(decays(kinds[name]) and weight_decay) for name in names], np.bool_)
    scales.flags.writeable = False
    decay.flags.writeable = False
    return names, scales, decay


def adamw_update(state: TrainState, grads, lr: float) -> None:
    """AdamW (decoupled weight decay) with a per-tensor learning-rate scale, docs/training.md.

    Scalars are computed in binary64 and rounded once to binary32; each element then takes
    p = p*(1 - lr*wd) [weights and tables]; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g);
    p = p - (lr/bc1) * (m / (sqrt(v)/sqrt(bc2) + eps)). On the fast path one compiled call
    updates every tensor (the registry entry "adamw_update"; the same bytes as the NumPy loop).
    """
    s = state.settings
    state.step += 1
    t = state.step
    b1, b2 = F32(s.beta1), F32(s.beta2)
    omb1, omb2 = F32(1.0 - s.beta1), F32(1.0 - s.beta2)
    bc1 = 1.0 - _power(s.beta1, t)
    bc2 = 1.0 - _power(s.beta2, t)
    sbc2 = F32(math.sqrt(bc2))
    eps = F32(s.eps)
    names, scales, decay = _memo(_adamw_plan, state.cfg, _trainable_of(state.cfg, s), s.weight_decay)
    # each tensor's scalars in binary64, rounded once to binary32: elementwise NumPy operations
    # are the same IEEE operations as the scalar ones, tensor by tensor
    lr_t = float(lr) * scales
    wdf = np.where(decay, (1.0 - lr_t * s.weight_decay).astype(F32), F32(1.0))
    lrb = (lr_t / bc1).astype(F32)
    params, m, v = state.params, state.m, state.v
    ps = [params[name] for name in names]
    gs = [grads[name] for name in names]
    ms = [m[name] for name in names]
    vs = [v[name] for name in names]
    ADAMW(Ops(s.kernels), state, ps, gs, ms, vs, decay, wdf, lrb, b1, omb1, b2, omb2, sbc2, eps)


@functools.lru_cache(maxsize=64)
def _names(trainable: tuple) -> tuple:
    """The names of trainable_scales' ((name, scale), ...), in order."""
    return tuple(name for name, _ in trainable)


def train_step(state: TrainState, examples, lr: float) -> StepResult:
    wanted = _memo(_names, _trainable_of(state.cfg, state.settings))
    if not wanted:
        raise ValueError("nothing to train: every loss term is off")
    loss, grads = batch_gradients(state.cfg, state.params, examples, state.settings, wanted, state.runner)
    norm = None
    if state.settings.clip:
        norm = global_norm(grads, state.settings.kernels)
        coef = state.settings.clip / (norm + 1e-6)
        if coef < 1.0:
            c = F32(coef)
            grads = OrderedDict((k, g * c) for k, g in grads.items())
    adamw_update(state, grads, lr)
    return StepResult(loss, norm, grads)
