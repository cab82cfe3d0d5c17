#!/usr/bin/env bash
# Data-parallel scaling on one host: tokens/s per GPU for 1, 2, 4, 8 GPUs (those present), with a
# fixed per-GPU batch (weak scaling), and the efficiency against one GPU. Prints a Markdown table for
# docs/BENCHMARKS.md. usage: bench/dist_scaling.sh [MODEL] [RECIPE] (env: B, DATA, STEPS, ROWS, SEQ)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${B:-build-gpu}
MODEL=${1:-olmo2-370m}
RECIPE=${2:-bf16}
DATA=${DATA:-data/shards-gpt2}
STEPS=${STEPS:-30}
ROWS=${ROWS:-8}   # rows per GPU per micro-batch
SEQ=${SEQ:-2048}
out=${OUT:-$root/gpu-out}/dist_scaling
rm -rf "$out" && mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
have=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "| GPUs | global batch | tokens/s | tokens/s per GPU | efficiency |"
echo "|---:|---:|---:|---:|---:|"
base=""
for n in 1 2 4 8; do
  [ "$n" -le "$have" ] || break
  run="$out/gpus$n"
  timeout 580 "$B/fp4train" launch --gpus "$n" -- "$B/fp4train" train --config "configs/runs/$MODEL.toml" \
    --recipe "$RECIPE" --set train.device=cuda --set "data.train_dir=$DATA" --set data.train_text= \
    --set data.val_text= --set "data.batch=$((ROWS * n))" --set "data.seq=$SEQ" --set "train.steps=$STEPS" \
    --set optim.warmup=2 --set train.log_every=1 --set train.eval_every=0 --set train.eval_batches=1 \
    --set train.ckpt_every=0 --out "$run" >"$run.log" 2>&1 || { echo "| $n | failed: see $run.log | | | |"; continue; }
  # Median of the second half of the steps (warm-up excluded).
  tps=$(/usr/bin/env python3 -c "
import json, sys
r = [json.loads(l)['tokens_per_s'] for l in open('$run/metrics.jsonl') if '\"train\"' in l]
r = sorted(r[len(r) // 2:]); print(r[len(r) // 2])")
  per=$(/usr/bin/env python3 -c "print(f'{$tps / $n:.0f}')")
  [ -n "$base" ] || base=$per
  eff=$(/usr/bin/env python3 -c "print(f'{100 * $per / $base:.1f}%')")
  echo "| $n | $((ROWS * n)) x $SEQ | $(printf %.0f "$tps") | $per | $eff |"
done
