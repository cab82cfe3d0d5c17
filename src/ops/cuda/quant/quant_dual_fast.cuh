// The fused dual quantizer specialized at compile time for the recipes' operand pairs: 1x16 blocks, no Four
// Over Six, RHT of 16 or none on either side, a BF16 original source or an aligned one. Fixing the modes
// removes the general kernel's run-time branches (and most of its code size), so the per-element work is
// the arithmetic of src/numerics/ and little else. The outputs are byte-identical to the CPU reference:
// every rounding goes through the same functions.
//
// Layout (one 256-thread block per 128 x 128 tile of x, as the general kernel):
//  - phase 1: thread = one 16-column block of 4 tile rows, one row per loop iteration; row operand quantized
//    and stored; the tile keeps the column operand's source as BF16 words: the input itself (original) or
//    the E2M1 values q of the row codes (aligned, with the block multipliers beside them), the column RHT's
//    signs already applied (sign flips are exact, and flipping here costs one XOR per two elements);
//  - phase 2: thread = tile column cl, rows hh * 64 .. + 63 (four T-blocks): an amax pass, then an encode
//    pass (a BF16 tile is read again there, an aligned one's blocks stay in registers); codes and scales of
//    T go through shared memory and leave in whole 64-byte row segments.
// The block loops are not unrolled: unrolled, the kernel's straight-line code outgrew the instruction caches.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/quant/quant_dual_args.cuh"
#include "ops/cuda/quant/quant_dual_encode.cuh"

namespace fp4::dual {

// Mode bits (the template parameter of the kernel).
inline constexpr uint32_t kF32In = 1, kAlignedSrc = 2, kRowB128 = 4, kRowSr = 8, kRowRht = 16, kColB128 = 32,
                          kColSr = 64, kColRht = 128;

inline constexpr int kFastThreads = 256;
inline constexpr int kFastTile = 128;
inline constexpr int kStageStride =
    80;  // bytes per T row in the code stage: 64 + 16 keeps STS.128 conflict-free

// Dynamic shared memory: the tile (BF16 words of an original source; FP32 values q * (+-s_b) of an aligned
// one, so that phase 2 reads them as they are), T code stage, T scale stage.
template <bool kAligned>
struct FastLayout {
  static constexpr int kTileOff = 0, kCodeOff = kFastTile * kFastTile * (kAligned ? 4 : 2);
  static constexpr int kScaleOff = kCodeOff + kFastTile * kStageStride, kBytes = kScaleOff + kFastTile * 8;
};

template <uint32_t M>
constexpr int fast_smem_bytes() {
  return FastLayout<(M & kAlignedSrc) != 0>::kBytes;
}

// Position of tile column cl in an FP32 tile row: the four 16-byte chunks of each 16-column block are
// rotated by (block / 2), which makes phase 1's 128-bit stores (8 lanes = 8 blocks of one row) conflict-free
// and keeps each 32-column run of phase 2's reads a permutation of 32 banks.
__device__ __forceinline__ int f32_tile_col(int cl) {
  const int j = cl >> 4;
  return 16 * j + 4 * (((cl >> 2) + (j >> 1)) & 3) + (cl & 3);
}

// Running max of |x| that keeps NaN (max.NaN): one instruction; a NaN or Inf in a block shows in the result.
__device__ __forceinline__ float max_abs_nan(float m, float x) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(fabsf(x)));
  return r;
}

// Two floats as BF16 (round to nearest even; lo in the low half). NaN gives the canonical NaN, which the
// CPU's bf16_bits_rne does not: the tests accept any NaN for any NaN.
__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 16 dequantized values at element i0 of an FP32 or BF16 (round to nearest even) output, 16-byte stores.
__device__ __forceinline__ void store_values16(void* base, bool as_bf16, int64_t i0, const float (&d)[16]) {
  if (as_bf16) {
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + i0);
#pragma unroll
    for (int c = 0; c < 2; ++c)
      dst[c] = make_uint4(bf16x2_rn(d[8 * c], d[8 * c + 1]), bf16x2_rn(d[8 * c + 2], d[8 * c + 3]),
                          bf16x2_rn(d[8 * c + 4], d[8 * c + 5]), bf16x2_rn(d[8 * c + 6], d[8 * c + 7]));
  } else {
    float4* dst = reinterpret_cast<float4*>(static_cast<float*>(base) + i0);
#pragma unroll
    for (int c = 0; c < 4; ++c) dst[c] = make_float4(d[4 * c], d[4 * c + 1], d[4 * c + 2], d[4 * c + 3]);
  }
}

