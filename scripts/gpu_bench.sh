#!/usr/bin/env bash
# GPU machine: benchmarks (training throughput, kernels, OsciReset cost, scaling), as phases.
# Logs and results go to $OUT (or ./gpu-out), a summary at the end. scripts/gpu_session.sh runs these
# phases mixed with those of the other scripts in one call.
#
# usage: scripts/gpu_bench.sh PHASE... where PHASE is one of
#   bench        train_bench (recipes vs bf16) and bench/torch_train_bench.py (fp4train vs PyTorch)
#   torchbench   bench/torch_train_bench.py alone, $TORCH_BENCH_ARGS passed on (e.g. --compile-mode max-autotune)
#   oscispeed    olmo2-70m tetrajet-v2-base with OsciReset: tokens/s inside its windows vs outside (needs data)
#   distscale    bench/dist_scaling.sh olmo2-370m on 1 and 2 GPUs ($DIST_SCALE_RECIPES, default bf16 tetrajet-v2-base)
#   normbench    norm_kernels_bench (RMSNorm, QK-norm+RoPE, SwiGLU against a D2D copy)
#   attnbench    attention_bench (our causal attention kernels, every variant, forward and backward)
#   trainbench   train_bench with $TB_ARGS (one extra comparison of recipes)
#   qbench       quantize_bench (quantizer bandwidth against a D2D copy, 64 and 256 MiB)
#   smoke1b      two training steps of olmo2-1b (bf16 and tetrajet-v2-base) through train_bench
#   recipebench  train_bench, 20 steps of $RB_CONFIGS (default olmo2-70m olmo2-370m), bf16 vs the two FP4 recipes
#   presetbench  train_bench, olmo2-70m, 20 steps: bf16 and every preset and module (docs/BENCHMARKS.md's table)
#   osciperiod   train_bench, olmo2-70m, 200 steps: tetrajet-v2 over a whole OsciReset period (windows included)
#   optbench     optimizer_bench: the optimizer step alone, olmo2-70m (plain and fullstack-fp4 layouts) and 370m:
#                root-bf16 vs q-root, adamw vs q-adamw ($OPT_CONFIGS, default olmo2-70m olmo2-370m)
source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu_common.sh"

