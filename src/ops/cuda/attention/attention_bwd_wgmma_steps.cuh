// The per-warp steps between the products of the Hopper attention backward (attention_bwd_wgmma_pipe.cuh),
// on the FP32 accumulators of a warpgroup product with keys as rows: each warp holds its 16 keys x kBlockM
// queries in the mma.sync C layout, so the steps are the per-warp code of the mma.sync kernel's bwd_probs
// (attention_bwd.cuh), split where the dP^T product lets the exponentials start before it is done.
//   wg_probs:    S^T becomes P^T (masked where a key exceeds its query or the query is past T)
//   wg_dscores:  dP^T becomes dS^T = P^T * (dP^T - Delta)
//   wg_store_ds: dS^T (BF16 A fragments) into the 128B-swizzled shared tile read by the dQ product
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention/attention_fwd.cuh"
#include "ops/cuda/attention/attention_ptx.cuh"
#include "ops/cuda/attention/attention_swizzle.cuh"

namespace fp4::cuda::attn {

// s (this warp's 16 keys x kBlockM queries of S^T) becomes P^T = 2^(S^T*scale*log2e - LSE*log2e) in FP32;
// with mask, pairs with key > query or query >= T get 0. Element e of block j: key = key0 + g + 8*(e/2),
// query = q0 + 8j + 2t + e%2.
template <int kBlockM>
__device__ __forceinline__ void wg_probs(FragC (&s)[kBlockM / 8], const float* lse, int key0, int q0, int T,
                                         bool mask, float scale_log2, int lane) {
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
__device__ __forceinline__ void wg_dscores(FragC (&dp)[kBlockM / 8], const FragC (&pr)[kBlockM / 8],
                                           const float* delta, int lane) {
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
__device__ __forceinline__ void wg_store_ds(uint32_t ds_tile, int row0, const FragA (&dsa)[kBlockM / 16],
                                            int lane) {
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

}  // namespace fp4::cuda::attn