// amax of a block as amax_finite16 gives it; `bad` and the non-finite count when the block has NaN/Inf.
__device__ __forceinline__ float block_amax(const float (&v)[16], bool& bad, unsigned& nonfinite) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) m = max_abs_nan(m, v[i]);
  bad = !(m <= kFloatMax);
  if (bad) {  // rare: the reference's finite-only maximum
    bool unused = false;
    m = amax_finite16(v, unused);
    nonfinite += static_cast<unsigned>(qk::count_nonfinite16(v));
  }
  return m;
}

// Scale code, element multiplier (p = s_in * s_out for block128, e_b for tensor) and decoded scale s_b of
// a block, with quant_nvfp4.cu's fast E4M3 steps: e4m3_code_nonneg is e4m3_encode for x >= 0 and not NaN
// (which t and amax16 * mult are here: finite amax, positive finite divisor or multiplier), e4m3_value is
// e4m3_decode for every code but the NaN one (a non-finite block's, decoded by the reference), and
// s_enc * inv_target is the multiplier nvfp4_scale_tensor forms. A tensor multiplier that is 0, inf or NaN
// (a caller's odd amax) takes the reference encoder.
template <bool kB128>
__device__ __forceinline__ uint8_t block_scale(const qk::Nvfp4Params& p, float amax16, float outer, bool bad,
                                               float& mult, float& s_b) {
  uint8_t s;
  if constexpr (kB128) {
    s = bad ? kE4m3Nan : qk::block128_scale_fast(amax16, outer, p);  // nvfp4_scale_block128's code
  } else {
    const float tm = mul_rn(p.ts.s_enc, p.inv_target);
    const bool fast = tm > 0.0f && tm <= kFloatMax;
    s = bad ? kE4m3Nan
            : (fast ? static_cast<uint8_t>(qk::e4m3_code_nonneg(mul_rn(amax16, tm)))
                    : nvfp4_scale_tensor(amax16, p.ts, p.target));
  }
  s_b = s == kE4m3Nan ? e4m3_decode(kE4m3Nan) : qk::e4m3_value(s);
  if constexpr (kB128)
    mult = mul_rn(s_b, outer);  // e4m3_decode(s) * outer
  else
    mult = min_f(1.0f / mul_rn(s_b, p.ts.s_dec), kFloatMax);  // nvfp4_encode_multiplier
  return s;
}

template <uint32_t M>
struct FastMode {
  static constexpr bool kF32 = (M & kF32In) != 0, kAligned = (M & kAlignedSrc) != 0;
  static constexpr bool kRB128 = (M & kRowB128) != 0, kRSr = (M & kRowSr) != 0, kRRht = (M & kRowRht) != 0;
  static constexpr bool kCB128 = (M & kColB128) != 0, kCSr = (M & kColSr) != 0, kCRht = (M & kColRht) != 0;
  static constexpr QuantIoType kIo = kF32 ? QuantIoType::kF32 : QuantIoType::kBF16;
  static_assert(kAligned || !kF32, "an original FP32 source needs an FP32 tile: the general kernel takes it");
  // Thread blocks per SM the registers are budgeted for: an aligned source's FP32 tile (76 KB of shared
  // memory) allows two, a BF16 tile (44 KB) three.
  static constexpr int kMinBlocks = kAligned ? 2 : 3;
};

// Phase 1: the row operand, and the tile for phase 2.
template <uint32_t M>
__device__ __forceinline__ void fast_rows(const DualArgs& a, uint8_t* smem, int64_t r0, int64_t c0, int nr,
                                          int nc) {
  using F = FastMode<M>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane & 7, cl = 16 * j;
  qk::Nvfp4Params p = a.pr;
  if constexpr (!F::kRB128) qk::load_tensor_scale(p, a.amax_r);
  const uint32_t row_neg = F::kRRht ? (a.signs_r.mask[0] & 0xFFFFu) : 0u;
  const uint32_t col_neg = F::kCRht ? (a.signs_c.mask[0] & 0xFFFFu) : 0u;
  using L = FastLayout<F::kAligned>;
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem + L::kTileOff);
  float* tile_f = reinterpret_cast<float*>(smem + L::kTileOff);
  const bool want_q = F::kAligned || a.dq != nullptr;

  // One block per iteration of a loop that is not unrolled, the next block's load in flight meanwhile: the
  // kernel's hot code then fits the instruction caches (unrolled, every warp ran ~6,000 distinct instructions
  // once and stalled on instruction fetch a quarter of the time; docs/BENCHMARKS.md, quantizers: tried and
  // not kept).
  unsigned nonfinite = 0;
  auto load_block = [&](int s, qk::Raw16<F::kIo>& raw) {
    const int rl = s * 32 + warp * 4 + (lane >> 3);
    if (rl < nr && cl < nc)
      qk::load_raw16<F::kIo>(a.x, (r0 + rl) * a.cols + c0 + cl, raw);
    else
      qk::zero_raw16<F::kIo>(raw);
  };
  qk::Raw16<F::kIo> cur;
  load_block(0, cur);
