#include <initializer_list>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kForwardThreads = 256;  // one warp per row

// ---------------------------------------------------------------- vectorized paths
// Heads of a multiple of 16 columns: a "pair chunk" is 8 consecutive columns a..a+7 of a head's first
// half and their rotation partners a+half..a+half+7, angles i0..i0+7 (i0 = a - head start). Lane l holds
// the pair chunks l, l + 32, ... (kP of them) of its row: both halves of every rotation in one lane.
struct PairChunk {
  int a, i0;
};
__device__ __forceinline__ PairChunk pair_chunk(int pc, int half) {
  const int per_head = half / 8, head = pc / per_head, i0 = 8 * (pc - head * per_head);
  return {head * 2 * half + i0, i0};
}

// Normalizes, scales and rotates one pair chunk (xa at column a, xb at a + half) into `out`.
__device__ __forceinline__ void norm_rotate(const Held8<bf16>& xa, const Held8<bf16>& xb, float r,
                                            const float* __restrict__ w, const float (&c)[8],
                                            const float (&s)[8], PairChunk pc, int half, bf16* out) {
  float va[8], vb[8], wa[8], wb[8], oa[8], ob[8];
  xa.get(va);
  xb.get(vb);
  load8(w + pc.a, wa);
  load8(w + pc.a + half, wb);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float na = (va[e] * r) * wa[e], nb = (vb[e] * r) * wb[e];
    oa[e] = na * c[e] - nb * s[e];
    ob[e] = nb * c[e] + na * s[e];
  }
  store8(out + pc.a, oa);
  store8(out + pc.a + half, ob);
}

// Sum of squares of a pair chunk.
__device__ __forceinline__ float square_sum(const Held8<bf16>& xa, const Held8<bf16>& xb) {
  float va[8], vb[8], ss = 0.0f;
  xa.get(va);
  xb.get(vb);
#pragma unroll
  for (int e = 0; e < 8; ++e) ss += va[e] * va[e] + vb[e] * vb[e];
  return ss;
}

template <int kP>
__global__ void __launch_bounds__(kForwardThreads)
    qk_norm_rope_forward_vec_kernel(const bf16* __restrict__ qkv, bf16* __restrict__ out,
                                    const float* __restrict__ w_q, const float* __restrict__ w_k,
                                    const float* __restrict__ cos_table, const float* __restrict__ sin_table,
                                    float* __restrict__ rstd_q, float* __restrict__ rstd_k, int n, int t,
                                    int d, int half, float eps) {
  const int row = blockIdx.x * (kForwardThreads / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= n) return;  // warp-uniform
  const size_t base = static_cast<size_t>(row) * 3 * d;
  const int pcs = d / 16;
  Held8<bf16> qa[kP], qb[kP], ka[kP], kb[kP];  // the row's q and k as stored (BF16)
  uint4 v[2 * kP];
  float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
  for (int i = 0; i < kP; ++i) {
    if (lane + 32 * i < pcs) {
      const PairChunk pc = pair_chunk(lane + 32 * i, half);
      qa[i].load(qkv + base + pc.a);
      qb[i].load(qkv + base + pc.a + half);
      ka[i].load(qkv + base + d + pc.a);
      kb[i].load(qkv + base + d + pc.a + half);
      ssq += square_sum(qa[i], qb[i]);
      ssk += square_sum(ka[i], kb[i]);
    }
  }
  // v is copied as it is: its 2 * pcs chunks of 8, loaded with q and k.
#pragma unroll
  for (int i = 0; i < 2 * kP; ++i)
    if (lane + 32 * i < 2 * pcs)
      v[i] = *reinterpret_cast<const uint4*>(qkv + base + 2 * d + 8 * (lane + 32 * i));
  ssq = warp_sum(ssq);
  ssk = warp_sum(ssk);
  const float rq = 1.0f / sqrtf(ssq / static_cast<float>(d) + eps);
  const float rk = 1.0f / sqrtf(ssk / static_cast<float>(d) + eps);
  if (lane == 0) {
    rstd_q[row] = rq;
    rstd_k[row] = rk;
  }
  const size_t angles = static_cast<size_t>(row % t) * half;
#pragma unroll
  for (int i = 0; i < kP; ++i) {
    if (lane + 32 * i < pcs) {
      const PairChunk pc = pair_chunk(lane + 32 * i, half);
      float c[8], s[8];
      load8(cos_table + angles + pc.i0, c);
      load8(sin_table + angles + pc.i0, s);
      norm_rotate(qa[i], qb[i], rq, w_q, c, s, pc, half, out + base);
      norm_rotate(ka[i], kb[i], rk, w_k, c, s, pc, half, out + base + d);
    }
  }
#pragma unroll
  for (int i = 0; i < 2 * kP; ++i)
    if (lane + 32 * i < 2 * pcs) *reinterpret_cast<uint4*>(out + base + 2 * d + 8 * (lane + 32 * i)) = v[i];
}

