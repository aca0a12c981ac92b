"""Where a whole `import images` page's CPU goes (docs/ocr.md, "Tenth round"): ocr_file, the
work a worker does on one file, run on each image with the time of its parts on the process CPU
clock (time.process_time), one thread: decoding (with EXIF), detection (the first and, on small
print, the enlarged page's), the enlarging itself, the crops, the 0/180 classifier, recognition,
the character boxes, the words (reading order and the word rules), a turned page's second read,
and the stored image's encoding; "rest" is what is left (rapidocr's and our Python between them).

    python bench/ocr_import_profile.py IMG...          # medians and means over the pages
    PAGES=1 python bench/ocr_import_profile.py IMG...  # and each page's line

The engine's start (the three sessions, the folded models' cache check) is timed apart: a worker
pays it once. The driver's share (reading the files, writing the page JSON and images) is the
whole command's CPU less its workers'; time the command itself for it (docs/ocr.md).
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dxstudio import ocr  # noqa: E402

PARTS = ("decode", "det", "det_big", "enlarge", "crop", "cls", "rec", "boxes", "words", "again", "encode")


def main(paths) -> None:
    t = time.process_time()
    eng = ocr.get_engine("rapidocr")
    eng.lines(np.full((64, 64, 3), 255, np.uint8))  # the sessions' first run
    start = time.process_time() - t
    o = eng.ocr
    spent = dict.fromkeys(PARTS, 0.0)
    depth = {"scaled": 0, "again": 0}
    counts = {"lines": 0, "enlarged": 0, "turned": 0}

    def timed(name, f, owner=None):
        def g(*a, **kw):
            t0 = time.process_time()
            try:
                return f(*a, **kw)
            finally:
                dt = time.process_time() - t0
                key = name
                if name == "det" and depth["scaled"]:
                    key = "det_big"
                spent[key] += dt
                if name == "rec":
                    counts["lines"] += len(a[0])
        return g

    o.auto_text_det = timed("det", o.auto_text_det)
    o.get_crop_img_list = timed("crop", o.get_crop_img_list)
    o.text_cls = timed("cls", o.text_cls)
    o.text_rec = timed("rec", o.text_rec)
    ocr._char_boxes = timed("boxes", ocr._char_boxes)
    ocr.page_words = timed("words", ocr.page_words)
    ocr.encode_image = timed("encode", ocr.encode_image)
    ocr.read_image_bytes = timed("decode", ocr.read_image_bytes)
    import cv2

    resize = cv2.resize

    def timed_resize(*a, **kw):  # the page enlarged for small print (lines_scaled's resize)
        t0 = time.process_time()
        r = resize(*a, **kw)
        if depth["scaled"]:
            spent["enlarge"] += time.process_time() - t0
        return r

    scaled = eng.lines_scaled

    def lines_scaled(*a, **kw):
        counts["enlarged"] += 1
        depth["scaled"] += 1
        cv2.resize = timed_resize
        try:
            return scaled(*a, **kw)
        finally:
            cv2.resize = resize
            depth["scaled"] -= 1

    eng.lines_scaled = lines_scaled
    rotation = eng.rotation

    def counted_rotation(lines):
        r = rotation(lines)
        counts["turned"] += bool(r)
        return r

    eng.rotation = counted_rotation

    rows = []
    for p in paths:
        p = Path(p)
        data = p.read_bytes()
        before = dict(spent)
        t0 = time.process_time()
        ocr.ocr_file("rapidocr", str(p), p.suffix, data)
        total = time.process_time() - t0
        row = {k: spent[k] - before[k] for k in PARTS}
        row["total"] = total
        row["rest"] = total - sum(row[k] for k in PARTS)
        rows.append(row)
        if os.environ.get("PAGES"):
            print(p.name, " ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    n = len(rows)
    keys = list(PARTS) + ["rest", "total"]
    print(f"{n} pages, {counts['lines']} lines recognised, {counts['enlarged']} read enlarged (small print), "
          f"{counts['turned']} turned; the engine's start {start:.2f} s (once a worker); process CPU s a page:")
    tot = sum(r["total"] for r in rows)
    for k in keys:
        v = [r[k] for r in rows]
        print(f"  {k:8s} median {np.median(v):.3f}  mean {np.mean(v):.3f}  share {sum(v) / tot:6.1%}")
    print(f"pages/s/core over these reads: {n / tot:.2f} (1 / mean), median page {np.median([r['total'] for r in rows]):.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