#pragma unroll 1
  for (int s = 0; s < 4; ++s) {
    qk::Raw16<F::kIo> next;
    if (s < 3)
      load_block(s + 1, next);
    else
      qk::zero_raw16<F::kIo>(next);
    {
      const qk::Raw16<F::kIo>& raw = cur;
      const int rl = s * 32 + warp * 4 + (lane >> 3);
      const bool active = rl < nr && cl < nc;
      const bool col_flip = ((col_neg >> (rl & 15)) & 1u) != 0;
      // Lanes 4..7 of a row write their two 16-byte halves in the other order: conflict-free stores.
      const int h = (j >> 2) & 1;
      uint4* tile_dst = reinterpret_cast<uint4*>(tile + rl * kFastTile + cl);
      if constexpr (!F::kAligned) {
        const uint32_t flip = col_flip ? 0x80008000u : 0u;
        const uint4 w0 = h ? raw.w[1] : raw.w[0], w1 = h ? raw.w[0] : raw.w[1];  // selects: no local copy
        tile_dst[h] = make_uint4(w0.x ^ flip, w0.y ^ flip, w0.z ^ flip, w0.w ^ flip);
        tile_dst[h ^ 1] = make_uint4(w1.x ^ flip, w1.y ^ flip, w1.z ^ flip, w1.w ^ flip);
      }
      float v[16];
      qk::convert16<F::kIo>(raw, v);
      if constexpr (F::kRRht) {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = bits_float(float_bits(v[i]) ^ (((row_neg >> i) & 1u) << 31));
        qk::rht16_presigned(v);
      }
      bool bad = false;
      const float amax16 = block_amax(v, bad, nonfinite);
      float outer, mult;
      if constexpr (F::kRB128)
        outer = qk::block128_outer_fast(qk::max8_lanes(amax16), p);
      else
        outer = p.ts.s_dec;
      float s_b;  // the dequantized value's factor after q: p (block128) or s_b (tensor; S_dec follows)
      const uint8_t scale = block_scale<F::kRB128>(p, amax16, outer, bad, mult, s_b);
      if constexpr (F::kRB128) s_b = mult;
      const int64_t i0 = (r0 + rl) * a.cols + c0 + cl;
      const bool direct = F::kRB128 && qk::block128_direct(scale, mult);
      float q[16];
      uint2 codes;
      if (want_q)
        codes = encode_block<F::kRB128, F::kRSr, true>(v, mult, direct, p.philox,
                                                       static_cast<uint32_t>(i0 >> 2), q);
      else
        codes = encode_block<F::kRB128, F::kRSr, false>(v, mult, direct, p.philox,
                                                        static_cast<uint32_t>(i0 >> 2), q);
      if (active) {
        *reinterpret_cast<uint2*>(a.out_r.codes + i0 / 2) = codes;
        a.out_r.scales[i0 / 16] = scale;
        if (F::kRB128 && j == 0) a.out_r.outer[i0 / 128] = outer;
        if (a.dq != nullptr) {
          float d[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            d[i] = mul_rn(q[i], s_b);
            if (!F::kRB128 && a.dq_apply) d[i] = mul_rn(d[i], outer);
          }
          store_values16(a.dq, a.dq_bf16, i0, d);
        }
      }
      if constexpr (F::kAligned) {
        // The column operand's source element q * (+-s_b), the product the CPU forms (aligned source, column
        // RHT signs). Outside the tensor it was (+0) * (+-0) = +-0: there the loaded zeros give q = +0 (a
        // zero amax, a positive finite s_b, a zero quotient or SR grid value with a + sign) unless a row RHT
        // flipped signs first, and +0 * (+-s_b) is the same +-0.
        const float m = col_flip ? -s_b : s_b;
        float d[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) d[i] = (F::kRRht && !active) ? 0.0f : q[i];
#pragma unroll
        for (int i = 0; i < 16; ++i)
          d[i] = mul_rn(d[i], (F::kRRht && !active) ? (col_flip ? -0.0f : 0.0f) : m);
        float* row = tile_f + rl * kFastTile + 16 * j;
#pragma unroll
        for (int c = 0; c < 4; ++c)
          *reinterpret_cast<float4*>(row + 4 * ((c + (j >> 1)) & 3)) =
              make_float4(d[4 * c], d[4 * c + 1], d[4 * c + 2], d[4 * c + 3]);
      }
    }
    cur = next;
  }
  qk::warp_count_add(nonfinite, a.nonfinite_r);
  if (!F::kRB128 && blockIdx.x == 0 && threadIdx.x == 0) a.out_r.outer[0] = p.ts.s_dec;
}

