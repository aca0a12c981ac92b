"""The small-print re-read, page by page: what the first read (at the page's size) and the
re-read (SMALL_TEXT_SCALE times enlarged) each give grounding, beside the first read's line
confidence, to see whether a confidence gate could skip re-reads that gain nothing
(docs/ocr.md, "Fourth round").

    python bench/ocr_reread.py ANSWERS.jsonl IMG...

ANSWERS.jsonl: {"id", "answers"} lines (bench/ocr_sroie.py jsonl); IMG: SROIE receipt images.
Process CPU seconds of each read, one thread."""
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from dxstudio import ocr  # noqa: E402
from dxstudio.engine.page import Page, Word  # noqa: E402
from dxstudio.grounding import ground_answers  # noqa: E402


def words_of(lines, rgb):
    h, w = rgb.shape[:2]
    words = [Word(x.text, (min(max(x.box[0], 0.0), w), min(max(x.box[1], 0.0), h),
                           min(max(x.box[2], 0.0), w), min(max(x.box[3], 0.0), h))) for x in ocr._ordered_words(lines)]
    return ocr.split_joined_words(ocr.split_amount_suffix(words))


def grounded(pid, words, rgb, answers):
    page = Page(pid, float(rgb.shape[1]), float(rgb.shape[0]), tuple(words))
    rep = ground_answers(page, answers, list(answers))
    return [f for f, g in rep.items() if g["status"] == "absent"]


def main(argv):
    answers = {}
    for line in Path(argv[0]).read_text().splitlines():
        d = json.loads(line)
        answers[d["id"]] = d["answers"]
    eng = ocr.get_engine("rapidocr")
    print("page | median line px seen | mean line confidence | lines under 0.9 | scale | CPU s read / re-read | absent after read | after re-read")
    for p in argv[1:]:
        pid = Path(p).stem
        [(_, rgb)] = ocr.read_image_file(p)
        t = time.process_time()
        first = eng.lines(rgb)
        t1 = time.process_time() - t
        confs = [ln.confidence for ln in first if not ln.vertical]
        flat = sorted(ln.box[3] - ln.box[1] for ln in first if not ln.vertical)
        seen = min(1.0, eng.ocr.max_side_len / max(rgb.shape[:2]))
        scale = eng.small_text_scale(first, rgb)
        miss1 = grounded(pid, words_of(first, rgb), rgb, answers[pid])
        t2, miss2 = 0.0, None
        if scale:
            t = time.process_time()
            again = eng.lines_scaled(rgb, scale)
            t2 = time.process_time() - t
            miss2 = grounded(pid, words_of(again, rgb), rgb, answers[pid])
        mean = sum(confs) / max(1, len(confs))
        low = sum(c < 0.9 for c in confs) / max(1, len(confs))
        print(f"{pid} | {flat[len(flat) // 2] * seen:.1f} | {mean:.3f} | {low:.2f} | {scale or '-'} | {t1:.2f} / {t2:.2f} | "
              f"{','.join(miss1) or '-'} | {('-' if miss2 is None else ','.join(miss2) or 'none')}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
