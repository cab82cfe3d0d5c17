#!/usr/bin/env bash
# GPU machine: Nsight Compute profiles and SASS of the kernels, as phases.
# Logs and results go to $OUT (or ./gpu-out), a summary at the end. scripts/gpu_session.sh runs these
# phases mixed with those of the other scripts in one call.
#
# usage: scripts/gpu_profile.sh PHASE... where PHASE is one of
#   dualprofile  Nsight Compute of the fused dual quantizer with stall reasons and source counters
#   dualdetail   Nsight Compute, every section and per-SASS-line stalls, of chosen dual-kernel launches
#   rowsdetail   Nsight Compute, every section and per-SASS-line stalls, of row-quantizer launches ($ROWS_DETAIL)
#   qprofile     Nsight Compute sections of the quantization kernels + their SASS instruction counts
#   sass         cuobjdump -sass of the quantizer objects (instruction counts)
#   stepprofile  per-kernel times of two olmo2-70m training steps of each of $PROFILE_RECIPES under ncu
#                (default bf16 tetrajet-v2-base; the timeout per recipe is $STEPPROFILE_TIMEOUT_S, 300)
source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu_common.sh"

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
phase_stepprofile() {
  local ncu
  ncu=$(ncu_bin)
  for r in ${PROFILE_RECIPES:-bf16 tetrajet-v2-base}; do
    # fullstack-fp4's two steps (about 21600 launches) took 245 s under ncu on an H100
    timeout ${STEPPROFILE_TIMEOUT_S:-300} "$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
      $B/train_bench --config olmo2-70m --steps 1 --warmup 1 --recipes $r >"$out/stepprofile-$r.csv" 2>"$out/stepprofile-$r.err"
    note "stepprofile $r rc=$? $(wc -l <"$out/stepprofile-$r.csv") lines"
    python3 bench/kernel_profile.py "$out/stepprofile-$r.csv" --label "olmo2-70m $r (2 steps)" --phases | head -40
  done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then run_phases "$@"; fi
