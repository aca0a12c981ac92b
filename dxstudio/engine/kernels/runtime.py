"""The compiled kernels' runtime: the OpenMP environment, glibc malloc tuning, Numba's
on-disk cache (the engine digest stamped on every kernel), the (parallel, serial) builds and
the threads policy (pick, parallel_pays, serial_kernels, set_threads), and the kernel path's name.

Importing this module sets the environment before Numba (and its OpenMP runtime) starts: every
module of the package that compiles imports it first.
"""
from __future__ import annotations

import os
import threading
import types

KERNELS = ("reference", "fast")


def check_kernels(kernels: str) -> str:
    """The kernel path's name, or a ValueError naming the choices."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, not {kernels!r}")
    return kernels


def fast_path(kernels: str) -> bool:
    """True for "fast", False for "reference"; any other name raises (never a silent fallback)."""
    return check_kernels(kernels) == "fast"

_NUMBA_CACHE = os.environ.get("DXSTUDIO_NUMBA_CACHE", "1") != "0"

# OpenMP threads that spin while waiting take the other core from everyone on a busy
# machine (a 15x slowdown measured with two processes on two cores); passive waiting costs
# little when the machine is idle. Must be set before the OpenMP runtime starts.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ...but a thread that sleeps at once after every parallel region takes a futex wake-up to start
# the next one: a forward pass at 2 threads made ~40 of them and ran 4x slower than at 1 thread
# (50 words: 4.0 against 1.0 ms). GNU OpenMP's spin count, when given, wins over PASSIVE: a
# short spin (2,000 pauses, some tens of µs) then sleep. 2 threads: 0.77 / 2.1 / 8.8 ms at 50 /
# 150 / 400 words (1 thread: 1.0 / 3.5 / 14.5), and an idle thread still leaves the core soon.
os.environ.setdefault("GOMP_SPINCOUNT", "2000")



def _keep_freed_memory() -> bool:
    """glibc returns a freed block of 128 KB or more to the kernel (mmap/trim), so the next
    step's activation of that size page-faults again: at 400 words a training step spent a
    fifth of its time in the kernel on 10,000 page faults. Blocks up to 32 MB come from the
    heap and freed memory stays mapped (peak resident memory unchanged: the same high-water
    mark). glibc only; DXSTUDIO_MALLOC_TUNE=0, or the MALLOC_*_ variables, leave malloc alone."""
    if os.environ.get("DXSTUDIO_MALLOC_TUNE", "1") == "0" or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to do
        return False


MALLOC_TUNED = _keep_freed_memory()

import numba  # noqa: E402  (after the environment above)
from numba import njit, prange  # noqa: E402,F401  (prange: the bodies' parallel loops)

_jit = dict(cache=_NUMBA_CACHE, nogil=True, fastmath=False, error_model="numpy")

# The engine's files whose kernels call one another (the blocks' and fused.py's call
# compiled.py's products, lanes and exp, which call intrinsics.py's IR). Numba keys a cached kernel to its own file's
# contents only, so after an edit (or an upgrade) that changes compiled.py alone, fused.py's
# cached kernels would still hold the old code of what they call (seen here: a segmentation
# fault, then slower code). The locators below stamp every kernel of these files with the
# digest of all of them together: every module of the folders in ENGINE_KERNEL_DIRS (relative
# to the engine package, this package's parent).
ENGINE_KERNEL_DIRS = ("kernels", "blocks")  # blocks/: each block type's compiled forward
_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def engine_kernel_files() -> list[str]:
    """The files of ENGINE_KERNEL_DIRS, relative to the engine package, sorted."""
    out = []
    for folder in ENGINE_KERNEL_DIRS:
        try:
            names = os.listdir(os.path.join(_ENGINE_DIR, folder))
        except OSError:
            continue
        out.extend(f"{folder}/{name}" for name in names if name.endswith(".py"))
    return sorted(out)


ENGINE_KERNEL_FILES = tuple(engine_kernel_files())


def engine_source_digest() -> str:
    import hashlib

    h = hashlib.sha256()
    for name in ENGINE_KERNEL_FILES:
        with open(os.path.join(_ENGINE_DIR, name), "rb") as fh:
            h.update(name.encode() + b"\0" + fh.read() + b"\0")
    from .isa import _TBLOCK, TILE  # the tile is chosen at import (the target CPU, DXSTUDIO_TILE): a build
    h.update(f"tile {TILE} transposes {_TBLOCK}".encode())  # cached for one shape is never loaded for another
    return h.hexdigest()


def _stamp_engine_caches() -> bool:
    """Put, before Numba's own cache locators, one subclass of each whose source stamp for a
    function of ENGINE_KERNEL_FILES is (the digest of all of them, Numba's stamp). Numba's
    internals differ between versions: where they are not as expected, nothing changes."""
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in Numba 0.6x
        bases = list(impl._locator_classes)
        ours = {os.path.join(_ENGINE_DIR, name) for name in ENGINE_KERNEL_FILES}
        digest = engine_source_digest()
    except Exception:  # pragma: no cover - another Numba, or no source files
        return False
    made = []
    for base in bases:
        if getattr(base, "_dxstudio_engine", False) or not hasattr(base, "get_source_stamp"):
            continue

        def get_source_stamp(self, _base=base):
            return ("dxstudio-engine", digest, _base.get_source_stamp(self))

        def from_function(cls, py_func, py_file, _base=base):
            if os.path.abspath(py_file) not in ours:
                return None
            return _base.from_function.__func__(cls, py_func, py_file)

        made.append(type("Engine" + base.__name__.lstrip("_"), (base,),
                         {"get_source_stamp": get_source_stamp, "from_function": classmethod(from_function),
                          "_dxstudio_engine": True}))
    impl._locator_classes[:0] = made
    return bool(made)


ENGINE_CACHE_STAMPED = _NUMBA_CACHE and _stamp_engine_caches()

# -- a cache that a killed or concurrent compile cannot make crash the next run ------------------
# Numba writes a kernel's index (.nbi: signature -> data file name) BEFORE its data file (.nbc),
# numbers data files 1, 2, ... per kernel, and reuses a number whose file is still there from an
# older build; two processes compiling into one cache (the CLI's background preparation beside a
# tune, pytest-xdist workers, Ray workers) each save their own index over the other's. So an index
# can name a data file that holds another signature's or another build's machine code, and Numba
# loads it as this one's (a TypeError, or the other kernel's code run where the arguments agree).
# Bytes damaged inside a data file (a disk, a copy, a machine stopped mid-write) ended the next
# run with a segmentation fault in LLVM's loader; a truncated or empty file raised out of pickle
# (reproduced on b960b07: tests/test_kernel_cache_damage.py). For the engine's kernels (ENGINE_CACHE_STAMPED: their stamp
# starts with "dxstudio-engine") each data file now carries a header: a magic, the digest of the
# key it was compiled for and of its own payload; it is written before the index, under a lock
# per cache folder; what does not check out (any other file, a short one, another key's, a broken
# index) is a cache miss: the kernel compiles again and is saved over it, and the first such
# kernel of the process says so on stderr in one line naming the cache folder.
_DATA_MAGIC = b"dxstudio-nbc-1\n"
_damage_said: set[str] = set()


def _cache_damaged(folder: str, what: str) -> None:
    if folder in _damage_said:
        return
    _damage_said.add(folder)
    import sys

    print(f"dxstudio: the compiled-kernel cache in {folder} is incomplete or damaged ({what}); "
          "compiling those kernels again", file=sys.stderr, flush=True)


def _key_digest(stamp, key) -> bytes:
    """The build a data file holds: the kernel's source stamp (the engine digest) and Numba's key
    (signature, target CPU, bytecode)."""
    import hashlib

    return hashlib.sha256(repr((stamp, key)).encode()).digest()


def _checked_cache_files() -> bool:
    try:
        import contextlib
        import hashlib
        import pickle

        from numba.core import caching

        base = caching.IndexDataCacheFile
    except Exception:  # pragma: no cover - another Numba
        return False
    if getattr(base, "_dxstudio_checked", False):
        return True

    class CheckedIndexDataCacheFile(base):
        """Numba's IndexDataCacheFile; for the engine's kernels, checked as above."""
        _dxstudio_checked = True

        def __init__(self, cache_path, filename_base, source_stamp):
            super().__init__(cache_path, filename_base, source_stamp)
            self._checked = isinstance(source_stamp, tuple) and source_stamp[:1] == ("dxstudio-engine",)

        def _damaged(self, name, what):
            _cache_damaged(self._cache_path, f"{name}: {what}")

        def _load_index(self):
            if not self._checked:
                return super()._load_index()
            try:
                overloads = super()._load_index()
            except Exception as e:  # a truncated or damaged index: start this kernel's afresh
                self._damaged(self._index_name, f"unreadable, {type(e).__name__}")
                return {}
            if not isinstance(overloads, dict) or not all(isinstance(v, str) for v in overloads.values()):
                self._damaged(self._index_name, "not an index of this cache")
                return {}
            return overloads

        @contextlib.contextmanager
        def _locked(self):
            try:
                import fcntl
            except ImportError:  # not POSIX: unlocked, the checks still hold
                yield
                return
            try:
                os.makedirs(self._cache_path, exist_ok=True)
                fh = open(os.path.join(self._cache_path, "dxstudio-cache.lock"), "a")  # one per folder
            except OSError:  # no lock to be had: unlocked, the checks still hold
                yield
                return
            with fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

        def save(self, key, data):
            if not self._checked:
                return super().save(key, data)
            payload = self._dump(data)
            blob = _DATA_MAGIC + _key_digest(self._source_stamp, key) + hashlib.sha256(payload).digest() + payload
            try:
                self._save_checked(key, blob)
            except OSError:  # a full or read-only disk: this kernel is not cached, nothing worse
                pass

        def _save_checked(self, key, blob):
            with self._locked():  # the index as it is now (another process may have added to it)
                overloads = self._load_index()
                name = overloads.get(key)
                if name is None:
                    taken = set(overloads.values())
                    name = next(n for n in map(self._data_name, range(1, len(taken) + 2)) if n not in taken)
                with self._open_for_write(self._data_path(name)) as fh:  # the data, then the index
                    fh.write(blob)
                if overloads.get(key) != name:
                    overloads[key] = name
                    self._save_index(overloads)

        def load(self, key):
            if not self._checked:
                return super().load(key)
            name = self._load_index().get(key)
            if name is None:
                return None
            try:
                with open(self._data_path(name), "rb") as fh:
                    blob = fh.read()
            except OSError:  # removed since: compiled again
                return None
            head = len(_DATA_MAGIC)
            if not blob.startswith(_DATA_MAGIC) or len(blob) < head + 64:
                self._damaged(name, "short, or not written by this cache")
                return None
            if blob[head:head + 32] != _key_digest(self._source_stamp, key):
                self._damaged(name, "holds another build than its index names")
                return None
            payload = blob[head + 64:]
            if hashlib.sha256(payload).digest() != blob[head + 32:head + 64]:
                self._damaged(name, "truncated or damaged")
                return None
            try:
                return pickle.loads(payload)
            except Exception as e:  # pragma: no cover - a payload that checks out but does not load
                self._damaged(name, f"does not load, {type(e).__name__}")
                return None

    caching.IndexDataCacheFile = CheckedIndexDataCacheFile  # Cache.__init__ makes one per kernel
    return True


ENGINE_CACHE_CHECKED = ENGINE_CACHE_STAMPED and _checked_cache_files()


def _renamed(fn, name):
    """A copy of fn under another name: Numba's on-disk cache keys functions by name, so the
    parallel and the serial build of one body need distinct names or they evict each other."""
    code = fn.__code__.replace(co_name=name)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    g = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    g.__qualname__ = name
    return g


def _build(body, name):
    """(parallel build, serial build) of one kernel body, under distinct names for the cache.
    One thread owns each output row (or element), so both give the same bytes; the serial
    one runs for small inputs and when examples are spread over Python threads (Numba's
    default thread pool is not re-entrant)."""
    return (njit(parallel=True, **_jit)(_renamed(body, name + "_par")),
            njit(**_jit)(_renamed(body, name + "_ser")))


_serial = threading.local()

# Below this many multiply-adds a kernel runs on the calling thread: waking the thread pool
# costs more than the work (milliseconds on a busy machine). Either way the bytes are the same.
PARALLEL_MIN_WORK = 1 << 18


def pick(kernels, rows: int, work: int):
    """The build to run of (parallel, serial): the parallel one for a large input, outside
    serial_kernels(). Threads never change a result: this choice is about speed only."""
    par, ser = kernels
    return par if parallel_pays(rows, work) else ser


def parallel_pays(rows: int, work: int, allowed: bool | None = None) -> bool:
    """pick's choice: a large input, outside serial_kernels(), and more than one Numba thread
    (on one thread a parallel build still launches its thread pool's scheduler for every call,
    a few µs each, 8% of a forward pass at 150 words). The compiled forward sections
    (blocks/transformer.block_forward, fused.heads_forward, ...) take it to choose the builds they call; allowed: the answer of
    parallel_allowed() when the caller already has it."""
    if rows <= 1 or work < PARALLEL_MIN_WORK:
        return False
    return parallel_allowed() if allowed is None else allowed


# The compiled sections (a block's forward and backward, the heads, the embedding, the pair
# MLP) take `par`: True runs the parallel builds of the kernels they call, False the serial
# ones, and None (SERIAL_ONLY) the serial ones in a process whose kernels have one thread
# (NUMBA_NUM_THREADS=1). A section tests `par is not None and par`: Numba decides the first half
# when it compiles the section for the argument's type, so a section called with None is built
# without the parallel kernels. They are half of a fresh compile (the generic build for the
# cross-CPU test: 105 s of CPU with them, 53 s without); a process with threads compiles them
# as before, in the same build as the serial ones (one build per section).
SERIAL_ONLY = None


def section_par(rows: int, work: int, allowed: bool | None = None) -> bool | None:
    """The compiled sections' `par` argument for an input of `rows` rows and `work`
    multiply-adds: SERIAL_ONLY where the kernels can never have a second thread, else
    parallel_pays."""
    if numba.config.NUMBA_NUM_THREADS == 1:
        return SERIAL_ONLY
    return parallel_pays(rows, work, allowed)


def parallel_allowed() -> bool:
    """Outside serial_kernels() with more than one Numba thread: parallel_pays without the size
    test. model.forward asks once (a microsecond) and hands the answer to its sections."""
    return not getattr(_serial, "on", False) and numba.get_num_threads() > 1


class serial_kernels:
    """Within this context the calling thread uses the single-threaded compiled kernels."""

    def __enter__(self):
        self.prev = getattr(_serial, "on", False)
        _serial.on = True

    def __exit__(self, *exc):
        _serial.on = self.prev


def set_threads(n: int) -> None:
    """Number of threads of the compiled kernels (results do not depend on it)."""
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
