// Pipelined backward of the fused causal attention on Hopper warpgroup MMA (sm_90a), templated on the head
// size kD, with the numerics of the mma.sync backward (attention_bwd.cuh). One CTA of two warpgroups per
// 128-key tile, 64-query steps; per step and warpgroup, keys as rows: S^T = K Q^T, dP^T = V dO^T, P^T and
// dS^T in FP32 (wg_probs, wg_dscores: attention_bwd_wgmma_steps.cuh), dV += P^T dO and dK += dS^T Q in
// registers; then dQ[:, half wg of the head dims] = dS K over all 128 keys from a shared dS^T tile, added
// into the FP32 accumulator with atomics. The steps are arranged so the tensor cores get work queued back
// to back:
//  - no wgmma chain is serialized by ptxas (no C7519/C751x notes): chains are straight-line code whose
//    registers nothing else touches between issue and retiring wait; dQ always runs all 8 key steps (rows
//    of a warpgroup that sees no query of the step are zeros); dS^T goes to shared memory before the dK
//    product reading the same registers is issued; groups in flight across the loop's back edge are retired
//    by wait<0> only (ptxas does not follow partial waits across it);
//  - one CTA barrier per step: three query stages (tile i in use, i+1 landed, i+2 loading) and two dS^T
//    buffers let that barrier cover both "dS^T complete" and "next tile landed";
//  - after the barrier the next step's S^T, this step's dQ and the next step's dP^T are queued together;
//    for D = 64 (kOverlapDq) the dQ atomics and the next step's exponentials run while dP^T computes.
//    D = 128 has no registers for that (dK and dV take 128 per thread): it waits for dQ, adds it, then
//    queues the next S^T and dP^T.
// Q-Attn hook (RECIPES.md 8.4): dS is quantized where wg_dscores ends (dsa feeds both the dS^T tile of the
// dQ product and the dK product); Q and K arrive already quantized, as for the mma.sync kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention/attention_bwd.cuh"
#include "ops/cuda/attention/attention_bwd_prep.cuh"
#include "ops/cuda/attention/attention_bwd_wgmma_steps.cuh"
#include "ops/cuda/attention/attention_swizzle.cuh"
#include "ops/cuda/attention/attention_variants.cuh"
#include "ops/cuda/attention/attention_wgmma.cuh"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda::attn {

template <int kD>
struct WgPipeTile {
  static constexpr int kThreads = 256;          // two warpgroups
  static constexpr int kBlockN = 128;           // keys per CTA
  static constexpr int kBlockM = 64;            // queries per step
  static constexpr int kStages = 3;             // query tiles i (in use), i+1 (landed), i+2 (loading)
  static constexpr bool kKvInRegs = kD == 64;   // K and V as A fragments: 32 registers
  static constexpr bool kOverlapDq = kD == 64;  // dQ atomics overlap the next S^T, dP^T (64 more registers)
  // Warpgroup 1 skips the products of the diagonal step (its keys all exceed the queries). D = 128 runs
  // them on the masked tile instead: the branch costs registers it does not have (ptxas spills).
  static constexpr bool kSkipMasked = kD == 64;
  static constexpr int kKvBytes = kBlockN * kD * 2;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  // Byte offsets from the 1024-aligned base: K, V, kStages stages of Q and of dO, two dS^T buffers,
  // kStages stages of LSE and of Delta.
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kKvBytes;
  static constexpr int kOffQ = 2 * kKvBytes;
  static constexpr int kOffDo = kOffQ + kStages * kQBytes;
  static constexpr int kOffDs = kOffDo + kStages * kQBytes;
  static constexpr int kOffLse = kOffDs + 2 * kDsBytes;
  static constexpr int kOffDelta = kOffLse + kStages * kBlockM * 4;
  static constexpr int kSmemBytes = kOffDelta + kStages * kBlockM * 4 + 1024;  // + slack to align the base
  static_assert(kD == 64 || kD == 128, "head size 64 or 128");
  static_assert(kKvBytes % 1024 == 0 && kQBytes % 1024 == 0 && kDsBytes % 1024 == 0,
                "tiles stay 1024-aligned");
  static_assert(kSmemBytes <= 227 * 1024, "fits the opt-in shared memory of an SM");
};

__device__ __forceinline__ void st_shared_zero16(uint32_t addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
}

// Declares the values of c dead (an empty asm that only writes them): c is next written by a product with
// scale-d = 0, whose "+f" operands would otherwise keep the old values live through the loop.
template <int kN>
__device__ __forceinline__ void forget(FragC (&c)[kN]) {
#pragma unroll
  for (int j = 0; j < kN; ++j)
    asm volatile("" : "=f"(c[j].x[0]), "=f"(c[j].x[1]), "=f"(c[j].x[2]), "=f"(c[j].x[3]));
}

