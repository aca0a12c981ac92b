"""Whole reads of receipts as `import images` does them (ocr_image: upright check, small print read
again), with the small print judged before recognition (EARLY_SMALL_TEXT, the default) and after
it (the fifth round's code), interleaved page by page in one process: process CPU seconds per
page (median, mean), pages per second per core, and how many pages read the same words
(docs/ocr.md, "Sixth round").

    python bench/ocr_early.py IMG...
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxstudio import ocr  # noqa: E402


def main(paths) -> None:
    images = [(Path(p).stem, rgb) for p in paths for _, rgb in ocr.read_image_file(p)]
    ocr.ocr_image(images[0][1])  # load the sessions
    spent = {False: [], True: []}
    same = small = 0
    for stem, rgb in images:
        words = {}
        for early in (False, True):
            ocr.EARLY_SMALL_TEXT = early
            calls = []
            eng = ocr.get_engine("rapidocr")
            real = eng.lines_scaled
            eng.lines_scaled = lambda img, scale: calls.append(scale) or real(img, scale)
            t = time.process_time()
            r = ocr.ocr_image(rgb)
            spent[early].append(time.process_time() - t)
            eng.lines_scaled = real
            words[early] = [(w.text, w.box) for w in r.words]
            if early:
                small += bool(calls)
        same += words[True] == words[False]
    n = len(images)
    for early, name in ((False, "after recognition (fifth round)"), (True, "from the detector's boxes (EARLY_SMALL_TEXT)")):
        s = spent[early]
        print(f"small print judged {name:45s} median {statistics.median(s):.2f} mean {sum(s) / n:.2f} s/page "
              f"({n / sum(s):.2f} pages/s/core)")
    print(f"{n} pages, {small} read enlarged; the same words on {same}/{n}; "
          f"ratio of the means {sum(spent[True]) / sum(spent[False]):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
