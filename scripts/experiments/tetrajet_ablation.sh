#!/usr/bin/env bash
# The recipe ablation on one GPU (docs/RESULTS.md): TetraJet-v2's components and Full-Stack FP4's presets and
# modules, WSD runs of every arm over paired seeds at several token budgets, many runs sharing the GPU, then
# `fp4train report` over the finished decays.
#
# Design. An arm is (recipe, overrides). Arms whose recipes agree before the decay share one stable run per
# seed: bf16, nvidia-nvfp4, nvidia-nvfp4-bf16tail, tetrajet-v2-base and tetrajet-v2-base+outcontrol are the
# stable runs; +oscireset branches from tetrajet-v2-base's, tetrajet-v2 (full) and tetrajet-v2-memeff from
# +outcontrol's, with OsciReset switched on from the first decay step; fullstack-fp4, nvidia-nvfp4+lorasvd,
# bf16+root, bf16+qattn and tetrajet-v2-qadamw have stable runs of their own, and so has fp4train-max (its OutControl
# calibrated as +outcontrol's, OsciReset switched on at the decay as in tetrajet-v2). A stable run keeps the peak LR (its
# schedule is 100x longer than it runs) and stops at each budget's decay start S_k = T_k - round(f T_k),
# saving a checkpoint; each decay is `fp4train train --init-from` that checkpoint with optim.total_steps =
# T_k (bit-identical to an uninterrupted WSD run of T_k steps: tests/unit/train/init_from_test.cpp).
# Pairing: train.seed fixes the initial weights, the data order and every SR/RHT random bit, so the arms of
# one seed see the same data in the same order from the same start.
#
# usage: [VAR=value ...] scripts/experiments/tetrajet_ablation.sh [plan | data | run | report]...
#   (no step: plan data run report). Run again with the same RUNS to continue: finished stable segments and
#   decays are skipped, stopped runs resume from their checkpoints.
# Variables (defaults in brackets):
#   FP4          the fp4train binary [${B:-build-gpu}/fp4train]
#   CONFIG       run config [configs/runs/ablation-1m-bytes.toml]
#   BUDGETS      tokens per non-embedding parameter, ascending; the last is the main comparison [25 50 100]
#   SEEDS        seeds of the main arms [1 2 3]
#   MAIN_ARMS    arms run with every seed [bf16 nvidia-nvfp4 tetrajet-v2-base tetrajet-v2 fullstack-fp4
#                fp4train-max bf16+root]
#   ARMS         every arm [all fourteen, see arm_family]
#   EXTRA_SEEDS  the other arms run with the first N of SEEDS [2]
#   SCAN_ARMS    arms decayed at the budgets below the last [bf16 nvidia-nvfp4 tetrajet-v2-base tetrajet-v2;
#                empty: every arm]
#   PARALLEL     runs at a time on the GPU [14]
#   DEADLINE_S   seconds after start at which running jobs are stopped and no more start (0: none) [0]
#   RUNS         where runs go [runs/ablation]; OUT: where the small artefacts go [$OUT or ./ablation-out]
#   EXTRA_SETS   --set arguments for every run (e.g. train.device=cpu) ['']
#   DATA_OUT     prepared data for `data` [data/shards-bytes-all]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
FP4=${FP4:-${B:-build-gpu}/fp4train}
CONFIG=${CONFIG:-configs/runs/ablation-1m-bytes.toml}
BUDGETS=${BUDGETS:-"25 50 100"}
SEEDS=${SEEDS:-"1 2 3"}
MAIN_ARMS=${MAIN_ARMS:-"bf16 nvidia-nvfp4 tetrajet-v2-base tetrajet-v2 fullstack-fp4 fp4train-max bf16+root"}
# TetraJet-v2's components (issue 20), then Full-Stack FP4's presets and modules one at a time (issue 21):
# LoRA-SVD over the linear-only NVFP4 recipe, Q-Attn alone over BF16, Q-AdamW over the TetraJet-v2 base, and
# BF16 with ROOT (FP32 Newton-Schulz), the optimizer-matched baseline of the two Q-Root presets.
ARMS=${ARMS:-"bf16 nvidia-nvfp4 nvidia-nvfp4-bf16tail tetrajet-v2-base tetrajet-v2-base+outcontrol tetrajet-v2-base+oscireset tetrajet-v2 tetrajet-v2-memeff fullstack-fp4 fp4train-max bf16+root nvidia-nvfp4+lorasvd bf16+qattn tetrajet-v2-qadamw"}
EXTRA_SEEDS=${EXTRA_SEEDS:-2}
SCAN_ARMS=${SCAN_ARMS-"bf16 nvidia-nvfp4 tetrajet-v2-base tetrajet-v2"}
PARALLEL=${PARALLEL:-14}
DEADLINE_S=${DEADLINE_S:-0}
RUNS=${RUNS:-runs/ablation}
OUT=${OUT:-$root/ablation-out}
EXTRA_SETS=${EXTRA_SETS:-}
DATA_OUT=${DATA_OUT:-data/shards-bytes-all}
DECAY_FRACTION=0.2  # must equal the config's optim.decay_fraction (checked in plan)
mkdir -p "$OUT"
t_start=$SECONDS

