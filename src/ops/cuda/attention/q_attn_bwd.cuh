// Q-Attn's fused backward kernel (q_attn_cuda.h): attention_bwd.cuh's mma.sync schedule (one CTA per key
// tile and slice, each warp 16 keys, query tiles streamed through two stages) with dS quantized to NVFP4 in
// registers. Per query tile each warp holds dS^T [16 keys x kBlockM queries] in the accumulator layout
// (element e of block j: key = wkey0 + g + 8*(e/2), query = q0 + 8j + 2t + e%2, lane = 4g + t), so
//   a 16-query block of one key (dS^T's 1x16 block) sits in the 4 lanes of one g: two registers each;
//   a 16-key block of one query (dS's 1x16 block) is the warp's 16 rows: one value in each g, two halves.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/nvfp4_block.h"
#include "numerics/philox.h"
#include "ops/cuda/attention/attention_bwd.cuh"
#include "ops/cuda/quant/quant_common.cuh"

namespace fp4::cuda::attn {

struct QAttnBwdExtra {
  const bf16* qt;  // Q^^T's q * s_b values at Q's positions, row stride p.ld_qkv
  const bf16* kt;  // K^^T's, likewise
  const bf16* v;   // the plain kernel's p.v, with its own row stride
  int64_t ld_v;
  const float* sdec_qt;  // [B*H]
  const float* sdec_kt;
  unsigned* ds_amax;           // [B*H] max |dS| as float bits: the amax pass's atomicMax target
  const float* scale_log2;     // device: scale * S_dec(Q^) * S_dec(K^) * log2(e)
  RngStream ds_rows, ds_cols;  // slice 0's streams
  int tp;                      // T rounded up to 16
  float* debug_ds;             // optional, q_attn_cuda.h
  bf16* debug_ds_rows;
  bf16* debug_ds_cols;
};

template <int kD, int kWarps, int kBlockM_>
struct QAttnBwdTile : BwdTile<kD, kWarps, kBlockM_> {
  using Base = BwdTile<kD, kWarps, kBlockM_>;
  // The plain kernel's tiles plus K^^T (with K and V) and two stages of Q^^T (with Q and dO).
  static constexpr int kSmemBf16 =
      Base::kSmemBf16 + Base::kBlockN * Base::kStride + 2 * kBlockM_ * Base::kStride;
  static constexpr int kSmemBytes = kSmemBf16 * 2 + 4 * kBlockM_ * 4;
};

// The NVFP4 tensor scale of a slice's dS (sr_headroom target, as q_attn_spec(kSr)).
__device__ __forceinline__ TensorScale q_attn_ds_scale(const unsigned* ds_amax, int bh) {
  return nvfp4_tensor_scale(__uint_as_float(ds_amax[bh]), false, kNvfp4HeadroomTarget);
}

// Max over the finite values of v (and whether one is not finite), as amax_finite16 on the block they form.
__device__ __forceinline__ void finite_max(float v, float& m, bool& bad) {
  if (is_finite_f(v)) {
    m = max_f(m, abs_f(v));
  } else {
    bad = true;
  }
}

// A block's finite amax and non-finite flag in one word that max() combines over lanes: |v|'s bits for a
// finite v (non-negative floats order as their bits), the bits of +inf for a NaN or inf, which are above
// every finite value's. The block is bad exactly when the combined word is kBadBlock.
constexpr uint32_t kBadBlock = 0x7F800000u;
__device__ __forceinline__ uint32_t amax_word(float v) {
  const float a = fabsf(v);
  return a < INFINITY ? __float_as_uint(a) : kBadBlock;
}

// One block's scale code and encode multiplier from its amax word.
struct BlockScale {
  float e_b, s_b;
};
// nvfp4_scale_tensor, e4m3_decode and nvfp4_encode_multiplier with the quantizers' fast E4M3 codec
// (quant_common.cuh: the same bits for a non-negative, non-NaN input and every code but NaN's); the NaN
// code (a bad block, or amax16 * mult = 0 * inf) takes the reference functions.
__device__ __forceinline__ BlockScale q_attn_block_scale(uint32_t word, const TensorScale& ts) {
  const float mult = ts.s_enc * (1.0f / kNvfp4HeadroomTarget);
  const float p = min_f(__uint_as_float(word) * mult, kE4m3Max);
  if (word == kBadBlock || is_nan_f(p))
    return BlockScale{nvfp4_encode_multiplier(kE4m3Nan, ts.s_dec), e4m3_decode(kE4m3Nan)};
  const float s_b = qk::e4m3_value(qk::e4m3_code_nonneg(p));
  return BlockScale{min_f(1.0f / (s_b * ts.s_dec), kFloatMax), s_b};
}

// The scales of the warp's blocks when each block is spread over a group of kGroup lanes (those at xor
// offsets kFirst, 2 kFirst, .., kLast of each other): block k of the sequence the caller walks belongs to
// the group's member k % kGroup, which computes its scale once (slot k / kGroup) where every member used to.
// collect() combines a block's words over the group and keeps the owner's; compute() forms the owned
// scales; get() sends block k's scale from its owner lane to the group.
template <int kFirst, int kLast, int kGroup, int kSlots>
struct SharedBlockScales {
  uint32_t word[kSlots] = {};
  BlockScale scale[kSlots];

