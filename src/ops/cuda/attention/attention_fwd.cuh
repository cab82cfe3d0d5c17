// Forward kernel of the fused causal attention (FlashAttention-2 schedule), templated on the head size kD,
// on kSlices, the number of 16-row query slices each of the four warps owns, and on kMinBlocks, the CTAs
// per SM the register allocation must allow (__launch_bounds__).
//
// One CTA per (query tile of kBlockM rows, batch*head). The Q tile stays in registers as mma A fragments;
// K/V tiles of 64 keys stream through two shared-memory stages (cp.async, the next tile loads while the
// current one is used). Per key tile: S = Q K^T (fwd_scores), causal mask on tiles that cross the diagonal,
// online softmax in base 2 with FP32 statistics (fwd_softmax), O += P V (fwd_accumulate_pv).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/attention/attention_tiles.cuh"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda::attn {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

struct FwdParams {
  const bf16* q;  // element [token 0 of the batch][head 0][0]
  const bf16* k;
  const bf16* v;
  int64_t ld_qkv;
  bf16* out;
  int64_t ld_out;
  float* lse;  // [B][H][T]
  int B, T, H;
  float scale_log2;  // scale * log2(e): the scores go straight into base-2 exponents
  // When set, the kernel reads scale * log2(e) from here instead (Q-Attn: its scores carry the NVFP4 tensor
  // scales of Q and K, which only the device knows).
  const float* scale_log2_device = nullptr;
};

__device__ __forceinline__ float forward_scale_log2(const FwdParams& p) {
  return p.scale_log2_device != nullptr ? *p.scale_log2_device : p.scale_log2;
}

struct FwdVariant;  // attention_variants.cuh
// Whether a forward configuration is a wgmma kernel (attention_fwd_wgmma.cuh: needs an sm_90 device);
// defined in attention_fwd.cu with the configuration table.
bool forward_variant_uses_wgmma(const FwdVariant& v);

template <int kD, int kSlices>
struct FwdTile {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerWarp = 16 * kSlices;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;  // query rows per CTA
  static constexpr int kBlockN = 64;                     // keys per tile
  static constexpr int kStride = kD + 8;                 // shared-memory row stride, elements
  // Q tile, then two stages of K, then two of V.
  static constexpr int kSmemBytes = (kBlockM + 4 * kBlockN) * kStride * static_cast<int>(sizeof(bf16));
  static_assert(kD % 16 == 0 && kBlockN % 16 == 0, "tiles are whole mma steps");
};

// S = Q K^T for this warp's query slices and one key tile: s[slice][j] holds keys 8j .. 8j+7 of the tile.
// qf: the warp's Q rows as A fragments (k = head dim); k_tile: [key][d] in shared memory.
template <int kD, int kSlices, int kBlockN, int kStride>
__device__ __forceinline__ void fwd_scores(FragC (&s)[kSlices][kBlockN / 8],
                                           const FragA (&qf)[kSlices][kD / 16], const bf16* k_tile,
                                           int lane) {
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) zero(s[sl][j]);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < kBlockN / 16; ++np) {
      FragB b0, b1;
      load_b_pair<kStride>(b0, b1, k_tile, np * 16, kk * 16, lane);
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl) {
        mma_bf16(s[sl][2 * np], qf[sl][kk], b0);
        mma_bf16(s[sl][2 * np + 1], qf[sl][kk], b1);
      }
    }
  }
}

// Causal mask of a tile that crosses the diagonal: the score of a key after its query becomes -inf.
// key0: first key of the tile; row0: first query row of the warp.
template <int kSlices, int kBlockN>
__device__ __forceinline__ void fwd_mask(FragC (&s)[kSlices][kBlockN / 8], int key0, int row0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + sl * 16 + g + (e >> 1) * 8;
        const int key = key0 + j * 8 + 2 * t + (e & 1);
        if (key > row) s[sl][j].x[e] = -INFINITY;
      }
}

