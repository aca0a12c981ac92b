#!/bin/bash
# Leave-one-source-out at the tiny size (docs/base-model.md "Which sources helped"): for each
# variant pretrain 400 steps, fine-tune on /tmp/sroie_p50, score on /tmp/sroie_eval (projects made
# as docs/base-model.md says). Run from anywhere; writes /tmp/loso.
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
PY=${PYTHON:-python}
mkdir -p /tmp/loso
D=../shared/data
declare -A SRC=( [cord]=$D/cord-v1-train [naf]=$D/naf [docbank]=$D/docbank-samples [invoice2data]=$D/invoice2data-samples [synthetic]=synthetic:4000 )
ALL="cord naf docbank invoice2data synthetic"
for out in none $ALL; do
  specs=""
  for s in $ALL; do [ "$s" != "$out" ] && specs="$specs ${SRC[$s]}"; done
  $PY -m dxstudio.cli pretrain $specs --size tiny --steps 400 --warmup 40 --lr 0.002 --degree 2 --out /tmp/loso/pt-$out > /tmp/loso/pt-$out.log 2>&1
  $PY -m dxstudio.cli tune /tmp/sroie_p50 --model /tmp/loso/pt-$out/model.safetensors --degree 2 --out /tmp/loso/ft-$out > /tmp/loso/ft-$out.log 2>&1
  $PY -m dxstudio.cli eval /tmp/loso/ft-$out/model.safetensors /tmp/sroie_eval --out /tmp/loso/ev-$out.json > /dev/null 2>&1
  echo "$out done $(date +%T)"
done
$PY -m dxstudio.cli tune /tmp/sroie_p50 --start new --size tiny --degree 2 --out /tmp/loso/ft-random > /tmp/loso/ft-random.log 2>&1
$PY -m dxstudio.cli eval /tmp/loso/ft-random/model.safetensors /tmp/sroie_eval --out /tmp/loso/ev-random.json > /dev/null 2>&1
echo "random done $(date +%T)"
