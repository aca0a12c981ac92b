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
import json
import shutil
from pathlib import Path

PROJECTS = {
    "sroie_p25": (range(0, 25), 0.04),
    "sroie_p50": (range(0, 50), 0.02),
    "sroie_p150": (range(0, 150), 0.007),
    "sroie_pall": (list(range(0, 400)) + list(range(600, 626)), 0.005),
    "sroie_eval": (range(400, 600), 0.995),
}


def make(src: Path, dst: Path, ids, fraction: float) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "pages").mkdir(parents=True)
    (dst / "labels").mkdir()
    d = json.loads((src / "dxproject.json").read_text(encoding="utf-8"))
    d["settings"] = {"heldout_fraction": fraction}
    d["name"] = dst.name
    (dst / "dxproject.json").write_text(json.dumps(d, indent=2), encoding="utf-8")
    for i in ids:
        shutil.copy(src / "pages" / f"{i:03d}.json", dst / "pages")
        label = src / "labels" / f"{i:03d}.json"
        if label.exists():
            shutil.copy(label, dst / "labels")


def main() -> None:
    ap = argparse.ArgumentParser(description="the SROIE projects of docs/base-model.md")
    ap.add_argument("--src", default="/tmp/sroie_pt")
    ap.add_argument("--dst", default="/tmp")
    a = ap.parse_args()
    for name, (ids, fraction) in PROJECTS.items():
        make(Path(a.src), Path(a.dst) / name, ids, fraction)
        print(Path(a.dst) / name)


if __name__ == "__main__":
    main()
