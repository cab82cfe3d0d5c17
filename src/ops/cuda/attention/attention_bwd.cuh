// Backward kernels of the fused causal attention (FlashAttention-2 schedule), templated on the head size kD,
// the warp count kWarps (each warp owns 16 keys, so a CTA owns kBlockN = 16*kWarps keys), the query
// tile height kBlockM and kMinBlocks, the CTAs per SM the register allocation must allow.
//
// 1. attention_bwd_delta_kernel: Delta = rowsum(dO * O) in FP32, [B][H][T].
// 2. attention_bwd_kernel: one CTA per (key tile, batch*head). K and V stay in shared memory; query tiles
//    from the diagonal to the end stream through two stages (Q, dO, LSE, Delta). Per query tile each warp
//    works on its 16 keys in the transposed orientation (keys as rows):
//      S^T = K Q^T, dP^T = V dO^T                (bwd_rows_times_cols)
//      P^T = 2^(S^T*scale*log2e - LSE*log2e), dS^T = P^T * (dP^T - Delta)   (bwd_probs)
//      dV += P^T dO, dK += dS^T Q               (bwd_accumulate, FP32 registers)
//    dS goes to shared memory; then dQ_tile += dS K (bwd_dq) is split over all warps and added into the
//    FP32 workspace with float2 atomics (not bit-reproducible run to run: summation order varies).
// 3. attention_bwd_dq_kernel: dq = BF16(scale * dq_accum) into the strided dq.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention/attention_fwd.cuh"
#include "ops/cuda/attention/attention_tiles.cuh"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda::attn {

struct BwdParams {
  const bf16* q;  // element [token 0 of the batch][head 0][0], as in the forward
  const bf16* k;
  const bf16* v;
  int64_t ld_qkv;
  const bf16* dout;
  int64_t ld_out;
  const float* lse;    // [B][H][T], natural log
  const float* delta;  // [B][H][T]
  float* dq_accum;     // [B][H][T][kD], zeroed before the kernel
  bf16* dk;
  bf16* dv;
  int64_t ld_dqkv;
  int B, T, H;
  float scale;
  float scale_log2;
};

template <int kD, int kWarps, int kBlockM_>
struct BwdTile {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * kWarps;    // keys per CTA
  static constexpr int kBlockM = kBlockM_;       // queries per step
  static constexpr int kStride = kD + 8;         // row stride of the [row][d] tiles
  static constexpr int kStrideDs = kBlockM + 8;  // row stride of dS^T [key][query]
  static constexpr int kMSlices = kBlockM / 16;
  // dQ tile [kBlockM][kD] = dS K: warp w takes query slice w % kMSlices and column group w / kMSlices.
  static constexpr int kColGroups = kWarps / kMSlices;
  static constexpr int kDqCols = kD / kColGroups;
  static_assert(kBlockM % 16 == 0 && kWarps % kMSlices == 0 && kDqCols % 16 == 0, "dQ split must be whole");
  // K, V; two stages of Q and of dO; dS^T; two stages of LSE and of Delta.
  static constexpr int kSmemBf16 = 2 * kBlockN * kStride + 4 * kBlockM * kStride + kBlockN * kStrideDs;
  static constexpr int kSmemBytes = kSmemBf16 * 2 + 4 * kBlockM * 4;
};

// Whether keys key0 .. key0+15 see any query of the tile starting at q0 (causal: key <= query).
__device__ __forceinline__ bool keys_see_tile(int key0, int q0, int block_m) {
  return key0 <= q0 + block_m - 1;
}

// acc = R C^T for this warp's 16 rows of rows_tile (R: [row][d]) and the kN rows of cols_tile ([n][d]):
// S^T = K Q^T and dP^T = V dO^T. acc[j] holds columns 8j .. 8j+7.
template <int kD, int kN, int kStride>
__device__ __forceinline__ void bwd_rows_times_cols(FragC (&acc)[kN / 8], const bf16* rows_tile, int row0,
                                                    const bf16* cols_tile, int lane) {
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) zero(acc[j]);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const FragA a = load_a<kStride>(rows_tile, row0, kk * 16, lane);
#pragma unroll
    for (int np = 0; np < kN / 16; ++np) {
      FragB b0, b1;
      load_b_pair<kStride>(b0, b1, cols_tile, np * 16, kk * 16, lane);
      mma_bf16(acc[2 * np], a, b0);
      mma_bf16(acc[2 * np + 1], a, b1);
    }
  }
}

