"""Copy an OCR project and apply ocr.split_amount_suffix and ocr.split_joined_words to its stored
words (the last steps of ocr_image, on the clamped words): the pages today's ocr.py gives from the
same recognised lines, without reading the images again (docs/ocr.md, "Fourth round").

    python bench/ocr_resplit.py SRC_PROJECT DST_PROJECT    # then dxstudio label DST --jsonl ... --force

The copy leaves out SRC's runs/. Prints how many pages changed."""
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxstudio.engine.page import Word  # noqa: E402
from dxstudio.ocr import split_amount_suffix, split_joined_words  # noqa: E402


def main(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("runs"))
    n = changed = 0
    for p in sorted((dst / "pages").glob("*.json")):
        d = json.loads(p.read_text(encoding="utf-8"))
        words = [Word(w["text"], tuple(w["box"])) for w in d["words"]]
        new = split_joined_words(split_amount_suffix(words))
        n += 1
        if [(w.text, w.box) for w in new] != [(w.text, w.box) for w in words]:
            changed += 1
            d["words"] = [{"text": w.text, "box": list(w.box)} for w in new]
            tmp = p.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(d, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            tmp.replace(p)
    print(dst, "pages", n, "changed", changed)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
