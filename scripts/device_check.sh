#!/usr/bin/env bash
# The one script to run on the GPU machine: configures and builds the CUDA targets, runs the CUDA tests
# (test_cuda), the format check against ml_dtypes / PyTorch (scripts/check_formats.py) and the
# quantization benchmark, writes full logs to $OUT (or <build dir>/device_logs) and ends with a short
# summary table. Exits non-zero when a step fails.
#
# usage: scripts/device_check.sh [--only tests,formats,bench] [--build-dir DIR] [--jobs N]
#                                [--test-filter GTEST_FILTER] [--cmake-arg ARG]... [--bench-arg ARG]...
# (--test-filter 'Quant*:CudaCheck*' runs only the quantization suites of test_cuda.)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-cuda"
jobs=16
test_filter="*"
only="tests,formats,bench"
cmake_args=()
bench_args=()
while (($#)); do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --test-filter) test_filter="$2"; shift 2 ;;
    --cmake-arg) cmake_args+=("$2"); shift 2 ;;
    --bench-arg) bench_args+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "device_check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$only," == *",$1,"* ]]; }

logs="${OUT:-$build/device_logs}"
mkdir -p "$logs"
status=0
results=()

# step NAME LOG LIMIT CMD...: runs one step under a time limit, records its verdict and duration.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local t0=$SECONDS rc verdict=PASS
  echo "== $name: $*" >"$log"
  echo "== $name ..."
  timeout "$limit" "$@" >>"$log" 2>&1
  rc=$?
  ((rc == 124)) && verdict="TIMEOUT(${limit}s)"
  ((rc != 0 && rc != 124)) && verdict="FAIL(rc=$rc)"
  ((rc != 0)) && status=1
  results+=("$(printf '  %-15s %-15s %5ss  %s' "$name" "$verdict" "$((SECONDS - t0))" "$(basename "$log")")")
  return $rc
}

summary() {
  {
    echo
    echo "== device_check summary ($(date -u +%FT%TZ); logs in $logs)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/  gpu: /'
    printf '%s\n' "${results[@]}"
    if [[ -f "$logs/test_cuda.log" ]]; then
      grep -E "^\[(nvfp4|dual)\] [0-9]+ of " "$logs/test_cuda.log" | sed 's/^/  /'
      grep -E "differ" "$logs/test_cuda.log" | head -10 | cut -c1-220 | sed 's/^/  /'
      grep -E "^\[  FAILED  \]" "$logs/test_cuda.log" | head -15 | sed 's/^/  /'
      grep -E "^\[  PASSED  \]|tests? from .* ran" "$logs/test_cuda.log" | sed 's/^/  /'
    fi
    [[ -f "$logs/check_formats.log" ]] && grep -E "^\[formats\] (E2M1|E4M3|PASS|FAIL)" "$logs/check_formats.log" | sed 's/^/  /'
    if [[ -f "$logs/quantize_bench.log" ]]; then
      echo "  bandwidth / copy bandwidth (bytes read + written, median of the timed runs):"
      python3 - "$logs/quantize_bench.log" <<'EOF'
import sys
cols, table = [], {}
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(f) != 7 or f[0] == "kernel":
        continue
    kernel, col = f[0], f"{f[1]} {f[2].replace(' ', '')}"
    if col not in cols:
        cols.append(col)
    table.setdefault(kernel, {})[col] = f[5].replace(" GB/s", "") if kernel.startswith("copy") else f[6]
print(f"    {'kernel':40s}" + "".join(f"{c:>17s}" for c in cols))
for k, row in table.items():
    print(f"    {k:40s}" + "".join(f"{row.get(c, '-'):>17s}" for c in cols))
print("    (the copy row is in GB/s, the others are ratios to it)")
EOF
    fi
  } | tee "$logs/summary.txt"
}

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if ! step configure "$logs/configure.log" 300 cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a "${cmake_args[@]}"; then
  tail -30 "$logs/configure.log"
  summary
  exit 1
fi
if ! step build "$logs/build.log" 420 cmake --build "$build" -j "$jobs" --target test_cuda format_dump quantize_bench; then
  grep -E -B2 -A6 "error" "$logs/build.log" | head -60
  summary
  exit 1
fi

wants tests && step test_cuda "$logs/test_cuda.log" 300 "$build/test_cuda" --gtest_brief=1 \
  --gtest_filter="$test_filter"
wants formats && step check_formats "$logs/check_formats.log" 150 python3 "$root/scripts/check_formats.py" \
  --build-dir "$build"
wants bench && step quantize_bench "$logs/quantize_bench.log" 180 "$build/quantize_bench" "${bench_args[@]}"
summary
exit $status
