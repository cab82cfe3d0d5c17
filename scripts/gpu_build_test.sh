#!/usr/bin/env bash
# GPU machine: build, CUDA tests and the PyTorch and two-GPU checks, as phases.
# Logs and results go to $OUT (or ./gpu-out), a summary at the end. scripts/gpu_session.sh runs these
# phases mixed with those of the other scripts in one call.
#
# usage: scripts/gpu_build_test.sh PHASE... where PHASE is one of
#   build        configure + build fp4train and the CUDA tests/benchmarks (build-gpu/)
#   tests        test_cuda
#   torch        tests/reference/check_torch_cuda.py (gradients at init, 300-step curves vs PyTorch)
#   dist2        scripts/dist_gpu_check.sh 2 (needs two GPUs)
#   testsbg      start test_cuda in the background on GPU $TESTS_GPU (default 0; CPU-heavy: it overlaps the phases after it)
#   testswait    wait for it and report
#   testsgpu1    start test_cuda in the background on GPU 1 (two-GPU machines; testswait waits for it)
#   buildqb      configure + build quantize_bench alone (for profiles)
#   buildqt      configure + build quantize_bench and test_cuda (quantizer work)
#   buildq       configure + build quantize_bench and train_bench
#   buildlite    configure + build fp4train, train_bench and optimizer_bench (training and the recipe benches)
source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu_common.sh"

phase_build() { configure_and_build fp4train test_cuda train_bench quantize_bench norm_kernels_bench attention_bench optimizer_bench engine_dump_cuda engine_dump; }
phase_buildq() { configure_and_build quantize_bench train_bench; }
phase_buildqb() { configure_and_build quantize_bench; }  # the quantizer benchmark alone (profiles)
phase_buildqt() { configure_and_build quantize_bench test_cuda; }  # quantizer benchmark + CUDA tests
phase_buildlite() { configure_and_build fp4train train_bench optimizer_bench; }  # what training and the recipe bench need
phase_tests() {  # $TESTS_FILTER: a gtest filter (default: every test)
  timeout 240 $B/test_cuda --gtest_brief=1 --gtest_filter="${TESTS_FILTER:-*}" >"$out/test_cuda.log" 2>&1
  local rc=$?
  note "test_cuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" "$out/test_cuda.log" | head
  return $rc
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
phase_torch() {
  timeout 300 python3 tests/reference/check_torch_cuda.py --build-dir $B >"$out/torch_cuda.log" 2>&1
  note "check_torch_cuda rc=$?"
  tail -15 "$out/torch_cuda.log"
}
phase_dist2() {  # the two-GPU data-parallel checks (scripts/dist_gpu_check.sh), when the GPUs are there
  local n
  n=$(nvidia-smi -L | wc -l)
  [ "$n" -ge 2 ] || { note "dist2: only $n GPU"; return 1; }
  OUT=$out STEPS=${DIST_STEPS:-40} timeout ${DIST_TIMEOUT:-240} scripts/dist_gpu_check.sh 2 >"$out/dist_check.log" 2>&1
  note "dist_gpu_check 2 rc=$?"
  grep -E "^==|vs |failed" "$out/dist_check.log" | head -20
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then run_phases "$@"; fi
