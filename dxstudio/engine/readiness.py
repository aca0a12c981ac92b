"""Whether the engine's compiled (Numba) kernels are ready on this machine, and preparing them.

    is_prepared() -> bool                 this engine's kernels were compiled and cached for this CPU
    prepare(progress=None, beside=True)   compile (or load) them now, a second process helping on 2+
                                          cores; the CPU seconds it took
    prepare_training() -> float           only a training step's own kernels (that second process)
    compile_products()                    mm_nt's two builds, which both call: first, before the second starts
    training_run()                        the training step both run: (config, parameters, examples, settings)
    PREPARE_CPU_SECONDS                   about how long a first preparation takes (measured)
    preparing_message()                   the one line every command and the app show meanwhile
    start_background_prepare() -> bool    a detached process that prepares them (the CLI's small jobs)

The first use on a machine compiles every kernel for this CPU (about a minute of CPU, cached
afterwards: Numba's cache, in the package's __pycache__ or NUMBA_CACHE_DIR). The reference
kernels (NumPy) compute the same bytes with nothing to compile, so a small first job runs on
them while the compiled ones are prepared (docs/numerics.md "First use"). A marker beside
Numba's cache of the engine, named for the engine's source digest, Numba's version and the
CPU, says a preparation finished; an edit of the engine, an upgrade or another CPU asks again.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# measured: the first `dxstudio extract` of one page on the fast kernels with an empty cache
# (114 s of CPU at load 20 on 2 cores, 77 s in the issue on a quieter machine),
# AMD EPYC (znver3, AVX2), Numba 0.68.1 (docs/numerics.md "First use")
PREPARE_CPU_SECONDS = 100


def _cache_dir() -> Path | None:
    """Where Numba caches the engine's kernels (None: caching is off or unknown)."""
    from dxstudio.engine.kernels import compiled, runtime

    if not runtime._NUMBA_CACHE:
        return None
    try:
        return Path(compiled._map_exp64._cache._cache_path)
    except AttributeError:  # another Numba's internals
        return None


def _marker() -> Path | None:
    directory = _cache_dir()
    if directory is None:
        return None
    import llvmlite.binding as llvm
    import numba

    from dxstudio.engine.kernels.runtime import engine_source_digest

    cpu = os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()
    return directory / f"dxstudio-prepared-{engine_source_digest()[:16]}-numba{numba.__version__}-{cpu}"


def is_prepared() -> bool:
    """DXSTUDIO_ENGINE_PREPARED=1 says yes without looking (the test suite: its tests compile
    on first need, as before, and keep the kernel path they ask for)."""
    if os.environ.get("DXSTUDIO_ENGINE_PREPARED") == "1":
        return True
    marker = _marker()
    return marker is None or marker.is_file()  # no cache: nothing to prepare ahead of time


def mark_prepared() -> None:
    marker = _marker()
    if marker is None:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("the engine's kernels are compiled and cached for this CPU\n")
    except OSError:  # a read-only cache: the kernels compile again next time, nothing worse
        pass


def preparing_message(seconds: float = PREPARE_CPU_SECONDS) -> str:
    return f"preparing the engine for this CPU, once: about {seconds:.0f} s of CPU"


def random_window(cfg, n, seed):
    """Random inputs shaped as the model reads them, with the fields of WindowInputs (char ids,
    buckets, word and pair features): every kernel sees its types. The tests' fake window too."""
    from types import SimpleNamespace

    import numpy as np

    rng = np.random.default_rng(seed)
    char_len = rng.integers(0, cfg.max_chars + 1, n).astype(np.int32)
    char_ids = np.zeros((n, cfg.max_chars), np.int32)
    for i in range(n):
        char_ids[i, : char_len[i]] = rng.integers(1, cfg.vocab, char_len[i])
    return SimpleNamespace(
        n=n, char_ids=char_ids, char_len=char_len,
        buckets=rng.integers(0, cfg.pos_buckets, (n, 4)).astype(np.int32),
        word_feats=rng.random((n, cfg.word_features)).astype(np.float32),
        pair_feats=rng.standard_normal((n * n, cfg.pair_features)).astype(np.float32))


STAGES = ("the forward pass", "the base size's forward pass", "the answers' confidences", "a training step")


def prepare(progress=None, beside: bool = True) -> float:
    """Run every compiled kernel once on small random inputs (compiling and caching those not
    cached), then mark the engine prepared. progress(done, total, label) after each stage.
    beside: where the engine is not prepared yet and the machine has two cores or more, a second
    process compiles the training step's own kernels (prepare_training) while this one compiles
    the forward's; the training stage then loads them (measured on a quiet 2-core machine: 0.55
    of the wait, a few seconds more CPU). Returns the CPU seconds it took (the second process's included)."""
    from dxstudio.engine.config import SIZES
    from dxstudio.engine.extract import tag_confidence, tags_and_probs
    from dxstudio.engine.layers import Ops
    from dxstudio.engine.model import forward, to_runtime
    from dxstudio.engine.params import new_params
    from dxstudio.engine.training import TrainState, train_step

    start, children = time.process_time(), _children_cpu()
    compile_products()  # before the second process starts, which then loads them
    helper = _start_training_beside() if beside and _cores() >= 2 and not is_prepared() else None
    ops = Ops("fast")
    tiny, base = SIZES["tiny"], SIZES["base"]
    step = 0

    def done():
        nonlocal step
        step += 1
        if progress is not None:
            progress(step, len(STAGES), STAGES[step - 1])

    out = forward(tiny, to_runtime(new_params(tiny, 7)), random_window(tiny, 9, 1), ops)
    done()
    forward(base, to_runtime(new_params(base, 3)), random_window(base, 7, 2), ops)
    done()
    tags, _ = tags_and_probs(ops, out.tag_logits)
    tag_confidence(out.tag_logits, tags, "fast")
    done()
    if helper is not None:
        helper.wait()  # its kernels are in the cache now (a failed one: compiled below instead)
    cfg, params, examples, settings = training_run()
    train_step(TrainState.start(cfg, params, settings), examples, 1e-3)
    done()
    mark_prepared()
    return time.process_time() - start + _children_cpu() - children


