"""Small print read enlarged: detected again at the enlarged size (SMALL_TEXT_REDETECT, the
default) or the page's own detector boxes cut from the enlarged page (no second detection),
whole reads as `import images` does them (ocr_image), interleaved page by page in one process:
process CPU seconds per page, pages per second per core, the pages that read the same words,
the CER and folded CER against the data set's lines (bench/ocr_sroie.py) and the SROIE key
values grounding does not find on each (docs/ocr.md, "Seventh round").

    python bench/ocr_small.py IMG...      # SROIE receipts: their stems name box/ and key/
"""
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from dxstudio import ocr  # noqa: E402
from dxstudio.engine.page import Page, Word  # noqa: E402
from dxstudio.grounding import ground_answers  # noqa: E402
from ocr_sroie import fold, levenshtein, reference_text  # noqa: E402

ROOT = HERE.parents[1] / "shared" / "data" / "sroie-train"
FIELDS = ("company", "date", "address", "total")


def main(paths) -> None:
    images = [(Path(p).stem, rgb) for p in paths for _, rgb in ocr.read_image_file(p)]
    ocr.ocr_image(images[0][1])  # load the sessions
    ways = {True: "detected again (SMALL_TEXT_REDETECT, default)", False: "the page's own boxes"}
    spent = {k: [] for k in ways}
    err = {k: [0, 0, 0, 0] for k in ways}  # folded errors, folded ref, plain errors, plain ref
    missed = {k: [] for k in ways}
    same = small = 0
    for stem, rgb in images:
        words = {}
        key = json.loads((ROOT / "key" / f"{stem}.json").read_text(encoding="utf-8"))
        for redetect in ways:
            ocr.SMALL_TEXT_REDETECT = redetect
            t = time.process_time()
            r = ocr.ocr_image(rgb)
            spent[redetect].append(time.process_time() - t)
            words[redetect] = [(w.text, w.box) for w in r.words]
            hyp = " ".join(w.text for w in r.words)
            plain = reference_text(ROOT, stem)
            e = err[redetect]
            e[0] += levenshtein(fold(hyp), fold(plain))
            e[1] += len(fold(plain))
            e[2] += levenshtein(hyp, plain)
            e[3] += len(plain)
            page = Page(stem, float(r.width), float(r.height), tuple(Word(w.text, tuple(w.box)) for w in r.words))
            g = ground_answers(page, {f: key.get(f) for f in FIELDS}, FIELDS)
            missed[redetect] += [f"{stem} {f}" for f in FIELDS if g[f]["status"] == "absent"]
        small += ocr.get_engine("rapidocr").small_quads is not None
        ocr.get_engine("rapidocr").small_quads = None
        same += words[True] == words[False]
    ocr.SMALL_TEXT_REDETECT = True
    n = len(images)
    for k, name in ways.items():
        s, e = spent[k], err[k]
        print(f"small print {name:48s} median {statistics.median(s):.2f} mean {sum(s) / n:.2f} s/page "
              f"({n / sum(s):.2f} pages/s/core) | CER {e[2] / max(e[3], 1):.4f} folded {e[0] / max(e[1], 1):.4f} "
              f"| not grounded {len(missed[k])}: {', '.join(missed[k])}")
    print(f"{n} pages, {small} small print; the same words on {same}/{n}; "
          f"ratio of the means {sum(spent[False]) / sum(spent[True]):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