# ---- the config's numbers ([model], [data], [optim] keys read from the TOML file) ----
key() { awk -F= -v k="$1" '$1 ~ "^"k"[ \t]*$" {gsub(/[ \t"]|#.*/, "", $2); print $2; exit}' "$CONFIG"; }
L=$(key n_layers) D=$(key d_model) FF=$(key d_ff)
BATCH=$(key batch) SEQ=$(key seq) ACCUM=$(key grad_accum) WARMUP=$(key warmup)
ACCUM=${ACCUM:-1}
# Non-embedding parameters (model/config.cpp's count less the embedding and the untied head).
NONEMB=$((L * (3 * D * D + 2 * D + D * D + D + 3 * FF * D + D) + D))
TPS=$((BATCH * SEQ * ACCUM))
declare -a T S
k=0
for b in $BUDGETS; do
  # T_k: the budget's steps, a multiple of 5 so that the 20% decay is a whole number of steps.
  t=$(awk -v b="$b" -v n=$NONEMB -v tps=$TPS 'BEGIN {t = int((b * n / tps + 4) / 5) * 5; if (t < 5) t = 5; print t}')
  T[k]=$t
  S[k]=$((t - t / 5))
  k=$((k + 1))
done
K=$k
CALIB_START=$((2 * WARMUP + 1))  # OutControl calibrates after warm-up, well inside the smallest stable phase

# ---- arms: the stable family each decays from, and its recipe arguments ----
arm_family() {
  case $1 in
    bf16 | nvidia-nvfp4 | nvidia-nvfp4-bf16tail | tetrajet-v2-base | tetrajet-v2-base+outcontrol) echo "$1" ;;
    fullstack-fp4 | fp4train-max | bf16+root | nvidia-nvfp4+lorasvd | bf16+qattn | tetrajet-v2-qadamw) echo "$1" ;;
    tetrajet-v2-base+oscireset) echo tetrajet-v2-base ;;
    tetrajet-v2 | tetrajet-v2-memeff) echo tetrajet-v2-base+outcontrol ;;
    *) echo "unknown arm '$1'" >&2; return 1 ;;
  esac
}
family_args() {  # the recipe of a stable run
  case $1 in
    bf16 | nvidia-nvfp4 | tetrajet-v2-base | fullstack-fp4 | tetrajet-v2-qadamw) echo "--recipe $1" ;;
    nvidia-nvfp4-bf16tail) echo "--recipe nvidia-nvfp4 --set bf16_layers=[-1] --set recipe.overrides.name=$1" ;;
    tetrajet-v2-base+outcontrol)
      echo "--recipe tetrajet-v2-base --set out_control.enabled=true --set out_control.ratio=0.1" \
        "--set out_control.round_to=16 --set out_control.calib_start=$CALIB_START --set out_control.calib_steps=50" \
        "--set recipe.overrides.name=$1" ;;
    # The preset with OutControl calibrated as the +outcontrol family and OsciReset off until the decay (as
    # the tetrajet-v2 arm).
    fp4train-max)
      echo "--recipe fp4train-max --set osci_reset.enabled=false --set out_control.ratio=0.1" \
        "--set out_control.round_to=16 --set out_control.calib_start=$CALIB_START --set out_control.calib_steps=50" \
        "--set recipe.overrides.name=$1" ;;
    nvidia-nvfp4+lorasvd)  # fullstack-fp4's LoRA-SVD settings
      echo "--recipe nvidia-nvfp4 --set lora_svd.enabled=true --set lora_svd.rank=32 --set lora_svd.beta=1.0" \
        "--set lora_svd.realign_every=2048 --set recipe.overrides.name=$1" ;;
    bf16+qattn) echo "--recipe bf16 --set attention.q_attn=true --set recipe.overrides.name=$1" ;;
    bf16+root) echo "--recipe bf16 --set optimizer=root --set recipe.overrides.name=$1" ;;
  esac
}
arm_args() {  # arm_args ARM BRANCH_STEP: the recipe of a decay
  local arm=$1 s=$2 fam
  fam=$(arm_family "$arm") || return 1
  local osci="--set osci_reset.enabled=true --set osci_reset.start=$((s + 1)) --set osci_reset.window=50"
  osci="$osci --set osci_reset.period=200 --set osci_reset.threshold=8"
  case $arm in
    tetrajet-v2-base+oscireset | tetrajet-v2 | fp4train-max) echo "$(family_args "$fam") $osci --set recipe.overrides.name=$arm" ;;
    tetrajet-v2-memeff) echo "$(family_args "$fam") $osci --set osci_reset.track_fraction=0.1 --set recipe.overrides.name=$arm" ;;
    *) family_args "$fam" ;;
  esac
}
seeds_of() {  # the seeds an arm runs with
  if [[ " $MAIN_ARMS " == *" $1 "* ]]; then echo $SEEDS; else echo $SEEDS | cut -d' ' -f1-"$EXTRA_SEEDS"; fi
}
in_scan() { [ -z "$SCAN_ARMS" ] || [[ " $SCAN_ARMS " == *" $1 "* ]]; }
sets() { local s=""; for x in $EXTRA_SETS; do s="$s --set $x"; done; echo "$s"; }

