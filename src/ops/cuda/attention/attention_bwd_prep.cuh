// The pass before the attention backward's main kernel, in one launch: Delta = rowsum(dO * O) (as
// attention_bwd_delta_kernel) and zeros in the FP32 dq accumulator, each thread clearing the eight
// accumulator elements of the (token, head, 8 dims) it reads. It replaces a cudaMemsetAsync of the whole
// accumulator plus the Delta kernel: the same bytes, one launch and one kernel boundary fewer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention/attention_bwd.cuh"

namespace fp4::cuda::attn {

// Grid: one thread per 8 dims of a (token, head) row, heads fastest; dq_accum [B][H][T][kD], delta [B][H][T].
template <int kD>
__global__ void attention_bwd_prep_kernel(const bf16* out, const bf16* dout, int64_t ld_out, float* delta,
                                          float* dq_accum, int B, int T, int H) {
  constexpr int kLanes = kD / 8;  // divides 32: a row's lanes sit in one warp
  const int64_t rows = static_cast<int64_t>(B) * T * H;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = gid / kLanes;  // (token, head), head fastest
  const int part = static_cast<int>(gid % kLanes);
  const int64_t tok = row / H;
  const int h = static_cast<int>(row % H);
  const int64_t bi = tok / T, ti = tok % T;
  const int64_t head_row = (bi * H + h) * T + ti;  // row of the [B][H][T] layouts
  float sum = 0.f;
  if (row < rows) {
    sum = delta_part(out, dout, tok * ld_out + h * kD + part * 8);
    float4* acc = reinterpret_cast<float4*>(dq_accum + head_row * kD + part * 8);
    acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
  if (row < rows && part == 0) delta[head_row] = sum;
}

}  // namespace fp4::cuda::attn