// Zeros rows row0 .. row0+63 of a dS^T tile (64 query columns: one 128-byte row each), by the 128 threads
// of a warpgroup (wtid = thread index inside it). The swizzle permutes chunks inside a row, so whole rows
// are one contiguous range.
__device__ __forceinline__ void wg_zero_ds_rows(uint32_t ds_tile, int row0, int wtid) {
#pragma unroll
  for (int c = 0; c < 4; ++c) st_shared_zero16(ds_tile + row0 * 128 + (c * 128 + wtid) * 16);
}

// Adds this warpgroup's share of a dQ tile (queries q0 .. q0+63, head dims wg*kD/2 .. +kD/2-1; dq[j] holds
// dims 8j .. 8j+7 of that half) into the FP32 accumulator, rows >= T skipped.
template <int kD>
__device__ __forceinline__ void wg_add_dq(float* dq_accum, const FragC (&dq)[kD / 16], int q0, int T, int wg,
                                          int wwarp, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const int row = q0 + 16 * wwarp + g;
  float* dst = dq_accum + static_cast<int64_t>(row) * kD + wg * (kD / 2) + 2 * t;
#pragma unroll
  for (int j = 0; j < kD / 16; ++j) {
    if (row < T) atomicAdd(reinterpret_cast<float2*>(dst + j * 8), make_float2(dq[j].x[0], dq[j].x[1]));
    if (row + 8 < T)
      atomicAdd(reinterpret_cast<float2*>(dst + 8 * kD + j * 8), make_float2(dq[j].x[2], dq[j].x[3]));
  }
}

