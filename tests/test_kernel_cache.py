"""The compile cache of the engine's kernels: a change to any kernel file invalidates them all.

Numba stamps a cached kernel with its own file's contents; fused.py's kernels call compiled.py's,
which call intrinsics.py's, so kernels.runtime's locators stamp every kernel of the package's
files (runtime.ENGINE_KERNEL_FILES) with the digest of all of them together."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from dxstudio.engine.kernels import compiled as kc
from dxstudio.engine.kernels import fused
from dxstudio.engine.kernels import runtime as rt

ENGINE = os.path.dirname(os.path.dirname(os.path.abspath(rt.__file__)))


def test_kernels_of_every_file_carry_the_engine_digest():
    if not rt._NUMBA_CACHE:  # DXSTUDIO_NUMBA_CACHE=0: nothing is cached, nothing to stamp
        return
    assert rt.ENGINE_CACHE_STAMPED
    digest = rt.engine_source_digest()
    for kernel in (fused._LAYERNORM_FWD[1], fused._block_forward_body, kc._MM_NT[0]):
        stamp = kernel._cache._impl._locator.get_source_stamp()
        assert stamp[:2] == ("dxstudio-engine", digest)


SCRIPT = textwrap.dedent("""
    import numpy as np
    import engcopy.kernels.fused as f
    f.relu_forward(np.ones(8, np.float32))
    stats = f._RELU_FWD[1].stats
    print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
""")


def test_a_change_to_the_compiled_bodies_recompiles_the_fused_kernels(tmp_path):
    pkg = tmp_path / "engcopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in rt.ENGINE_KERNEL_FILES:  # "kernels/compiled.py", ...: the folders as they are
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(ENGINE, name), pkg / name)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DXSTUDIO_NUMBA_CACHE")}
    env["PYTHONPATH"] = str(tmp_path)

    def run():
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        hits, misses = map(int, out.stdout.split()[-2:])
        return hits, misses

    assert run() == (0, 1)  # compiled, and cached
    assert run() == (1, 0)  # from the cache
    with open(pkg / "kernels" / "compiled.py", "a") as fh:  # fused.py unchanged: only the file it calls
        fh.write("\n# an edit\n")
    assert run() == (0, 1)  # not the stale cached code: compiled again
