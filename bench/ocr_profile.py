"""CPU seconds of rapidocr's stages on some images, one thread (docs/ocr.md, "Speed").

    python bench/ocr_profile.py IMG...                # the shipped settings (ocr.py)
    BATCH=6 python bench/ocr_profile.py IMG...        # rapidocr's own recognition batch
    DETTYPE=max DETLIM=960 python bench/ocr_profile.py IMG...   # detector input at most 960
    PROFILE=1 python bench/ocr_profile.py IMG...      # and cProfile's view (process CPU clock):
                                                      # the Python between the models, by function

Times are process CPU time (time.process_time) of RapidEngine.lines (one read of each page,
no upright check, no small-print re-read), split into detection, the 0/180 classifier and
recognition; "pages/s/core" is pages over that CPU time.
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dxstudio.ocr import get_engine, read_image_file  # noqa: E402


def main(paths) -> None:
    eng = get_engine("rapidocr")
    o = eng.ocr
    if os.environ.get("BATCH"):
        o.text_rec.rec_batch_num = int(os.environ["BATCH"])
    if os.environ.get("DETLIM"):
        o.text_det.limit_side_len = int(os.environ["DETLIM"])
    if os.environ.get("DETTYPE"):
        o.text_det.limit_type = os.environ["DETTYPE"]
    print("detector", o.text_det.limit_side_len, o.text_det.limit_type, "recognition batch", o.text_rec.rec_batch_num)
    spent = {"det": 0.0, "cls": 0.0, "rec": 0.0}

    def timed(name, f):
        def g(*a, **k):
            t = time.process_time()
            r = f(*a, **k)
            spent[name] += time.process_time() - t
            return r
        return g

    o.auto_text_det = timed("det", o.auto_text_det)
    o.text_cls = timed("cls", o.text_cls)
    o.text_rec = timed("rec", o.text_rec)
    eng.lines(np.full((64, 64, 3), 255, np.uint8))  # load the sessions
    for k in spent:
        spent[k] = 0.0
    images = [rgb for p in paths for _, rgb in read_image_file(p)]
    prof = None
    if os.environ.get("PROFILE"):
        import cProfile

        prof = cProfile.Profile(time.process_time)
        prof.enable()
    t0, n, nlines = time.process_time(), 0, 0
    for rgb in images:
        nlines += len(eng.lines(rgb))
        n += 1
    tot = time.process_time() - t0
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    print(f"pages {n} lines {nlines} cpu {tot:.2f} s = {tot / n:.2f} s/page ({n / tot:.2f} pages/s/core); per page: "
          + ", ".join(f"{k} {v / n:.2f} s" for k, v in spent.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
