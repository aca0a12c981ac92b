"""The recognised lines of OCR'd images kept, and a project's words made again from them with
today's ocr.py: the word rules (splitting a line's characters into words, the reading order, the
splits after it) measured end to end without reading the images again (docs/ocr.md, "Sixth round").

    python bench/ocr_lines.py dump OUT.pkl IMG...          # ocr_image on each, its lines kept
    python bench/ocr_lines.py rebuild OUT.pkl SRC DST      # DST = SRC (no runs/), words made again
    dxstudio label DST --jsonl ANSWERS.jsonl --force        # then relabel, tune, eval as before

`dump` runs ocr_image as `import images` does (upright, small print read again) and keeps, per
image stem, the lines page_words was given (each with its recognised characters) and the words it
gave. `rebuild` cuts each line's characters into words again (ocr._words_of_chars), runs
ocr.page_words, and writes the words into the page of the same id; it prints how many pages
changed, and with unchanged code none does (the check that the dump is the import's)."""
import json
import pickle
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxstudio import ocr  # noqa: E402
from dxstudio.fsutil import write_json_atomic  # noqa: E402


def dump(out: Path, images) -> None:
    kept = {}
    real = ocr.page_words

    def keep(lines, width, height, engine=ocr.DEFAULT_ENGINE):
        words = real(lines, width, height, engine)
        kept[current] = {"lines": lines, "width": width, "height": height, "engine": engine,
                         "words": [(w.text, tuple(w.box)) for w in words]}
        return words

    ocr.page_words = keep
    for p in images:
        p = Path(p)
        for number, rgb in ocr.read_image_file(p):
            current = p.stem if number == 1 else f"{p.stem}-p{number}"
            ocr.ocr_image(rgb, "rapidocr")
        print(p.stem, len(kept[current]["lines"]), flush=True)
    with open(out, "wb") as f:
        pickle.dump(kept, f)


def words_again(entry) -> list:
    lines = []
    for ln in entry["lines"]:
        if ln.chars is not None:
            ln = ocr.Line(ln.box, ocr._words_of_chars(ln.chars), ln.upright, ln.vertical, ln.score,
                          ln.confidence, ln.chars)
        lines.append(ln)
    return ocr.page_words(lines, entry["width"], entry["height"], entry["engine"])


def rebuild(pkl: Path, src: Path, dst: Path) -> None:
    with open(pkl, "rb") as f:
        kept = pickle.load(f)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("runs"))
    n = changed = 0
    for p in sorted((dst / "pages").glob("*.json")):
        entry = kept.get(p.stem)
        if entry is None:
            continue
        d = json.loads(p.read_text(encoding="utf-8"))
        words = words_again(entry)
        n += 1
        new = [{"text": w.text, "box": [float(v) for v in w.box]} for w in words]
        old = [{"text": w["text"], "box": [float(v) for v in w["box"]]} for w in d["words"]]
        if new != old:
            changed += 1
            d["words"] = new
            write_json_atomic(p, d)
    print(dst, "pages", n, "changed", changed)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "dump":
        dump(Path(sys.argv[2]), sys.argv[3:])
    elif cmd == "rebuild":
        rebuild(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        raise SystemExit(__doc__)