# ---- the job list ----
declare -a JOBS   # "stable FAMILY SEED" or "decay ARM SEED K"
families=""
for arm in $ARMS; do
  fam=$(arm_family "$arm") || exit 2
  for s in $(seeds_of "$arm"); do
    [[ " $families " == *" $fam:$s "* ]] || families="$families $fam:$s "
  done
done
# The slowest stable runs first (longest job first keeps the GPU's last minutes from waiting on one of them):
# the Q-Root presets, then LoRA-SVD and Q-Attn, then the rest, each group in ARMS order.
slow_rank() {
  case $1 in
    fullstack-fp4 | fp4train-max) echo 0 ;;
    *lorasvd* | *qattn*) echo 1 ;;
    *) echo 2 ;;
  esac
}
for rank in 0 1 2; do
  for fs in $families; do
    [ "$(slow_rank "${fs%%:*}")" = $rank ] && JOBS+=("stable ${fs%%:*} ${fs##*:}")
  done
done
for ((k = K - 1; k >= 0; k--)); do  # the main budget's decays first
  for arm in $ARMS; do
    [ $k = $((K - 1)) ] || in_scan "$arm" || continue
    for s in $(seeds_of "$arm"); do JOBS+=("decay $arm $s $k"); done
  done
done
stable_dir() { echo "$RUNS/stable/$1-s$2"; }
decay_dir() { echo "$RUNS/decay/b${T[$3]}/$1-s$2"; }

plan() {
  local stable_tokens=0 decay_tokens=0 n_stable=0 n_decay=0 j
  for j in "${JOBS[@]}"; do
    set -- $j
    if [ "$1" = stable ]; then stable_tokens=$((stable_tokens + S[K - 1] * TPS)); n_stable=$((n_stable + 1))
    else decay_tokens=$((decay_tokens + (T[$4] - S[$4]) * TPS)); n_decay=$((n_decay + 1)); fi
  done
  local cf
  cf=$(key decay_fraction)
  awk -v a="$cf" -v b=$DECAY_FRACTION 'BEGIN {exit !(a + 0 == b + 0)}' ||
    { echo "plan: $CONFIG has optim.decay_fraction = $cf, this script decays the last $DECAY_FRACTION" >&2; return 1; }
  [[ " $families " != *"outcontrol:"* ]] || [ $((CALIB_START + 50)) -lt "${S[0]}" ] ||
    { echo "plan: OutControl freezes at step $((CALIB_START + 50)), after the smallest budget's decay start ${S[0]}: raise the budgets" >&2; return 1; }
  echo "== plan: $CONFIG, $NONEMB non-embedding parameters, $TPS tokens/step, warm-up $WARMUP, OutControl calibration from step $CALIB_START"
  for ((k = 0; k < K; k++)); do
    echo "   budget $(echo $BUDGETS | cut -d' ' -f$((k + 1))) tokens/param: T = ${T[k]} steps ($((T[k] * TPS)) tokens), decay from step ${S[k]}"
  done
  echo "   $n_stable stable runs to step ${S[K - 1]} ($((stable_tokens / 1000000))M tokens), $n_decay decays ($((decay_tokens / 1000000))M tokens), $PARALLEL at a time"
}

