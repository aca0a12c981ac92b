"""The pages grounding keeps under absent_value exclude and ignore (docs/ocr.md, "Eighth round").

    python bench/absent_pages.py PROJECT [PROJECT...]

For each project: the pages each policy keeps, how many pages both keep with the same targets
(tags, field words, unscored fields: where all are the same, a run tuned on the project is the
same run under either policy), the pages only `ignore` keeps (the field it leaves unscored and
the words it ignores) and the reasons `exclude` gives. Targets as a run builds them (max_words
512, repeats ignore: the defaults).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dxstudio.grounding import project_targets  # noqa: E402
from dxstudio.project import Project  # noqa: E402
for root in sys.argv[1:]:
    p = Project.open(root)
    out = {}
    for absent in ("exclude", "ignore"):
        out[absent] = project_targets(p, max_words=512, repeats="ignore", absent=absent)
    e, i = out["exclude"], out["ignore"]
    ek = {pid: t for pid, _, t in e.kept}; ik = {pid: t for pid, _, t in i.kept}
    same = sum(1 for pid in ek if pid in ik and np.array_equal(ek[pid].tags, ik[pid].tags)
               and ek[pid].field_words == ik[pid].field_words and ek[pid].unscored == ik[pid].unscored)
    extra = sorted(set(ik) - set(ek))
    print(f"{root}: exclude keeps {len(ek)}, excluded {len(e.excluded)}, errors {len(e.errors)}; "
          f"ignore keeps {len(ik)}, excluded {len(i.excluded)}; kept by both with the same targets: {same}/{len(ek)}; "
          f"kept only by ignore: {extra}")
    for pid, r in e.excluded[:20]:
        print("   excluded at exclude:", pid, r[:150])
    for pid in extra:
        print("   ignore unscored:", pid, sorted(ik[pid].unscored), "ignored words:", int((ik[pid].tags == -1).sum()))
