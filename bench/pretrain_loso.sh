#!/bin/bash
# Leave-one-source-out (docs/base-model.md "Which sources helped"): for each variant pretrain a
# base on every source but one, fine-tune it on /tmp/sroie_p50, score it on /tmp/sroie_eval
# (projects made as docs/base-model.md says). Run from anywhere.
#
#   bench/pretrain_loso.sh                       # the tiny-size table: 400 steps, lr 0.002, degree 2
#   bench/pretrain_loso.sh --size base --steps 600 --warmup 60 --lr 0.001 --degree 1 \
#       --synthetic 2000 --eval-all --nice 10 --out /tmp/loso_base --variants "none synthetic cord naf"
#
# Options (defaults: the tiny-size run): --size tiny|base, --steps N, --warmup N, --lr X,
# --degree N (pretrain and tune), --synthetic COUNT (the generated documents of every variant),
# --out DIR (default /tmp/loso), --variants "none cord naf docbank invoice2data synthetic"
# (none = every source; the others: every source but that one; run in this order),
# --eval-all (score with `dxstudio eval --all`), --nice N (run every step under nice -n N),
# --random (also fine-tune a new random model of the size: the "nothing" row),
# --pretrain-seed N (the pretraining seed: starting weights, batch order; default 1),
# --table-only (run nothing: write DIR/table.md from the reports there),
# --tune-seeds "1 2" (fine-tune each pretrained model with each of these seeds: the table gives
# each field's agreement averaged over them, and the mean of each seed; default "1").
# Each variant writes DIR/pt-V (pretrain run), DIR/ft-V (tune run, seed 1; ft-V-sN for seed N),
# DIR/ev-V.json (eval report; ev-V-sN.json) and their logs; DIR/times.tsv gets the wall seconds
# of each stage with the 1-minute load average before and after, and DIR/table.md the table
# when done.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
PY=${PYTHON:-python}
SIZE=tiny STEPS=400 WARMUP=40 LR=0.002 DEGREE=2 NSYN=4000 OUT=/tmp/loso EVAL_ALL="" NICE=0 RANDOM_ROW=0 SEEDS=1 TABLE_ONLY=0 PSEED=1
VARIANTS="none cord naf docbank invoice2data synthetic"
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE=$2; shift 2;;
    --steps) STEPS=$2; shift 2;;
    --warmup) WARMUP=$2; shift 2;;
    --lr) LR=$2; shift 2;;
    --degree) DEGREE=$2; shift 2;;
    --synthetic) NSYN=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --variants) VARIANTS=$2; shift 2;;
    --eval-all) EVAL_ALL=--all; shift;;
    --nice) NICE=$2; shift 2;;
    --random) RANDOM_ROW=1; shift;;
    --tune-seeds) SEEDS=$2; shift 2;;
    --table-only) TABLE_ONLY=1; shift;;
    --pretrain-seed) PSEED=$2; shift 2;;
    *) echo "pretrain_loso.sh: unknown option $1" >&2; exit 2;;
  esac
done
mkdir -p "$OUT"
D=../shared/data
declare -A SRC=( [cord]=$D/cord-v1-train [naf]=$D/naf [docbank]=$D/docbank-samples [invoice2data]=$D/invoice2data-samples [synthetic]=synthetic:$NSYN )
ALL="cord naf docbank invoice2data synthetic"
RUN="nice -n $NICE $PY -m dxstudio.cli"
[ "$TABLE_ONLY" = 1 ] && VARIANTS="" RANDOM_ROW=0 || echo "# $(date -u +%FT%TZ) size=$SIZE steps=$STEPS warmup=$WARMUP lr=$LR degree=$DEGREE synthetic=$NSYN eval=${EVAL_ALL:-scoring-project} tune-seeds=$SEEDS pretrain-seed=$PSEED" >> "$OUT/times.tsv"