  __device__ __forceinline__ void collect(int k, uint32_t w, int member) {
#pragma unroll
    for (int off = kFirst; off <= kLast; off <<= 1) w = max(w, __shfl_xor_sync(0xFFFFFFFFu, w, off));
    if (member == k % kGroup) word[k / kGroup] = w;
  }
  __device__ __forceinline__ void compute(const TensorScale& ts) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) scale[i] = q_attn_block_scale(word[i], ts);
  }
  __device__ __forceinline__ BlockScale get(int k, int owner_lane) const {
    return BlockScale{__shfl_sync(0xFFFFFFFFu, scale[k / kGroup].e_b, owner_lane),
                      __shfl_sync(0xFFFFFFFFu, scale[k / kGroup].s_b, owner_lane)};
  }
};

// q * s_b of x rounded stochastically with SR word `random` (the CPU's nvfp4_encode_tensor, then the value
// without S_dec: at most 6 significant bits, exact in BF16), the value formed without the code.
__device__ __forceinline__ float q_attn_quantize(float x, const BlockScale& bs, uint32_t random) {
  return nvfp4_sr_value_tensor(x, bs.e_b, random) * bs.s_b;
}

// Word i (0..3, not known at compile time) of a Philox block or of four received words, by selects: a
// runtime index into a register array would put it in local memory.
__device__ __forceinline__ uint32_t word_at(const uint32_t (&w)[4], int i) {
  return i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
}

// The SR bits of one half of a Philox word, in sr16_word's form (odd: the high half).
__device__ __forceinline__ uint32_t sr16_half(uint32_t word, int odd) {
  return odd ? (word & 0xFFFF0000u) : (word << 16);
}

// Four Philox blocks shared by a group of lanes: the lane with group index `mine` (0..3) computed block
// `mine` as `r`; every lane needs word `want` (0..3) of each of the four. Four shuffles instead of four
// Philox blocks per lane: in round k a lane reads block (want + k) & 3 from the group's lane
// `lane_of(block)`, which sends word (its block - k) & 3, i.e. `want`. Returns, for block m (static index),
// word `want` of it.
template <typename LaneOf>
__device__ __forceinline__ void share_philox_blocks(uint32_t (&out)[4], const Philox4& r, int mine, int want,
                                                    LaneOf lane_of) {
  uint32_t recv[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    recv[k] = __shfl_sync(0xFFFFFFFFu, word_at(r.v, (mine - k) & 3), lane_of((want + k) & 3));
#pragma unroll
  for (int m = 0; m < 4; ++m) out[m] = word_at(recv, (m - want) & 3);  // block m came in round m - want
}

// dS^T quantized along the queries (operand [key][tp], element key * tp + query) into A fragments for
// dK += Q(dS^T) Q^^T: block ks of a key row is columns 16ks .. 16ks+15 of the tile, n-blocks 2ks and 2ks+1.
// The quad of one g (key) uses four Philox blocks per ks, (half, pair) = (m >> 1, m & 1) for m = 0..3:
// block (key * tp + q0 + 16 ks + 8 pair) / 8 with key = wkey0 + g + 8 half, whose word t serves the lane's
// queries 2t and 2t + 1 of the eight. Lane t computes block m = t and the quad shares them.
template <int kBlockM>
__device__ __forceinline__ void quantize_ds_along_queries(FragA (&out)[kBlockM / 16],
                                                          const FragC (&ds)[kBlockM / 8],
                                                          const TensorScale& ts, RngStream stream, int wkey0,
                                                          int q0, int tp, int lane) {
  const int g = lane >> 2, t = lane & 3;
  // Block k = 2 ks + half (key g + 8 half, queries 16 ks ..): the quad's 4 lanes, owner lane t = k % 4.
  SharedBlockScales<1, 2, 4, kBlockM / 32> scales;
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      scales.collect(
          2 * ks + half,
          max(max(amax_word(ds[2 * ks].x[2 * half]), amax_word(ds[2 * ks].x[2 * half + 1])),
              max(amax_word(ds[2 * ks + 1].x[2 * half]), amax_word(ds[2 * ks + 1].x[2 * half + 1]))),
          t);
  scales.compute(ts);
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks) {
    BlockScale bs[2];
#pragma unroll
    for (int half = 0; half < 2; ++half)
      bs[half] = scales.get(2 * ks + half, (lane & ~3) | ((2 * ks + half) % 4));
    const int64_t my_key = wkey0 + g + 8 * (t >> 1);
    const Philox4 r =
        philox_block(stream, static_cast<uint64_t>(my_key * tp + q0 + 16 * ks + 8 * (t & 1)) >> 3);
    uint32_t word[4];
    share_philox_blocks(word, r, t, t, [&](int m) { return (lane & ~3) | m; });
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {  // queries q0 + 16ks + 8pair + 2t and the next
        const uint32_t w = word[2 * half + pair];
        const float lo = q_attn_quantize(ds[2 * ks + pair].x[2 * half], bs[half], sr16_half(w, 0));
        const float hi = q_attn_quantize(ds[2 * ks + pair].x[2 * half + 1], bs[half], sr16_half(w, 1));
        out[ks].x[half + 2 * pair] = pack_bf16(lo, hi);
      }
  }
}

