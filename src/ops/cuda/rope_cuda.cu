#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kForwardThreads = 256;  // one warp per row

// Rotation pair p of a d-wide row: columns a = head * head_dim + i and a + half, angle index i.
struct RotPair {
  int a, b, i;
};
__device__ __forceinline__ RotPair rot_pair(int p, int half) {
  const int head = p / half, i = p - head * half;
  const int a = head * 2 * half + i;
  return {a, a + half, i};
}

__global__ void qk_norm_rope_forward_kernel(const bf16* __restrict__ qkv, bf16* __restrict__ out,
                                            const float* __restrict__ w_q, const float* __restrict__ w_k,
                                            const float* __restrict__ cos_table,
                                            const float* __restrict__ sin_table, float* __restrict__ rstd_q,
                                            float* __restrict__ rstd_k, int n, int t, int d, int half,
                                            float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= n) return;  // warp-uniform
  const size_t base = static_cast<size_t>(row) * 3 * d;
  const bf16* q = qkv + base;
  const bf16* k = q + d;
  const int pairs = d / 2;
  float ssq = 0.0f, ssk = 0.0f;
  for (int p = lane; p < pairs; p += 32) {
    const float2 a = load2(q + 2 * p), b = load2(k + 2 * p);
    ssq += a.x * a.x + a.y * a.y;
    ssk += b.x * b.x + b.y * b.y;
  }
  ssq = warp_sum(ssq);
  ssk = warp_sum(ssk);
  const float rq = 1.0f / sqrtf(ssq / static_cast<float>(d) + eps);
  const float rk = 1.0f / sqrtf(ssk / static_cast<float>(d) + eps);
  if (lane == 0) {
    rstd_q[row] = rq;
    rstd_k[row] = rk;
  }
  const int pos = row % t;
  const float* cs = cos_table + static_cast<size_t>(pos) * half;
  const float* sn = sin_table + static_cast<size_t>(pos) * half;
  for (int p = lane; p < pairs; p += 32) {
    const RotPair rp = rot_pair(p, half);
    const float c = cs[rp.i], s = sn[rp.i];
    const float qa = (load1(q + rp.a) * rq) * w_q[rp.a], qb = (load1(q + rp.b) * rq) * w_q[rp.b];
    store1(out + base + rp.a, qa * c - qb * s);
    store1(out + base + rp.b, qb * c + qa * s);
    const float ka = (load1(k + rp.a) * rk) * w_k[rp.a], kb = (load1(k + rp.b) * rk) * w_k[rp.b];
    store1(out + base + d + rp.a, ka * c - kb * s);
    store1(out + base + d + rp.b, kb * c + ka * s);
  }
  for (int p = lane; p < pairs; p += 32)
    *reinterpret_cast<__nv_bfloat162*>(out + base + 2 * d + 2 * p) =
        *reinterpret_cast<const __nv_bfloat162*>(qkv + base + 2 * d + 2 * p);
}

// Gradient with respect to the normed (unrotated) value of pair p: rotation by -angle.
__device__ __forceinline__ float2 unrotate(const bf16* g, RotPair rp, float c, float s) {
  const float ga = load1(g + rp.a), gb = load1(g + rp.b);
  return make_float2(ga * c + gb * s, gb * c - ga * s);
}

