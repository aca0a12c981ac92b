"""bench/pretrain_loso.sh: its options and the table it writes (--table-only: nothing is trained)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "pretrain_loso.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(*args):
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def _eval(path, agreements):
    path.write_text(json.dumps({"fields": {f: {"agreement": a} for f, a in agreements.items()}}))


def test_table_averages_tune_seeds_and_names_each_variant(tmp_path):
    _eval(tmp_path / "ev-none.json", {"company": 0.4, "total": 0.6})
    _eval(tmp_path / "ev-none-s2.json", {"company": 0.6, "total": 0.8})
    _eval(tmp_path / "ev-naf.json", {"company": 0.2, "total": 0.2})  # seed 2 missing: one run
    _eval(tmp_path / "ev-random-s2.json", {"company": 0.0, "total": 0.1})
    (tmp_path / "pt-none").mkdir()
    (tmp_path / "pt-none" / "report.json").write_text(json.dumps({"windows": 4254, "final_loss": 0.4123}))
    r = _run("--out", str(tmp_path), "--tune-seeds", "1 2", "--table-only")
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "table.md").read_text().splitlines()
    assert rows[0].startswith("| pretrained on | windows | final loss | company | total | mean |")
    assert rows[2] == "| every source | 4,254 | 0.41 | 0.500 | 0.700 | **0.600** | 0.500, 0.700 (2) |"
    assert rows[3] == "| all but NAF |  |  | 0.200 | 0.200 | **0.200** | 0.200 (1) |"
    assert rows[4].startswith("| nothing (new random model) |  |  | 0.000 | 0.100 | **0.050** |")
    assert len(rows) == 5
    assert not (tmp_path / "times.tsv").exists()  # --table-only runs nothing


def test_unknown_option_and_variant_are_refused(tmp_path):
    r = _run("--bogus")
    assert r.returncode == 2 and "unknown option --bogus" in r.stderr
    r = _run("--out", str(tmp_path), "--variants", "fred")
    assert r.returncode == 2 and "unknown variant fred" in r.stderr
