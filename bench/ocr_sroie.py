"""OCR on SROIE receipts against the data set's own OCR lines (docs/ocr.md).

    python bench/ocr_sroie.py subset --ids 0-149 --out DIR      # images + box/key subset folders
    python bench/ocr_sroie.py schema PROJECT                    # add SROIE's four fields
    python bench/ocr_sroie.py jsonl SROIE_ROOT PROJECT OUT.jsonl  # the key values, for label --jsonl
    python bench/ocr_sroie.py cer SROIE_ROOT PROJECT [PROJECT...]  # CER of each project's OCR

The reference of a receipt is the data set's box/<id>.csv: its lines in the reading order the
importers use (dxstudio.importers.reading_order), each line's words left to right, joined
by single spaces. The hypothesis is the project page's words in their order, joined the same
way. CER = Levenshtein distance / reference characters, summed over pages (a micro
average); "folded" compares case-folded texts without any white space (what grounding's
normalizer sees: dxstudio/grounding.py).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute: 1 each), one NumPy row at a time."""
    if not a:
        return len(b)
    if not b:
        return len(a)
    bb = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    prev = np.arange(len(b) + 1, dtype=np.int64)
    for i, ca in enumerate(a, 1):
        code = ord(ca)
        sub = prev[:-1] + (bb != code)
        cur = np.empty_like(prev)
        cur[0] = i
        # deletions and substitutions first, insertions by a running minimum
        np.minimum(sub, prev[1:] + 1, out=cur[1:])
        # cur[j] = min(cur[j], cur[j-1] + 1): a cumulative minimum of cur[j] - j, plus j
        idx = np.arange(len(b) + 1, dtype=np.int64)
        cur = np.minimum.accumulate(cur - idx) + idx
        prev = cur
    return int(prev[-1])


def reference_text(root: Path, stem: str) -> str:
    from dxstudio.importers import reading_order

    lines = []
    raw = (root / "box" / f"{stem}.csv").read_bytes().decode("utf-8-sig", errors="replace")
    for line in raw.splitlines():
        parts = line.split(",", 8)
        if len(parts) < 9 or not parts[8].strip():
            continue
        c = [float(v) for v in parts[:8]]
        lines.append(((min(c[0::2]), min(c[1::2]), max(c[0::2]), max(c[1::2])), " ".join(parts[8].split())))
    return " ".join(lines[i][1] for i in reading_order([b for b, _ in lines]))


def page_text(path: Path) -> str:
    d = json.loads(path.read_text(encoding="utf-8"))
    return " ".join(w["text"] for w in d["words"])


def fold(t: str) -> str:
    return "".join(t.casefold().split())


def ids_of(spec: str) -> list[str]:
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.extend(f"{i:03d}" for i in range(int(a), int(b or a) + 1))
    return out


def cmd_subset(a) -> None:
    src, out = Path(a.src), Path(a.out)
    for sub in ("img", "sroie/box", "sroie/key", "sroie/img"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    ids = ids_of(a.ids)
    rows = [r for r in (src / "image_sizes.csv").read_text(encoding="utf-8").splitlines()]
    keep = [rows[0]] + [r for r in rows[1:] if r.split(",")[0] in set(ids)]
    (out / "sroie" / "image_sizes.csv").write_text("\n".join(keep) + "\n", encoding="utf-8")
    for i in ids:
        shutil.copy(src / "img" / f"{i}.jpg", out / "img")
        shutil.copy(src / "img" / f"{i}.jpg", out / "sroie" / "img")
        shutil.copy(src / "box" / f"{i}.csv", out / "sroie" / "box")
        shutil.copy(src / "key" / f"{i}.json", out / "sroie" / "key")
    print(out, len(ids))


def cmd_schema(a) -> None:
    from dxstudio.importers import SROIE_FIELDS
    from dxstudio.project import Project

    p = Project.open(a.project)
    added = p.add_fields(SROIE_FIELDS)
    p.save()
    print(json.dumps({"project": a.project, "fields_added": added}))


def cmd_jsonl(a) -> None:
    root, project = Path(a.root), Path(a.project)
    lines = []
    for page in sorted((project / "pages").glob("*.json")):
        key = root / "key" / f"{page.stem}.json"
        if key.is_file():
            d = json.loads(key.read_text(encoding="utf-8"))
            lines.append(json.dumps({"id": page.stem, "answers": {k: (None if v is None else str(v)) for k, v in d.items()}}))
    Path(a.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(a.out, len(lines))


def cmd_cer(a) -> None:
    root = Path(a.root)
    for project in a.projects:
        pages = sorted((Path(project) / "pages").glob("*.json"))
        err = ref_n = ferr = fref_n = 0
        engines = set()
        for p in pages:
            ref = reference_text(root, p.stem)
            hyp = page_text(p)
            engines.add(json.loads(p.read_text(encoding="utf-8")).get("ocr", {}).get("engine", "dataset"))
            err += levenshtein(hyp, ref)
            ref_n += len(ref)
            ferr += levenshtein(fold(hyp), fold(ref))
            fref_n += len(fold(ref))
        print(json.dumps({"project": project, "engine": sorted(engines), "pages": len(pages),
                          "cer": round(err / max(ref_n, 1), 4), "cer_folded": round(ferr / max(fref_n, 1), 4),
                          "reference_chars": ref_n}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("subset")
    s.add_argument("--src", default=str(Path(__file__).resolve().parents[2] / "shared/data/sroie-train"))
    s.add_argument("--ids", required=True)
    s.add_argument("--out", required=True)
    s = sub.add_parser("schema")
    s.add_argument("project")
    s = sub.add_parser("jsonl")
    s.add_argument("root")
    s.add_argument("project")
    s.add_argument("out")
    s = sub.add_parser("cer")
    s.add_argument("root")
    s.add_argument("projects", nargs="+")
    a = ap.parse_args()
    {"subset": cmd_subset, "schema": cmd_schema, "jsonl": cmd_jsonl, "cer": cmd_cer}[a.cmd](a)


if __name__ == "__main__":
    main()
