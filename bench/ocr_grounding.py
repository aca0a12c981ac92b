"""Grounding on OCR'd pages (docs/ocr.md, "Grounding OCR text").

    python bench/ocr_grounding.py failures PROJECT ANSWERS.jsonl [PROJECT ANSWERS.jsonl ...]
        every answered value that does not ground (status absent), beside the page's words,
        then pages kept / values failed per field
    python bench/ocr_grounding.py paired NEW_PROJECT OLD_PROJECT ANSWERS.jsonl SROIE_ROOT
        on the pages NEW_PROJECT holds, pages kept and CER (plain, folded) of each project

ANSWERS.jsonl: one {"id": page id, "answers": {field: value}} a line (bench/ocr_sroie.py jsonl).
Grounding is computed afresh (ground_answers), not read from the label files.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dxstudio.grounding import ground_answers  # noqa: E402
from dxstudio.project import Project  # noqa: E402


def answers_of(path) -> dict:
    return {d["id"]: d["answers"] for d in map(json.loads, Path(path).read_text(encoding="utf-8").splitlines()) if d}


def failures(args) -> None:
    total = kept = failed = 0
    fields: dict = {}
    for proj, jl in zip(args[0::2], args[1::2]):
        P, ans = Project.open(proj), answers_of(jl)
        for pid in P.page_ids():
            if pid not in ans:
                continue
            page, _ = P.read_page(pid)
            rep = ground_answers(page, ans[pid], list(ans[pid]))
            bad = [n for n, g in rep.items() if g["status"] == "absent"]
            total += 1
            kept += not bad
            for n in bad:
                failed += 1
                fields[n] = fields.get(n, 0) + 1
                print(f"== {Path(proj).name} {pid} {n}: {ans[pid][n]!r}")
                print("   ", " | ".join(w.text for w in page.words)[:900])
    print(f"# kept {kept}/{total}, failed values {failed} {fields}")


def paired(args) -> None:
    from ocr_sroie import fold, levenshtein, reference_text

    new, old, jl, root = Path(args[0]), Path(args[1]), args[2], Path(args[3])
    ans = answers_of(jl)
    ids = sorted(p.stem for p in (new / "pages").glob("*.json"))
    for name, proj in (("new", new), ("old", old)):
        P = Project.open(proj)
        kept = err = ferr = n = fn = 0
        for pid in ids:
            page, _ = P.read_page(pid)
            rep = ground_answers(page, ans[pid], list(ans[pid]))
            kept += all(g["status"] != "absent" for g in rep.values())
            hyp, ref = " ".join(w.text for w in page.words), reference_text(root, pid)
            err += levenshtein(hyp, ref)
            n += len(ref)
            ferr += levenshtein(fold(hyp), fold(ref))
            fn += len(fold(ref))
        print(f"{name} ({proj}): {len(ids)} pages, kept {kept}, CER {err / max(n, 1):.4f}, folded {ferr / max(fn, 1):.4f}")


if __name__ == "__main__":
    {"failures": failures, "paired": paired}[sys.argv[1]](sys.argv[2:])
