// Backward of the fused causal attention on Hopper warpgroup MMA (wgmma, sm_90a), templated on the head
// size kD. Same schedule and numerics as attention_bwd_kernel (attention_bwd.cuh), with the five products
// issued by two warpgroups straight from 128B-swizzled shared-memory tiles:
//
// One CTA of 256 threads per (128-key tile, batch*head); warpgroup wg owns keys key0+64wg .. +63. K and V
// stay in shared memory (D = 64: also as A fragments in registers); 64-query tiles (Q, dO, LSE, Delta) from
// the diagonal on stream through two cp.async stages, the next one loading during the current step. Per step
// each warpgroup, keys as rows:
//   S^T = K Q^T, dP^T = V dO^T         (m64n64, Q and dO read K-major)
//   P^T, dS^T in FP32 registers         (wg_probs / wg_dscores: the per-warp code of the mma.sync kernel)
//   dV += P^T dO, dK += dS^T Q          (A = P^T / dS^T from registers, dO and Q read MN-major)
//   dS^T (BF16) to shared memory; after a barrier both warpgroups compute dQ = dS K for the 64 queries, each
//   for half of the head dims (A = dS^T and B = K read MN-major), and add it into the FP32 accumulator with
//   float2 atomics.
// Q-Attn hook (RECIPES.md 8.4): dS is quantized where wg_dscores ends (dsa feeds dK) and in shared memory
// before the dQ product; Q and K arrive already quantized, as for the mma.sync kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention_bwd.cuh"
#include "ops/cuda/attention_swizzle.cuh"
#include "ops/cuda/attention_variants.cuh"
#include "ops/cuda/attention_wgmma.cuh"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda::attn {

template <int kD>
struct WgBwdTile {
  static constexpr int kThreads = 256;  // two warpgroups
  static constexpr int kBlockN = 128;   // keys per CTA
  static constexpr int kBlockM = 64;    // queries per step
  // D = 64: K and V as A fragments take 32 registers; D = 128 would need 64 more than the budget allows.
  static constexpr bool kKvInRegs = kD == 64;
  static constexpr int kKvBytes = kBlockN * kD * 2;
  static constexpr int kQBytes = kBlockM * kD * 2;
  // Byte offsets from the 1024-aligned base: K, V, two stages of Q and of dO, dS^T, two of LSE and Delta.
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kKvBytes;
  static constexpr int kOffQ = 2 * kKvBytes;
  static constexpr int kOffDo = kOffQ + 2 * kQBytes;
  static constexpr int kOffDs = kOffDo + 2 * kQBytes;
  static constexpr int kOffLse = kOffDs + kBlockN * kBlockM * 2;
  static constexpr int kOffDelta = kOffLse + 2 * kBlockM * 4;
  static constexpr int kSmemBytes = kOffDelta + 2 * kBlockM * 4 + 1024;  // + slack to align the base
  static_assert(kD == 64 || kD == 128, "head size 64 or 128");
  static_assert(kKvBytes % 1024 == 0 && kQBytes % 1024 == 0, "tiles stay 1024-byte aligned");
};

// s (this warp's 16 keys x kBlockM queries of S^T) becomes P^T = 2^(S^T*scale*log2e - LSE*log2e) in FP32;
// with mask, pairs with key > query or query >= T get 0. Element e of block j: key = key0 + g + 8*(e/2),
// query = q0 + 8j + 2t + e%2.
template <int kBlockM>
__device__ __forceinline__ void wg_probs(FragC (&s)[kBlockM / 8], const float* lse, int key0, int q0, int T, bool mask,
                                         float scale_log2, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const float2 ls = *reinterpret_cast<const float2*>(lse + j * 8 + 2 * t);
    const float lse2[2] = {ls.x * kLog2e, ls.y * kLog2e};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + g + (e >> 1) * 8;
      const int query = q0 + j * 8 + 2 * t + (e & 1);
      float pr = ex2(fmaf(s[j].x[e], scale_log2, -lse2[e & 1]));
      if (mask && (key > query || query >= T)) pr = 0.f;
      s[j].x[e] = pr;
    }
  }
}

// dp (dP^T) becomes dS^T = P^T * (dP^T - Delta), FP32.
template <int kBlockM>
__device__ __forceinline__ void wg_dscores(FragC (&dp)[kBlockM / 8], const FragC (&pr)[kBlockM / 8], const float* delta,
                                           int lane) {
  const int t = lane & 3;
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const float2 dl = *reinterpret_cast<const float2*>(delta + j * 8 + 2 * t);
    dp[j].x[0] = pr[j].x[0] * (dp[j].x[0] - dl.x);
    dp[j].x[1] = pr[j].x[1] * (dp[j].x[1] - dl.y);
    dp[j].x[2] = pr[j].x[2] * (dp[j].x[2] - dl.x);
    dp[j].x[3] = pr[j].x[3] * (dp[j].x[3] - dl.y);
  }
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Writes this warp's dS^T rows (row0 .. row0+15 of the swizzled [key][query] tile) from its A fragments.
template <int kRows, int kBlockM>
__device__ __forceinline__ void wg_store_ds(uint32_t ds_tile, int row0, const FragA (&dsa)[kBlockM / 16], int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks) {
    const int c = ks * 16 + 2 * t;
    st_shared_b32(ds_tile + sw128_offset<kRows>(row0 + g, c), dsa[ks].x[0]);
    st_shared_b32(ds_tile + sw128_offset<kRows>(row0 + g + 8, c), dsa[ks].x[1]);
    st_shared_b32(ds_tile + sw128_offset<kRows>(row0 + g, c + 8), dsa[ks].x[2]);
    st_shared_b32(ds_tile + sw128_offset<kRows>(row0 + g + 8, c + 8), dsa[ks].x[3]);
  }
}

