"""The median height of a page's level lines, as the small-print rule (SMALL_TEXT_PX) judges it,
from the first detection at several detector sides (DET_MIN_SIDE), with the detection's CPU
seconds: to set SMALL_TEXT_PX again for another side so that the same pages are read enlarged
(docs/ocr.md, "Tenth round").

    python bench/ocr_heights.py 736,640,576 IMG...
    THRESHOLDS=736:18,576:19 python bench/ocr_heights.py 736,576 IMG...   # pages judged otherwise

Each line: the image, its size, then for each side "side: median px / boxes / detection s".
With THRESHOLDS the pages that a side and its threshold take for small print otherwise than the
first side and its threshold are listed.
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dxstudio import ocr  # noqa: E402


def median_height(eng, rgb):
    """(median level-line height in the pixels small_text_scale judges, boxes, detection CPU s)."""
    o = eng.ocr
    img = np.ascontiguousarray(rgb[:, :, ::-1])
    raw_h, raw_w = img.shape[:2]
    img, ratio_h, ratio_w = o.preprocess(img)
    record = {"preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w}}
    img, record = o.maybe_add_letterbox(img, record)
    t = time.process_time()
    boxes, _ = o.auto_text_det(img)
    spent = time.process_time() - t
    if boxes is None or not len(boxes):
        return float("nan"), 0, spent
    flat = []
    for q in o._get_origin_points(boxes, record, raw_h, raw_w):
        if np.linalg.norm(q[0] - q[3]) < 1.5 * np.linalg.norm(q[0] - q[1]):  # level, as Line.vertical
            flat.append(float(q[:, 1].max() - q[:, 1].min()))
    seen = min(1.0, o.max_side_len / max(rgb.shape[:2]))
    return (sorted(flat)[len(flat) // 2] * seen if flat else float("nan")), len(boxes), spent


def main(sides: str, paths) -> None:
    sides = [int(s) for s in sides.split(",")]
    limits = dict((int(a), float(b)) for a, b in (x.split(":") for x in os.environ["THRESHOLDS"].split(","))) \
        if os.environ.get("THRESHOLDS") else {}
    eng = ocr.get_engine("rapidocr")
    det = eng.ocr.text_det
    spent = dict.fromkeys(sides, 0.0)
    differ = {s: [] for s in sides}
    for p in paths:
        rgb = ocr.read_image_file(p)[0][1]
        row, small = [], {}
        for s in sides:
            det.limit_side_len = s
            med, n, t = median_height(eng, rgb)
            spent[s] += t
            row.append(f"{s}: {med:.1f} / {n} / {t:.3f}")
            if s in limits:
                small[s] = med < limits[s]
        print(Path(p).name, rgb.shape[1], rgb.shape[0], " | ".join(row), flush=True)
        for s in small:
            if small[s] != small[sides[0]]:
                differ[s].append(Path(p).name)
    det.limit_side_len = ocr.DET_MIN_SIDE
    print("detection CPU s a page: " + ", ".join(f"{s}: {spent[s] / len(paths):.3f}" for s in sides))
    for s in limits:
        if s != sides[0]:
            print(f"small print at {s} < {limits[s]} otherwise than at {sides[0]} < {limits.get(sides[0])}: "
                  f"{len(differ[s])} {differ[s]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