// Online softmax step over one key tile. Each thread holds two rows per slice (r = 2*slice + half: row g
// and g+8), spread over the four lanes of its quad. m[r]: running max of the scaled scores in base 2 (the
// same in all four lanes); l[r]: this lane's partial sum of 2^(x - m). Rescales o and l by 2^(m_old - m_new)
// and replaces s by P = 2^(s*scale_log2 - m_new) (FP32, not yet normalised).
template <int kD, int kSlices, int kBlockN>
__device__ __forceinline__ void fwd_softmax(FragC (&s)[kSlices][kBlockN / 8], FragC (&o)[kSlices][kD / 8],
                                            float (&m)[2 * kSlices], float (&l)[2 * kSlices],
                                            float scale_log2) {
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 2 * sl + half;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
        mx = fmaxf(mx, fmaxf(s[sl][j].x[2 * half], s[sl][j].x[2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[r], mx * scale_log2);     // scale_log2 > 0: max commutes with the scaling
      const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing unmasked yet: keep everything at 0
      const float alpha = ex2(m[r] - base);                 // 0 on the first tile (m = -inf)
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          const float p = ex2(fmaf(s[sl][j].x[e], scale_log2, -base));
          s[sl][j].x[e] = p;
          sum += p;
        }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        o[sl][j].x[2 * half] *= alpha;
        o[sl][j].x[2 * half + 1] *= alpha;
      }
    }
}

// O += P V: P (the softmaxed s, rounded to BF16) as A fragments, V tile [key][d] as B.
template <int kD, int kSlices, int kBlockN, int kStride>
__device__ __forceinline__ void fwd_accumulate_pv(FragC (&o)[kSlices][kD / 8],
                                                  const FragC (&p)[kSlices][kBlockN / 8], const bf16* v_tile,
                                                  int lane) {
#pragma unroll
  for (int ks = 0; ks < kBlockN / 16; ++ks) {
    FragA pa[kSlices];
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) pa[sl] = accum_to_a(p[sl][2 * ks], p[sl][2 * ks + 1]);
#pragma unroll
    for (int np = 0; np < kD / 16; ++np) {
      FragB b0, b1;
      load_b_pair_trans<kStride>(b0, b1, v_tile, np * 16, ks * 16, lane);
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl) {
        mma_bf16(o[sl][2 * np], pa[sl], b0);
        mma_bf16(o[sl][2 * np + 1], pa[sl], b1);
      }
    }
  }
}

