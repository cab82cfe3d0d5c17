#!/usr/bin/env bash
# One call on the GPU machine: build, CUDA tests, PyTorch checks, benchmarks and the recipe experiments,
# as selected phases. Logs and results go to $OUT (or ./gpu-out), a summary at the end.
#
# usage: scripts/gpu_session.sh PHASE... where PHASE is one of
#   build        configure + build fp4train and the CUDA tests/benchmarks (build-gpu/)
#   tests        test_cuda
#   torch        tests/reference/check_torch_cuda.py (gradients at init, 300-step curves vs PyTorch)
#   bench        train_bench (recipes vs bf16) and bench/torch_train_bench.py (fp4train vs PyTorch)
#   torchbench   bench/torch_train_bench.py alone, $TORCH_BENCH_ARGS passed on (e.g. --compile-mode max-autotune)
#   data         unpack .carry/corpus.tar.xz and prepare GPT-2 shards (data/shards-gpt2)
#   quick        200 steps of olmo2-30m per recipe (speed and sanity)
#   exp30m       olmo2-30m, $EXP_RECIPES (default all three), $EXP_STEPS steps (default 3052: 100M tokens),
#                seed $EXP_SEED (default 1), then the report; EXP_GROUPS="bf16,nvidia-nvfp4 tetrajet-v2-base"
#                runs groups on GPUs 0, 1, ...
#   exp70m       the same on olmo2-70m
#   oscispeed    olmo2-70m tetrajet-v2-base with OsciReset: tokens/s inside its windows vs outside (needs data)
#   dist2        scripts/dist_gpu_check.sh 2 (needs two GPUs)
#   distscale    bench/dist_scaling.sh olmo2-370m on 1 and 2 GPUs ($DIST_SCALE_RECIPES, default bf16 tetrajet-v2-base)
#   normbench    norm_kernels_bench (RMSNorm, QK-norm+RoPE, SwiGLU against a D2D copy)
#   testsbg      start test_cuda in the background on GPU $TESTS_GPU (default 0; CPU-heavy: it overlaps the phases after it)
#   testswait    wait for it and report
#   testsgpu1    start test_cuda in the background on GPU 1 (two-GPU machines; testswait waits for it)
#   attnbench    attention_bench (our causal attention kernels, every variant, forward and backward)
#   dualprofile  Nsight Compute of the fused dual quantizer with stall reasons and source counters
#   dualdetail   Nsight Compute, every section and per-SASS-line stalls, of chosen dual-kernel launches
#   trainbench   train_bench with $TB_ARGS (one extra comparison of recipes)
#   rowsdetail   Nsight Compute, every section and per-SASS-line stalls, of row-quantizer launches ($ROWS_DETAIL)
#   qbench       quantize_bench (quantizer bandwidth against a D2D copy, 64 and 256 MiB)
#   smoke1b      two training steps of olmo2-1b (bf16 and tetrajet-v2-base) through train_bench
#   qprofile     Nsight Compute sections of the quantization kernels + their SASS instruction counts
#   sass         cuobjdump -sass of the quantizer objects (instruction counts)
#   buildqb      configure + build quantize_bench alone (for profiles)
#   buildqt      configure + build quantize_bench and test_cuda (quantizer work)
#   stepprofile  per-kernel times of one olmo2-70m training step (bf16 and tetrajet-v2-base) under ncu
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
# GPU_BUILD_DIR: a build folder outside a copied tree survives between calls on a machine kept warm.
B=${GPU_BUILD_DIR:-build-gpu}
export B NCCL_NVLS_ENABLE=0
summary=()
note() { summary+=("$*"); echo "== $*"; }

