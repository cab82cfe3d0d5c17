#!/usr/bin/env bash
# GPU machine: the corpus and the recipe experiments (EXPERIMENTS.md), as phases.
# Logs and results go to $OUT (or ./gpu-out), a summary at the end. scripts/gpu_session.sh runs these
# phases mixed with those of the other scripts in one call.
#
# usage: scripts/gpu_experiments.sh PHASE... where PHASE is one of
#   data         unpack .carry/corpus.tar.xz and prepare GPT-2 shards (data/shards-gpt2)
#   quick        200 steps of olmo2-30m per recipe (speed and sanity)
#   exp30m       olmo2-30m, $EXP_RECIPES (default all three), $EXP_STEPS steps (default 3052: 100M tokens),
#                seed $EXP_SEED (default 1), then the report; EXP_GROUPS="bf16,nvidia-nvfp4 tetrajet-v2-base"
#                runs groups on GPUs 0, 1, ...
#   exp70m       the same on olmo2-70m
source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu_common.sh"

phase_data() {
  mkdir -p data
  [ -d data/corpus ] || tar xJf .carry/corpus.tar.xz -C data
  # Validation: 3% of the training documents' ~256 KiB pieces, so it follows the training mix (5/6 C code);
  # the corpus's val/ folder (speeches, a little Gutenberg) measures prose only.
  [ -f data/shards-gpt2/manifest.json ] || $B/fp4train prepare --input data/corpus/train --val-sample 0.03 \
    --tokenizer data/tokenizers/gpt2 --out data/shards-gpt2 --threads 16 >"$out/prepare.log" 2>&1
  note "data rc=$? $(tail -1 "$out/prepare.log" 2>/dev/null)"
}
phase_quick() {
  mkdir -p runs
  for r in bf16 nvidia-nvfp4 tetrajet-v2-base; do
    rm -rf runs/quick-$r
    train_recipe configs/runs/olmo2-30m.toml runs/quick-$r $r 200 --set train.eval_every=100 \
      --set train.eval_batches=8 --set train.log_every=50
    grep -E "tok/s" runs/quick-$r.log | tail -2
  done
}
# run_experiment SIZE DEFAULT_STEPS: the recipes on configs/runs/olmo2-SIZE.toml, same data, seed and schedule.
# EXP_STEPS overrides the steps, EXP_SEED the seed (run directories get a -sSEED suffix), EXP_RECIPES splits
# the experiment over several calls (each call's runs come back in runs-SIZE.tar.gz; the report is drawn where
# all three metrics files are), EXP_GROUPS runs groups in parallel, one GPU each ("bf16,nvidia-nvfp4
# tetrajet-v2-base": two GPUs).
run_experiment() {
  local size=$1 steps=${EXP_STEPS:-$2} seed=${EXP_SEED:-1}
  local tag=$size
  [ "$seed" = 1 ] || tag=$size-s$seed
  mkdir -p runs
  local groups=${EXP_GROUPS:-$(echo "${EXP_RECIPES:-bf16 nvidia-nvfp4 tetrajet-v2-base}" | tr ' ' ',')}
  local gpu=0
  for g in $groups; do
    (
      export CUDA_VISIBLE_DEVICES=$gpu
      for r in ${g//,/ }; do
        rm -rf runs/$tag-$r
        train_recipe configs/runs/olmo2-$size.toml runs/$tag-$r $r "$steps" --set train.seed=$seed \
          --set train.eval_every=$((steps / 8)) --set train.log_every=25
      done
    ) &
    gpu=$((gpu + 1))
  done
  wait
  grep -h "val ppl" runs/$tag-*.log | tail -3
  if [ -f runs/$tag-bf16/metrics.jsonl ] && [ -f runs/$tag-nvidia-nvfp4/metrics.jsonl ] &&
    [ -f runs/$tag-tetrajet-v2-base/metrics.jsonl ]; then
    $B/fp4train report runs/$tag-bf16 runs/$tag-nvidia-nvfp4 runs/$tag-tetrajet-v2-base --svg "$out/olmo2-$tag.svg" \
      --title "olmo2-$size, seed $seed, $steps steps x 32k tokens" >"$out/olmo2-$tag.md" 2>>"$out/report.log"
    cat "$out/olmo2-$tag.md"
  fi
  tar czf "$out/runs-$tag.tar.gz" runs/$tag-*/metrics.jsonl runs/$tag-*/config.json runs/$tag-*/recipe.toml runs/$tag-*.log
}
phase_exp30m() { run_experiment 30m 3052; }  # 100M tokens
phase_exp70m() { run_experiment 70m 3052; }  # 100M tokens

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then run_phases "$@"; fi
