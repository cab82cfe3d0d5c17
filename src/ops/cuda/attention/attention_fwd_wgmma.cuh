// Forward of the fused causal attention on Hopper warpgroup MMA (wgmma, sm_90a), templated on the head size
// kD, the number of warpgroups kWarpgroups (64 query rows each), the key tile kBlockN and whether Q sits in
// registers (kQInRegs) or is read from shared memory by every S product. Same numerics as
// attention_fwd_kernel (attention_fwd.cuh): FP32 scores, online softmax in base 2 with scale*log2(e) folded
// into the exponent, FP32 row max and sum, P rounded to BF16 for P V, FP32 O, LSE = m ln2 + ln l.
//
// One CTA per (query tile of 64*kWarpgroups rows, batch*head); the heaviest (last) query tiles launch first.
// Q (one 128B-swizzled tile) and two stages each of K and V tiles stream in by cp.async; key tile j+1 and
// value tile j load during step j. Per step each warpgroup, with its 64 rows:
//   issue S_j = Q K_j^T      (wgmma; Q K-major from registers or shared memory, K K-major)
//   issue O += P_{j-1} V_{j-1} (wgmma RS: P from registers as BF16 A fragments, V read MN-major)
//   wait for S_j; mask (diagonal tiles only); row max, P_j = 2^(S scale log2e - m), row sums
//   wait for the P V product; rescale O by 2^(m_old - m_new); P_j to BF16 A fragments
// so the exponentials of tile j run while the tensor cores do the P V product of tile j-1 (the registers of
// an in-flight wgmma, O and the P fragments, are touched only after the wait that retires it). Key tiles
// wholly above a warpgroup's diagonal are skipped.
//
// Q-Attn hook (RECIPES.md 8.4): Q and K arrive already quantized to NVFP4 values (held exactly in BF16), so
// S = Q K^T here is the quantized product with nothing changed inside; P V stays BF16 as the recipe asks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/attention/attention_fwd.cuh"
#include "ops/cuda/attention/attention_swizzle.cuh"
#include "ops/cuda/attention/attention_variants.cuh"
#include "ops/cuda/attention/attention_wgmma.cuh"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda::attn {

template <int kD_, int kWarpgroups, int kBlockN_, bool kQInRegs_>
struct WgFwdTile {
  static constexpr int kD = kD_, kBlockN = kBlockN_;
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kKvBytes = kBlockN * kD * 2;
  // Byte offsets from the 1024-aligned base: Q, two stages of K, two of V.
  static constexpr int kOffK = kQBytes;
  static constexpr int kOffV = kQBytes + 2 * kKvBytes;
  static constexpr int kSmemBytes = kOffV + 2 * kKvBytes + 1024;  // + slack to align the base
  static constexpr int kSFrags = kBlockN / 8;   // S accumulator of one warp: 8 keys per FragC
  static constexpr int kOFrags = kD / 8;        // O accumulator: 8 head dims per FragC
  static constexpr int kPSteps = kBlockN / 16;  // k16 steps of P V
  static constexpr int kQSteps = kD / 16;       // k16 steps of Q K^T
  static_assert(kD == 64 || kD == 128, "head size 64 or 128");
  static_assert(kBlockN == 64 || kBlockN == 128, "key tiles of 64 or 128 (the compiled wgmma widths)");
  static_assert(kWarpgroups >= 1 && kWarpgroups <= 3, "one to three warpgroups");
  static_assert(kQBytes % 1024 == 0 && kKvBytes % 1024 == 0, "tiles stay 1024-byte aligned");
};