// s (S^T) becomes P^T and dp (dP^T) becomes dS^T, in FP32. Element e of block j: key = key0 + g + 8*(e/2),
// query = q0 + 8j + 2t + e%2. With mask, pairs with key > query or query >= T get P = dS = 0.
// lse, delta: this query tile's LSE (natural log) and Delta in shared memory.
template <int kBlockM>
__device__ __forceinline__ void bwd_probs(FragC (&s)[kBlockM / 8], FragC (&dp)[kBlockM / 8], const float* lse,
                                          const float* delta, int key0, int q0, int T, bool mask,
                                          float scale_log2, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const float2 ls = *reinterpret_cast<const float2*>(lse + j * 8 + 2 * t);
    const float2 dl = *reinterpret_cast<const float2*>(delta + j * 8 + 2 * t);
    const float lse2[2] = {ls.x * kLog2e, ls.y * kLog2e};
    const float dlt[2] = {dl.x, dl.y};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + g + (e >> 1) * 8;
      const int query = q0 + j * 8 + 2 * t + (e & 1);
      float p = ex2(fmaf(s[j].x[e], scale_log2, -lse2[e & 1]));
      if (mask && (key > query || query >= T)) p = 0.f;
      s[j].x[e] = p;
      dp[j].x[e] = p * (dp[j].x[e] - dlt[e & 1]);
    }
  }
}

// acc[16 rows][kD] += A B with A = a (16 x kBlockM, k = queries, from registers) and B = tile [query][d]:
// dV += P^T dO and dK += dS^T Q.
template <int kD, int kBlockM, int kStride>
__device__ __forceinline__ void bwd_accumulate(FragC (&acc)[kD / 8], const FragA (&a)[kBlockM / 16],
                                               const bf16* tile, int lane) {
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks)
#pragma unroll
    for (int np = 0; np < kD / 16; ++np) {
      FragB b0, b1;
      load_b_pair_trans<kStride>(b0, b1, tile, np * 16, ks * 16, lane);
      mma_bf16(acc[2 * np], a[ks], b0);
      mma_bf16(acc[2 * np + 1], a[ks], b1);
    }
}

// Writes this warp's dS^T rows (16 keys from row0 of the [key][query] tile) from its BF16 A fragments.
template <int kBlockM, int kStrideDs>
__device__ __forceinline__ void bwd_store_ds(bf16* ds_tile, int row0, const FragA (&dsa)[kBlockM / 16],
                                             int lane) {
  const int g = lane >> 2, t = lane & 3;
  bf16* r_lo = ds_tile + (row0 + g) * kStrideDs + 2 * t;
  bf16* r_hi = r_lo + 8 * kStrideDs;
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks) {
    *reinterpret_cast<uint32_t*>(r_lo + ks * 16) = dsa[ks].x[0];
    *reinterpret_cast<uint32_t*>(r_hi + ks * 16) = dsa[ks].x[1];
    *reinterpret_cast<uint32_t*>(r_lo + ks * 16 + 8) = dsa[ks].x[2];
    *reinterpret_cast<uint32_t*>(r_hi + ks * 16 + 8) = dsa[ks].x[3];
  }
}

// dq_accum[q0 .. q0+kBlockM) += dS K for this CTA's keys (unscaled; the conversion kernel applies scale).
// Warp w computes query slice w % kMSlices, columns [cg*kDqCols, (cg+1)*kDqCols) with cg = w / kMSlices.
template <typename Tile, int kD>
__device__ __forceinline__ void bwd_dq(float* dq_accum, const bf16* ds_tile, const bf16* k_tile, int key0,
                                       int q0, int T, int warp, int lane) {
  constexpr int kWarps = Tile::kThreads / 32;
  const int ms = warp % Tile::kMSlices, cg = warp / Tile::kMSlices;
  const int qs = q0 + ms * 16;
  if (qs + 15 < key0) return;  // every query of the slice precedes every key: dS = 0
  FragC acc[Tile::kDqCols / 8];
#pragma unroll
  for (int j = 0; j < Tile::kDqCols / 8; ++j) zero(acc[j]);
#pragma unroll
  for (int ks = 0; ks < kWarps; ++ks) {                            // 16 keys per step: the keys of warp ks
    if (!keys_see_tile(key0 + ks * 16, q0, Tile::kBlockM)) break;  // dS^T rows never written this tile
    const FragA a = load_a_trans<Tile::kStrideDs>(ds_tile, ms * 16, ks * 16, lane);
#pragma unroll
    for (int np = 0; np < Tile::kDqCols / 16; ++np) {
      FragB b0, b1;
      load_b_pair_trans<Tile::kStride>(b0, b1, k_tile, cg * Tile::kDqCols + np * 16, ks * 16, lane);
      mma_bf16(acc[2 * np], a, b0);
      mma_bf16(acc[2 * np + 1], a, b1);
    }
  }
  const int g = lane >> 2, t = lane & 3;
  const int row = qs + g;
  float* dst = dq_accum + static_cast<int64_t>(row) * kD + cg * Tile::kDqCols + 2 * t;
#pragma unroll
  for (int j = 0; j < Tile::kDqCols / 8; ++j) {
    if (row < T) atomicAdd(reinterpret_cast<float2*>(dst + j * 8), make_float2(acc[j].x[0], acc[j].x[1]));
    if (row + 8 < T)
      atomicAdd(reinterpret_cast<float2*>(dst + 8 * kD + j * 8), make_float2(acc[j].x[2], acc[j].x[3]));
  }
}