stage() {  # stage NAME LOG COMMAND...: run, append wall seconds and the 1-minute load average
  local name=$1 log=$2; shift 2
  local t0=$(date +%s.%N) l0=$(cut -d' ' -f1 /proc/loadavg)
  "$@" > "$log" 2>&1
  local rc=$?
  printf '%s\t%.1f\t%s\t%s\trc=%s\n' "$name" "$(echo "$(date +%s.%N) - $t0" | bc)" "$l0" "$(cut -d' ' -f1 /proc/loadavg)" "$rc" >> "$OUT/times.tsv"
  return $rc
}

tune_and_eval() {  # tune_and_eval NAME START-OPTIONS...: fine-tune on /tmp/sroie_p50 and score, each seed
  local name=$1 seed sfx; shift
  for seed in $SEEDS; do
    sfx=""; [ "$seed" != 1 ] && sfx=-s$seed
    stage ft-$name$sfx "$OUT/ft-$name$sfx.log" $RUN tune /tmp/sroie_p50 "$@" --seed $seed --degree $DEGREE \
      --overwrite --out "$OUT/ft-$name$sfx" || { echo "$name: tune failed, $OUT/ft-$name$sfx.log"; continue; }
    stage ev-$name$sfx "$OUT/ev-$name$sfx.log" $RUN eval "$OUT/ft-$name$sfx/model.safetensors" /tmp/sroie_eval $EVAL_ALL \
      --out "$OUT/ev-$name$sfx.json"
  done
}

for out in $VARIANTS; do
  if [ "$out" != none ] && [ -z "${SRC[$out]:-}" ]; then echo "pretrain_loso.sh: unknown variant $out" >&2; exit 2; fi
  specs=""
  for s in $ALL; do [ "$s" != "$out" ] && specs="$specs ${SRC[$s]}"; done
  stage pt-$out "$OUT/pt-$out.log" $RUN pretrain $specs --size $SIZE --steps $STEPS --warmup $WARMUP --lr $LR \
    --seed $PSEED --degree $DEGREE --out "$OUT/pt-$out" || { echo "$out: pretrain failed, $OUT/pt-$out.log"; continue; }
  tune_and_eval $out --model "$OUT/pt-$out/model.safetensors"
  echo "$out done $(date +%T)"
done
if [ "$RANDOM_ROW" = 1 ]; then
  tune_and_eval random --start new --size $SIZE
  echo "random done $(date +%T)"
fi
$PY - "$OUT" $SEEDS <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
seeds = sys.argv[2:]
names = {"none": "every source", "cord": "all but CORD", "naf": "all but NAF", "docbank": "all but DocBank",
         "invoice2data": "all but invoice2data", "synthetic": "all but the generated documents",
         "random": "nothing (new random model)"}
rows, fields = [], None
for key, label in names.items():
    reps = [json.loads(p.read_text()) for p in (out / f"ev-{key}{'' if s == '1' else '-s' + s}.json" for s in seeds)
            if p.exists()]
    if not reps:
        continue
    fields = fields or list(reps[0]["fields"])
    agr = [sum(r["fields"][f].get("agreement") or 0 for r in reps) / len(reps) for f in fields]
    means = [sum(r["fields"][f].get("agreement") or 0 for f in fields) / len(fields) for r in reps]
    pt = out / f"pt-{key}" / "report.json"
    win = loss = ""
    if pt.exists():
        r = json.loads(pt.read_text())
        win, loss = f"{r['windows']:,}", f"{r['final_loss']:.2f}"
    mean = sum(agr) / len(agr)
    rows.append(f"| {label} | {win} | {loss} | " + " | ".join(f"{a:.3f}" for a in agr)
                + f" | **{mean:.3f}** | " + ", ".join(f"{m:.3f}" for m in means) + f" ({len(reps)}) |")
if rows:
    head = ("| pretrained on | windows | final loss | " + " | ".join(fields)
            + " | mean | mean per tune seed (runs) |")
    text = "\n".join([head, "|" + "---|" * (len(fields) + 5)] + rows) + "\n"
    (out / "table.md").write_text(text)
    print(text)
EOF