// Eight Philox blocks shared by the 8 lanes of one t (lane 4 h + t computed block h as `r`), of which every
// lane needs word g >> 1 (g: its own index in the group): in round k lane g reads block (g + k) & 7 from lane
// 4 ((g + k) & 7) + t, which sends word ((h - k) & 7) >> 1, i.e. the reader's g >> 1. Block m arrived in
// round (m - g) & 7, so a rotation by g (three stages of selects) puts the words in block order.
__device__ __forceinline__ void share_philox_blocks8(uint32_t (&out)[8], const Philox4& r, int g, int t) {
  uint32_t recv[8];
#pragma unroll
  for (int k = 0; k < 8; ++k)
    recv[k] = __shfl_sync(0xFFFFFFFFu, word_at(r.v, ((g - k) & 7) >> 1), 4 * ((g + k) & 7) + t);
#pragma unroll
  for (int step = 1; step < 8; step <<= 1) {
    const bool rotate = (g & step) != 0;
    uint32_t next[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) next[m] = rotate ? recv[(m - step) & 7] : recv[m];
#pragma unroll
    for (int m = 0; m < 8; ++m) recv[m] = next[m];
  }
#pragma unroll
  for (int m = 0; m < 8; ++m) out[m] = recv[m];
}

// dS quantized along the keys (operand [query][tp], element query * tp + key), in place: the warp's 16 keys
// of one query form a block; keys wkey0 + g and wkey0 + g + 8 take words g of Philox blocks idx0/8 and
// idx0/8 + 1 (idx0 = query * tp + wkey0, a multiple of 16). Per pair of tiles j = 2 jj + (m >> 2) the 8 lanes
// of one t use eight blocks, m = 0..7 with (c, b) = ((m >> 1) & 1, m & 1): block (query * tp + wkey0) / 8 + b
// with query = q0 + 8 j + 2 t + c, of which lane g needs word g >> 1 (half g & 1). Lane g computes block g,
// so each block is computed once (per single j, four blocks for eight lanes were computed twice each).
template <int kBlockM>
__device__ __forceinline__ void quantize_ds_along_keys(FragC (&ds)[kBlockM / 8], const TensorScale& ts,
                                                       RngStream stream, int wkey0, int q0, int tp,
                                                       int lane) {
  static_assert(kBlockM % 16 == 0, "tiles j are taken in pairs");
  const int g = lane >> 2, t = lane & 3;
  // Block k = 2 j + c (query q0 + 8 j + 2 t + c, the warp's 16 keys): the 8 lanes of one t, owner g = k % 8.
  SharedBlockScales<4, 16, 8, kBlockM / 32> scales;
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c)
      scales.collect(2 * j + c, max(amax_word(ds[j].x[c]), amax_word(ds[j].x[c + 2])), g);
  scales.compute(ts);
#pragma unroll
  for (int jj = 0; jj < kBlockM / 16; ++jj) {
    const int64_t my_query = q0 + 8 * (2 * jj + (g >> 2)) + 2 * t + ((g >> 1) & 1);
    const Philox4 r = philox_block(stream, (static_cast<uint64_t>(my_query * tp + wkey0) >> 3) + (g & 1));
    uint32_t word[8];
    share_philox_blocks8(word, r, g, t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * jj + half;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const BlockScale bs = scales.get(2 * j + c, 4 * ((2 * j + c) % 8) + t);
        ds[j].x[c] = q_attn_quantize(ds[j].x[c], bs, sr16_half(word[4 * half + 2 * c], g & 1));
        ds[j].x[c + 2] = q_attn_quantize(ds[j].x[c + 2], bs, sr16_half(word[4 * half + 2 * c + 1], g & 1));
      }
    }
  }
}