// Epilogue of every backward kernel: this warp's 16 keys (wkey0 ..) of dK = scale * dS^T Q and dV = P^T dO
// as BF16, keys < T; dk[j] / dv[j] hold head dims 8j .. 8j+7 (the mma/wgmma accumulator layout).
template <int kD>
__device__ __forceinline__ void store_dk_dv(const BwdParams& p, const FragC (&dk)[kD / 8],
                                            const FragC (&dv)[kD / 8], int wkey0, int64_t tok0, int h,
                                            int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = wkey0 + g + half * 8;
    if (key >= p.T) continue;
    bf16* dk_row = p.dk + (tok0 + key) * p.ld_dqkv + h * kD + 2 * t;
    bf16* dv_row = p.dv + (tok0 + key) * p.ld_dqkv + h * kD + 2 * t;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(dk_row + j * 8) =
          __floats2bfloat162_rn(dk[j].x[2 * half] * p.scale, dk[j].x[2 * half + 1] * p.scale);
      *reinterpret_cast<__nv_bfloat162*>(dv_row + j * 8) =
          __floats2bfloat162_rn(dv[j].x[2 * half], dv[j].x[2 * half + 1]);
    }
  }
}

// Grid: x = batch*head, y = key tile (tile 0, with the most query tiles, first).
template <int kD, int kWarps, int kBlockM, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) attention_bwd_kernel(const BwdParams p) {
  using Tile = BwdTile<kD, kWarps, kBlockM>;
  constexpr int kStride = Tile::kStride, kBlockN = Tile::kBlockN, kThreads = Tile::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* s_k = reinterpret_cast<bf16*>(smem);
  bf16* s_v = s_k + kBlockN * kStride;
  bf16* s_q = s_v + kBlockN * kStride;       // two stages
  bf16* s_do = s_q + 2 * kBlockM * kStride;  // two stages
  bf16* s_ds = s_do + 2 * kBlockM * kStride;
  float* s_lse = reinterpret_cast<float*>(s_ds + kBlockN * Tile::kStrideDs);  // two stages
  float* s_delta = s_lse + 2 * kBlockM;                                       // two stages

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int bh = blockIdx.x, b = bh / p.H, h = bh % p.H;
  const int key0 = blockIdx.y * kBlockN;
  const int64_t tok0 = static_cast<int64_t>(b) * p.T;
  const int64_t head_off = static_cast<int64_t>(bh) * p.T;
  const bf16* q = p.q + tok0 * p.ld_qkv + h * kD;
  const bf16* k = p.k + tok0 * p.ld_qkv + h * kD;
  const bf16* v = p.v + tok0 * p.ld_qkv + h * kD;
  const bf16* dout = p.dout + tok0 * p.ld_out + h * kD;
  const float* lse = p.lse + head_off;
  const float* delta = p.delta + head_off;
  float* dq_accum = p.dq_accum + head_off * kD;

  const int first_tile = key0 / kBlockM;  // the first query tile holding a query >= key0
  const int n_q_tiles = (p.T + kBlockM - 1) / kBlockM;

  // Query tile i into stage st, all asynchronously: Q, dO, LSE and Delta; rows past T read as zeros (the
  // mask then zeroes their P and dS).
  auto load_query_tile = [&](int i, int st) {
    const int qt0 = i * kBlockM;
    copy_tile_async<kBlockM, kD, kStride, kThreads>(s_q + st * kBlockM * kStride, q, p.ld_qkv, qt0, p.T, tid);
    copy_tile_async<kBlockM, kD, kStride, kThreads>(s_do + st * kBlockM * kStride, dout, p.ld_out, qt0, p.T,
                                                    tid);
    for (int r = tid; r < 2 * kBlockM; r += kThreads) {
      const int row = qt0 + (r % kBlockM);
      const bool valid = row < p.T;
      const float* src = (r < kBlockM ? lse : delta) + (valid ? row : 0);
      float* dst = (r < kBlockM ? s_lse : s_delta) + st * kBlockM + (r % kBlockM);
      cp_async_4(smem_u32(dst), src, valid);
    }
  };

  copy_tile_async<kBlockN, kD, kStride, kThreads>(s_k, k, p.ld_qkv, key0, p.T, tid);
  copy_tile_async<kBlockN, kD, kStride, kThreads>(s_v, v, p.ld_qkv, key0, p.T, tid);
  load_query_tile(first_tile, 0);
  cp_async_commit();

  const int wkey0 = key0 + warp * 16;  // this warp's first key
  FragC dk[kD / 8], dv[kD / 8];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    zero(dk[j]);
    zero(dv[j]);
  }

  for (int i = first_tile; i < n_q_tiles; ++i) {
    const int stage = (i - first_tile) & 1;
    if (i + 1 < n_q_tiles) load_query_tile(i + 1, stage ^ 1);
    cp_async_commit();   // possibly empty: keeps the wait below uniform
    cp_async_wait<1>();  // query tile i (and K, V on the first step) has landed
    __syncthreads();

    const int q0 = i * kBlockM;
    const bf16* q_tile = s_q + stage * kBlockM * kStride;
    const bf16* do_tile = s_do + stage * kBlockM * kStride;
    if (keys_see_tile(wkey0, q0, kBlockM)) {  // warp-uniform
      FragC s[kBlockM / 8], dp[kBlockM / 8];
      bwd_rows_times_cols<kD, kBlockM, kStride>(s, s_k, warp * 16, q_tile, lane);
      bwd_rows_times_cols<kD, kBlockM, kStride>(dp, s_v, warp * 16, do_tile, lane);
      const bool mask = q0 < wkey0 + 15 || q0 + kBlockM > p.T;
      bwd_probs<kBlockM>(s, dp, s_lse + stage * kBlockM, s_delta + stage * kBlockM, wkey0, q0, p.T, mask,
                         p.scale_log2, lane);
      FragA pa[kBlockM / 16], dsa[kBlockM / 16];
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) {
        pa[ks] = accum_to_a(s[2 * ks], s[2 * ks + 1]);
        dsa[ks] = accum_to_a(dp[2 * ks], dp[2 * ks + 1]);
      }
      bwd_accumulate<kD, kBlockM, kStride>(dv, pa, do_tile, lane);
      bwd_accumulate<kD, kBlockM, kStride>(dk, dsa, q_tile, lane);
      bwd_store_ds<kBlockM, Tile::kStrideDs>(s_ds, warp * 16, dsa, lane);
    }
    __syncthreads();  // dS^T complete
    bwd_dq<Tile, kD>(dq_accum, s_ds, s_k, key0, q0, p.T, warp, lane);
    __syncthreads();  // stage and dS^T free for the next step
  }

  store_dk_dv<kD>(p, dk, dv, wkey0, tok0, h, lane);
}

