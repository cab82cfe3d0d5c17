// The kernel arguments of the fused dual quantizer (quant_dual.cu), shared by its general kernel
// (quant_dual_general.cuh) and the specialized one of quant_dual_fast.cuh.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4::dual {

struct DualArgs {
  const void* x;
  int64_t rows, cols;
  qk::Nvfp4Params pr, pc;  // row / column (transposed) operand
  int rht_r, rht_c;
  RhtSigns signs_r, signs_c;
  const float* amax_r;
  const float* amax_c;
  Nvfp4DeviceView out_r, out_c;
  unsigned long long* nonfinite_r;
  unsigned long long* nonfinite_c;
  bool aligned;
  void* dq;  // dequant(rows) [rows x cols], optional
  bool dq_bf16, dq_apply;
  void* dq_c;  // dequant(cols) [cols x rows], optional; only the specialized kernel writes it
  bool dq_c_bf16, dq_c_apply;
  float* amax_c_out;  // kAmaxOnly: where the amax of the transformed T goes
};

// One thread block per tile x tile piece of an [rows x cols] input.
inline unsigned tile_grid(int64_t rows, int64_t cols, int tile) {
  const int64_t tiles = qk::ceil_div(rows, tile) * qk::ceil_div(cols, tile);
  FP4_CHECK(tiles < (int64_t{1} << 31), "quantize_dual_cuda: tensor [", rows, " x ", cols,
            "] is too large for one launch");
  return static_cast<unsigned>(tiles);
}

}  // namespace fp4::dual
