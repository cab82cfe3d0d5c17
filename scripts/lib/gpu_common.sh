# Shared by the GPU-machine scripts (scripts/gpu_build_test.sh, gpu_bench.sh, gpu_experiments.sh,
# gpu_profile.sh and the dispatcher gpu_session.sh), sourced: the repository root as working directory, $out
# for logs and results ($OUT or ./gpu-out), $B the build folder, note() for the summary, the helpers
# several phases use, and run_phases, which runs phases in order and prints the summary.
[ -n "${FP4_GPU_COMMON_LOADED:-}" ] && return 0
FP4_GPU_COMMON_LOADED=1
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
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
# merge_bench_json RUN.jsonl: the run's figures into docs/benchmarks/latest.json of this tree (ratios against
# the run's own baselines, scripts/bench_to_json.py), and a copy of the result into $out. The tree copied to
# the GPU machine has no git: FP4_COMMIT names the commit that was built (the caller sets it).
merge_bench_json() {
  [ -s "$1" ] || { note "bench_to_json: $1 is empty, latest.json not updated"; return 0; }
  # The device service may lend an H100 for an H200 call: name the card the run actually had.
  local gpu
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  python3 scripts/bench_to_json.py --commit "${FP4_COMMIT:-unknown}" --machine "one ${gpu:-unknown GPU}" "$1" &&
    cp docs/benchmarks/latest.json "$out/latest.json"
  note "bench_to_json $(basename "$1") rc=$?"
}
ncu_bin() { command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1; }
train_recipe() {  # train_recipe CONFIG RUN_DIR RECIPE STEPS EXTRA_SETS...
  local config=$1 dir=$2 recipe=$3 steps=$4
  shift 4
  local warm=$((steps / 10))
  $B/fp4train train --config "$config" --recipe "$recipe" --out "$dir" \
    --set train.steps=$steps --set optim.warmup=$warm --set train.ckpt_every=100000 "$@" >"$dir.log" 2>&1
  note "$recipe: rc=$? $(grep -E 'val ppl' "$dir.log" | tail -1)"
}

# run_phases PHASE...: phase_PHASE for each, in order (a failed build phase stops the rest), then one archive
# of $out and the summary.
run_phases() {
  for p in "$@"; do
    "phase_$p" || { note "phase $p failed"; [[ $p == build* ]] && break; }
  done
  # Everything in one archive (the device tool brings back only a few files per call).
  (cd "$out" && tar czf ../gpu-out.tar.gz . && mv ../gpu-out.tar.gz .) 2>/dev/null
  echo
  echo "== summary"
  printf '  %s\n' "${summary[@]}"
}
