"""The compile cache of the engine's kernels: a change to any kernel file invalidates them all.

Numba stamps a cached kernel with its own file's contents; fused.py's kernels call numerics.py's,
so numerics.engine's locators stamp both files' kernels with the digest of the two together."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from dxstudio.engine import fused
from dxstudio.engine import numerics as nu

ENGINE = os.path.dirname(os.path.abspath(nu.__file__))


def test_kernels_of_both_files_carry_the_engine_digest():
    if not nu._NUMBA_CACHE:  # DXSTUDIO_NUMBA_CACHE=0: nothing is cached, nothing to stamp
        return
    assert nu.ENGINE_CACHE_STAMPED
    digest = nu.engine_source_digest()
    for kernel in (fused._LAYERNORM_FWD[1], fused._block_forward_body, nu._MM_NT[0]):
        stamp = kernel._cache._impl._locator.get_source_stamp()
        assert stamp[:2] == ("dxstudio-engine", digest)


SCRIPT = textwrap.dedent("""
    import numpy as np
    import engcopy.fused as f
    f.relu_forward(np.ones(8, np.float32))
    stats = f._RELU_FWD[1].stats
    print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
""")


def test_a_change_to_numerics_recompiles_the_fused_kernels(tmp_path):
    pkg = tmp_path / "engcopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in nu.ENGINE_KERNEL_FILES:
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
    with open(pkg / "numerics.py", "a") as fh:  # fused.py unchanged: only the file it calls
        fh.write("\n# an edit\n")
    assert run() == (0, 1)  # not the stale cached code: compiled again