configure_and_build() {  # configure_and_build TARGET...
  local t0=$SECONDS
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >"$out/configure.log" 2>&1 ||
    { tail -20 "$out/configure.log"; return 1; }
  cmake --build $B -j16 --target "$@" >"$out/build.log" 2>&1
  local rc=$?
  grep -E "error" "$out/build.log" | head -20
  note "build rc=$rc in $((SECONDS - t0))s"
  return $rc
}
phase_build() { configure_and_build fp4train test_cuda train_bench quantize_bench norm_kernels_bench attention_bench engine_dump_cuda engine_dump; }
phase_normbench() {
  timeout 60 $B/norm_kernels_bench >"$out/norm_kernels_bench.log" 2>&1
  note "norm_kernels_bench rc=$?"
  grep -E "^\|" "$out/norm_kernels_bench.log" | head -24
}
phase_testsbg() {  # TESTS_GPU picks the GPU (default: the first visible)
  (CUDA_VISIBLE_DEVICES=${TESTS_GPU:-${CUDA_VISIBLE_DEVICES:-0}} timeout 400 $B/test_cuda --gtest_brief=1 >"$out/test_cuda.log" 2>&1; echo $? >"$out/test_cuda.rc") &
  note "test_cuda started in the background"
}
phase_testswait() {
  while [ ! -f "$out/test_cuda.rc" ]; do sleep 2; done
  note "test_cuda rc=$(cat "$out/test_cuda.rc") $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda.log" | head -3 | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" "$out/test_cuda.log" | head -12
  [ "$(cat "$out/test_cuda.rc")" = 0 ]
}
phase_testsgpu1() {  # test_cuda on the second GPU in the background, so benchmarks keep GPU 0 to themselves
  (CUDA_VISIBLE_DEVICES=1 timeout 400 $B/test_cuda --gtest_brief=1 >"$out/test_cuda.log" 2>&1; echo $? >"$out/test_cuda.rc") &
  note "test_cuda started in the background on GPU 1"
}
phase_attnbench() {
  timeout 90 $B/attention_bench >"$out/attention_bench.log" 2>&1
  note "attention_bench rc=$?"
  grep -E "^\|" "$out/attention_bench.log" | head -30
}
phase_dualprofile() {  # every dual-kernel launch of one quantize_bench pass ($DUAL_NCU_COUNT), plus its SASS
  local ncu obj
  ncu=$(ncu_bin)
  timeout 240 "$ncu" -k "regex:quantize_dual" -c ${DUAL_NCU_COUNT:-12} --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section SourceCounters --section InstructionStats \
    $B/quantize_bench --sizes-mib 64 --dtypes bf16 --runs 1 >"$out/ncu-dual.txt" 2>&1
  note "dualprofile rc=$?"
  obj=$(find $B -name "quant_dual.cu.o" | head -1)
  cuobjdump -sass "$obj" 2>&1 | gzip >"$out/sass-quant_dual.txt.gz"
  grep -E "^  [a-z_]+.*kernel|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Instructions  " \
    "$out/ncu-dual.txt" | head -60
}
# Full Nsight Compute detail (every section, per-SASS-line stall samples) of single dual-kernel launches of
# quantize_bench's BF16 64 MiB pass: $DUAL_DETAIL_SKIPS lists launch indices (default: TetraJet-v2's dY pair
# codes-only and with the BF16 values of both).
phase_dualdetail() {
  local ncu
  ncu=$(ncu_bin)
  for skip in ${DUAL_DETAIL_SKIPS:-4 8}; do
    timeout 200 "$ncu" -k "regex:quantize_dual_fast_kernel" --launch-skip "$skip" -c 1 --set full --import-source yes \
      -o "$out/dual-$skip" $B/quantize_bench --sizes-mib 64 --dtypes bf16 --runs 1 >"$out/ncu-detail-$skip.log" 2>&1
    note "dualdetail launch $skip rc=$?"
    "$ncu" --import "$out/dual-$skip.ncu-rep" --print-details all >"$out/ncu-detail-$skip.txt" 2>&1
    "$ncu" --import "$out/dual-$skip.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip >"$out/ncu-source-$skip.csv.gz"
    grep -E "Duration|Issue Slots Busy|Stall|L1/TEX Hit|Mem Busy|Max Bandwidth|Executed Ipc" "$out/ncu-detail-$skip.txt" | head -20
  done
}
# The same detail for row-quantizer launches: $ROWS_DETAIL lists ';'-separated template-argument tails of
# quantize_rows_kernel<T, block128, sr, rht, four_over_six> as ncu prints them (default: BF16 block128 RTN),
# each profiled at its fourth launch (after quantize_bench's warm-ups) of the BF16 64 MiB pass.
phase_rowsdetail() {
  local ncu i=0 pats
  ncu=$(ncu_bin)
  IFS=';' read -ra pats <<<"${ROWS_DETAIL:-1, (bool)1, (bool)0, (int)0, (bool)0>}"
  for pat in "${pats[@]}"; do
    i=$((i + 1))
    local re
    re=$(printf '%s' "$pat" | sed 's/[()]/\\&/g')
    timeout 200 "$ncu" --kernel-name-base demangled -k "regex:quantize_rows_kernel<.*${re}" --launch-skip 3 -c 1 \
      --set full --import-source yes -o "$out/rows-$i" $B/quantize_bench --sizes-mib 64 --dtypes bf16 --runs 1 \
      >"$out/ncu-rows-$i.log" 2>&1
    note "rowsdetail $i ($pat) rc=$?"
    "$ncu" --import "$out/rows-$i.ncu-rep" --print-details all >"$out/ncu-rows-$i.txt" 2>&1
    "$ncu" --import "$out/rows-$i.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip >"$out/ncu-rows-source-$i.csv.gz"
    grep -E "quantize_rows|Duration|Issue Slots Busy|Stall|Registers Per|Achieved Occupancy|Mem Busy|DRAM Throughput|Executed Ipc" \
      "$out/ncu-rows-$i.txt" | head -24
  done
}
phase_qbench() {
  # The SM clock while the benchmark runs (the instruction budgets in docs/BENCHMARKS.md depend on it).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv -lms 100 \
    -f "$out/qbench-clocks.csv" >/dev/null 2>&1 &
  local smi=$!
  timeout 200 $B/quantize_bench ${QBENCH_ARGS:-} >"$out/quantize_bench.log" 2>&1
  note "quantize_bench rc=$?"
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
phase_buildq() { configure_and_build quantize_bench train_bench; }
phase_buildqb() { configure_and_build quantize_bench; }  # the quantizer benchmark alone (profiles)
phase_buildqt() { configure_and_build quantize_bench test_cuda; }  # quantizer benchmark + CUDA tests
phase_buildlite() { configure_and_build fp4train train_bench; }  # what training and the recipe bench need
phase_recipebench() {
  for cfg in ${RB_CONFIGS:-olmo2-70m olmo2-370m}; do
    timeout 150 $B/train_bench --config $cfg --steps 20 --warmup 3 --recipes bf16,nvidia-nvfp4,tetrajet-v2-base \
      >>"$out/train_bench.log" 2>&1
  done
  note "train_bench done"
  grep "^train_bench:" "$out/train_bench.log"
}
phase_trainbench() {  # train_bench with $TB_ARGS (e.g. "--config olmo2-70m --recipes tetrajet-v2-base,tetrajet-v2-qadamw")
  timeout ${TB_TIMEOUT:-150} $B/train_bench ${TB_ARGS:---config olmo2-70m --steps 20 --warmup 3} >>"$out/train_bench_extra.log" 2>&1
  note "train_bench ${TB_ARGS:-} rc=$?"
  grep "^train_bench:" "$out/train_bench_extra.log" | tail -4
}
phase_tests() {  # $TESTS_FILTER: a gtest filter (default: every test)
  timeout 240 $B/test_cuda --gtest_brief=1 --gtest_filter="${TESTS_FILTER:-*}" >"$out/test_cuda.log" 2>&1
  local rc=$?
  note "test_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" "$out/test_cuda.log" | head
  return $rc
}
phase_torch() {
  timeout 300 python3 tests/reference/check_torch_cuda.py --build-dir $B >"$out/torch_cuda.log" 2>&1
  note "check_torch_cuda rc=$?"
  tail -15 "$out/torch_cuda.log"
}
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
    >"$out/torch_train_bench$tag.log" 2>&1
  note "torch_train_bench$tag rc=$?"
  tail -8 "$out/torch_train_bench$tag.log"
}
phase_data() {
  mkdir -p data
  [ -d data/corpus ] || tar xJf .carry/corpus.tar.xz -C data
  # Validation: 3% of the training documents' ~256 KiB pieces, so it follows the training mix (5/6 C code);
  # the corpus's val/ folder (speeches, a little Gutenberg) measures prose only.
  [ -f data/shards-gpt2/manifest.json ] || $B/fp4train prepare --input data/corpus/train --val-sample 0.03 \
    --tokenizer data/tokenizers/gpt2 --out data/shards-gpt2 --threads 16 >"$out/prepare.log" 2>&1
  note "data rc=$? $(tail -1 "$out/prepare.log" 2>/dev/null)"
}
train_recipe() {  # train_recipe CONFIG RUN_DIR RECIPE STEPS EXTRA_SETS...
  local config=$1 dir=$2 recipe=$3 steps=$4
  shift 4
  local warm=$((steps / 10))
  $B/fp4train train --config "$config" --recipe "$recipe" --out "$dir" \
    --set train.steps=$steps --set optim.warmup=$warm --set train.ckpt_every=100000 "$@" >"$dir.log" 2>&1
  note "$recipe: rc=$? $(grep -E 'val ppl' "$dir.log" | tail -1)"
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

phase_dist2() {  # the two-GPU data-parallel checks (scripts/dist_gpu_check.sh), when the GPUs are there
  local n
  n=$(nvidia-smi -L | wc -l)
  [ "$n" -ge 2 ] || { note "dist2: only $n GPU"; return 1; }
  OUT=$out STEPS=${DIST_STEPS:-40} timeout ${DIST_TIMEOUT:-240} scripts/dist_gpu_check.sh 2 >"$out/dist_check.log" 2>&1
  note "dist_gpu_check 2 rc=$?"
  grep -E "^==|vs |failed" "$out/dist_check.log" | head -20
}

phase_distscale() {  # tokens/s per GPU on 1 and 2 GPUs (bench/dist_scaling.sh), $DIST_SCALE_RECIPES
  OUT=$out STEPS=${DIST_SCALE_STEPS:-16} timeout ${DIST_SCALE_TIMEOUT:-200} bench/dist_scaling.sh olmo2-370m \
    ${DIST_SCALE_RECIPES:-bf16 tetrajet-v2-base} >"$out/dist_scaling.log" 2>&1
  note "dist_scaling rc=$?"
  grep -E "^\||efficiency" "$out/dist_scaling.log" | head -12
}

ncu_bin() { command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1; }
phase_qprofile() {
  local ncu
  ncu=$(ncu_bin)
  [ -n "$ncu" ] || { note "no ncu"; return 1; }
  for kc in quantize_nvfp4_kernel:24 quantize_dual_kernel:2 amax:2; do
    local k=${kc%%:*} c=${kc##*:}
    timeout 150 "$ncu" -k "regex:$k" -c $c --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \
      $B/quantize_bench --sizes-mib 64 --dtypes bf16 --runs 1 >"$out/ncu-$k.txt" 2>&1
  done
  phase_sass
  note "qprofile done: $(ls "$out" | grep -c ncu-) ncu reports"
  grep -E "^  [a-z_]+.*kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issue Slots Busy|Registers Per" "$out"/ncu-*.txt | head -60
}
phase_sass() {  # SASS of the quantizer objects (cuobjdump is on the GPU machine, not on the dev machines)
  for f in quant_nvfp4 quant_dual quant_dual_general_quantize; do
    obj=$(find $B -name "$f.cu.o" | head -1)
    cuobjdump -sass "$obj" 2>&1 | gzip >"$out/sass-$f.txt.gz"
  done
  note "sass: $(ls "$out" | grep -c sass-) objects"
}
phase_stepprofile() {
  local ncu
  ncu=$(ncu_bin)
  for r in ${PROFILE_RECIPES:-bf16 tetrajet-v2-base}; do
    timeout 200 "$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
      $B/train_bench --config olmo2-70m --steps 1 --warmup 1 --recipes $r >"$out/stepprofile-$r.csv" 2>"$out/stepprofile-$r.err"
    note "stepprofile $r rc=$? $(wc -l <"$out/stepprofile-$r.csv") lines"
    python3 bench/kernel_profile.py "$out/stepprofile-$r.csv" --label "olmo2-70m $r (2 steps)" | head -16
  done
}

for p in "$@"; do
  "phase_$p" || { note "phase $p failed"; [[ $p == build* ]] && break; }
done
# Everything in one archive (the device tool brings back only a few files per call).
(cd "$out" && tar czf ../gpu-out.tar.gz . && mv ../gpu-out.tar.gz .) 2>/dev/null
echo
echo "== summary"
printf '  %s\n' "${summary[@]}"
