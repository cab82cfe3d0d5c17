#!/usr/bin/env bash
# Builds the CPU suite and the fuzz test with AddressSanitizer + UndefinedBehaviorSanitizer in a separate
# build directory (build-asan, or $FP4_ASAN_DIR) and runs them (docs/RELIABILITY.md). Any sanitizer report
# fails the run. Arguments are ctest arguments (default: the whole CPU suite, fuzz test included), e.g.
#   scripts/sanitize.sh -R 'Checkpoint|Manifest|fuzz_cli'
# FP4_FUZZ_PER_FAMILY sets the fuzz corpus size under the sanitizers (default 40: ASan makes each run slower).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FP4_ASAN_DIR:-$root/build-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP4_WITH_CUDA=OFF "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$build" -j "$(nproc)"
# halt_on_error: the first report ends the process with a non-zero status, which fails its test.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# The fuzz test's processes would be killed by the fuzzer's timeout under ASan's slowdown: fewer, same seed.
per_family=${FP4_FUZZ_PER_FAMILY:-40}
if [ "$#" -eq 0 ]; then set -- -L cpu; fi
# install_examples builds the installed (sanitized) libraries into examples compiled without the sanitizer
# runtime, which cannot link; it checks packaging, which the normal suite covers.
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -E 'fuzz_cli|install_examples' "$@"
if ! printf '%s\n' "$@" | grep -q -- '-E'; then
  python3 "$root/tests/fuzz/fuzz_cli.py" --binary "$build/fp4train" --per-family "$per_family" --jobs "$(nproc)"
fi
