#!/usr/bin/env bash
# Configures and builds fp4train into build/ (or $FP4_BUILD_DIR). CUDA sources are compiled when nvcc is
# found (sm_90a plus a compile-only sm_100a target); the CPU path needs no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FP4_BUILD_DIR:-$root/build}
if [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$(nproc)"
