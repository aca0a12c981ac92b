#!/usr/bin/env bash
# docs/ocr.md: OCR on SROIE receipts, end to end, beside the data set's own OCR.
#   bench/ocr_sroie.sh WORKDIR [TRAIN_IDS] [TEST_IDS] [ENGINES]
# Train receipts (default 000-149) and other test receipts (default 546-625) are copied from
# ../shared/data/sroie-train; for each engine: import images with OCR, SROIE's four fields, the
# key values as the labelling model's answers (label --jsonl), tune (defaults), eval --all on
# the test receipts imported the same way; the same on the data set's OCR (import sroie).
# CPU time of each import (user + sys, the tesseract processes included) is printed as "time".
set -euo pipefail
cd "$(dirname "$0")/.."
W="$1"; TRAIN="${2:-0-149}"; TEST="${3:-546-625}"; ENGINES="${4:-rapidocr dataset tesseract}"
PY="${PY:-.venv/bin/python}"; B=bench/ocr_sroie.py; DX="$PY -m dxstudio.cli"
mkdir -p "$W"
[ -d "$W/train" ] || $PY $B subset --ids "$TRAIN" --out "$W/train"
[ -d "$W/test" ] || $PY $B subset --ids "$TEST" --out "$W/test"
for eng in $ENGINES; do
  for split in train test; do
    P="$W/$split-$eng"
    [ -f "$P/dxproject.json" ] && continue
    if [ "$eng" = dataset ]; then
      /usr/bin/time -f "time $split $eng user=%U sys=%S wall=%e" $DX import sroie "$W/$split/sroie" "$P" >"$W/$split-$eng.import.json" || true
    else
      /usr/bin/time -f "time $split $eng user=%U sys=%S wall=%e" $DX import images "$W/$split/img" "$P" --ocr "$eng" ${WORKERS:+--workers $WORKERS} >"$W/$split-$eng.import.json" || true
      $PY $B schema "$P"
      $PY $B jsonl "$W/$split/sroie" "$P" "$W/$split-$eng.jsonl"
      $DX label "$P" --jsonl "$W/$split-$eng.jsonl" >"$W/$split-$eng.label.json" || true
    fi
  done
  [ -f "$W/runs/$eng/model.safetensors" ] || /usr/bin/time -f "time tune $eng user=%U sys=%S wall=%e" \
      $DX tune "$W/train-$eng" --out "$W/runs/$eng" >"$W/tune-$eng.json"
  $DX eval "$W/runs/$eng/model.safetensors" "$W/test-$eng" --all >"$W/eval-$eng.json"
  echo "eval $eng: $(cat "$W/eval-$eng.json" | head -c 600)"
done