// One lane's share of Delta: sum of dO * O over the 8 BF16 elements at offset off (16-byte loads).
__device__ __forceinline__ float delta_part(const bf16* out, const bf16* dout, int64_t off) {
  const uint4 ow = *reinterpret_cast<const uint4*>(out + off);
  const uint4 dw = *reinterpret_cast<const uint4*>(dout + off);
  const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&ow);
  const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&dw);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 of = __bfloat1622float2(o2[i]);
    const float2 df = __bfloat1622float2(d2[i]);
    sum = fmaf(of.x, df.x, sum);
    sum = fmaf(of.y, df.y, sum);
  }
  return sum;
}

// Delta[b][h][t] = sum_d dO * O (FP32) for one (token, head) row per kD/8 lanes; 16-byte loads.
template <int kD>
__global__ void attention_bwd_delta_kernel(const bf16* out, const bf16* dout, int64_t ld_out, float* delta,
                                           int B, int T, int H) {
  constexpr int kLanes = kD / 8;  // divides 32: a row's lanes sit in one warp
  const int64_t rows = static_cast<int64_t>(B) * T * H;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = gid / kLanes;  // (token, head), head fastest
  const int part = static_cast<int>(gid % kLanes);
  const int64_t tok = row / H;
  const int h = static_cast<int>(row % H);
  float sum = row < rows ? delta_part(out, dout, tok * ld_out + h * kD + part * 8) : 0.f;
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
  if (row < rows && part == 0) {
    const int64_t bi = tok / T, ti = tok % T;
    delta[(bi * H + h) * T + ti] = sum;
  }
}