def compile_products() -> None:
    """Compile (or load) mm_nt's parallel and serial builds, the product the forward's sections
    and the backward's both call: where the two preparations started together, each compiled
    them (12 s of CPU each on a Zen 3 core); started after this, prepare_training loads them
    from the cache. The arguments have the types the sections pass (C-contiguous float32)."""
    import numpy as np

    from dxstudio.engine.kernels import compiled as kc

    a, bt = np.ones((3, 20), np.float32), np.ones((5, 20), np.float32)
    bias = np.zeros((5 + kc._NR - 1) // kc._NR * kc._NR, np.float32)
    for build in kc._MM_NT:
        build(a, bt, bias, np.empty((3, 5), np.float32))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _start_training_beside():
    """`python -m dxstudio.engine.readiness --training` (prepare_training), quiet; None where it
    cannot start (then the training stage compiles them here)."""
    try:
        return subprocess.Popen([sys.executable, "-m", "dxstudio.engine.readiness", "--training"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def training_run():
    """(config, container parameters, examples, settings) of the training step the preparation
    runs: the tiny size, two windows of random words and targets, every loss term on. The
    cross-CPU check (tests/cpu_subprocess_check.py) runs the same step."""
    import numpy as np

    from dxstudio.engine.config import SIZES
    from dxstudio.engine.params import new_params
    from dxstudio.engine.training import Example, Targets, TrainSettings

    tiny = SIZES["tiny"]
    rng = np.random.default_rng(5)
    examples = [Example(random_window(tiny, n, seed), Targets(
        tags=rng.integers(-1, tiny.n_tags, n), roles=rng.integers(0, len(tiny.roles), n), doc=2,
        items=rng.integers(-1, n, n), kv=rng.integers(-1, n, n))) for n, seed in ((6, 11), (9, 12))]
    settings = TrainSettings(backbone_scale=0.5, loss_role=1.0, loss_doc=1.0, loss_items=0.5, loss_kv=0.5,
                             clip=0.5, kernels="fast", weight_decay=0.01, tag_class_weights=(1.0,) + (3.0,) * (tiny.n_tags - 1))
    return tiny, new_params(tiny, 7), examples, settings


def prepare_training() -> float:
    """Compile (or load) the kernels only a training step runs (the backward, the losses'
    gradients, clipping, AdamW), from the activations of the reference forward, so that nothing
    of the forward is compiled here: a second process runs this beside prepare() and the two fill
    one cache in about the time of the longer (prepare()'s training stage then loads them). The
    test suite's second worker does (tests/conftest.py). Does not mark the engine prepared.
    Returns the CPU seconds it took."""
    from dxstudio.engine import training

    start = time.process_time()
    cfg, params, examples, settings = training_run()
    state = training.TrainState.start(cfg, params, settings)
    wanted = list(training.trainable_scales(cfg, settings))
    for ex in examples:
        _, grads = training.example_gradients(cfg, state.params, ex, settings, wanted, len(examples),
                                              forward_kernels="reference")
    training.global_norm(grads, settings.kernels)
    training.adamw_update(state, grads, 1e-3)
    return time.process_time() - start


BUSY_SECONDS = 1800  # a preparation that started this recently is taken to be still going


def _busy_file() -> Path | None:
    marker = _marker()
    return None if marker is None else marker.with_name(marker.name + ".preparing")


def start_background_prepare() -> bool:
    """Prepare the kernels in a detached process (its own session, no output), so the next
    command finds them ready; False when it could not be started or is turned off
    (DXSTUDIO_BACKGROUND_PREPARE=0)."""
    if os.environ.get("DXSTUDIO_BACKGROUND_PREPARE", "1") == "0":
        return False
    busy = _busy_file()
    if busy is not None:  # one preparation at a time: a script calling extract page by page starts one
        if _still_preparing(busy):
            return True
        _write_busy(busy, os.getpid())
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dxstudio.engine.readiness"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True)
    except OSError:
        return False
    if busy is not None and getattr(proc, "pid", None):
        _write_busy(busy, proc.pid)  # the preparing process itself: a killed one is not waited for
    return True


def _write_busy(busy: Path, pid: int) -> None:
    try:
        busy.parent.mkdir(parents=True, exist_ok=True)
        tmp = busy.with_name(f"{busy.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{pid}\n")
        tmp.replace(busy)
    except OSError:
        pass


def _still_preparing(busy: Path) -> bool:
    """A preparation started less than BUSY_SECONDS ago whose process still runs (one killed,
    or a machine restarted since, leaves the file behind: then another starts)."""
    try:
        if time.time() - busy.stat().st_mtime >= BUSY_SECONDS:
            return False
        pid = int(busy.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's
        return True
    return True


if __name__ == "__main__" and sys.argv[1:] == ["--training"]:  # beside prepare(): the training step's kernels
    prepare_training()
elif __name__ == "__main__":  # python -m dxstudio.engine.readiness: prepare now
    try:
        os.nice(10)  # a background job: after the person's own work
    except OSError:
        pass
    try:
        seconds = prepare(lambda d, t, label: print(f"prepared {label} ({d}/{t})", file=sys.stderr))
        print(f"the engine is prepared for this CPU ({seconds:.1f} s of CPU)", file=sys.stderr)
    finally:
        busy = _busy_file()
        if busy is not None:
            try:
                busy.unlink()
            except OSError:
                pass