// dequant(cols) of one T block at element i0 from its E2M1 values q: q * p (block128, mult = p) or
// (q * s_b) * S_dec (tensor; S_dec only when dq_c_apply), as decode16 forms them. Each thread owns 64
// consecutive elements of one T row, so its stores fill whole 32-byte sectors in pairs.
template <bool kB128>
__device__ __forceinline__ void store_dequant_cols(const DualArgs& a, int64_t i0, const float (&q)[16],
                                                   float mult, float s_b, float s_dec) {
  float d[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    d[i] = mul_rn(q[i], kB128 ? mult : s_b);
    if (!kB128 && a.dq_c_apply) d[i] = mul_rn(d[i], s_dec);
  }
  store_values16(a.dq_c, a.dq_c_bf16, i0, d);
}

// Phase 2: the column operand from the tile, codes and scales staged in shared memory; optionally its
// dequantized values straight to dq_c.
template <uint32_t M>
__device__ __forceinline__ void fast_cols(const DualArgs& a, uint8_t* smem, int64_t r0, int64_t c0, int nr,
                                          int nc) {
  using F = FastMode<M>;
  __shared__ float half_amax[2][kFastTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hh = warp >> 2, cl = (warp & 3) * 32 + lane;
  using L = FastLayout<F::kAligned>;
  const uint16_t* tile = reinterpret_cast<const uint16_t*>(smem + L::kTileOff);
  const float* tile_f = reinterpret_cast<const float*>(smem + L::kTileOff) + f32_tile_col(cl);
  float s_dec_rows = 1.0f;  // an aligned tensor-scaled row operand decodes as (q * s_b) * S_dec
  if constexpr (F::kAligned && !F::kRB128)
    s_dec_rows = nvfp4_tensor_scale(*a.amax_r, false, a.pr.target).s_dec;

  // The 16 source values of T block k of this thread (rows hh * 64 + 16 k ..), column RHT applied.
  auto load_block = [&](int k, float(&v)[16]) {
    const int rb = hh * 64 + 16 * k;
    if constexpr (F::kAligned) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        v[i] = tile_f[(rb + i) * kFastTile];
        if constexpr (!F::kRB128) v[i] = mul_rn(v[i], s_dec_rows);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i)
        v[i] = bits_float(static_cast<uint32_t>(tile[(rb + i) * kFastTile + cl]) << 16);
    }
    if constexpr (F::kCRht) qk::rht16_presigned(v);
  };

  // Pass A: the four blocks' amax (and the 128-block's). Pass B encodes them. A BF16 tile is read and
  // transformed again in pass B, a loop that is not unrolled: the hot code then fits the instruction caches
  // and one block is held in registers (three thread blocks per SM), which costs fewer cycles than the
  // instruction fetches it saves. An aligned source's FP32 tile allows two thread blocks per SM anyway: its
  // blocks stay in registers from pass A (measured faster than reading them twice; docs/BENCHMARKS.md).
  constexpr bool kKeep = F::kAligned;
  float kept[kKeep ? 4 : 1][16];
  float amax16[4];
  bool bad[4];
  float m = 0.0f;
  unsigned nonfinite = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float v[16];
    load_block(k, v);
    amax16[k] = block_amax(v, bad[k], nonfinite);
    m = max_f(m, amax16[k]);
    if constexpr (kKeep) {
#pragma unroll
      for (int i = 0; i < 16; ++i) kept[k][i] = v[i];
    }
  }

  qk::Nvfp4Params p = a.pc;
  if constexpr (!F::kCB128) qk::load_tensor_scale(p, a.amax_c);
  float outer = p.ts.s_dec;
  if constexpr (F::kCB128) {  // T's 128-block = both halves of this column
    half_amax[hh][cl] = m;
    __syncthreads();
    outer = qk::block128_outer_fast(max_f(half_amax[0][cl], half_amax[1][cl]), p);
  }
  const int64_t trow = c0 + cl;
  uint8_t* code_stage = smem + L::kCodeOff + cl * kStageStride + hh * 32;
  uint32_t scales = 0;
  auto encode_col_block = [&](int k, float(&v)[16]) {
    float mult, s_b, q[16];
    // amax16[k] and bad[k] by selects: a register array indexed in a rolled loop would go to local memory.
    const float amax_k = k == 0 ? amax16[0] : k == 1 ? amax16[1] : k == 2 ? amax16[2] : amax16[3];
    const bool bad_k = k == 0 ? bad[0] : k == 1 ? bad[1] : k == 2 ? bad[2] : bad[3];
    const uint8_t scale = block_scale<F::kCB128>(p, amax_k, outer, bad_k, mult, s_b);
    const int64_t i0 = trow * a.rows + r0 + hh * 64 + 16 * k;
    // The kept blocks' loop below is unrolled: there only the reference-form quotient is compiled in.
    const bool direct = F::kCB128 && !kKeep && qk::block128_direct(scale, mult);
    uint2 codes;
    if (a.dq_c == nullptr) {
      codes = encode_block<F::kCB128, F::kCSr, false, !kKeep>(v, mult, direct, p.philox,
                                                              static_cast<uint32_t>(i0 >> 2), q);
    } else {
      codes = encode_block<F::kCB128, F::kCSr, true, !kKeep>(v, mult, direct, p.philox,
                                                             static_cast<uint32_t>(i0 >> 2), q);
      if (cl < nc && hh * 64 + 16 * k < nr) store_dequant_cols<F::kCB128>(a, i0, q, mult, s_b, outer);
    }
    *reinterpret_cast<uint2*>(code_stage + 8 * k) = codes;
    scales |= static_cast<uint32_t>(scale) << (8 * k);
  };
  if constexpr (kKeep) {
#pragma unroll
    for (int k = 0; k < 4; ++k) encode_col_block(k, kept[k]);
  } else {
#pragma unroll 1
    for (int k = 0; k < 4; ++k) {
      float v[16];
      load_block(k, v);
      encode_col_block(k, v);
    }
  }
  *reinterpret_cast<uint32_t*>(smem + L::kScaleOff + cl * 8 + hh * 4) = scales;
  if (F::kCB128 && hh == 0 && cl < nc) a.out_c.outer[(trow * a.rows + r0) / 128] = outer;
  qk::warp_count_add(nonfinite, a.nonfinite_c);
  if (!F::kCB128 && blockIdx.x == 0 && threadIdx.x == 0) a.out_c.outer[0] = p.ts.s_dec;
  __syncthreads();

  // T rows leave as 64-byte segments (8 lanes a row) and 8-byte scale groups.
  const int64_t code_stride = a.rows / 2, scale_stride = a.rows / 16;
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int item = threadIdx.x + kFastThreads * it, rt = item >> 3, ch = item & 7;
    if (rt < nc && ch * 16 < nr)
      *reinterpret_cast<uint2*>(a.out_c.codes + (c0 + rt) * code_stride + r0 / 2 + ch * 8) =
          *reinterpret_cast<const uint2*>(smem + L::kCodeOff + rt * kStageStride + ch * 8);
  }
  if (threadIdx.x < nc) {
    const int rt = threadIdx.x;
    const uint8_t* src = smem + L::kScaleOff + rt * 8;
    uint8_t* dst = a.out_c.scales + (c0 + rt) * scale_stride + r0 / 16;
    if (nr == kFastTile && ((reinterpret_cast<uintptr_t>(dst) & 7) == 0)) {  // (scales are only byte-aligned)
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
    } else {
      for (int b = 0; b < nr / 16; ++b) dst[b] = src[b];
    }
  }
}

template <uint32_t M>
__global__ void __launch_bounds__(kFastThreads, FastMode<M>::kMinBlocks)
    quantize_dual_fast_kernel(DualArgs a) {
  extern __shared__ float4 dual_fast_smem[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(dual_fast_smem);
  const int64_t row_tiles = (a.rows + kFastTile - 1) / kFastTile;
  const int64_t r0 = (blockIdx.x % row_tiles) * kFastTile, c0 = (blockIdx.x / row_tiles) * kFastTile;
  const int nr = static_cast<int>(a.rows - r0 < kFastTile ? a.rows - r0 : kFastTile);
  const int nc = static_cast<int>(a.cols - c0 < kFastTile ? a.cols - c0 : kFastTile);
  fast_rows<M>(a, smem, r0, c0, nr, nc);
  __syncthreads();
  fast_cols<M>(a, smem, r0, c0, nr, nc);
}

}  // namespace fp4::dual