// Grid: x = batch*head, y = key tile of 128 (tile 0, with the most query tiles, first). Needs sm_90a.
template <int kD>
__global__ void __launch_bounds__(256, 1) attention_bwd_wgmma_pipe_kernel(const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = WgPipeTile<kD>;
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kThreads = Tile::kThreads;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle pattern is anchored at 1024-byte boundaries
  unsigned char* smem = smem_raw + (base - raw);
  const uint32_t s_k = base + Tile::kOffK, s_v = base + Tile::kOffV;
  float* s_lse = reinterpret_cast<float*>(smem + Tile::kOffLse);
  float* s_delta = reinterpret_cast<float*>(smem + Tile::kOffDelta);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // With kSkipMasked, broadcast from lane 0: the compiler then knows wg is warp-uniform, and the branch on
  // it around wgmma chains does not make ptxas serialize them (D = 128: no branch, and the shuffle alone
  // shifts its register allocation into spills).
  const int wg = Tile::kSkipMasked ? __shfl_sync(0xFFFFFFFFu, warp >> 2, 0) : warp >> 2, wwarp = warp & 3;
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

  const int first_tile = key0 / kBlockM;  // the first query tile holding a query >= key0 (the diagonal)
  const int n_q_tiles = (p.T + kBlockM - 1) / kBlockM;
  auto q_stage = [&](int st) { return base + Tile::kOffQ + st * Tile::kQBytes; };
  auto do_stage = [&](int st) { return base + Tile::kOffDo + st * Tile::kQBytes; };

  // Query tile i into stage st (rows past T zero-filled; the mask zeroes their P and dS).
  auto load_query_tile = [&](int i, int st) {
    const int qt0 = i * kBlockM;
    copy_tile_sw128<kBlockM, kD, kThreads>(q_stage(st), q, p.ld_qkv, qt0, p.T, tid);
    copy_tile_sw128<kBlockM, kD, kThreads>(do_stage(st), dout, p.ld_out, qt0, p.T, tid);
    if (tid < 2 * kBlockM) {
      const int row = qt0 + (tid % kBlockM);
      const bool valid = row < p.T;
      const float* src = (tid < kBlockM ? lse : delta) + (valid ? row : 0);
      float* dst = (tid < kBlockM ? s_lse : s_delta) + st * kBlockM + (tid % kBlockM);
      cp_async_4(smem_u32(dst), src, valid);
    }
  };

  const int wg_key0 = key0 + 64 * wg;      // this warpgroup's first key
  const int wkey0 = wg_key0 + 16 * wwarp;  // this warp's first key
  FragA kf[Tile::kKvInRegs ? kD / 16 : 1], vf[Tile::kKvInRegs ? kD / 16 : 1];

  // S^T = K Q^T (issue_s) and dP^T = V dO^T (issue_dp) of the query tile in stage st, one commit group each.
  auto issue_s = [&](FragC(&s)[kBlockM / 8], int st) {
    forget(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      if constexpr (Tile::kKvInRegs) {
        wgmma_rs<0>(s, kf[kk], desc_k_major<kBlockM>(q_stage(st), 0, kk), kk > 0);
      } else {
        wgmma_ss<0, 0>(s, desc_k_major<kBlockN>(s_k, 64 * wg, kk), desc_k_major<kBlockM>(q_stage(st), 0, kk),
                       kk > 0);
      }
    }
    wgmma_commit();
  };
  auto issue_dp = [&](FragC(&dp)[kBlockM / 8], int st) {
    forget(dp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      if constexpr (Tile::kKvInRegs) {
        wgmma_rs<0>(dp, vf[kk], desc_k_major<kBlockM>(do_stage(st), 0, kk), kk > 0);
      } else {
        wgmma_ss<0, 0>(dp, desc_k_major<kBlockN>(s_v, 64 * wg, kk),
                       desc_k_major<kBlockM>(do_stage(st), 0, kk), kk > 0);
      }
    }
    wgmma_commit();
  };

  // Prologue: K, V and the diagonal query tile (group 1), the next query tile (group 2).
  copy_tile_sw128<kBlockN, kD, kThreads>(s_k, k, p.ld_qkv, key0, p.T, tid);
  copy_tile_sw128<kBlockN, kD, kThreads>(s_v, v, p.ld_qkv, key0, p.T, tid);
  load_query_tile(first_tile, 0);
  cp_async_commit();
  if (first_tile + 1 < n_q_tiles) load_query_tile(first_tile + 1, 1);
  cp_async_commit();
  cp_async_wait<1>();
  fence_proxy_async();
  __syncthreads();
  if constexpr (Tile::kKvInRegs) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      kf[kk] = load_a_sw128<kBlockN>(s_k, 64 * wg + 16 * wwarp, kk * 16, lane);
      vf[kk] = load_a_sw128<kBlockN>(s_v, 64 * wg + 16 * wwarp, kk * 16, lane);
    }
  }

  FragC dk[kD / 8], dv[kD / 8];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    zero(dk[j]);
    zero(dv[j]);
  }
  // P^T (kOverlapDq: already exponentiated) and dP^T (in flight) of the current step at the loop top.
  FragC s[kBlockM / 8], dp[kBlockM / 8];
  // Warpgroup-uniform; false only for warpgroup 1 on the diagonal step.
  auto sees_queries = [&](int q0) { return !Tile::kSkipMasked || wg_key0 <= q0 + kBlockM - 1; };
  // s (S^T of the query tile at q0, stage st) becomes P^T in place.
  auto probs = [&](int q0, int st) {
    const bool mask = q0 < wkey0 + 15 || q0 + kBlockM > p.T;
    wg_probs<kBlockM>(s, s_lse + st * kBlockM, wkey0, q0, p.T, mask, p.scale_log2, lane);
  };
  if (sees_queries(first_tile * kBlockM)) {
    issue_s(s, 0);
    issue_dp(dp, 0);
    if constexpr (Tile::kOverlapDq) {
      wgmma_wait<1>();
      fence_accumulators(s);
      probs(first_tile * kBlockM, 0);
    }
  }

  int st = 0;  // stage of query tile i; tile i+1 sits in st+1, tile i+2 loads into st+2 (mod 3)
  for (int i = first_tile; i < n_q_tiles; ++i) {
    const int st_next = st == 2 ? 0 : st + 1, st_load = st_next == 2 ? 0 : st_next + 1;
    const int q0 = i * kBlockM;
    const uint32_t ds_tile = base + Tile::kOffDs + ((i - first_tile) & 1) * Tile::kDsBytes;
    // dP^T (and S^T) of this step. Only wait<0> may retire a group issued before the loop's back edge:
    // ptxas does not follow partial waits across it and would serialize every wgmma.
    wgmma_wait<0>();
    if (sees_queries(q0)) {
      fence_accumulators(s);
      fence_accumulators(dp);
      if constexpr (!Tile::kOverlapDq) probs(q0, st);
      wg_dscores<kBlockM>(dp, s, s_delta + st * kBlockM, lane);
      FragA pa[kBlockM / 16], dsa[kBlockM / 16];
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks) {
        pa[ks] = accum_to_a(s[2 * ks], s[2 * ks + 1]);
        dsa[ks] = accum_to_a(dp[2 * ks], dp[2 * ks + 1]);
      }
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks)
        wgmma_rs<1>(dv, pa[ks], desc_mn_major<kBlockM>(do_stage(st), 0, ks), true);
      // dsa is read here, before the dK product that reads it is issued.
      wg_store_ds<kBlockN, kBlockM>(ds_tile, 64 * wg + 16 * wwarp, dsa, lane);
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks)
        wgmma_rs<1>(dk, dsa[ks], desc_mn_major<kBlockM>(q_stage(st), 0, ks), true);
      wgmma_commit();
    } else {
      // P = dS = 0 for every key of this warpgroup; no (empty) commit here: an empty group committed in
      // a branch makes ptxas inject a warpgroup.arrive, and the waits below count correctly without it.
      wg_zero_ds_rows(ds_tile, 64 * wg, tid & 127);
    }
    cp_async_wait<0>();  // query tile i+1 has landed
    fence_proxy_async();
    // dS^T and tile i+1 complete for every thread; every warpgroup is past this step's wait<0>, so
    // nothing reads the stage of tile i-1 any more (step i-1's dV/dK products included).
    __syncthreads();
    if (i + 2 < n_q_tiles) load_query_tile(i + 2, st_load);
    cp_async_commit();

    // dQ tile = dS K over all 128 keys; warpgroup wg takes head dims wg*kD/2 .. +kD/2-1. The next step's
    // S^T and dP^T are issued around it unconditionally: after the last step they read a stale stage and
    // are discarded (a conditional issue would serialize the chains).
    FragC dq[kD / 16];
    auto issue_dq = [&] {
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks)
        wgmma_ss<1, 1>(dq, desc_mn_major<kBlockN>(ds_tile, 0, ks),
                       desc_mn_major<kBlockN>(s_k, wg * (kD / 2), ks), ks > 0);
      wgmma_commit();
    };
    if constexpr (Tile::kOverlapDq) {
      // Queue: [dV/dK] S^T(i+1), dQ(i), dP^T(i+1). The dQ atomics and the exponentials of step i+1 run
      // while the tensor cores compute dP^T(i+1).
      issue_s(s, st_next);
      issue_dq();
      issue_dp(dp, st_next);
      wgmma_wait<1>();
      fence_accumulators(dq);
      wg_add_dq<kD>(dq_accum, dq, q0, p.T, wg, wwarp, lane);
      fence_accumulators(s);
      probs(q0 + kBlockM, st_next);
    } else {
      issue_dq();
      wgmma_wait<0>();
      fence_accumulators(dq);
      wg_add_dq<kD>(dq_accum, dq, q0, p.T, wg, wwarp, lane);
      issue_s(s, st_next);
      issue_dp(dp, st_next);
    }
    st = st_next;
  }
  wgmma_wait<0>();
  fence_accumulators(dk);
  fence_accumulators(dv);

  store_dk_dv<kD>(p, dk, dv, wkey0, tok0, h, lane);
