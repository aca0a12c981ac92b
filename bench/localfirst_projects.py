"""The projects of docs/tuning.md "Measured: LocalFirst that never over-promises" (issue 21),
cut by page position (sorted ids) from one imported project:

    dxstudio import sroie ../shared/data/sroie-train /tmp/i21/sroie_all
    dxstudio import cord ../shared/data/cord-v1-train/json /tmp/i21/cord_all
    python bench/localfirst_projects.py /tmp/i21/sroie_all /tmp/i21/sroie --test 426:626
    python bench/localfirst_projects.py /tmp/i21/cord_all /tmp/i21/cord --test 600:800

makes PREFIX25, PREFIX50, PREFIX150 (the first 25, 50, 150 pages, the project's settings left
at their defaults) and PREFIXtest (the --test slice: pages outside every training project,
scored with `dxstudio eval MODEL PREFIXtest --all`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import copy_subproject  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("prefix")
    ap.add_argument("--sizes", default="25,50,150")
    ap.add_argument("--test", required=True, metavar="START:END", help="positions of the test pages")
    a = ap.parse_args()
    src = Path(a.src)
    ids = sorted(p.stem for p in (src / "pages").glob("*.json"))
    lo, hi = (int(x) for x in a.test.split(":"))
    for n in (int(s) for s in a.sizes.split(",")):
        if n > lo:
            raise SystemExit(f"a training project of {n} pages would overlap the test pages from {lo}")
        copy_subproject(src, Path(f"{a.prefix}{n}"), ids[:n], None)
        print(f"{a.prefix}{n}")
    copy_subproject(src, Path(f"{a.prefix}test"), ids[lo:hi], None)
    print(f"{a.prefix}test")


if __name__ == "__main__":
    main()