// Grid: x = batch*head, y = key tile of 128 (tile 0, with the most query tiles, first). Needs sm_90a.
template <int kD>
__global__ void __launch_bounds__(256, 1) attention_bwd_wgmma_kernel(const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = WgBwdTile<kD>;
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kThreads = Tile::kThreads;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle pattern is anchored at 1024-byte boundaries
  unsigned char* smem = smem_raw + (base - raw);
  const uint32_t s_k = base + Tile::kOffK, s_v = base + Tile::kOffV, s_q = base + Tile::kOffQ;
  const uint32_t s_do = base + Tile::kOffDo, s_ds = base + Tile::kOffDs;
  float* s_lse = reinterpret_cast<float*>(smem + Tile::kOffLse);      // two stages
  float* s_delta = reinterpret_cast<float*>(smem + Tile::kOffDelta);  // two stages

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2, wwarp = warp & 3;
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

  // Query tile i into stage st (rows past T zero-filled; the mask zeroes their P and dS).
  auto load_query_tile = [&](int i, int st) {
    const int qt0 = i * kBlockM;
    copy_tile_sw128<kBlockM, kD, kThreads>(s_q + st * Tile::kQBytes, q, p.ld_qkv, qt0, p.T, tid);
    copy_tile_sw128<kBlockM, kD, kThreads>(s_do + st * Tile::kQBytes, dout, p.ld_out, qt0, p.T, tid);
    if (tid < 2 * kBlockM) {
      const int row = qt0 + (tid % kBlockM);
      const bool valid = row < p.T;
      const float* src = (tid < kBlockM ? lse : delta) + (valid ? row : 0);
      float* dst = (tid < kBlockM ? s_lse : s_delta) + st * kBlockM + (tid % kBlockM);
      cp_async_4(smem_u32(dst), src, valid);
    }
  };

  copy_tile_sw128<kBlockN, kD, kThreads>(s_k, k, p.ld_qkv, key0, p.T, tid);
  copy_tile_sw128<kBlockN, kD, kThreads>(s_v, v, p.ld_qkv, key0, p.T, tid);
  load_query_tile(first_tile, 0);
  cp_async_commit();

  const int wg_key0 = key0 + 64 * wg;     // this warpgroup's first key
  const int wkey0 = wg_key0 + 16 * wwarp;  // this warp's first key
  FragC dk[kD / 8], dv[kD / 8];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    zero(dk[j]);
    zero(dv[j]);
  }
  FragA kf[Tile::kKvInRegs ? kD / 16 : 1], vf[Tile::kKvInRegs ? kD / 16 : 1];

  for (int i = first_tile; i < n_q_tiles; ++i) {
    const int stage = (i - first_tile) & 1;
    cp_async_wait<0>();  // query tile i (and K, V on the first step) has landed
    fence_proxy_async();
    __syncthreads();  // ... for every thread, and step i-1 (its wgmma included) is finished everywhere
    if (i + 1 < n_q_tiles) load_query_tile(i + 1, stage ^ 1);
    cp_async_commit();
    if constexpr (Tile::kKvInRegs) {
      if (i == first_tile) {
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          kf[kk] = load_a_sw128<kBlockN>(s_k, 64 * wg + 16 * wwarp, kk * 16, lane);
          vf[kk] = load_a_sw128<kBlockN>(s_v, 64 * wg + 16 * wwarp, kk * 16, lane);
        }
      }
    }

    const int q0 = i * kBlockM;
    const uint32_t q_tile = s_q + stage * Tile::kQBytes, do_tile = s_do + stage * Tile::kQBytes;
    if (wg_key0 <= q0 + kBlockM - 1) {  // warpgroup-uniform: some key of the warpgroup sees a query
      FragC s[kBlockM / 8], dp[kBlockM / 8];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        if constexpr (Tile::kKvInRegs) {
          wgmma_rs<0>(s, kf[kk], desc_k_major<kBlockM>(q_tile, 0, kk), kk > 0);
        } else {
          wgmma_ss<0, 0>(s, desc_k_major<kBlockN>(s_k, 64 * wg, kk), desc_k_major<kBlockM>(q_tile, 0, kk), kk > 0);
        }
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        if constexpr (Tile::kKvInRegs) {
          wgmma_rs<0>(dp, vf[kk], desc_k_major<kBlockM>(do_tile, 0, kk), kk > 0);
        } else {
          wgmma_ss<0, 0>(dp, desc_k_major<kBlockN>(s_v, 64 * wg, kk), desc_k_major<kBlockM>(do_tile, 0, kk), kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // S^T done; dP^T may still run while the exponentials are computed
      fence_accumulators(s);
      const bool mask = q0 < wkey0 + 15 || q0 + kBlockM > p.T;
      wg_probs<kBlockM>(s, s_lse + stage * kBlockM, wkey0, q0, p.T, mask, p.scale_log2, lane);
      wgmma_wait<0>();
      fence_accumulators(dp);
      wg_dscores<kBlockM>(dp, s, s_delta + stage * kBlockM, lane);
      FragA pa[kBlockM / 16], dsa[kBlockM / 16];
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) {
        pa[ks] = accum_to_a(s[2 * ks], s[2 * ks + 1]);
        dsa[ks] = accum_to_a(dp[2 * ks], dp[2 * ks + 1]);
      }
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) wgmma_rs<1>(dv, pa[ks], desc_mn_major<kBlockM>(do_tile, 0, ks), true);
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) wgmma_rs<1>(dk, dsa[ks], desc_mn_major<kBlockM>(q_tile, 0, ks), true);
      wgmma_commit();  // waited for after the dQ product
      wg_store_ds<kBlockN, kBlockM>(s_ds, 64 * wg + 16 * wwarp, dsa, lane);
    }
    fence_proxy_async();
    __syncthreads();  // dS^T complete

    // dQ tile = dS K over the keys that see some query of the tile (warpgroup 1's rows are unwritten when
    // it skipped the step, and then lie outside n_ks); warpgroup wg takes head dims wg*kD/2 .. +kD/2-1.
    const int n_ks = min(kBlockN / 16, (q0 + kBlockM - key0 + 15) / 16);
    FragC dq[kD / 16];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks)
      if (ks < n_ks)
        wgmma_ss<1, 1>(dq, desc_mn_major<kBlockN>(s_ds, 0, ks), desc_mn_major<kBlockN>(s_k, wg * (kD / 2), ks), ks > 0);
    wgmma_commit();
    wgmma_wait<0>();  // dQ, and this warpgroup's dV/dK products of the step
    fence_accumulators(dq);
    fence_accumulators(dk);
    fence_accumulators(dv);
    const int g = lane >> 2, t = lane & 3;
    const int row = q0 + 16 * wwarp + g;
    float* dst = dq_accum + static_cast<int64_t>(row) * kD + wg * (kD / 2) + 2 * t;