// Tests: this warp's FP32 dS^T values (accumulator layout) into dst [query][tp] (transposed) or [key][tp].
template <int kBlockM, typename T>
__device__ __forceinline__ void debug_store(T* dst, const FragC (&a)[kBlockM / 8], bool by_query, int wkey0,
                                            int q0, int rows, int tp, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = wkey0 + g + 8 * (e >> 1), query = q0 + 8 * j + 2 * t + (e & 1);
      if (key >= rows || query >= rows) continue;
      const int64_t at =
          by_query ? static_cast<int64_t>(query) * tp + key : static_cast<int64_t>(key) * tp + query;
      dst[at] = static_cast<T>(a[j].x[e]);
    }
}

// A fragments back to the accumulator layout (BF16 values widened), for debug_store of the dK operand.
template <int kBlockM>
__device__ __forceinline__ void a_to_accum(FragC (&out)[kBlockM / 8], const FragA (&a)[kBlockM / 16]) {
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        const uint32_t w = a[ks].x[half + 2 * pair];
        out[2 * ks + pair].x[2 * half] = __uint_as_float(w << 16);
        out[2 * ks + pair].x[2 * half + 1] = __uint_as_float(w & 0xFFFF0000u);
      }
}

// Grid: x = batch*head, y = key tile. kAmaxPass: only max |dS| of the slice (into x.ds_amax); otherwise the
// gradients, with that amax as dS's tensor scale.
template <int kD, int kWarps, int kBlockM, int kMinBlocks, bool kAmaxPass>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    q_attn_bwd_kernel(const BwdParams p, const QAttnBwdExtra x) {
  using Tile = QAttnBwdTile<kD, kWarps, kBlockM>;
  constexpr int kStride = Tile::kStride, kBlockN = Tile::kBlockN, kThreads = Tile::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* s_k = reinterpret_cast<bf16*>(smem);
  bf16* s_kt = s_k + kBlockN * kStride;
  bf16* s_v = s_kt + kBlockN * kStride;
  bf16* s_q = s_v + kBlockN * kStride;        // two stages
  bf16* s_qt = s_q + 2 * kBlockM * kStride;   // two stages
  bf16* s_do = s_qt + 2 * kBlockM * kStride;  // two stages
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
  const bf16* qt = x.qt + tok0 * p.ld_qkv + h * kD;
  const bf16* kt = x.kt + tok0 * p.ld_qkv + h * kD;
  const bf16* v = x.v + tok0 * x.ld_v + h * kD;
  const bf16* dout = p.dout + tok0 * p.ld_out + h * kD;
  const float* lse = p.lse + head_off;
  const float* delta = p.delta + head_off;
  float* dq_accum = p.dq_accum + head_off * kD;
  const float scale_log2 = *x.scale_log2;
  const uint64_t slice_bits = static_cast<uint64_t>(bh) << 32;
  const RngStream rows_stream{x.ds_rows.seed, x.ds_rows.stream + slice_bits};
  const RngStream cols_stream{x.ds_cols.seed, x.ds_cols.stream + slice_bits};
  TensorScale ts{};
  if constexpr (!kAmaxPass) ts = q_attn_ds_scale(x.ds_amax, bh);

  const int first_tile = key0 / kBlockM;
  const int n_q_tiles = (p.T + kBlockM - 1) / kBlockM;

  auto load_query_tile = [&](int i, int st) {
    const int qt0 = i * kBlockM;
    copy_tile_async<kBlockM, kD, kStride, kThreads>(s_q + st * kBlockM * kStride, q, p.ld_qkv, qt0, p.T, tid);
    if constexpr (!kAmaxPass)
      copy_tile_async<kBlockM, kD, kStride, kThreads>(s_qt + st * kBlockM * kStride, qt, p.ld_qkv, qt0, p.T,
                                                      tid);
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
  if constexpr (!kAmaxPass)
    copy_tile_async<kBlockN, kD, kStride, kThreads>(s_kt, kt, p.ld_qkv, key0, p.T, tid);
  copy_tile_async<kBlockN, kD, kStride, kThreads>(s_v, v, x.ld_v, key0, p.T, tid);
  load_query_tile(first_tile, 0);
  cp_async_commit();

  const int wkey0 = key0 + warp * 16;
  FragC dk[kD / 8], dv[kD / 8];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    zero(dk[j]);
    zero(dv[j]);
  }
  float amax = 0.f;  // amax pass: this thread's max |dS| over finite values

  for (int i = first_tile; i < n_q_tiles; ++i) {
    const int stage = (i - first_tile) & 1;
    if (i + 1 < n_q_tiles) load_query_tile(i + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
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
                         scale_log2, lane);
      if constexpr (kAmaxPass) {
        bool unused = false;
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) finite_max(dp[j].x[e], amax, unused);
      } else {
        if (x.debug_ds != nullptr)
          debug_store<kBlockM>(x.debug_ds + head_off * x.tp, dp, true, wkey0, q0, p.T, x.tp, lane);
        FragA pa[kBlockM / 16], dsa[kBlockM / 16];
#pragma unroll
        for (int ks = 0; ks < kBlockM / 16; ++ks) pa[ks] = accum_to_a(s[2 * ks], s[2 * ks + 1]);
        bwd_accumulate<kD, kBlockM, kStride>(dv, pa, do_tile, lane);
        quantize_ds_along_queries<kBlockM>(dsa, dp, ts, cols_stream, wkey0, q0, x.tp, lane);
        bwd_accumulate<kD, kBlockM, kStride>(dk, dsa, s_qt + stage * kBlockM * kStride, lane);
        if (x.debug_ds_cols != nullptr) {
          a_to_accum<kBlockM>(s, dsa);  // s is free after P^T was packed
          debug_store<kBlockM>(x.debug_ds_cols + head_off * x.tp, s, false, wkey0, q0, p.T, x.tp, lane);
        }
        quantize_ds_along_keys<kBlockM>(dp, ts, rows_stream, wkey0, q0, x.tp, lane);
        if (x.debug_ds_rows != nullptr)
          debug_store<kBlockM>(x.debug_ds_rows + head_off * x.tp, dp, true, wkey0, q0, p.T, x.tp, lane);
#pragma unroll
        for (int ks = 0; ks < kBlockM / 16; ++ks) dsa[ks] = accum_to_a(dp[2 * ks], dp[2 * ks + 1]);
        bwd_store_ds<kBlockM, Tile::kStrideDs>(s_ds, warp * 16, dsa, lane);
      }
    }
    __syncthreads();  // dS^T complete
    if constexpr (!kAmaxPass) bwd_dq<Tile, kD>(dq_accum, s_ds, s_kt, key0, q0, p.T, warp, lane);
    __syncthreads();  // stage and dS^T free for the next step
  }

  if constexpr (kAmaxPass) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = max_f(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
    if (lane == 0) atomicMax(x.ds_amax + bh, __float_as_uint(amax));  // non-negative floats order as integers
  } else {
    BwdParams scaled = p;  // dK = s S_dec(dS^T) S_dec(Q^^T) (the sum of q * s_b products)
    scaled.scale = p.scale * (ts.s_dec * x.sdec_qt[bh]);
    store_dk_dv<kD>(scaled, dk, dv, wkey0, tok0, h, lane);
  }
}

