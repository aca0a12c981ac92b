"""rapidocr settings side by side on the same images, interleaved page by page in one process
(so the machine's load falls on each alike): process CPU seconds per page (median, mean) split
into detection, the 0/180 classifier and recognition, the folded CER against the data set's
lines (bench/ocr_sroie.py) and how many pages read exactly as the first setting's (docs/ocr.md,
"Speed").

    python bench/ocr_settings.py IMG...                     # every setting below
    CONFIGS=rapidocr,shipped python bench/ocr_settings.py IMG...

IMG are SROIE receipts (their stem names ../shared/data/sroie-train/box/<stem>.csv). Each read is
RapidEngine.lines (one read, no upright check, no small-print re-read), one thread.
"""
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from dxstudio import ocr  # noqa: E402
from ocr_sroie import fold, levenshtein, reference_text  # noqa: E402

ROOT = HERE.parents[1] / "shared" / "data" / "sroie-train"

# name: (det_limit_type, det_limit_side_len, recognition min width, memory arena, batch)
SETTINGS = {
    "rapidocr": ("min", 736, 320, False, 1),  # rapidocr 1.4.4's own (one line at a time, as before)
    "arena": ("min", 736, 320, True, 1),
    "det-native": ("min", 32, 320, False, 1),  # the page's own size (never enlarged)
    "det-max960": ("max", 960, 320, False, 1),
    "det-min512": ("min", 512, 320, False, 1),
    "rec-w160": ("min", 736, 160, False, 1),
    "rec-w96": ("min", 736, 96, False, 1),
    "rec-w48": ("min", 736, 48, False, 1),
    "w48-batch6": ("min", 736, 48, True, 6),
    "shipped": ("min", ocr.DET_MIN_SIDE, ocr.REC_MIN_WIDTH, True, ocr.REC_BATCH),  # ocr.py now
}


def engine(limit_type, side, min_width, arena, batch):
    import onnxruntime
    from rapidocr_onnxruntime import RapidOCR

    e = object.__new__(ocr.RapidEngine)
    e.version = "bench"
    e.ocr = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1, det_limit_type=limit_type,
                     det_limit_side_len=side)
    e.ocr.text_rec.rec_batch_num = batch
    e.ocr.text_rec.rec_image_shape = list(e.ocr.text_rec.rec_image_shape[:2]) + [min_width]
    if arena:
        for w in (e.ocr.text_det.infer, e.ocr.text_cls.infer, e.ocr.text_rec.session):
            ocr._reuse_memory(w, onnxruntime)
    return e


def main(paths) -> None:
    names = os.environ.get("CONFIGS", ",".join(SETTINGS)).split(",")
    engines = {k: engine(*SETTINGS[k]) for k in names}
    spent = {k: {"det": 0.0, "cls": 0.0, "rec": 0.0} for k in names}
    cur = [names[0]]

    def timed(name, f):
        def g(*a, **kw):
            t = time.process_time()
            r = f(*a, **kw)
            spent[cur[0]][name] += time.process_time() - t
            return r
        return g

    for k, e in engines.items():
        o = e.ocr
        o.auto_text_det, o.text_cls, o.text_rec = timed("det", o.auto_text_det), timed("cls", o.text_cls), timed("rec", o.text_rec)
        cur[0] = k
        e.lines(np.full((64, 64, 3), 255, np.uint8))  # load the sessions
        spent[k] = {"det": 0.0, "cls": 0.0, "rec": 0.0}
    per = {k: [] for k in names}
    text = {k: {} for k in names}
    for p in paths:
        for _, rgb in ocr.read_image_file(p):
            for k, e in engines.items():
                cur[0] = k
                t = time.process_time()
                lines = e.lines(rgb)
                per[k].append(time.process_time() - t)
                text[k][Path(p).stem] = " ".join(w.text for w in ocr._ordered_words(lines))
    n = len(per[names[0]])
    print(f"{n} pages; process CPU s per page, one thread")
    for k in names:
        err = ref_n = same = 0
        for stem, hyp in text[k].items():
            ref = fold(reference_text(ROOT, stem))
            err += levenshtein(fold(hyp), ref)
            ref_n += len(ref)
            same += hyp == text[names[0]][stem]
        tot = sum(per[k])
        s = spent[k]
        print(f"{k:12s} median {np.median(per[k]):.2f} mean {tot / n:.2f} s/page ({n / tot:.2f} pages/s/core): "
              f"det {s['det'] / n:.2f} cls {s['cls'] / n:.2f} rec {s['rec'] / n:.2f} | CER folded {err / max(ref_n, 1):.4f} "
              f"| same words as {names[0]} {same}/{n}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