// A descriptor moved by `bytes` (a multiple of 16): the start address field (address >> 4, bits 0-13) takes
// the whole addition, as shared addresses stay below 256 KiB.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Issues S = Q K^T for this warpgroup's 64 rows (not waited for): qf its Q rows as A fragments (kQInRegs),
// else q_desc is k-step 0 of its rows of the Q tile (K-major); k_desc is k-step 0 of the key tile (keys as
// N, K-major). A k-step of 16 columns lies in 64-column block kk/4 (tile rows * 128 bytes each), 32 bytes on.
template <class Tile, int kQFrags>
__device__ __forceinline__ void wg_fwd_issue_scores(FragC (&s)[Tile::kSFrags], const FragA (&qf)[kQFrags],
                                                    uint64_t q_desc, uint64_t k_desc) {
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;
#pragma unroll
  for (int kk = 0; kk < Tile::kQSteps; ++kk) {
    const uint64_t b = desc_advance(k_desc, (kk >> 2) * (kBlockN * 128) + (kk & 3) * 32);
    if constexpr (Tile::kQInRegs) {
      wgmma_rs<0>(s, qf[kk], b, kk > 0);
    } else {
      const uint64_t a = desc_advance(q_desc, (kk >> 2) * (kBlockM * 128) + (kk & 3) * 32);
      if constexpr (kBlockN == 128) {
        wgmma_ss_n128<0, 0>(s, a, b, kk > 0);
      } else {
        wgmma_ss<0, 0>(s, a, b, kk > 0);
      }
    }
  }
}

// Issues O += P V (not waited for): pa the BF16 P fragments, v_desc k-step 0 of the value tile read
// MN-major (keys as the reduction index, 16 rows of 128 bytes per step).
template <int kPSteps, int kOFrags>
__device__ __forceinline__ void wg_fwd_issue_pv(FragC (&o)[kOFrags], const FragA (&pa)[kPSteps],
                                                uint64_t v_desc) {
#pragma unroll
  for (int ks = 0; ks < kPSteps; ++ks) wgmma_rs<1>(o, pa[ks], desc_advance(v_desc, ks * 16 * 128), true);
}

// Causal mask of a tile that crosses the warpgroup's diagonal: a key after its query scores -inf. Element e
// of block c: row = row0 + g + 8*(e/2), key = key0 + 8c + 2t + e%2 (row0: this warp's first query row).
template <int kSFrags>
__device__ __forceinline__ void wg_fwd_mask(FragC (&s)[kSFrags], int key0, int row0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int c = 0; c < kSFrags; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (key0 + 8 * c + 2 * t + (e & 1) > row0 + g + (e >> 1) * 8) s[c].x[e] = -INFINITY;
}

// The statistics half of the online softmax step (fwd_softmax's arithmetic): the thread's two rows (half 0:
// row g, half 1: row g+8) take the new running max m (base 2, the same in the four lanes of the quad); s
// becomes P = 2^(s*scale_log2 - m) in FP32; l (this lane's partial row sum) is rescaled and extended;
// alpha = 2^(m_old - m_new) is returned for O, which an in-flight wgmma may still be writing.
template <int kSFrags>
__device__ __forceinline__ void wg_fwd_softmax(FragC (&s)[kSFrags], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < kSFrags; ++c) mx = fmaxf(mx, fmaxf(s[c].x[2 * half], s[c].x[2 * half + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    const float m_new = fmaxf(m[half], mx * scale_log2);  // scale_log2 > 0: max commutes with the scaling
    const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing unmasked yet: keep everything at 0
    alpha[half] = ex2(m[half] - base);                    // 0 on the first tile (m = -inf)
    m[half] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < kSFrags; ++c)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        const float pr = ex2(fmaf(s[c].x[e], scale_log2, -base));
        s[c].x[e] = pr;
        sum += pr;
      }
    l[half] = l[half] * alpha[half] + sum;
  }
}

template <int kOFrags>
__device__ __forceinline__ void wg_fwd_rescale(FragC (&o)[kOFrags], const float (&alpha)[2]) {
#pragma unroll
  for (int c = 0; c < kOFrags; ++c) {
    o[c].x[0] *= alpha[0];
    o[c].x[1] *= alpha[0];
    o[c].x[2] *= alpha[1];
    o[c].x[3] *= alpha[1];
  }
}