// dq[token][h*kD + d] = BF16(dq_accum * s * S_dec(dS) * S_dec(K^^T)) of the token's slice.
template <int kD>
__global__ void q_attn_dq_kernel(const float* dq_accum, const unsigned* ds_amax, const float* sdec_kt,
                                 bf16* dq, int64_t ld_dq, int B, int T, int H, float scale) {
  constexpr int kParts = kD / 8;
  const int64_t total = static_cast<int64_t>(B) * T * H * kParts;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= total) return;
  const int part = static_cast<int>(gid % kParts);
  const int64_t row = gid / kParts;
  const int64_t tok = row / H;
  const int h = static_cast<int>(row % H);
  const int64_t bi = tok / T, ti = tok % T;
  const int bh = static_cast<int>(bi * H + h);
  const float f = scale * (q_attn_ds_scale(ds_amax, bh).s_dec * sdec_kt[bh]);
  const float4* src = reinterpret_cast<const float4*>(dq_accum + ((bi * H + h) * T + ti) * kD + part * 8);
  const float4 a = src[0], c = src[1];
  const uint4 w{pack_bf16(a.x * f, a.y * f), pack_bf16(a.z * f, a.w * f), pack_bf16(c.x * f, c.y * f),
                pack_bf16(c.z * f, c.w * f)};
  *reinterpret_cast<uint4*>(dq + tok * ld_dq + h * kD + part * 8) = w;
}

}  // namespace fp4::cuda::attn
