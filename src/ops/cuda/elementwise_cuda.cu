#include <cmath>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/elementwise_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, bf16* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void gather_last_kernel(const bf16* __restrict__ x, bf16* __restrict__ out, int b, int t, int d) {
  const int64_t total = static_cast<int64_t>(b) * d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i / d, j = i - s * d;
    out[i] = x[(s * t + t - 1) * d + j];
  }
}

__global__ void mask_padded_kernel(float* __restrict__ logits, int rows, int v, int v_real) {
  const int pad = v - v_real;
  const int64_t total = static_cast<int64_t>(rows) * pad;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pad, j = v_real + (i - r * pad);
    logits[r * v + j] = -INFINITY;
  }
}

}  // namespace

void f32_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream) {
  FP4_CHECK(n >= 0, "f32_to_bf16: negative count ", n);
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(in, out, n);
  FP4_CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void gather_last_positions(const bf16* x, bf16* out, int b, int t, int d, cudaStream_t stream) {
  FP4_CHECK(b >= 0 && t > 0 && d > 0, "gather_last_positions: bad shape b=", b, " t=", t, " d=", d);
  const int64_t total = static_cast<int64_t>(b) * d;
  if (total == 0) return;
  gather_last_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(x, out, b, t, d);
  FP4_CUDA_CHECK_LAUNCH("gather_last_kernel");
}

void mask_padded_logits(float* logits, int rows, int v, int v_real, cudaStream_t stream) {
  FP4_CHECK(rows >= 0 && v >= v_real && v_real > 0, "mask_padded_logits: bad sizes v=", v,
            " v_real=", v_real);
  const int64_t total = static_cast<int64_t>(rows) * (v - v_real);
  if (total == 0) return;
  mask_padded_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(logits, rows, v, v_real);
  FP4_CUDA_CHECK_LAUNCH("mask_padded_kernel");
}

}  // namespace fp4::cuda
