// The kernel arguments of the fused dual quantizer (quant_dual.cu), shared by its general kernel and the
// specialized one of quant_dual_fast.cuh.
#pragma once

#include <cstdint>

#include "ops/cuda/quant_common.cuh"

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

}  // namespace fp4::dual