#pragma unroll
    for (int j = 0; j < kD / 16; ++j) {
      if (row < p.T) atomicAdd(reinterpret_cast<float2*>(dst + j * 8), make_float2(dq[j].x[0], dq[j].x[1]));
      if (row + 8 < p.T)
        atomicAdd(reinterpret_cast<float2*>(dst + 8 * kD + j * 8), make_float2(dq[j].x[2], dq[j].x[3]));
    }
  }

  store_dk_dv<kD>(p, dk, dv, wkey0, tok0, h, lane);
#else
  __trap();  // never launched: the host checks for an sm_90 device first
#endif
}

// The whole backward with the wgmma main kernel: zero dq_accum, Delta, main kernel, dq conversion.
// Throws fp4::Error on a device other than sm_90.
template <int kD>
void launch_attention_backward_wgmma(const BwdArgs& a, cudaStream_t stream) {
  using Tile = WgBwdTile<kD>;
  FP4_CHECK(device_has_wgmma(), "attention_backward: the wgmma kernel needs an sm_90 (Hopper) device");
  const BwdParams& p = a.p;
  const int64_t rows = static_cast<int64_t>(p.B) * p.T * p.H;
  constexpr int kBlock = 256;
  FP4_CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, bwd_dq_accum_bytes(p.B, p.T, p.H, kD), stream));

  const int64_t row_threads = rows * (kD / 8);
  const unsigned row_blocks = static_cast<unsigned>((row_threads + kBlock - 1) / kBlock);
  attention_bwd_delta_kernel<kD><<<row_blocks, kBlock, 0, stream>>>(a.out, p.dout, p.ld_out, a.delta, p.B, p.T, p.H);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_delta_kernel");

  const auto kernel = attention_bwd_wgmma_kernel<kD>;
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(p.B * p.H), static_cast<unsigned>((p.T + Tile::kBlockN - 1) / Tile::kBlockN));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_wgmma_kernel");

  attention_bwd_dq_kernel<kD><<<row_blocks, kBlock, 0, stream>>>(p.dq_accum, a.dq, p.ld_dqkv, p.B, p.T, p.H, p.scale);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_dq_kernel");
}

}  // namespace fp4::cuda::attn