phase_data() {
  [ -d data/corpus ] || { mkdir -p data && tar xJf .carry/corpus.tar.xz -C data; }
  [ -f "$DATA_OUT/manifest.json" ] || "$FP4" prepare --input data/corpus/train --val-sample 0.03 --tokenizer bytes \
    --out "$DATA_OUT" --threads "$(nproc)" >"$OUT/prepare.log" 2>&1
  echo "== data rc=$? $(tail -1 "$OUT/prepare.log" 2>/dev/null) ($((SECONDS - t_start))s)"
}

run_stable() {  # FAMILY SEED: segment by segment, each ending in a checkpoint at S_k
  local fam=$1 seed=$2 dir k
  dir=$(stable_dir "$fam" "$seed")
  mkdir -p "$(dirname "$dir")"
  for ((k = 0; k < K; k++)); do
    [ -f "$dir.ready-$k" ] && continue
    "$FP4" train --config "$CONFIG" $(family_args "$fam") --out "$dir" --set train.seed="$seed" \
      --set train.steps=${S[k]} --set optim.total_steps=$((100 * T[K - 1])) --set train.ckpt_every=0 \
      --set train.keep_checkpoints=$((K + 1)) $(sets) || return $?
    touch "$dir.ready-$k"
  done
}
run_decay() {  # ARM SEED K
  local arm=$1 seed=$2 k=$3 fam dir
  fam=$(arm_family "$arm")
  dir=$(decay_dir "$arm" "$seed" "$k")
  [ -f "$dir.done" ] && return 0
  # A decay stopped before its first checkpoint starts again from the stable run's (one with a checkpoint
  # of its own resumes from it).
  [ -e "$dir/checkpoints/latest" ] || rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  "$FP4" train --config "$CONFIG" $(arm_args "$arm" "${S[k]}") --out "$dir" --set train.seed="$seed" \
    --init-from "$(stable_dir "$fam" "$seed")/checkpoints/$(printf 'step_%06d' "${S[k]}")" \
    --set train.steps=${T[k]} --set optim.total_steps=${T[k]} --set train.ckpt_every=0 $(sets) &&
    touch "$dir.done"
}
ready() {  # a job can start: stable always; a decay once its stable run has reached S_k
  set -- $1
  [ "$1" = stable ] && return 0
  [ -f "$(stable_dir "$(arm_family "$2")" "$3").ready-$4" ]
}
failed_dep() {  # a decay whose stable run failed
  set -- $1
  [ "$1" = decay ] && [ -f "$(stable_dir "$(arm_family "$2")" "$3").failed" ]
}
job_log() { set -- $1; echo "$RUNS/logs/$1-$2-s$3${4:+-b${T[$4]}}.log"; }