phase_bench() {
  for cfg in olmo2-70m olmo2-370m; do
    timeout 150 $B/train_bench --config $cfg --steps 10 --warmup 3 --recipes bf16,nvidia-nvfp4,tetrajet-v2-base \
      >>"$out/train_bench.log" 2>&1
  done
  note "train_bench done"
  grep "^train_bench:" "$out/train_bench.log"
  phase_torchbench
}
# fp4train vs PyTorch tokens/s (bench/torch_train_bench.py); TORCH_BENCH_ARGS adds options, e.g.
# "--compile-mode default,reduce-overhead --steps 8 --warmup 3" (PyTorch timed in each mode, compared with the
# fastest; each choice of modes gets its own log).
phase_torchbench() {
  local tag
  tag=$(echo "${TORCH_BENCH_ARGS:-}" | grep -oE -- "--compile-mode [a-z,-]+" | awk '{print "-" $2}' | tr ',' '_')
  timeout ${TORCH_BENCH_TIMEOUT:-330} python3 bench/torch_train_bench.py --build-dir $B ${TORCH_BENCH_ARGS:-} \
    --json "$out/torch_train_bench$tag.jsonl" >"$out/torch_train_bench$tag.log" 2>&1
  note "torch_train_bench$tag rc=$?"
  merge_bench_json "$out/torch_train_bench$tag.jsonl"
  tail -8 "$out/torch_train_bench$tag.log"
}
phase_recipebench() {
  for cfg in ${RB_CONFIGS:-olmo2-70m olmo2-370m}; do
    timeout 150 $B/train_bench --config $cfg --steps 20 --warmup 3 --recipes bf16,nvidia-nvfp4,tetrajet-v2-base \
      --json "$out/recipebench-$cfg.jsonl" >>"$out/train_bench.log" 2>&1
    merge_bench_json "$out/recipebench-$cfg.jsonl"
  done
  note "train_bench done"
  grep "^train_bench:" "$out/train_bench.log"
}
# OutControl's calibration moved to steps 1-2 so its split layers run in the timed steps (the presets
# calibrate at 501..550).
PRESET_OC=out_control.calib_start=1:out_control.calib_steps=2
phase_presetbench() {
  local r="bf16,nvidia-nvfp4,nvidia-nvfp4-bf16tail,tetrajet-v2-base,tetrajet-v2:$PRESET_OC,tetrajet-v2-memeff:$PRESET_OC"
  r+=",tetrajet-v2-qadamw,tetrajet-v2-base:optimizer=root,tetrajet-v2-base:optimizer=root-bf16,tetrajet-v2-qroot"
  r+=",tetrajet-v2-lorasvd,fullstack-fp4:attention.q_attn=false,fullstack-fp4,fp4train-max:$PRESET_OC"
  timeout ${PB_TIMEOUT:-240} stdbuf -oL $B/train_bench --config olmo2-70m --steps 20 --warmup 3 --recipes "$r" \
    --json "$out/presetbench.jsonl" >"$out/presetbench.log" 2>&1
  note "presetbench rc=$?"
  merge_bench_json "$out/presetbench.jsonl"
  grep "^train_bench:" "$out/presetbench.log" | sed 's/.*recipe //'
}
phase_osciperiod() {
  timeout 150 stdbuf -oL $B/train_bench --config olmo2-70m --steps 200 --warmup 3 \
    --recipes "bf16,tetrajet-v2:$PRESET_OC:osci_reset.start=4" --json "$out/osciperiod.jsonl" >"$out/osciperiod.log" 2>&1
  note "osciperiod rc=$?"
  merge_bench_json "$out/osciperiod.jsonl"
  grep "^train_bench:" "$out/osciperiod.log" | sed 's/.*recipe //'
}
phase_trainbench() {  # train_bench with $TB_ARGS (e.g. "--config olmo2-70m --recipes tetrajet-v2-base,tetrajet-v2-qadamw")
  local n=$(ls "$out"/trainbench-*.jsonl 2>/dev/null | wc -l)
  timeout ${TB_TIMEOUT:-150} $B/train_bench ${TB_ARGS:---config olmo2-70m --steps 20 --warmup 3} \
    --json "$out/trainbench-$n.jsonl" >>"$out/train_bench_extra.log" 2>&1
  note "train_bench ${TB_ARGS:-} rc=$?"
  merge_bench_json "$out/trainbench-$n.jsonl"
  grep "^train_bench:" "$out/train_bench_extra.log" | tail -4
}
phase_optbench() {
  for c in ${OPT_CONFIGS:-olmo2-70m olmo2-370m}; do
    for args in "--optimizers root-bf16,q-root" "--optimizers adamw,q-adamw" \
      "--layout fullstack-fp4 --optimizers root-bf16+q-adamw,q-root+q-adamw"; do
      timeout 120 $B/optimizer_bench --config $c $args >>"$out/optimizer_bench.log" 2>&1
      note "optimizer_bench --config $c $args rc=$?"
    done
  done
  grep "^optimizer_bench:" "$out/optimizer_bench.log" | sed 's/ on NVIDIA[^:]*//'
}
phase_normbench() {
  timeout 60 $B/norm_kernels_bench >"$out/norm_kernels_bench.log" 2>&1
  note "norm_kernels_bench rc=$?"
  grep -E "^\|" "$out/norm_kernels_bench.log" | head -24
}
phase_attnbench() {
  timeout 90 $B/attention_bench >"$out/attention_bench.log" 2>&1
  note "attention_bench rc=$?"
  grep -E "^(\||fp4train|Q-Attn)" "$out/attention_bench.log" | head -30
}
phase_qbench() {
  # The SM clock while the benchmark runs (the instruction budgets in docs/BENCHMARKS.md depend on it).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv -lms 100 \
    -f "$out/qbench-clocks.csv" >/dev/null 2>&1 &
  local smi=$!
  timeout 200 $B/quantize_bench ${QBENCH_ARGS:-} --json "$out/quantize_bench.jsonl" >"$out/quantize_bench.log" 2>&1
  note "quantize_bench rc=$?"
  merge_bench_json "$out/quantize_bench.jsonl"
  kill -INT $smi 2>/dev/null  # SIGINT: nvidia-smi flushes its file and stops
  wait $smi 2>/dev/null
  note "SM clock during quantize_bench (MHz): $(awk -F', ' 'NR > 1 && $2 + 0 > 0 {n++; s += $2; if ($2 + 0 > mx) mx = $2 + 0; if (mn == 0 || $2 + 0 < mn) mn = $2 + 0} END {if (n) printf "mean %.0f, min %d, max %d over %d samples", s / n, mn, mx, n}' "$out/qbench-clocks.csv")"
  grep -E "^\|" "$out/quantize_bench.log" | grep -E "copy|1x16|16x16|dual|dequant|amax" | head -24
}
phase_smoke1b() {
  for r in bf16 tetrajet-v2-base; do
    timeout 150 $B/train_bench --config olmo2-1b --steps 2 --warmup 1 --recipes $r >>"$out/smoke1b.log" 2>&1
    note "olmo2-1b $r rc=$? $(grep '^train_bench:' "$out/smoke1b.log" | tail -1 | cut -c1-200)"
  done
}
phase_distscale() {  # tokens/s per GPU on 1 and 2 GPUs (bench/dist_scaling.sh), $DIST_SCALE_RECIPES
  OUT=$out STEPS=${DIST_SCALE_STEPS:-16} timeout ${DIST_SCALE_TIMEOUT:-200} bench/dist_scaling.sh olmo2-370m \
    ${DIST_SCALE_RECIPES:-bf16 tetrajet-v2-base} >"$out/dist_scaling.log" 2>&1
  note "dist_scaling rc=$?"
  grep -E "^\||efficiency" "$out/dist_scaling.log" | head -12
}
# OsciReset's cost on the GPU: olmo2-70m tetrajet-v2-base, 300 steps, windows of 50 steps at 100-150 and
# 200-250; median tokens/s of logged steps inside the windows against those outside (same run). Needs `data`.
phase_oscispeed() {
  mkdir -p runs
  rm -rf runs/oscispeed
  train_recipe configs/runs/olmo2-70m.toml runs/oscispeed tetrajet-v2-base 300 --set osci_reset.enabled=true \
    --set osci_reset.start=100 --set osci_reset.window=50 --set osci_reset.period=100 --set train.log_every=5 \
    --set train.eval_every=0
  grep -E "osci_reset" runs/oscispeed.log | head -4
  python3 - runs/oscispeed/metrics.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r.get("type") == "train" and r["step"] > 20]
inside = [r["tokens_per_s"] for r in train if 100 < r["step"] <= 150 or 200 < r["step"] <= 250]
outside = [r["tokens_per_s"] for r in train if not (100 < r["step"] <= 150 or 200 < r["step"] <= 250)]
resets = [r for r in rows if r.get("type") == "osci_reset"]
mi, mo = statistics.median(inside), statistics.median(outside)
print(f"oscispeed: median tokens/s inside windows {mi:,.0f}, outside {mo:,.0f}, ratio {mi / mo:.3f}; "
      f"windows closed {len(resets)}, elements reset {[r['reset'] for r in resets]}")
PY
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then run_phases "$@"; fi