// grid.y = 0 handles q, 1 handles k: a block's warps walk rows r0 + warp, r0 + warp + 8, ... of its part,
// each lane keeping its columns' unrotated gradient and input between the row's reduction and output,
// and its weight-gradient sums in registers; the block leaves the partial row's q or k half.
template <int kP>
__global__ void __launch_bounds__(kNormRowThreads)
    qk_norm_rope_backward_vec_kernel(bf16* dqkv, const bf16* __restrict__ qkv, const float* __restrict__ w_q,
                                     const float* __restrict__ w_k, const float* __restrict__ cos_table,
                                     const float* __restrict__ sin_table, const float* __restrict__ rstd_q,
                                     const float* __restrict__ rstd_k, float* __restrict__ partials, int n,
                                     int t, int d, int half, int rows_per_block) {
  __shared__ float buf[kP * 16 * 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pcs = d / 16, part = blockIdx.y;
  const float* __restrict__ w = part == 0 ? w_q : w_k;
  const float* __restrict__ rstd = part == 0 ? rstd_q : rstd_k;
  const size_t off = static_cast<size_t>(part) * d;
  float acc[kP * 16];
#pragma unroll
  for (int i = 0; i < kP * 16; ++i) acc[i] = 0.0f;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(n, r0 + rows_per_block);
  for (int r = r0 + warp; r < r1; r += kNormRowWarps) {
    const size_t base = static_cast<size_t>(r) * 3 * d + off;
    const size_t angles = static_cast<size_t>(r % t) * half;
    float ga[kP][8], gb[kP][8];  // gradient w.r.t. the normed, unrotated value (rotated by -angle)
    Held8<bf16> xa[kP], xb[kP];
#pragma unroll
    for (int i = 0; i < kP; ++i) {
      if (lane + 32 * i < pcs) {
        const PairChunk pc = pair_chunk(lane + 32 * i, half);
        float c[8], s[8];
        load8(dqkv + base + pc.a, ga[i]);
        load8(dqkv + base + pc.a + half, gb[i]);
        xa[i].load(qkv + base + pc.a);
        xb[i].load(qkv + base + pc.a + half);
        load8(cos_table + angles + pc.i0, c);
        load8(sin_table + angles + pc.i0, s);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float a = ga[i][e], b = gb[i][e];
          ga[i][e] = a * c[e] + b * s[e];
          gb[i][e] = b * c[e] - a * s[e];
        }
      }
    }
    const float rs = rstd[r];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kP; ++i) {
      if (lane + 32 * i < pcs) {
        const PairChunk pc = pair_chunk(lane + 32 * i, half);
        float wa[8], wb[8], va[8], vb[8];
        load8(w + pc.a, wa);
        load8(w + pc.a + half, wb);
        xa[i].get(va);
        xb[i].get(vb);
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += ga[i][e] * wa[e] * va[e] + gb[i][e] * wb[e] * vb[e];
      }
    }
    dot = warp_sum(dot);
    const float kr = dot / static_cast<float>(d) * rs * rs * rs;
#pragma unroll
    for (int i = 0; i < kP; ++i) {
      if (lane + 32 * i < pcs) {
        const PairChunk pc = pair_chunk(lane + 32 * i, half);
        float wa[8], wb[8], va[8], vb[8], oa[8], ob[8];
        load8(w + pc.a, wa);
        load8(w + pc.a + half, wb);
        xa[i].get(va);
        xb[i].get(vb);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          oa[e] = ga[i][e] * wa[e] * rs - va[e] * kr;
          ob[e] = gb[i][e] * wb[e] * rs - vb[e] * kr;
          acc[i * 16 + e] += ga[i][e] * (va[e] * rs);
          acc[i * 16 + 8 + e] += gb[i][e] * (vb[e] * rs);
        }
        store8(dqkv + base + pc.a, oa);
        store8(dqkv + base + pc.a + half, ob);
      }
    }
  }
  sum_over_warps<kP * 16>(acc, buf);
  if (warp != 0) return;
  float* row_out = partials + static_cast<size_t>(blockIdx.x) * 2 * d + off;
