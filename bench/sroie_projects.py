"""The SROIE projects of docs/base-model.md's transfer measurements, cut from one imported
project (`dxstudio import sroie ../shared/data/sroie-train /tmp/sroie_pt`):

    python bench/sroie_projects.py [--src /tmp/sroie_pt] [--dst /tmp]

    sroie_p25   receipts 000-024, heldout_fraction 0.04
    sroie_p50   receipts 000-049, heldout_fraction 0.02
    sroie_p150  receipts 000-149, heldout_fraction 0.007
    sroie_pall  receipts 000-399 and 600-625, heldout_fraction 0.005
    sroie_eval  receipts 400-599, heldout_fraction 0.995: the scoring project (`dxstudio eval`
                scores its held-out pages, i.e. all but one), outside every training project
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import copy_subproject  # noqa: E402

PROJECTS = {
    "sroie_p25": (range(0, 25), 0.04),
    "sroie_p50": (range(0, 50), 0.02),
    "sroie_p150": (range(0, 150), 0.007),
    "sroie_pall": (list(range(0, 400)) + list(range(600, 626)), 0.005),
    "sroie_eval": (range(400, 600), 0.995),
}


def main() -> None:
    ap = argparse.ArgumentParser(description="the SROIE projects of docs/base-model.md")
    ap.add_argument("--src", default="/tmp/sroie_pt")
    ap.add_argument("--dst", default="/tmp")
    a = ap.parse_args()
    for name, (ids, fraction) in PROJECTS.items():
        copy_subproject(Path(a.src), Path(a.dst) / name, [f"{i:03d}" for i in ids], {"heldout_fraction": fraction})
        print(Path(a.dst) / name)


if __name__ == "__main__":
    main()
