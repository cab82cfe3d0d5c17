#include <initializer_list>

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

// ---------------------------------------------------------------- vectorized paths
// One thread per 8 adjacent columns (16-byte accesses) for f a multiple of 8 and aligned rows; chunk
// `idx` of the n * (f / 8) is row idx / cpr, columns 8 (idx % cpr) ...

__global__ void swiglu_forward_vec_kernel(const bf16* __restrict__ gu, bf16* __restrict__ out,
                                          unsigned chunks, unsigned cpr) {
  for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < chunks; idx += gridDim.x * blockDim.x) {
    const unsigned row = idx / cpr, j = 8 * (idx - row * cpr), f = 8 * cpr;
    const bf16* g = gu + static_cast<size_t>(row) * 2 * f + j;
    float gv[8], uv[8], o[8];
    load8(g, gv);
    load8(g + f, uv);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = (gv[e] * sigmoid(gv[e])) * uv[e];
    store8(out + static_cast<size_t>(row) * f + j, o);
  }
}

__global__ void swiglu_backward_vec_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ gu,
                                           bf16* __restrict__ dgu, unsigned chunks, unsigned cpr) {
  for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < chunks; idx += gridDim.x * blockDim.x) {
    const unsigned row = idx / cpr, j = 8 * (idx - row * cpr), f = 8 * cpr;
    const size_t in = static_cast<size_t>(row) * 2 * f + j;
    float gv[8], uv[8], dv[8], dg[8], du[8];
    load8(gu + in, gv);
    load8(gu + in + f, uv);
    load8(dout + static_cast<size_t>(row) * f + j, dv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float s = sigmoid(gv[e]);
      dg[e] = dv[e] * uv[e] * (s * (1.0f + gv[e] * (1.0f - s)));  // silu'(g) = s (1 + g (1 - s))
      du[e] = dv[e] * (gv[e] * s);
    }
    store8(dgu + in, dg);
    store8(dgu + in + f, du);
  }
}

// ---------------------------------------------------------------- general paths (any even f)

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

// Whether the vectorized kernels apply: f a multiple of 8, 16-byte aligned rows, 32-bit chunk indices.
bool vector_path(int n, int f, std::initializer_list<const void*> pointers) {
  if (f % 8 != 0 || static_cast<long long>(n) * (f / 8) >= (1ll << 31)) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void swiglu_forward(const bf16* gu, bf16* out, int n, int f, cudaStream_t stream) {
  check_shape(n, f, "swiglu_forward");
  const long long pairs = static_cast<long long>(n) * (f / 2);
  if (pairs == 0) return;
  if (vector_path(n, f, {gu, out})) {
    const long long chunks = static_cast<long long>(n) * (f / 8);
    swiglu_forward_vec_kernel<<<grid_for(chunks, kThreads, 1 << 20), kThreads, 0, stream>>>(
        gu, out, static_cast<unsigned>(chunks), static_cast<unsigned>(f / 8));
    FP4_CUDA_CHECK_LAUNCH("swiglu_forward_vec_kernel");
    return;
  }
  swiglu_forward_kernel<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(gu, out, pairs, f / 2);
  FP4_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(const bf16* dout, const bf16* gu, bf16* dgu, int n, int f, cudaStream_t stream) {
  check_shape(n, f, "swiglu_backward");
  const long long pairs = static_cast<long long>(n) * (f / 2);
  if (pairs == 0) return;
  if (vector_path(n, f, {dout, gu, dgu})) {
    const long long chunks = static_cast<long long>(n) * (f / 8);
    swiglu_backward_vec_kernel<<<grid_for(chunks, kThreads, 1 << 20), kThreads, 0, stream>>>(
        dout, gu, dgu, static_cast<unsigned>(chunks), static_cast<unsigned>(f / 8));
    FP4_CUDA_CHECK_LAUNCH("swiglu_backward_vec_kernel");
    return;
  }
  swiglu_backward_kernel<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(dout, gu, dgu, pairs, f / 2);
  FP4_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

}  // namespace fp4::cuda
