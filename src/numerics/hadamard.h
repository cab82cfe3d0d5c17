// Random Hadamard transform (RECIPES.md section 3): x' = (x * s) H_n / sqrt(n) on each n-element segment
// along the GEMM reduction dimension, with the Sylvester Walsh-Hadamard matrix H_n and signs s.
#pragma once

#include <cstdint>

#include "numerics/hd.h"
#include "numerics/philox.h"

namespace fp4 {

// Up to 128 signs as a bit mask: bit i set -> s_i = -1.
struct RhtSigns {
  uint32_t mask[4] = {0, 0, 0, 0};
  int n = 16;

  FP4_HD bool negative(int i) const { return (mask[i >> 5] >> (i & 31)) & 1u; }
};

// Signs drawn from the counter-based RNG: one Philox block at an index no element stream reaches.
FP4_HD RhtSigns rht_signs_from_seed(RngStream s, int n) {
  const Philox4 r = philox_block(s, 0x8000000000000000ull);
  RhtSigns out;
  out.n = n;
  for (int w = 0; w < 4; ++w) {
    const int bits_here = n - 32 * w;
    out.mask[w] = bits_here >= 32 ? r.v[w] : (bits_here > 0 ? (r.v[w] & ((1u << bits_here) - 1u)) : 0u);
  }
  return out;
}

// The fixed 16-sign vector of the NVIDIA recipe (as TransformerEngine uses for its Wgrad RHT):
// (+1,+1,+1,-1,+1,-1,-1,-1,-1,-1,-1,+1,-1,+1,-1,-1).
FP4_HD RhtSigns rht_signs_nvidia16() {
  RhtSigns out;
  out.n = 16;
  const int neg[] = {3, 5, 6, 7, 8, 9, 10, 12, 14, 15};
  for (int i : neg) out.mask[0] |= 1u << i;
  return out;
}

// The signs of RHT16 as xor masks for an operand's raw input words: flipping the sign bit of a BF16 value
// before its (exact) conversion to FP32, or of an FP32 value itself, is the negation rht_segment applies.
// bf16 = true: word j holds elements 2j (bit 15) and 2j + 1 (bit 31), words 0..7; else word i holds element i
// (bit 31). The GPU quantizers apply them to every 16-element block (each starts its RHT16 segment).
struct Rht16SignWords {
  uint32_t w[16] = {};
};

inline Rht16SignWords rht16_sign_words(const RhtSigns& s, bool bf16) {
  Rht16SignWords r;
  for (int i = 0; i < 16; ++i) {
    if (!s.negative(i)) continue;
    if (bf16)
      r.w[i >> 1] |= (i & 1) != 0 ? 0x80000000u : 0x8000u;
    else
      r.w[i] |= 0x80000000u;
  }
  return r;
}

// 1/sqrt(n) for n = 16, 32, 64, 128 (FP32, correctly rounded).
FP4_HD float rht_norm(int n) {
  switch (n) {
    case 16:
      return 0.25f;
    case 32:
      return 0.17677669529663688f;
    case 64:
      return 0.125f;
    default:
      return 0.08838834764831845f;  // 128
  }
}

// In-place transform of one segment x[0..n). Butterfly order is fixed (h = 1, 2, 4, ...), so every
// implementation that pairs the same elements per stage gets the same bits (a+b and a-b are exact
// functions of their operands).
template <int N>
FP4_HD void rht_segment(float* x, const RhtSigns& signs) {
  FP4_UNROLL
  for (int i = 0; i < N; ++i)
    if (signs.negative(i)) x[i] = -x[i];
  // Stage s pairs elements h = 2^s apart: pair k is (j, j + h), j = (k / h) 2h + k % h. Every loop has a
  // constant trip count so nvcc unrolls them all; nested loops bounded by h were left rolled and put x in
  // local memory (Q-AdamW's device kernels).
  constexpr int kStages = N == 16 ? 4 : N == 32 ? 5 : N == 64 ? 6 : 7;
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "RHT sizes are 16, 32, 64 and 128");
  FP4_UNROLL
  for (int stage = 0; stage < kStages; ++stage) {
    const int h = 1 << stage;
    FP4_UNROLL
    for (int k = 0; k < N / 2; ++k) {
      const int j = (k >> stage) * 2 * h + (k & (h - 1));
      const float a = x[j], b = x[j + h];
      x[j] = a + b;
      x[j + h] = a - b;
    }
  }
  const float norm = rht_norm(N);
  FP4_UNROLL
  for (int i = 0; i < N; ++i) x[i] = x[i] * norm;
}

// Run-time n dispatch for CPU code paths.
inline void rht_segment_n(float* x, const RhtSigns& signs) {
  switch (signs.n) {
    case 16:
      rht_segment<16>(x, signs);
      break;
    case 32:
      rht_segment<32>(x, signs);
      break;
    case 64:
      rht_segment<64>(x, signs);
      break;
    default:
      rht_segment<128>(x, signs);
      break;
  }
}

}  // namespace fp4