phase_run() {
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}  # many processes share the host's cores
  set -m  # every job in its own process group, so a deadline stops fp4train with it
  mkdir -p "$RUNS/logs"
  local -A pid=()
  local pending=("${JOBS[@]}") j i started stopped=0
  for j in "${JOBS[@]}"; do  # an earlier call's failed stable runs: this call tries them again
    set -- $j
    [ "$1" = stable ] && rm -f "$(stable_dir "$2" "$3").failed"
  done
  while :; do
    for j in "${!pid[@]}"; do
      kill -0 "${pid[$j]}" 2>/dev/null && continue
      wait "${pid[$j]}"
      local rc=$?
      set -- $j
      # A stable run stopped by the deadline is not a failure: the next call resumes it, and its decays follow.
      [ $rc = 0 ] || { echo "== $j: rc=$rc ($(tail -1 "$(job_log "$j")"))"; [ "$1" = stable ] && [ $stopped = 0 ] && touch "$(stable_dir "$2" "$3").failed"; }
      [ $rc = 0 ] && echo "== $j: done at $((SECONDS - t_start))s"
      unset "pid[$j]"
    done
    if [ "$DEADLINE_S" -gt 0 ] && [ $((SECONDS - t_start)) -ge "$DEADLINE_S" ] && [ $stopped = 0 ]; then
      echo "== deadline ${DEADLINE_S}s: stopping ${#pid[@]} running job(s), ${#pending[@]} not started"
      for j in "${!pid[@]}"; do kill -TERM -- -"${pid[$j]}" 2>/dev/null; done
      pending=()
      stopped=1
    fi
    started=1
    while [ $started = 1 ] && [ ${#pid[@]} -lt "$PARALLEL" ]; do
      started=0
      for i in "${!pending[@]}"; do
        j=${pending[$i]}
        if failed_dep "$j"; then echo "== $j: skipped (its stable run failed)"; unset "pending[$i]"; continue; fi
        ready "$j" || continue
        set -- $j
        if [ "$1" = stable ]; then (run_stable "$2" "$3") >"$(job_log "$j")" 2>&1 &
        else (run_decay "$2" "$3" "$4") >"$(job_log "$j")" 2>&1 & fi
        pid[$j]=$!
        unset "pending[$i]"
        started=1
        break
      done
    done
    [ ${#pid[@]} = 0 ] && [ ${#pending[@]} = 0 ] && break
    [ ${#pid[@]} = 0 ] && ! for j in "${pending[@]}"; do ready "$j" && exit 0; done && {
      echo "== ${#pending[@]} job(s) can never start"; break; }
    sleep 2
  done
  set +m
  echo "== run finished at $((SECONDS - t_start))s"
}

phase_report() {
  local dirs=() d
  for d in "$RUNS"/decay/b*/*/; do
    d=${d%/}
    [ -f "$d.done" ] && dirs+=("$d")
  done
  [ ${#dirs[@]} -gt 0 ] || { echo "== report: no finished decays under $RUNS/decay"; return 1; }
  "$FP4" report --svg "$OUT/ablation.svg" --title "Recipe ablation, $(key name)" "${dirs[@]}" >"$OUT/report.md" 2>"$OUT/report.log"
  echo "== report rc=$? (${#dirs[@]} runs) -> $OUT/report.md"
  cat "$OUT/report.md"
  # The Q-Root presets against BF16 trained with ROOT too (the optimizer-matched baseline), main budget.
  local rdirs=()
  for d in "${dirs[@]}"; do
    [ "$(dirname "$d")" = "$RUNS/decay/b${T[K - 1]}" ] || continue
    case $(basename "$d") in bf16+root-s* | fullstack-fp4-s* | fp4train-max-s*) rdirs+=("$d") ;; esac
  done
  if [ ${#rdirs[@]} -gt 0 ]; then
    "$FP4" report --baseline bf16+root --svg "$OUT/ablation-root.svg" --title "Q-Root presets against BF16 + ROOT, $(key name)" \
      "${rdirs[@]}" >"$OUT/report-root.md" 2>>"$OUT/report.log"
    echo "== report against bf16+root rc=$? (${#rdirs[@]} runs) -> $OUT/report-root.md"
  fi
  for d in "${dirs[@]}" "$RUNS"/stable/*/; do  # the small artefacts of every run, stable ones included
    d=${d%/}
    local to="$OUT/runs/${d#"$RUNS"/}"
    mkdir -p "$to"
    for f in metrics.jsonl recipe.toml config.json; do [ -f "$d/$f" ] && cp "$d/$f" "$to/"; done
  done
  cp -r "$RUNS/logs" "$OUT/" 2>/dev/null
}

steps=${*:-plan data run report}
for step in $steps; do
  case $step in
    plan) plan || exit 1 ;;
    data) phase_data ;;
    run) plan >/dev/null && phase_run ;;
    report) phase_report ;;
    *) echo "unknown step '$step' (plan, data, run, report)" >&2; exit 2 ;;
  esac
done