#pragma unroll
  for (int i = 0; i < kP; ++i) {
    if (lane + 32 * i < pcs) {
      const PairChunk pc = pair_chunk(lane + 32 * i, half);
      float pa[8], pb[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        pa[e] = buf[(i * 16 + e) * 32 + lane];
        pb[e] = buf[(i * 16 + 8 + e) * 32 + lane];
      }
      store8(row_out + pc.a, pa);
      store8(row_out + pc.a + half, pb);
    }
  }
}

// ---------------------------------------------------------------- general paths (any even head size)

// Rotation pair p of a d-wide row: columns a = head * head_dim + i and a + half, angle index i.
struct RotPair {
  int a, b, i;
};
__device__ __forceinline__ RotPair rot_pair(int p, int half) {
  const int head = p / half, i = p - head * half;
  const int a = head * 2 * half + i;
  return {a, a + half, i};
}

__global__ void qk_norm_rope_forward_pairs_kernel(
    const bf16* __restrict__ qkv, bf16* __restrict__ out, const float* __restrict__ w_q,
    const float* __restrict__ w_k, const float* __restrict__ cos_table, const float* __restrict__ sin_table,
    float* __restrict__ rstd_q, float* __restrict__ rstd_k, int n, int t, int d, int half, float eps) {
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

__global__ void qk_norm_rope_backward_block_kernel(
    bf16* __restrict__ dqkv, const bf16* __restrict__ qkv, const float* __restrict__ w_q,
    const float* __restrict__ w_k, const float* __restrict__ cos_table, const float* __restrict__ sin_table,
    const float* __restrict__ rstd_q, const float* __restrict__ rstd_k, float* __restrict__ partials, int n,
    int t, int d, int half, int rows_per_block) {
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

// Pair chunks per lane of the vectorized kernels, or 0 where only the general path applies (heads not
// a multiple of 16 columns, rows wider than 2048, or a pointer not 16-byte aligned).
int pair_chunks_per_lane(int d, int head_dim, std::initializer_list<const void*> pointers) {
  if (head_dim % 16 != 0) return 0;
  for (const void* p : pointers)
    if (!aligned16(p)) return 0;
  for (int k = 1; k <= 4; k *= 2)
    if (d <= 512 * k) return k;
  return 0;
}

template <int kP>
void forward_vec(const bf16* qkv, bf16* out, const float* w_q, const float* w_k, const float* cos_table,
                 const float* sin_table, float* rstd_q, float* rstd_k, int n, int t, int d, int half,
                 float eps, cudaStream_t stream) {
  const int rows_per_block = kForwardThreads / 32;
  qk_norm_rope_forward_vec_kernel<kP>
      <<<(n + rows_per_block - 1) / rows_per_block, kForwardThreads, 0, stream>>>(
          qkv, out, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, n, t, d, half, eps);
  FP4_CUDA_CHECK_LAUNCH("qk_norm_rope_forward_vec_kernel");
}

template <int kP>
void backward_vec(bf16* dqkv, const bf16* qkv, const float* w_q, const float* w_k, const float* cos_table,
                  const float* sin_table, const float* rstd_q, const float* rstd_k, float* dw_q, float* dw_k,
                  float* scratch, int n, int t, int d, int half, cudaStream_t stream) {
  constexpr auto kKernel = qk_norm_rope_backward_vec_kernel<kP>;
  const NormTiling tl = resident_norm_tiling<kKernel>(n, 2);
  kKernel<<<dim3(tl.blocks, 2), kNormRowThreads, 0, stream>>>(
      dqkv, qkv, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, scratch, n, t, d, half, tl.rows_per_block);
  FP4_CUDA_CHECK_LAUNCH("qk_norm_rope_backward_vec_kernel");
  reduce_norm_partials(scratch, tl.blocks, 2 * d, d, dw_q, dw_k, stream);
}

}  // namespace

void qk_norm_rope_forward(const bf16* qkv, bf16* out, const float* w_q, const float* w_k,
                          const float* cos_table, const float* sin_table, float* rstd_q, float* rstd_k, int n,
                          int t, int d, int head_dim, float eps, cudaStream_t stream) {
  check_shape(n, t, d, head_dim, "qk_norm_rope_forward");
  if (n == 0) return;
  const int half = head_dim / 2;
  switch (pair_chunks_per_lane(d, head_dim, {qkv, out, w_q, w_k, cos_table, sin_table})) {
    case 1:
      return forward_vec<1>(qkv, out, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, n, t, d, half, eps,
                            stream);
    case 2:
      return forward_vec<2>(qkv, out, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, n, t, d, half, eps,
                            stream);
    case 4:
      return forward_vec<4>(qkv, out, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, n, t, d, half, eps,
                            stream);
    default:
      break;
  }
  const int rows_per_block = kForwardThreads / 32;
  qk_norm_rope_forward_pairs_kernel<<<(n + rows_per_block - 1) / rows_per_block, kForwardThreads, 0,
                                      stream>>>(qkv, out, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, n,
                                                t, d, half, eps);
  FP4_CUDA_CHECK_LAUNCH("qk_norm_rope_forward_pairs_kernel");
}

void qk_norm_rope_backward(bf16* dqkv, const bf16* qkv, const float* w_q, const float* w_k,
                           const float* cos_table, const float* sin_table, const float* rstd_q,
                           const float* rstd_k, float* dw_q, float* dw_k, float* scratch, int n, int t, int d,
                           int head_dim, cudaStream_t stream) {
  check_shape(n, t, d, head_dim, "qk_norm_rope_backward");
  FP4_CHECK(d <= kNormMaxWidth, "qk_norm_rope_backward: width ", d, " exceeds the kernel's limit ",
            kNormMaxWidth);
  if (n == 0) return;
  const int half = head_dim / 2;
  switch (pair_chunks_per_lane(d, head_dim, {dqkv, qkv, w_q, w_k, cos_table, sin_table, scratch})) {
    case 1:
      return backward_vec<1>(dqkv, qkv, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, dw_q, dw_k, scratch,
                             n, t, d, half, stream);
    case 2:
      return backward_vec<2>(dqkv, qkv, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, dw_q, dw_k, scratch,
                             n, t, d, half, stream);
    case 4:
      return backward_vec<4>(dqkv, qkv, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, dw_q, dw_k, scratch,
                             n, t, d, half, stream);
    default:
      break;
  }
  const NormTiling tl = norm_backward_tiling(n);
  qk_norm_rope_backward_block_kernel<<<tl.blocks, kNormThreads, 0, stream>>>(
      dqkv, qkv, w_q, w_k, cos_table, sin_table, rstd_q, rstd_k, scratch, n, t, d, half, tl.rows_per_block);
  FP4_CUDA_CHECK_LAUNCH("qk_norm_rope_backward_block_kernel");
  reduce_norm_partials(scratch, tl.blocks, 2 * d, d, dw_q, dw_k, stream);
}

}  // namespace fp4::cuda