__global__ void qk_norm_rope_backward_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ qkv,
                                             const float* __restrict__ w_q, const float* __restrict__ w_k,
                                             const float* __restrict__ cos_table,
                                             const float* __restrict__ sin_table,
                                             const float* __restrict__ rstd_q,
                                             const float* __restrict__ rstd_k, float* __restrict__ partials,
                                             int n, int t, int d, int half, int rows_per_block) {
  __shared__ float scratch[32];
  const int pairs = d / 2;
  float2 acc_q[kNormPairsPerThread], acc_k[kNormPairsPerThread];
  for (int i = 0; i < kNormPairsPerThread; ++i) acc_q[i] = acc_k[i] = make_float2(0.0f, 0.0f);
  const int r0 = blockIdx.x * rows_per_block, r1 = min(n, r0 + rows_per_block);
  for (int r = r0; r < r1; ++r) {
    const size_t base = static_cast<size_t>(r) * 3 * d;
    const bf16* xq = qkv + base;
    const bf16* xk = xq + d;
    bf16* gq = dqkv + base;
    bf16* gk = gq + d;
    const int pos = r % t;
    const float* cs = cos_table + static_cast<size_t>(pos) * half;
    const float* sn = sin_table + static_cast<size_t>(pos) * half;
    float dot_q = 0.0f, dot_k = 0.0f;
    for (int i = 0; i < kNormPairsPerThread; ++i) {
      const int p = threadIdx.x + i * kNormThreads;
      if (p < pairs) {
        const RotPair rp = rot_pair(p, half);
        const float c = cs[rp.i], s = sn[rp.i];
        const float2 g = unrotate(gq, rp, c, s), h = unrotate(gk, rp, c, s);
        dot_q += g.x * w_q[rp.a] * load1(xq + rp.a) + g.y * w_q[rp.b] * load1(xq + rp.b);
        dot_k += h.x * w_k[rp.a] * load1(xk + rp.a) + h.y * w_k[rp.b] * load1(xk + rp.b);
      }
    }
    dot_q = block_sum(dot_q, scratch);
    dot_k = block_sum(dot_k, scratch);
    const float rq = rstd_q[r], rk = rstd_k[r];
    const float kq = dot_q / static_cast<float>(d) * rq * rq * rq;
    const float kk = dot_k / static_cast<float>(d) * rk * rk * rk;
    for (int i = 0; i < kNormPairsPerThread; ++i) {
      const int p = threadIdx.x + i * kNormThreads;
      if (p < pairs) {
        const RotPair rp = rot_pair(p, half);
        const float c = cs[rp.i], s = sn[rp.i];
        const float2 g = unrotate(gq, rp, c, s), h = unrotate(gk, rp, c, s);
        const float qa = load1(xq + rp.a), qb = load1(xq + rp.b), ka = load1(xk + rp.a),
                    kb = load1(xk + rp.b);
        store1(gq + rp.a, g.x * w_q[rp.a] * rq - qa * kq);
        store1(gq + rp.b, g.y * w_q[rp.b] * rq - qb * kq);
        store1(gk + rp.a, h.x * w_k[rp.a] * rk - ka * kk);
        store1(gk + rp.b, h.y * w_k[rp.b] * rk - kb * kk);
        acc_q[i].x += g.x * (qa * rq);
        acc_q[i].y += g.y * (qb * rq);
        acc_k[i].x += h.x * (ka * rk);
        acc_k[i].y += h.y * (kb * rk);
      }
    }
  }
  float* out = partials + static_cast<size_t>(blockIdx.x) * 2 * d;
  for (int i = 0; i < kNormPairsPerThread; ++i) {
    const int p = threadIdx.x + i * kNormThreads;
    if (p < pairs) {
      const RotPair rp = rot_pair(p, half);
      out[rp.a] = acc_q[i].x;
      out[rp.b] = acc_q[i].y;
      out[d + rp.a] = acc_k[i].x;
      out[d + rp.b] = acc_k[i].y;
    }
  }
}

void check_shape(int n, int t, int d, int head_dim, const char* what) {
  FP4_CHECK(n >= 0 && t > 0 && n % t == 0, what, ": ", n, " rows are not whole sequences of ", t);
  FP4_CHECK(head_dim > 0 && head_dim % 2 == 0 && d > 0 && d % head_dim == 0, what, ": width ", d,
            " is not a whole number of heads of even size ", head_dim);
}

}  // namespace

void qk_norm_rope_forward(const bf16* qkv, bf16* out, const float* w_q, const float* w_k,
                          const float* cos_table, const float* sin_table, float* rstd_q, float* rstd_k, int n,
                          int t, int d, int head_dim, float eps, cudaStream_t stream) {
  check_shape(n, t, d, head_dim, "qk_norm_rope_forward");
  if (n == 0) return;
  const int rows_per_block = kForwardThreads / 32;
  qk_norm_rope_forward_kernel<<<(n + rows_per_block - 1) / rows_per_block, kForwardThreads, 0, stream>>>(
      qkv, out, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, n, t, d, head_dim / 2, eps);
  FP4_CUDA_CHECK_LAUNCH("qk_norm_rope_forward_kernel");
}

void qk_norm_rope_backward(bf16* dqkv, const bf16* qkv, const float* w_q, const float* w_k,
                           const float* cos_table, const float* sin_table, const float* rstd_q,
                           const float* rstd_k, float* dw_q, float* dw_k, float* scratch, int n, int t, int d,
                           int head_dim, cudaStream_t stream) {
  check_shape(n, t, d, head_dim, "qk_norm_rope_backward");
  FP4_CHECK(d <= kNormMaxWidth, "qk_norm_rope_backward: width ", d, " exceeds the kernel's limit ",
            kNormMaxWidth);
  if (n == 0) return;
  const NormTiling tl = norm_backward_tiling(n);
  qk_norm_rope_backward_kernel<<<tl.blocks, kNormThreads, 0, stream>>>(dqkv, qkv, w_q, w_k, cos_table,
                                                                       sin_table, rstd_q, rstd_k, scratch, n,
                                                                       t, d, head_dim / 2, tl.rows_per_block);
  FP4_CUDA_CHECK_LAUNCH("qk_norm_rope_backward_kernel");
  reduce_norm_partials(scratch, tl.blocks, 2 * d, d, dw_q, dw_k, stream);
}

}  // namespace fp4::cuda
