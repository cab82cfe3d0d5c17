#!/usr/bin/env bash
# Data-parallel scaling on one host (weak scaling: a fixed batch per GPU): tokens/s per GPU on 1 GPU
# (a plain process) and on 2, 4, 8 GPUs (those present, up to MAX_GPUS) with the gradient reductions
# overlapped with the backward and after it (dist.overlap=false), and the efficiency against one GPU.
# Prints a Markdown table for docs/BENCHMARKS.md. About 3 minutes on 2 H200s with the defaults.
# usage: bench/dist_scaling.sh [MODEL] [RECIPE...] (default: olmo2-370m bf16 tetrajet-v2-base)
# env: B=build dir, DATA=prepared shards, STEPS, ROWS (per GPU), SEQ, MAX_GPUS, RUN_TIMEOUT (s per run), OUT (DEVICE=cpu: the
# same runs on the CPU engine over TCP, to check the script without a GPU)
# Without DATA: data/shards-gpt2 when prepared, else a small GPT-2 set is prepared from data/corpus
# (unpacked from .carry/corpus.tar.xz when needed) into data/shards-gpt2-small: speed does not depend
# on which tokens are trained.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${B:-build-gpu}
MODEL=${1:-olmo2-370m}
shift $(($# > 0 ? 1 : 0))
RECIPES=("$@")
[ ${#RECIPES[@]} -gt 0 ] || RECIPES=(bf16 tetrajet-v2-base)
STEPS=${STEPS:-16}
ROWS=${ROWS:-8}  # rows per GPU per micro-batch
SEQ=${SEQ:-2048}
out=${OUT:-$root/gpu-out}/dist_scaling
rm -rf "$out" && mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
have=$(nvidia-smi -L 2>/dev/null | wc -l)
MAX_GPUS=${MAX_GPUS:-$have}
DEVICE=${DEVICE:-cuda}

source "$root/scripts/lib/pick_data.sh"
DATA=$(pick_data) || { echo "no data"; exit 1; }

# run NAME GPUS OVERLAP RECIPE: writes the job's tokens/s to $out/NAME.tps (median of the second half
# of the steps: start-up, cuBLASLt's first calls and NCCL's connections excluded); none when it failed.
run() {
  local name=$1 n=$2 overlap=$3 recipe=$4 dir="$out/$1"
  local cmd=("$B/fp4train" train --config configs/runs/olmo2-70m.toml --set "model.preset=$MODEL" --recipe "$recipe"
    --set "train.device=$DEVICE" --set "data.train_dir=$DATA" --set data.tokenizer= --set "data.batch=$((ROWS * n))"
    --set "data.seq=$SEQ" --set "train.steps=$STEPS" --set optim.warmup=2 --set train.log_every=1
    --set train.eval_every=0 --set train.eval_batches=1 --set train.ckpt_every=0 --set train.keep_checkpoints=1
    --set "dist.overlap=$overlap" --out "$dir")
  [ "$n" -eq 1 ] || cmd=("$B/fp4train" launch --gpus "$n" -- "${cmd[@]}")
  local t=$SECONDS
  timeout "${RUN_TIMEOUT:-120}" "${cmd[@]}" >"$dir.log" 2>&1
  local rc=$?
  echo "run $name: rc=$rc in $((SECONDS - t))s" >&2
  [ $rc -eq 0 ] || return 0
  /usr/bin/env python3 -c "
import json
r = [json.loads(l)['tokens_per_s'] for l in open('$dir/metrics.jsonl') if '\"train\"' in l]
r = sorted(r[len(r) // 2:]); print(f'{r[len(r) // 2]:.0f}')" >"$dir.tps"
  rm -rf "$dir/checkpoints"  # the final checkpoint (GBs) is not needed
}
tps_of() { cat "$out/$1.tps" 2>/dev/null; }

t0=$SECONDS
# Rows are printed as they complete, so a run cut short by a time limit still reports what it measured.
echo "$MODEL, $STEPS steps, $ROWS x $SEQ tokens per GPU per step, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1):"
echo
echo "| recipe | GPUs | overlap | global batch | tokens/s | tokens/s per GPU | efficiency |"
echo "|---|---:|---|---:|---:|---:|---:|"
# The one-GPU baselines of the recipes run side by side, one per GPU (start-up dominates short runs).
i=0
for recipe in "${RECIPES[@]}"; do
  if [ "$MAX_GPUS" -ge 2 ] && [ "$DEVICE" = cuda ]; then
    CUDA_VISIBLE_DEVICES=$((i % MAX_GPUS)) run "$recipe-gpus1" 1 true "$recipe" &
    [ $((++i % MAX_GPUS)) -ne 0 ] || wait
  else
    run "$recipe-gpus1" 1 true "$recipe"
  fi
done
wait
for recipe in "${RECIPES[@]}"; do
  base=$(tps_of "$recipe-gpus1")
  echo "| $recipe | 1 | - | $ROWS x $SEQ | ${base:-failed} | ${base:-} | 100% |"
  for n in 2 4 8; do
    [ "$n" -le "$MAX_GPUS" ] || break
    for overlap in true false; do
      name="$recipe-gpus$n-overlap-$overlap"
      run "$name" "$n" "$overlap" "$recipe"
      tps=$(tps_of "$name")
      [ "$overlap" = true ] && mode=on || mode=off
      if [ -z "$tps" ] || [ -z "$base" ]; then
        echo "| $recipe | $n | $mode | $((ROWS * n)) x $SEQ | ${tps:-failed} | | |"
        continue
      fi
      per=$((tps / n))
      eff=$(/usr/bin/env python3 -c "print(f'{100 * $per / $base:.1f}%')")
      echo "| $recipe | $n | $mode | $((ROWS * n)) x $SEQ | $tps | $per | $eff |"
    done
  done
done
echo
echo "$((SECONDS - t0))s; logs in $out (a failed run: $out/<recipe>-gpus<N>*.log)"
