#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/swiglu_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// One thread per two adjacent columns of a row.
__global__ void swiglu_forward_kernel(const bf16* __restrict__ gu, bf16* __restrict__ out, long long pairs,
                                      int half_f) {
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < pairs;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = idx / half_f;
    const int j = static_cast<int>(idx - row * half_f) * 2, f = 2 * half_f;
    const bf16* g = gu + row * 2 * f + j;
    const float2 gv = load2(g), uv = load2(g + f);
    store2(out + row * f + j, make_float2((gv.x * sigmoid(gv.x)) * uv.x, (gv.y * sigmoid(gv.y)) * uv.y));
  }
}

__global__ void swiglu_backward_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ gu,
                                       bf16* __restrict__ dgu, long long pairs, int half_f) {
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < pairs;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = idx / half_f;
    const int j = static_cast<int>(idx - row * half_f) * 2, f = 2 * half_f;
    const size_t in = row * 2 * f + j;
    const float2 gv = load2(gu + in), uv = load2(gu + in + f), dv = load2(dout + row * f + j);
    const float sx = sigmoid(gv.x), sy = sigmoid(gv.y);
    // silu'(g) = s (1 + g (1 - s))
    store2(dgu + in, make_float2(dv.x * uv.x * (sx * (1.0f + gv.x * (1.0f - sx))),
                                 dv.y * uv.y * (sy * (1.0f + gv.y * (1.0f - sy)))));
    store2(dgu + in + f, make_float2(dv.x * (gv.x * sx), dv.y * (gv.y * sy)));
  }
}

void check_shape(int n, int f, const char* what) {
  FP4_CHECK(n >= 0 && f > 0 && f % 2 == 0, what, ": the inner size must be even and positive, got n=", n,
            " f=", f);
}

}  // namespace

void swiglu_forward(const bf16* gu, bf16* out, int n, int f, cudaStream_t stream) {
  check_shape(n, f, "swiglu_forward");
  const long long pairs = static_cast<long long>(n) * (f / 2);
  if (pairs == 0) return;
  swiglu_forward_kernel<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(gu, out, pairs, f / 2);
  FP4_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(const bf16* dout, const bf16* gu, bf16* dgu, int n, int f, cudaStream_t stream) {
  check_shape(n, f, "swiglu_backward");
  const long long pairs = static_cast<long long>(n) * (f / 2);
  if (pairs == 0) return;
  swiglu_backward_kernel<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(dout, gu, dgu, pairs, f / 2);
  FP4_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

}  // namespace fp4::cuda