#else
  __trap();  // never launched: the host checks for an sm_90 device first
#endif
}

// The whole backward with the pipelined wgmma main kernel: Delta and zeroed dq_accum (one kernel), main
// kernel, dq conversion. Throws fp4::Error on a device other than sm_90.
template <int kD>
void launch_attention_backward_wgmma_pipe(const BwdArgs& a, cudaStream_t stream) {
  using Tile = WgPipeTile<kD>;
  FP4_CHECK(device_has_wgmma(), "attention_backward: the wgmma kernel needs an sm_90 (Hopper) device");
  const BwdParams& p = a.p;
  const int64_t rows = static_cast<int64_t>(p.B) * p.T * p.H;
  constexpr int kBlock = 256;
  const int64_t row_threads = rows * (kD / 8);
  const unsigned row_blocks = static_cast<unsigned>((row_threads + kBlock - 1) / kBlock);
  attention_bwd_prep_kernel<kD>
      <<<row_blocks, kBlock, 0, stream>>>(a.out, p.dout, p.ld_out, a.delta, p.dq_accum, p.B, p.T, p.H);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_prep_kernel");

  const auto kernel = attention_bwd_wgmma_pipe_kernel<kD>;
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(p.B * p.H),
                  static_cast<unsigned>((p.T + Tile::kBlockN - 1) / Tile::kBlockN));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_wgmma_pipe_kernel");

  attention_bwd_dq_kernel<kD>
      <<<row_blocks, kBlock, 0, stream>>>(p.dq_accum, a.dq, p.ld_dqkv, p.B, p.T, p.H, p.scale);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_dq_kernel");
}

}  // namespace fp4::cuda::attn
