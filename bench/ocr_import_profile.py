"""Where a whole `import images` page's CPU goes (docs/ocr.md, "Tenth round"): ocr_file, the
work a worker does on one file, run on each image with the time of its parts on the process CPU
clock (time.process_time), one thread: decoding (with EXIF), detection (the first and, on small
print, the enlarged page's), the enlarging itself, the crops, the 0/180 classifier, recognition,
the character boxes, the words (reading order and the word rules), and the stored image's
encoding (a turned page's second read counts in its parts); "rest" is what is left (rapidocr's
and our Python between them).

    python bench/ocr_import_profile.py IMG...          # the shipped settings (ocr.py)
    PAGES=1 python bench/ocr_import_profile.py IMG...  # and each page's line
    CONFIGS="shipped;DET_MIN_SIDE=736,SMALL_TEXT_PX=18,REC_HEIGHT=44,REC_MIN_WIDTH=147" \\
        python bench/ocr_import_profile.py IMG...      # settings side by side, page by page

CONFIGS: settings of dxstudio/ocr.py separated by ";", each a list of NAME=VALUE ("shipped":
none changed); each gets its own engine, and the pages are read by each in turn (interleaved, so
the machine's load falls on each alike); the words are compared with the first's. The engine's
start (the three sessions, the folded models' cache check) is timed apart: a worker pays it
once. The driver's share (reading the files, writing the page JSON and images, its own start) is
the whole command's CPU less its workers'; time the command itself for it (docs/ocr.md).
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dxstudio import ocr  # noqa: E402

PARTS = ("decode", "det", "det_big", "enlarge", "crop", "cls", "rec", "boxes", "words", "encode")


def parse(configs: str) -> list:
    out = []
    for item in configs.split(";"):
        item = item.strip()
        sets = {}
        for pair in item.split(","):
            if "=" in pair:
                k, v = pair.split("=", 1)
                old = getattr(ocr, k.strip())  # an unknown name stops here
                sets[k.strip()] = type(old)(float(v)) if isinstance(old, (int, float)) else v
        out.append((item or "shipped", sets))
    return out


def main(paths) -> None:
    configs = parse(os.environ.get("CONFIGS", "shipped"))
    shipped = {k: getattr(ocr, k) for _, sets in configs for k in sets}
    cur = [0]
    spent = [dict.fromkeys(PARTS, 0.0) for _ in configs]
    depth = {"scaled": 0}
    counts = [{"lines": 0, "enlarged": 0} for _ in configs]

    def use(i):
        cur[0] = i
        for k, v in shipped.items():
            setattr(ocr, k, v)
        for k, v in configs[i][1].items():
            setattr(ocr, k, v)

    def timed(name, f):
        def g(*a, **kw):
            t0 = time.process_time()
            try:
                return f(*a, **kw)
            finally:
                key = "det_big" if name == "det" and depth["scaled"] else name
                spent[cur[0]][key] += time.process_time() - t0
                if name == "rec":
                    counts[cur[0]]["lines"] += len(a[0])
        return g

    import cv2

    resize = cv2.resize

    def timed_resize(*a, **kw):  # the page enlarged for small print (lines_scaled's resize)
        t0 = time.process_time()
        try:
            return resize(*a, **kw)
        finally:
            spent[cur[0]]["enlarge"] += time.process_time() - t0

    # the modules a worker imports once (PIL's decoders, reading order), before any timing
    blank = np.full((64, 64, 3), 255, np.uint8)
    ocr.read_image_bytes(ocr.encode_image(blank, "JPEG"), "blank.jpg", ".jpg")
    ocr.page_words([], 64, 64)
    engines, starts = [], []
    for i, _ in enumerate(configs):
        use(i)
        t = time.process_time()
        eng = ocr.RapidEngine()
        eng.lines(blank)  # the sessions' first run
        starts.append(time.process_time() - t)
        o = eng.ocr
        o.auto_text_det = timed("det", o.auto_text_det)
        o.get_crop_img_list = timed("crop", o.get_crop_img_list)
        o.text_cls = timed("cls", o.text_cls)
        o.text_rec = timed("rec", o.text_rec)
        scaled = eng.lines_scaled

        def lines_scaled(*a, _scaled=scaled, **kw):
            counts[cur[0]]["enlarged"] += 1
            depth["scaled"] += 1
            cv2.resize = timed_resize
            try:
                return _scaled(*a, **kw)
            finally:
                cv2.resize = resize
                depth["scaled"] -= 1

        eng.lines_scaled = lines_scaled
        engines.append(eng)
    ocr._char_boxes = timed("boxes", ocr._char_boxes)
    ocr.page_words = timed("words", ocr.page_words)
    ocr.encode_image = timed("encode", ocr.encode_image)
    ocr.read_image_bytes = timed("decode", ocr.read_image_bytes)

    rows = [[] for _ in configs]
    words = [[] for _ in configs]
    for p in paths:
        p = Path(p)
        data = p.read_bytes()
        for i, eng in enumerate(engines):
            use(i)
            ocr._engines["rapidocr"] = eng
            before = dict(spent[i])
            t0 = time.process_time()
            pages = ocr.ocr_file("rapidocr", str(p), p.suffix, data)
            total = time.process_time() - t0
            row = {k: spent[i][k] - before[k] for k in PARTS}
            row["total"] = total
            row["rest"] = total - sum(row[k] for k in PARTS)
            rows[i].append(row)
            words[i].append([w for page in pages for w in page["words"]])
            if os.environ.get("PAGES"):
                print(p.name, configs[i][0], " ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    use(0)
    n = len(paths)
    for i, (name, _) in enumerate(configs):
        tot = sum(r["total"] for r in rows[i])
        same = sum(a == b for a, b in zip(words[i], words[0]))
        print(f"[{name}] {n} pages, {counts[i]['lines']} lines recognised, {counts[i]['enlarged']} read enlarged "
              f"(small print); the engine's start {starts[i]:.2f} s (once a worker); words as [{configs[0][0]}] "
              f"on {same}/{n}; process CPU s a page:")
        for k in list(PARTS) + ["rest", "total"]:
            v = [r[k] for r in rows[i]]
            print(f"  {k:8s} median {np.median(v):.3f}  mean {np.mean(v):.3f}  share {sum(v) / tot:6.1%}")
        med = np.median([r["total"] for r in rows[i]])
        print(f"  pages/s/core: {1 / med:.2f} (1 / median page, {med:.2f} s), {n / tot:.2f} (1 / mean)")


if __name__ == "__main__":
    main(sys.argv[1:])
