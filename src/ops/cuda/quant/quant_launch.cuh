// Host-side helpers shared by the quantizer launchers: argument checks that name the operand at fault,
// and launch sizing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "numerics/quantize.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4::qk {

inline void check_aligned(const void* p, int64_t alignment, const char* what, const char* field) {
  FP4_CHECK(p != nullptr, what, ": ", field, " is a null device pointer");
  FP4_CHECK(reinterpret_cast<uintptr_t>(p) % alignment == 0, what, ": ", field, " must be ", alignment,
            "-byte aligned");
}

inline void check_input(const DeviceInput& x, const char* what) {
  check_aligned(x.data, 16, what, "input");
  FP4_CHECK(x.dtype == QuantIoType::kF32 || x.dtype == QuantIoType::kBF16, what, ": unknown input dtype");
}

inline void check_dequant(const DequantOutput& d, const char* what) {
  if (d.data == nullptr) return;
  check_aligned(d.data, 16, what, "dequantized output");
  FP4_CHECK(d.dtype == QuantIoType::kF32 || d.dtype == QuantIoType::kBF16, what, ": unknown dequant dtype");
}

// The view must describe an operand of this shape and spec, with usable pointers.
inline void check_view(const Nvfp4DeviceView& v, int64_t rows, int64_t cols, const QuantSpec& spec,
                       const char* what) {
  FP4_CHECK(v.rows == rows && v.cols == cols, what, ": output view is [", v.rows, " x ", v.cols,
            "] but the operand is [", rows, " x ", cols, "]");
  FP4_CHECK(v.block == spec.block && v.outer_mode == spec.outer, what, ": output view is ",
            to_string(v.block), " ", to_string(v.outer_mode), " but the spec is ", describe(spec));
  check_aligned(v.codes, 8, what, "codes");
  check_aligned(v.scales, 1, what, "scales");
  check_aligned(v.outer, 4, what, "outer scales");
}

// Validation of an NVFP4 spec as the CPU reference does it (quantize_nvfp4), plus the RNG inputs.
inline void check_nvfp4_spec(int64_t rows, int64_t cols, const QuantSpec& spec, const QuantRandomness& rnd,
                             const char* what) {
  validate(spec, what);
  FP4_CHECK(spec.format == QuantFormat::kNvfp4, what, ": spec format is ", to_string(spec.format));
  check_nvfp4_shape(rows, cols, spec, what);
  FP4_CHECK(spec.rht_n == 0 || rnd.signs.n == spec.rht_n, what, ": RHT signs have n=", rnd.signs.n,
            " but spec.rht_n=", spec.rht_n);
}

// Multiprocessor count of the current device (an attribute query: cheap, no synchronization).
inline int sm_count() {
  int dev = 0, count = 0;
  FP4_CUDA_CHECK(cudaGetDevice(&dev));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
  return count;
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Grid of a grid-stride kernel: enough blocks to fill the machine `per_sm` times, no more than needed.
inline unsigned grid_for(int64_t work_items, int threads, int per_sm) {
  const int64_t needed = ceil_div(work_items, threads);
  const int64_t cap = static_cast<int64_t>(sm_count()) * per_sm;
  return static_cast<unsigned>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

}  // namespace fp4::qk