// P (FP32 in the S accumulator) rounded to BF16 A fragments for P V: two adjacent 8-key blocks per k-step.
template <int kPSteps>
__device__ __forceinline__ void wg_fwd_pack(FragA (&pa)[kPSteps], const FragC (&s)[2 * kPSteps]) {
#pragma unroll
  for (int ks = 0; ks < kPSteps; ++ks) pa[ks] = accum_to_a(s[2 * ks], s[2 * ks + 1]);
}

// Grid: x = batch*head, y = query tile (the last, heaviest, first). Needs sm_90a.
template <int kD, int kWarpgroups, int kBlockN, bool kQInRegs, int kMinBlocks>
__global__ void __launch_bounds__(128 * kWarpgroups, kMinBlocks)
    attention_fwd_wgmma_kernel(const FwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = WgFwdTile<kD, kWarpgroups, kBlockN, kQInRegs>;
  constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads, kKvBytes = Tile::kKvBytes;
  constexpr int kSFrags = Tile::kSFrags, kOFrags = Tile::kOFrags, kPSteps = Tile::kPSteps;
  constexpr int kQFrags = kQInRegs ? Tile::kQSteps : 1;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle pattern is anchored at 1024-byte boundaries
  const uint32_t s_q = base, s_k = base + Tile::kOffK, s_v = base + Tile::kOffV;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2, wwarp = warp & 3;
  const int bh = blockIdx.x, b = bh / p.H, h = bh % p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBlockM;
  const int64_t tok0 = static_cast<int64_t>(b) * p.T;
  const bf16* q = p.q + tok0 * p.ld_qkv + h * kD;
  const bf16* k = p.k + tok0 * p.ld_qkv + h * kD;
  const bf16* v = p.v + tok0 * p.ld_qkv + h * kD;
  const int n_tiles = (min(q0 + kBlockM, p.T) - 1) / kBlockN + 1;  // key tiles holding keys 0 .. last row
  const int wg_row0 = q0 + 64 * wg;                                // this warpgroup's first query row
  const int warp_row0 = wg_row0 + 16 * wwarp;
  // Key tiles this warpgroup needs (those holding keys 0 .. its last row below T); 0 when all its rows >= T.
  const int n_wg = wg_row0 < p.T ? min(wg_row0 + 63, p.T - 1) / kBlockN + 1 : 0;

  copy_tile_sw128_any<kBlockM, kD, kThreads>(s_q, q, p.ld_qkv, q0, p.T, tid);
  copy_tile_sw128_any<kBlockN, kD, kThreads>(s_k, k, p.ld_qkv, 0, p.T, tid);
  cp_async_commit();

  FragA qf[kQFrags];
  FragA pa[kPSteps];
  FragC o[kOFrags];
#pragma unroll
  for (int c = 0; c < kOFrags; ++c) zero(o[c]);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const uint64_t q_desc = sw128_desc(s_q + 64 * wg * 128, 16, 1024);
  const float scale_log2 = forward_scale_log2(p);

  // Step j: S of key tile j (j < n_wg) and P V of tile j-1 (1 <= j <= n_wg). The three cases are separate
  // straight-line blocks, so every wgmma is waited for on the path that issued it.
  for (int j = 0; j <= n_tiles; ++j) {
    cp_async_wait<0>();  // key tile j and value tile j-1 (with Q on step 0) have landed
    fence_proxy_async();
    __syncthreads();  // ... for every thread, and every warpgroup is done with step j-1's tiles
    if (j + 1 < n_tiles)
      copy_tile_sw128_any<kBlockN, kD, kThreads>(s_k + ((j + 1) & 1) * kKvBytes, k, p.ld_qkv,
                                                 (j + 1) * kBlockN, p.T, tid);
    if (j < n_tiles)
      copy_tile_sw128_any<kBlockN, kD, kThreads>(s_v + (j & 1) * kKvBytes, v, p.ld_qkv, j * kBlockN, p.T,
                                                 tid);
    cp_async_commit();
    if constexpr (kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < kQFrags; ++kk)
          qf[kk] = load_a_sw128<kBlockM>(s_q, 64 * wg + 16 * wwarp, kk * 16, lane);
      }
    }
    const uint64_t k_desc = sw128_desc(s_k + (j & 1) * kKvBytes, 16, 1024);
    const uint64_t v_desc = sw128_desc(s_v + ((j + 1) & 1) * kKvBytes, kBlockN * 128, 1024);  // tile j-1
    const int key0 = j * kBlockN;
    const bool mask = key0 + kBlockN - 1 > wg_row0;  // warpgroup-uniform: the tile crosses the diagonal
    if (j >= 1 && j < n_wg) {
      FragC s[kSFrags];
      wgmma_fence();
      wg_fwd_issue_scores<Tile>(s, qf, q_desc, k_desc);
      wgmma_commit();
      wg_fwd_issue_pv(o, pa, v_desc);
      wgmma_commit();
      wgmma_wait<1>();  // S done; P V runs on during the exponentials
      fence_accumulators(s);
      if (mask) wg_fwd_mask(s, key0, warp_row0, lane);
      float alpha[2];
      wg_fwd_softmax(s, m, l, alpha, scale_log2);
      wgmma_wait<0>();
      fence_accumulators(o);
      fence_accumulators(s);  // keeps the packing of P after the wait: pa is an operand of the P V product
      wg_fwd_rescale(o, alpha);
      wg_fwd_pack(pa, s);
    } else if (j == 0 && n_wg > 0) {
      FragC s[kSFrags];
      wgmma_fence();
      wg_fwd_issue_scores<Tile>(s, qf, q_desc, k_desc);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(s);
      if (mask) wg_fwd_mask(s, key0, warp_row0, lane);
      float alpha[2];  // O is still zero: nothing to rescale
      wg_fwd_softmax(s, m, l, alpha, scale_log2);
      wg_fwd_pack(pa, s);
    } else if (j >= 1 && j == n_wg) {
      wgmma_fence();
      wg_fwd_issue_pv(o, pa, v_desc);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(o);
    }
  }

  // Epilogue: O = acc / l in BF16, LSE = ln(sum exp(scaled scores)) = m ln2 + ln l.
  const int g = lane >> 2, t = lane & 3;
  bf16* out = p.out + tok0 * p.ld_out + h * kD;
  float* lse = p.lse + static_cast<int64_t>(bh) * p.T;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = l[half];
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    const int row = warp_row0 + g + half * 8;
    if (row < p.T) {
      const float inv = 1.f / sum;
      bf16* dst = out + row * p.ld_out + 2 * t;
#pragma unroll
      for (int c = 0; c < kOFrags; ++c)
        *reinterpret_cast<__nv_bfloat162*>(dst + c * 8) =
            __floats2bfloat162_rn(o[c].x[2 * half] * inv, o[c].x[2 * half + 1] * inv);
      if (t == 0) lse[row] = m[half] * kLn2 + logf(sum);
    }
  }
#else
  __trap();  // never launched: the host checks for an sm_90 device first
#endif
}

// Launches one wgmma forward configuration (no synchronization; the launch is checked). Throws fp4::Error on
// a device other than sm_90.
template <int kD, int kWarpgroups, int kBlockN, bool kQInRegs, int kMinBlocks>
void launch_attention_forward_wgmma(const FwdParams& p, cudaStream_t stream) {
  using Tile = WgFwdTile<kD, kWarpgroups, kBlockN, kQInRegs>;
  FP4_CHECK(device_has_wgmma(), "attention_forward: the wgmma kernel needs an sm_90 (Hopper) device");
  const auto kernel = attention_fwd_wgmma_kernel<kD, kWarpgroups, kBlockN, kQInRegs, kMinBlocks>;
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(p.B * p.H),
                  static_cast<unsigned>((p.T + Tile::kBlockM - 1) / Tile::kBlockM));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  FP4_CUDA_CHECK_LAUNCH("attention_fwd_wgmma_kernel");
}

}  // namespace fp4::cuda::attn
