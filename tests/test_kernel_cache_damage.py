"""A damaged compiled-kernel cache is rebuilt, never loaded (dxstudio.engine.kernels.runtime,
"a cache that a killed or concurrent compile cannot make crash the next run").

Seen by a user: after a run was killed during its first compile, the next run ended in a
segmentation fault while loading Numba's cache; deleting the .nbi/.nbc files fixed it. Reproduced
with Numba's own cache files (b960b07): 64 random bytes inside a kernel's .nbc -> SIGSEGV; a
truncated or empty .nbc or .nbi -> UnpicklingError/EOFError; another kernel's .nbc under this
one's name (what two processes saving one kernel's index at once leave) -> TypeError, or the
other kernel's code run silently where the arguments agree. Here each is made by hand, in a
cache of a few small kernels in tmp_path, and the next run must succeed with the same bytes,
compile those kernels again with one line naming the cache folder, and leave a cache that
loads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dxstudio.engine.kernels import runtime as rt

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import hashlib, json
import numpy as np
from dxstudio.engine.kernels import fused as f
x = np.linspace(-3, 3, 97, dtype=np.float32)
g = np.cos(x).astype(np.float32)
y, t = f.gelu_forward(x)
outs = [f.relu_forward(x), f.relu_backward(g, f.relu_forward(x)), y, t, f.gelu_backward(g, x, t)]
stats = {k: getattr(f, k)[1].stats for k in ("_RELU_FWD", "_RELU_BWD", "_GELU_FWD", "_GELU_BWD")}
print(json.dumps({"bytes": hashlib.sha256(b"".join(o.tobytes() for o in outs)).hexdigest(),
                  "hits": {k: sum(s.cache_hits.values()) for k, s in stats.items()},
                  "misses": {k: sum(s.cache_misses.values()) for k, s in stats.items()}}))
"""


def run(cache: Path) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != "DXSTUDIO_NUMBA_CACHE"}
    env.update(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.splitlines()[-1]), out.stderr


def files(cache: Path, kernel: str) -> tuple[Path, Path]:
    """(index, data file) of a kernel's serial build in the cache."""
    index = next(cache.glob(f"*/fused.{kernel}_ser-*.nbi"))
    return index, next(index.parent.glob(index.name[:-len(".nbi")] + ".1.nbc"))


@pytest.mark.skipif(not rt.ENGINE_CACHE_CHECKED, reason="the engine's Numba cache is off (DXSTUDIO_NUMBA_CACHE=0)")
def test_a_truncated_damaged_or_mismatched_cache_is_rebuilt_with_the_same_bytes(tmp_path):
    cache = tmp_path / "numba-cache"
    first, _ = run(cache)
    assert set(first["misses"].values()) == {1}  # compiled, and saved
    relu_fwd_index, relu_fwd = files(cache, "_relu_fwd")
    relu_bwd_index, relu_bwd = files(cache, "_relu_bwd")
    _, gelu_fwd = files(cache, "_gelu_fwd")
    _, gelu_bwd = files(cache, "_gelu_bwd")

    gelu_fwd.write_bytes(relu_fwd.read_bytes())  # another kernel's build under this one's name
    data = bytearray(gelu_bwd.read_bytes())  # random bytes inside the machine code (SIGSEGV before)
    data[len(data) // 6: len(data) // 6 + 64] = os.urandom(64)
    gelu_bwd.write_bytes(bytes(data))
    relu_fwd.write_bytes(relu_fwd.read_bytes()[: relu_fwd.stat().st_size // 2])  # a half-written data file
    relu_bwd_index.write_bytes(relu_bwd_index.read_bytes()[:100])  # a half-written index

    second, err = run(cache)
    assert second["bytes"] == first["bytes"]
    assert set(second["misses"].values()) == {1}, second  # every damaged kernel compiled again
    lines = [line for line in err.splitlines() if "compiled-kernel cache" in line]
    assert len(lines) == 1, err  # one line, naming the folder
    assert str(relu_fwd.parent) in lines[0] and "compiling those kernels again" in lines[0]

    third, err = run(cache)  # the rebuilt cache loads
    assert third["bytes"] == first["bytes"]
    assert set(third["hits"].values()) == {1} and set(third["misses"].values()) == {0}, third
    assert "compiled-kernel cache" not in err
    assert relu_fwd_index.is_file()


@pytest.mark.skipif(not rt.ENGINE_CACHE_CHECKED, reason="the engine's Numba cache is off (DXSTUDIO_NUMBA_CACHE=0)")
def test_a_data_file_of_numbas_own_format_is_not_loaded(tmp_path):
    """A data file the checked cache did not write (Numba's plain format, an older dxstudio): a
    cache miss, compiled again, never unpickled."""
    from numba.core import caching

    cache_file = caching.IndexDataCacheFile(str(tmp_path), "k-1.py311", ("dxstudio-engine", "d", 0))
    assert cache_file._checked
    key = (("float32",), ("x86_64", "cpu", ""), ("a", "b"))
    cache_file.save(key, ("payload", 1))
    assert cache_file.load(key) == ("payload", 1)
    (tmp_path / "k-1.py311.1.nbc").write_bytes(caching.dumps(("payload", 1)))  # Numba's own format
    assert cache_file.load(key) is None
    assert cache_file.load((("int64",),) + key[1:]) is None  # a key it does not hold
    other = caching.IndexDataCacheFile(str(tmp_path), "k-1.py311", ("numba", 0))  # not the engine's
    assert not other._checked
