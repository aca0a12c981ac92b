"""rapidocr settings side by side on the same images, interleaved page by page in one process
(so the machine's load falls on each alike): process CPU seconds per page (median, mean) split
into detection, the 0/180 classifier, recognition and the rest (rapidocr's and our Python outside
the three models), the CER and folded CER against the data set's lines (bench/ocr_sroie.py) and
how many pages read exactly as the first setting's (docs/ocr.md, "Third round", "Fourth round").

    python bench/ocr_settings.py IMG...                     # every setting below
    CONFIGS=third,shipped,detnative python bench/ocr_settings.py IMG...
    CONFIGS=fourth,folded,fold-batch4 python bench/ocr_settings.py IMG...   # docs/ocr.md, "Fifth round"
    CONFIGS=folded,fold-h44,fold-h40 python bench/ocr_settings.py IMG...    # docs/ocr.md, "Ninth round"

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

# name: (det_limit_type, det_limit_side_len, recognition min width, memory arena, batch,
#        classifier sample (0: every line), our character boxes + table-normalised detector input,
#        folded models (ocr_graph), recognition width cap (0: none; a longer line is squeezed)
#        [, lines narrowed to this share of their width at their own height (default 1: not),
#        the recogniser's input height (REC_HEIGHT; default 48, rapidocr's)])
OLD = (0, False, False, 0)  # rapidocr's classifier on every line, its CalRecBoxes, its normalisation
FOURTH = ("min", 736, 160, True, 1, 8, True)  # the fourth round's shipped settings
SETTINGS = {
    "rapidocr": ("min", 736, 320, False, 1) + OLD,  # rapidocr 1.4.4's own (one line at a time, as before)
    "arena": ("min", 736, 320, True, 1) + OLD,
    "det-native": ("min", 32, 320, False, 1) + OLD,  # the page's own size (never enlarged)
    "det-max960": ("max", 960, 320, False, 1) + OLD,
    "det-min512": ("min", 512, 320, False, 1) + OLD,
    "rec-w160": ("min", 736, 160, False, 1) + OLD,
    "rec-w96": ("min", 736, 96, False, 1) + OLD,
    "rec-w48": ("min", 736, 48, False, 1) + OLD,
    "w48-batch6": ("min", 736, 48, True, 6) + OLD,
    "third": ("min", 736, 160, True, 1) + OLD,  # the third round's shipped settings
    "boxes": ("min", 736, 160, True, 1, 0, True, False, 0),  # + our character boxes and detector input table
    "cls8": ("min", 736, 160, True, 1, 8, False, False, 0),  # + the classifier on 8 lines of an upright page
    "det640": ("min", 640, 160, True, 1, 8, True, False, 0),
    "det576": ("min", 576, 160, True, 1, 8, True, False, 0),
    "det512": ("min", 512, 160, True, 1, 8, True, False, 0),
    "detnative": ("min", 32, 160, True, 1, 8, True, False, 0),
    "fourth": FOURTH + (False, 0),  # the fourth round's shipped settings (the models as they come)
    "folded": FOURTH + (True, 0),  # + the folded models
    "fold-batch4": ("min", 736, 160, True, 4, 8, True, True, 0),  # batches of 4 lines sorted by width
    "fold-batch8": ("min", 736, 160, True, 8, 8, True, True, 0),
    "fold-cap480": FOURTH + (True, 480),  # a line wider than 480 px at 48 px high is squeezed to 480
    "fold-cap640": FOURTH + (True, 640),
    "fold-w128": ("min", 736, 128, True, 1, 8, True, True, 0),
    "fold-det640": ("min", 640, 160, True, 1, 8, True, True, 0),
    "fold-detnative": ("min", 32, 160, True, 1, 8, True, True, 0),
    # docs/ocr.md, "Ninth round": lines narrowed before recognition, with and without less padding;
    # the recogniser's input less high (its padding in proportion); with the detector smaller
    "fold-s85": FOURTH + (True, 0, 0.85),
    "fold-s75": FOURTH + (True, 0, 0.75),
    "fold-s65": FOURTH + (True, 0, 0.65),
    "fold-s75-w128": ("min", 736, 128, True, 1, 8, True, True, 0, 0.75),
    "fold-s65-w112": ("min", 736, 112, True, 1, 8, True, True, 0, 0.65),
    "fold-s75-det640": ("min", 640, 160, True, 1, 8, True, True, 0, 0.75),
    "fold-h44": ("min", 736, 147, True, 1, 8, True, True, 0, 1.0, 44),  # the recogniser's input 44 high
    "fold-h40": ("min", 736, 136, True, 1, 8, True, True, 0, 1.0, 40),  # the recogniser's input 40 high
    "fold-h36": ("min", 736, 120, True, 1, 8, True, True, 0, 1.0, 36),
    "fold-h48-w136": ("min", 736, 136, True, 1, 8, True, True, 0, 1.0, 48),
    "fold-h40-w160": ("min", 736, 160, True, 1, 8, True, True, 0, 1.0, 40),
    "fold-h34": ("min", 736, 112, True, 1, 8, True, True, 0, 1.0, 34),
    "fold-h33": ("min", 736, 112, True, 1, 8, True, True, 0, 1.0, 33),
    "fold-h32": ("min", 736, 112, True, 1, 8, True, True, 0, 1.0, 32),
    "fold-h40-det640": ("min", 640, 136, True, 1, 8, True, True, 0, 1.0, 40),
    "fold-h36-det640": ("min", 640, 120, True, 1, 8, True, True, 0, 1.0, 36),
    "fold-h40-det576": ("min", 576, 136, True, 1, 8, True, True, 0, 1.0, 40),
    "shipped": ("min", ocr.DET_MIN_SIDE, ocr.REC_MIN_WIDTH, True, ocr.REC_BATCH, ocr.CLS_SAMPLE, True,
                ocr.FOLD_MODELS, ocr.REC_MAX_WIDTH, 1.0, ocr.REC_HEIGHT),  # ocr.py now
}


def engine(limit_type, side, min_width, arena, batch, cls_sample, fast, fold, cap, scale=1.0, height=48):
    import onnxruntime
    from rapidocr_onnxruntime import RapidOCR

    e = ocr.RapidEngine()
    e.version = "bench"
    e.ocr = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)  # rapidocr's own, then the setting's
    wrappers = (e.ocr.text_det.infer, e.ocr.text_cls.infer, e.ocr.text_rec.session)
    if fold:
        paths, note = ocr.folded_paths(wrappers, True)
        if paths[0] is None:
            raise SystemExit(f"the folded models: {note}")
    else:
        paths = [None] * 3
    if arena or fold:
        for w, path in zip(wrappers, paths):
            ocr._reuse_memory(w, onnxruntime, path)
    if fast:
        made = e.ocr.text_det.get_preprocess

        def get_preprocess(max_wh):
            pre = made(max_wh)
            ocr._table_normalize(pre)
            return pre

        e.ocr.text_det.get_preprocess = get_preprocess
    e.ocr.text_det.limit_type = limit_type
    e.ocr.text_det.limit_side_len = side
    e.ocr.text_rec.rec_batch_num = batch
    e.ocr.text_rec.rec_image_shape = [e.ocr.text_rec.rec_image_shape[0], height, min_width]
    if cap:
        ocr._cap_width(e.ocr.text_rec, cap)
    e.cls_sample = cls_sample
    if scale != 1.0:  # each crop narrowed at its own height before the recogniser (not in ocr.py)
        import cv2

        rec = e.ocr.text_rec
        e.ocr.text_rec = lambda crops, boxes: rec(
            [cv2.resize(c, (max(1, round(c.shape[1] * scale)), c.shape[0]), interpolation=cv2.INTER_AREA)
             for c in crops], boxes)
    e.fast_boxes = fast
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
        err = ref_n = perr = pref_n = same = 0
        for stem, hyp in text[k].items():
            plain = reference_text(ROOT, stem)
            ref = fold(plain)
            err += levenshtein(fold(hyp), ref)
            ref_n += len(ref)
            perr += levenshtein(hyp, plain)
            pref_n += len(plain)
            same += hyp == text[names[0]][stem]
        tot = sum(per[k])
        s = spent[k]
        print(f"{k:12s} median {np.median(per[k]):.2f} mean {tot / n:.2f} s/page ({n / tot:.2f} pages/s/core): "
              f"det {s['det'] / n:.2f} cls {s['cls'] / n:.2f} rec {s['rec'] / n:.2f} "
              f"rest {(tot - s['det'] - s['cls'] - s['rec']) / n:.2f} | CER {perr / max(pref_n, 1):.4f} folded {err / max(ref_n, 1):.4f} "
              f"| same words as {names[0]} {same}/{n}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
