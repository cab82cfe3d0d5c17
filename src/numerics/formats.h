// The number formats of RECIPES.md section 1: E2M1 (FP4), E4M3 (FP8), UE8M0 and BF16, as pure
// __host__ __device__ functions. Every quantizer, on CPU and GPU, goes through these.
#pragma once

#include <cmath>
#include <cstdint>

#include "numerics/hd.h"

namespace fp4 {

// ---------------------------------------------------------------- E2M1
// Code = sign bit 0x8 | magnitude index 0..7 over {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
inline constexpr float kE2m1Max = 6.0f;

// Decoding reverses e2m1_grid_index's encoding (below): the bits (index << 22) are magnitude * 2^-126,
// so one exact multiplication by 2^126 gives the magnitude (0 -> 0, 1 -> 0.5, ..., 7 -> 6).
inline constexpr float kTwoPow126 = 8.50705917302346158658e+37f;

FP4_HD float e2m1_magnitude(uint8_t index) {
  return mul_rn(bits_float(static_cast<uint32_t>(index & 0x7u) << 22), kTwoPow126);
}

FP4_HD float e2m1_decode(uint8_t code) {
  const uint32_t c = code;
  return mul_rn(bits_float(((c & 0x7u) << 22) | ((c & 0x8u) << 28)), kTwoPow126);  // sign to bit 31
}

// E2M1 magnitudes times 2^-126 are FP32 numbers whose bits, shifted right by 22, are the magnitude index:
// 0.5 -> 2^-127 (subnormal, 1 << 22), 1 -> 2 << 22, 1.5 -> 3 << 22, ..., 6 -> 7 << 22. Kernels then need no
// comparison chain (the integer pipe, not memory, bounded them). Needs denormals (no flush-to-zero).
inline constexpr float kTwoPowMinus126 = 1.17549435082228750797e-38f;

// Index of a grid magnitude r (or of anything above 6, NaN and inf: saturated to 7).
FP4_HD uint8_t e2m1_grid_index(float r) {
  const uint32_t i = float_bits(mul_rn(r, kTwoPowMinus126)) >> 22;
  return static_cast<uint8_t>(i > 7u ? 7u : i);
}

// Magnitude index of a >= 0 rounded to nearest, ties to the even index, saturating at 6 (NaN -> 7):
// 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4, 5->4. One rounding: adding
// M = 1.5 * 2^22 * max(2^floor(log2 a), 1) gives a sum whose ulp is the grid step of a's binade (0.5 below
// 2, 1 in [2, 4), 2 from 4), so the FP32 addition itself rounds a to the nearest-even grid point, and
// subtracting M again is exact. Ties to the even multiple of the step are ties to the even code.
FP4_HD uint8_t e2m1_rtn_index(float a) {
  const float binade = bits_float(float_bits(a) & 0x7F800000u);  // 2^floor(log2 a); inf for inf/NaN
  const float magic = mul_rn(max_f(1.0f, binade), 6291456.0f);   // overflows to inf only for huge a
  return e2m1_grid_index(add_rn(add_rn(a, magic), -magic));      // inf - inf = NaN saturates too
}

// e2m1_rtn_index(a) << 22 for 0 <= a < 7 (block128 quotients under a normal E4M3 scale stay below 6.4):
// nothing to saturate (a in [6, 7) rounds to 6), and the magic number max(1, binade) * 1.5 * 2^22 is added
// and taken away by two fused multiply-adds whose products are exact, so each is the addition's rounding.
FP4_HD uint32_t e2m1_rtn_bits_below7(float a) {
  const float binade = bits_float(float_bits(max_nonnan(a, 1.0f)) & 0x7F800000u);
  const float t = fma_rn(binade, 6291456.0f, a);
  return float_bits(mul_rn(fma_rn(binade, -6291456.0f, t), kTwoPowMinus126));
}

FP4_HD uint8_t sign_bit_e2m1(float x) {
  return static_cast<uint8_t>((float_bits(x) >> 28) & 0x8u);
}

FP4_HD uint8_t e2m1_encode_rtn(float x) {
  return sign_bit_e2m1(x) | e2m1_rtn_index(abs_f(x));
}

// Stochastic rounding of a >= 0: up to the next grid point with probability (a - lo) / gap. In the
// 2^-126-scaled form of e2m1_grid_index, the bits above bit 22 index lo and the 22 bits below are
// (a - lo) / gap in units of 2^-22: exact for a >= 1; below 1 the scaling rounds a to a multiple of 2^-23.
// The top 22 bits of `random` are compared with that fraction. Saturates at 6; NaN and inf give 7.
FP4_HD uint8_t e2m1_sr_index(float a, uint32_t random) {
  const uint32_t s = float_bits(mul_rn(a, kTwoPowMinus126));
  const uint32_t i = (s >> 22) + ((random >> 10) < (s & 0x3FFFFFu) ? 1u : 0u);
  return static_cast<uint8_t>(i > 7u ? 7u : i);
}

FP4_HD uint8_t e2m1_encode_sr(float x, uint32_t random) {
  return sign_bit_e2m1(x) | e2m1_sr_index(abs_f(x), random);
}

// ---------------------------------------------------------------- E4M3 (FN: no infinities, 0x7F/0xFF NaN)
inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3Nan = 0x7F;

FP4_HD float e4m3_decode(uint8_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xFu, man = code & 0x7u;
  if (exp == 0xF && man == 0x7) return bits_float(sign | 0x7FC00000u);  // NaN
  float mag;
  if (exp == 0) {
    mag = static_cast<float>(man) * 0.001953125f;  // man * 2^-9 (subnormal)
  } else {
    mag = bits_float(((exp + 120u) << 23) | (man << 20));  // 2^(exp-7) * (1 + man/8)
  }
  return bits_float(float_bits(mag) | sign);
}

// Round to nearest even, saturating to +-448 (satfinite); NaN -> 0x7F (sign kept); +-inf -> +-448.
FP4_HD uint8_t e4m3_encode(float x) {
  const uint32_t bits = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  if (is_nan_f(x)) return sign | kE4m3Nan;
  const float a = abs_f(x);
  if (a >= 448.0f) return sign | 0x7E;
  const int e = static_cast<int>((float_bits(a) >> 23) & 0xFF) - 127;  // floor(log2 a) for normal a
  if (e < -6) {
    // Subnormal range of E4M3: multiples of 2^-9. a * 2^9 is exact; rint rounds half to even.
    const float q = rintf(a * 512.0f);  // 0..8; 8 is the smallest normal 2^-6 (code 0x08)
    return sign | static_cast<uint8_t>(q);
  }
  // Normal: mantissa m in [8, 16] units of 2^(e-3)
  const float scaled = a * bits_float(static_cast<uint32_t>(127 + 3 - e) << 23);  // a * 2^(3-e), exact
  int m = static_cast<int>(rintf(scaled));
  int ex = e;
  if (m == 16) {
    m = 8;
    ex += 1;
  }
  const int code = ((ex + 7) << 3) | (m - 8);
  return sign | static_cast<uint8_t>(code > 0x7E ? 0x7E : code);
}

// ---------------------------------------------------------------- UE8M0 (power of two 2^(e-127))
FP4_HD float ue8m0_decode(uint8_t e) {
  if (e == 0xFF) return bits_float(0x7FC00000u);
  if (e == 0) return 5.877471754111438e-39f;  // 2^-127 (FP32 subnormal)
  return bits_float(static_cast<uint32_t>(e) << 23);
}

// Exponent code of 2^ceil(log2(r)) for r > 0 finite, clamped to [0, 254].
FP4_HD uint8_t ue8m0_ceil_log2(float r) {
  if (!(r > 0.0f)) return 0;
  const uint32_t b = float_bits(r);
  int e = static_cast<int>((b >> 23) & 0xFF);
  // Subnormal r = m * 2^-149 < 2^-126: 2^-126 if r > 2^-127 (m > 2^22), else clamp to 2^-127.
  if (e == 0) return (b & 0x7FFFFFu) > 0x400000u ? 1 : 0;
  if ((b & 0x7FFFFFu) != 0) e += 1;  // not a power of two: round the exponent up
  return static_cast<uint8_t>(e > 254 ? 254 : e);
}

// ---------------------------------------------------------------- BF16
FP4_HD uint16_t bf16_bits_rne(float x) {
  const uint32_t u = float_bits(x);
  if (is_nan_f(x)) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

FP4_HD float bf16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

FP4_HD float round_to_bf16(float x) {
  return bf16_bits_to_float(bf16_bits_rne(x));
}

}  // namespace fp4