// dq[token][h*kD + d] = BF16(scale * dq_accum[b][h][t][d]), eight elements per thread.
template <int kD>
__global__ void attention_bwd_dq_kernel(const float* dq_accum, bf16* dq, int64_t ld_dq, int B, int T, int H,
                                        float scale) {
  constexpr int kParts = kD / 8;
  const int64_t total = static_cast<int64_t>(B) * T * H * kParts;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= total) return;
  const int part = static_cast<int>(gid % kParts);
  const int64_t row = gid / kParts;  // (token, head), head fastest: coalesced writes
  const int64_t tok = row / H;
  const int h = static_cast<int>(row % H);
  const int64_t bi = tok / T, ti = tok % T;
  const float4* src = reinterpret_cast<const float4*>(dq_accum + ((bi * H + h) * T + ti) * kD + part * 8);
  const float4 a = src[0], c = src[1];
  const uint4 w{pack_bf16(a.x * scale, a.y * scale), pack_bf16(a.z * scale, a.w * scale),
                pack_bf16(c.x * scale, c.y * scale), pack_bf16(c.z * scale, c.w * scale)};
  *reinterpret_cast<uint4*>(dq + tok * ld_dq + h * kD + part * 8) = w;
}

// Workspace layout: the FP32 dq accumulator [B][H][T][kD], then Delta [B][H][T].
inline size_t bwd_dq_accum_bytes(int B, int T, int H, int D) {
  return static_cast<size_t>(B) * H * T * D * sizeof(float);
}
inline size_t bwd_workspace_bytes(int B, int T, int H, int D) {
  const size_t delta = static_cast<size_t>(B) * H * T * sizeof(float);
  return bwd_dq_accum_bytes(B, T, H, D) + (delta + 15) / 16 * 16;
}

// Everything the backward needs besides the tile configuration.
struct BwdArgs {
  BwdParams p;      // p.delta and p.dq_accum point into the workspace
  const bf16* out;  // the forward's output, for Delta
  float* delta;     // writable view of p.delta
  bf16* dq;
};

inline BwdArgs make_bwd_args(const bf16* q, const bf16* k, const bf16* v, int ld_qkv, const bf16* out,
                             const bf16* dout, int ld_out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                             int ld_dqkv, int B, int T, int H, int D, float scale, void* workspace) {
  float* dq_accum = static_cast<float*>(workspace);
  float* delta = reinterpret_cast<float*>(static_cast<char*>(workspace) + bwd_dq_accum_bytes(B, T, H, D));
  const BwdParams p{q,  k,  v,       ld_qkv, dout, ld_out, lse,   delta,         dq_accum,
                    dk, dv, ld_dqkv, B,      T,    H,      scale, scale * kLog2e};
  return BwdArgs{p, out, delta, dq};
}

// The whole backward for one tile configuration: zero dq_accum, Delta, the main kernel, dq conversion.
// Stream-ordered, no synchronization; every launch is checked.
template <int kD, int kWarps, int kBlockM, int kMinBlocks>
void launch_attention_backward(const BwdArgs& a, cudaStream_t stream) {
  using Tile = BwdTile<kD, kWarps, kBlockM>;
  const BwdParams& p = a.p;
  const int64_t rows = static_cast<int64_t>(p.B) * p.T * p.H;
  constexpr int kBlock = 256;
  FP4_CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, bwd_dq_accum_bytes(p.B, p.T, p.H, kD), stream));

  const int64_t delta_threads = rows * (kD / 8);
  attention_bwd_delta_kernel<kD>
      <<<static_cast<unsigned>((delta_threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
          a.out, p.dout, p.ld_out, a.delta, p.B, p.T, p.H);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_delta_kernel");

  const auto kernel = attention_bwd_kernel<kD, kWarps, kBlockM, kMinBlocks>;
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(p.B * p.H),
                  static_cast<unsigned>((p.T + Tile::kBlockN - 1) / Tile::kBlockN));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_kernel");

  const int64_t dq_threads = rows * (kD / 8);
  attention_bwd_dq_kernel<kD>
      <<<static_cast<unsigned>((dq_threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
          p.dq_accum, a.dq, p.ld_dqkv, p.B, p.T, p.H, p.scale);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_dq_kernel");
}

}  // namespace fp4::cuda::attn