// Grid: x = batch*head, y = query tile, heaviest (last) tiles first so the causal triangle balances.
template <int kD, int kSlices, int kMinBlocks>
__global__ void __launch_bounds__(FwdTile<kD, kSlices>::kThreads, kMinBlocks)
    attention_fwd_kernel(const FwdParams p) {
  using Tile = FwdTile<kD, kSlices>;
  constexpr int kStride = Tile::kStride, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;
  constexpr int kThreads = Tile::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* s_q = reinterpret_cast<bf16*>(smem);
  bf16* s_k = s_q + kBlockM * kStride;
  bf16* s_v = s_k + 2 * kBlockN * kStride;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int bh = blockIdx.x, b = bh / p.H, h = bh % p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBlockM;
  const int64_t tok0 = static_cast<int64_t>(b) * p.T;
  const bf16* q = p.q + tok0 * p.ld_qkv + h * kD;
  const bf16* k = p.k + tok0 * p.ld_qkv + h * kD;
  const bf16* v = p.v + tok0 * p.ld_qkv + h * kD;
  const int last_row = min(q0 + kBlockM, p.T) - 1;
  const int n_tiles = last_row / kBlockN + 1;  // key tiles holding keys 0 .. last_row

  copy_tile_async<kBlockM, kD, kStride, kThreads>(s_q, q, p.ld_qkv, q0, p.T, tid);
  copy_tile_async<kBlockN, kD, kStride, kThreads>(s_k, k, p.ld_qkv, 0, p.T, tid);
  copy_tile_async<kBlockN, kD, kStride, kThreads>(s_v, v, p.ld_qkv, 0, p.T, tid);
  cp_async_commit();

  const int row0 = q0 + warp * Tile::kRowsPerWarp;  // this warp's first query row
  const int row_last = row0 + Tile::kRowsPerWarp - 1;
  const bool warp_has_rows = row0 < p.T;
  FragA qf[kSlices][kD / 16];
  FragC o[kSlices][kD / 8];
  float m[2 * kSlices], l[2 * kSlices];
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl) {
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) zero(o[sl][j]);
    m[2 * sl] = m[2 * sl + 1] = -INFINITY;
    l[2 * sl] = l[2 * sl + 1] = 0.f;
  }

  const float scale_log2 = forward_scale_log2(p);
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_tiles) {
      const int next = (stage ^ 1) * kBlockN * kStride;
      copy_tile_async<kBlockN, kD, kStride, kThreads>(s_k + next, k, p.ld_qkv, (j + 1) * kBlockN, p.T, tid);
      copy_tile_async<kBlockN, kD, kStride, kThreads>(s_v + next, v, p.ld_qkv, (j + 1) * kBlockN, p.T, tid);
    }
    cp_async_commit();   // possibly empty: keeps the wait below uniform
    cp_async_wait<1>();  // tile j (and on j == 0 the Q tile) has landed
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk)
          qf[sl][kk] = load_a<kStride>(s_q, warp * Tile::kRowsPerWarp + sl * 16, kk * 16, lane);
    }
    const int key0 = j * kBlockN;
    if (warp_has_rows && key0 <= row_last) {  // warp-uniform: some key of the tile is visible to the warp
      const bf16* k_tile = s_k + stage * kBlockN * kStride;
      const bf16* v_tile = s_v + stage * kBlockN * kStride;
      FragC s[kSlices][kBlockN / 8];
      fwd_scores<kD, kSlices, kBlockN, kStride>(s, qf, k_tile, lane);
      if (key0 + kBlockN - 1 > row0) fwd_mask<kSlices, kBlockN>(s, key0, row0, lane);
      fwd_softmax<kD, kSlices, kBlockN>(s, o, m, l, scale_log2);
      fwd_accumulate_pv<kD, kSlices, kBlockN, kStride>(o, s, v_tile, lane);
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }

  // Epilogue: O = acc / l in BF16, LSE = ln(sum exp(scaled scores)) = m ln2 + ln l.
  const int g = lane >> 2, t = lane & 3;
  bf16* out = p.out + tok0 * p.ld_out + h * kD;
  float* lse = p.lse + static_cast<int64_t>(bh) * p.T;
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 2 * sl + half;
      float sum = l[r];
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
      const int row = row0 + sl * 16 + g + half * 8;
      if (row < p.T) {
        const float inv = 1.f / sum;
        bf16* dst = out + row * p.ld_out + 2 * t;
#pragma unroll
        for (int jd = 0; jd < kD / 8; ++jd)
          *reinterpret_cast<__nv_bfloat162*>(dst + jd * 8) =
              __floats2bfloat162_rn(o[sl][jd].x[2 * half] * inv, o[sl][jd].x[2 * half + 1] * inv);
        if (t == 0) lse[row] = m[r] * kLn2 + logf(sum);
      }
    }
}

// Launches the forward for one tile configuration (no synchronization; the launch is checked).
template <int kD, int kSlices, int kMinBlocks>
void launch_attention_forward(const FwdParams& p, cudaStream_t stream) {
  using Tile = FwdTile<kD, kSlices>;
  const auto kernel = attention_fwd_kernel<kD, kSlices, kMinBlocks>;
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(p.B * p.H),
                  static_cast<unsigned>((p.T + Tile::kBlockM - 1) / Tile::kBlockM));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  FP4_CUDA_CHECK_LAUNCH("attention_fwd_kernel");
}

}  // namespace fp4::cuda::attn
