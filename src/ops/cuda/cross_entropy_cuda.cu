#include <cmath>

#include "core/error.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kSumThreads = 1024;

// Loads/stores kVec consecutive BF16 values (kVec = 8: one 16-byte access).
template <int kVec>
__device__ __forceinline__ void load_vec(const bf16* p, float* out) {
  if constexpr (kVec == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
    for (int i = 0; i < kVec; ++i) out[i] = __bfloat162float(p[i]);
  }
}

template <int kVec>
__device__ __forceinline__ void store_vec(bf16* p, const float* in) {
  if constexpr (kVec == 8) {
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    for (int i = 0; i < 4; ++i) h[i] = __float22bfloat162_rn(make_float2(in[2 * i], in[2 * i + 1]));
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
    for (int i = 0; i < kVec; ++i) p[i] = __float2bfloat16_rn(in[i]);
  }
}

// Merges the running (max, sum of 2^(x - max)) of two parts (base-2 units).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  s = s * (m == mx ? 1.0f : exp2f(m - mx)) + s2 * (m2 == mx ? 1.0f : exp2f(m2 - mx));
  m = mx;
}

template <int kVec>
__global__ void cross_entropy_kernel(bf16* __restrict__ logits, const int32_t* __restrict__ targets,
                                     float* __restrict__ row_loss, float* __restrict__ row_ce, int v,
                                     int v_real, float z_loss, float grad_scale, bool backward) {
  __shared__ float sm_m[32], sm_s[32];
  const int row = blockIdx.x;
  bf16* x = logits + static_cast<size_t>(row) * v;
  const int y = targets[row];
  const int n_vec = v / kVec;
  if (y < 0) {  // ignored row: no loss, no gradient
    if (threadIdx.x == 0) row_loss[row] = row_ce[row] = 0.0f;
    if (backward) {
      float zero[kVec] = {};
      for (int c = threadIdx.x; c < n_vec; c += blockDim.x) store_vec<kVec>(x + c * kVec, zero);
    }
    return;
  }
  const float x_y = __bfloat162float(x[y]);  // read before any thread overwrites the row
  // Running (max, sum of exp(x - max)) in base 2: one rescale per 8 values instead of a branch per value,
  // and ex2.approx (relative error ~2^-22, far below BF16 logits' resolution) instead of expf.
  constexpr float kLog2e = 1.4426950408889634f;
  float m = -INFINITY, s = 0.0f;  // m in log2 units: max of x * log2(e)
  for (int c = threadIdx.x; c < n_vec; c += blockDim.x) {
    float vals[kVec];
    load_vec<kVec>(x + c * kVec, vals);
    const int valid = min(kVec, v_real - c * kVec);
    float mc = -INFINITY;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      vals[e] *= kLog2e;
      if (e < valid) mc = fmaxf(mc, vals[e]);
    }
    if (valid <= 0) continue;
    const float mn = fmaxf(m, mc);
    float add = 0.0f;
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      if (e < valid) add += exp2f(vals[e] - mn);
    s = s * exp2f(m - mn) + add;  // exp2(-inf) = 0 on the first chunk
    m = mn;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, o), s2 = __shfl_xor_sync(kFullMask, s, o);
    merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (lane == 0) {
    sm_m[warp] = m;
    sm_s[warp] = s;
  }
  __syncthreads();
  m = lane < n_warps ? sm_m[lane] : -INFINITY;
  s = lane < n_warps ? sm_s[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, o), s2 = __shfl_xor_sync(kFullMask, s, o);
    merge(m, s, m2, s2);
  }
  const float lse = (m + log2f(s)) * 0.6931471805599453f;  // back to natural log
  if (threadIdx.x == 0) {
    const float ce = lse - x_y;
    row_ce[row] = ce;
    row_loss[row] = ce + z_loss * lse * lse;
  }
  if (!backward) return;
  // d/dx_j (lse - x_y + z lse^2) = p_j (1 + 2 z lse) - [j == y]
  const float k = grad_scale * (1.0f + 2.0f * z_loss * lse);
  const float lse2 = lse * kLog2e;
  for (int c = threadIdx.x; c < n_vec; c += blockDim.x) {
    float vals[kVec];
    load_vec<kVec>(x + c * kVec, vals);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int j = c * kVec + e;
      vals[e] = j < v_real ? exp2f(fmaf(vals[e], kLog2e, -lse2)) * k - (j == y ? grad_scale : 0.0f) : 0.0f;
    }
    store_vec<kVec>(x + c * kVec, vals);
  }
}

__global__ void loss_sums_kernel(const float* __restrict__ row_loss, const float* __restrict__ row_ce, int n,
                                 double* sums) {
  __shared__ double sh_loss[kSumThreads], sh_ce[kSumThreads];
  double a = 0.0, b = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    a += row_loss[i];
    b += row_ce[i];
  }
  sh_loss[threadIdx.x] = a;
  sh_ce[threadIdx.x] = b;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      sh_loss[threadIdx.x] += sh_loss[threadIdx.x + w];
      sh_ce[threadIdx.x] += sh_ce[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[0] += sh_loss[0];
    sums[1] += sh_ce[0];
  }
}

}  // namespace

void cross_entropy(bf16* logits, const int32_t* targets, float* row_loss, float* row_ce, int n, int v,
                   int v_real, float z_loss, float grad_scale, bool backward, cudaStream_t stream) {
  FP4_CHECK(n >= 0 && v_real > 0 && v >= v_real, "cross_entropy: bad vocabulary sizes v=", v,
            " v_real=", v_real);
  if (n == 0) return;
  if (v % 8 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0)
    cross_entropy_kernel<8><<<n, kThreads, 0, stream>>>(logits, targets, row_loss, row_ce, v, v_real, z_loss,
                                                        grad_scale, backward);
  else
    cross_entropy_kernel<1><<<n, kThreads, 0, stream>>>(logits, targets, row_loss, row_ce, v, v_real, z_loss,
                                                        grad_scale, backward);
  FP4_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

void accumulate_loss_sums(const float* row_loss, const float* row_ce, int n, double* sums,
                          cudaStream_t stream) {
  FP4_CHECK(n >= 0, "accumulate_loss_sums: negative row count ", n);
  loss_sums_kernel<<<1, kSumThreads, 0, stream>>>(row_loss, row_ce, n, sums);
  FP4_CUDA_CHECK_LAUNCH("loss_sums_kernel");
}

}  // namespace fp4::cuda
