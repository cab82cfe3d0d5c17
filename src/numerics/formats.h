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

FP4_HD float e2m1_magnitude(uint8_t index) {
  // index 0..7 -> 0, 0.5, 1, 1.5, 2, 3, 4, 6 (branch-free: exponent/mantissa form)
  const uint32_t e = index >> 1, m = index & 1u;
  if (e == 0) return m ? 0.5f : 0.0f;
  return bits_float(((e + 126u) << 23) | (m << 22));  // 2^(e-1) * (1 + m/2)
}

FP4_HD float e2m1_decode(uint8_t code) {
  const float mag = e2m1_magnitude(code & 0x7u);
  return (code & 0x8u) ? -mag : mag;
}

// Magnitude index of |a| rounded to nearest, ties to the even index; saturates at 6.
// Midpoints: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4, 5->4.
// Branch-free: the index is the number of midpoints a lies above (`<=` midpoints round down to the even
// index, `<` ones up). NaN compares false everywhere and so gives 7, the saturated code.
FP4_HD uint8_t e2m1_rtn_index(float a) {
  return static_cast<uint8_t>(!(a <= 0.25f) + !(a < 0.75f) + !(a <= 1.25f) + !(a < 1.75f) + !(a <= 2.5f) +
                              !(a < 3.5f) + !(a <= 5.0f));
}

FP4_HD uint8_t sign_bit_e2m1(float x) { return (float_bits(x) >> 31) ? 0x8u : 0x0u; }

FP4_HD uint8_t e2m1_encode_rtn(float x) { return sign_bit_e2m1(x) | e2m1_rtn_index(abs_f(x)); }

// Stochastic rounding of |a| (a >= 0, finite): up to the next grid point with probability
// (a - lo) / gap. `random` is 32 uniform bits; the top 24 bits form u in [0, 1).
FP4_HD uint8_t e2m1_sr_index(float a, uint32_t random) {
  if (a >= 6.0f) return 7;
  uint8_t lo_index;
  float lo, inv_gap;  // the gap is a power of two, so multiplying by its inverse is exact
  if (a < 2.0f) {
    lo_index = static_cast<uint8_t>(a * 2.0f);  // exact: a*2 < 4, truncation = floor
    lo = static_cast<float>(lo_index) * 0.5f;
    inv_gap = 2.0f;
  } else if (a < 4.0f) {
    lo_index = a < 3.0f ? 4 : 5;
    lo = a < 3.0f ? 2.0f : 3.0f;
    inv_gap = 1.0f;
  } else {
    lo_index = 6;
    lo = 4.0f;
    inv_gap = 0.5f;
  }
  const float frac = (a - lo) * inv_gap;  // exact: a - lo has no rounding in this binade
  const float u = static_cast<float>(random >> 8) * 5.9604644775390625e-8f;  // * 2^-24
  return static_cast<uint8_t>(lo_index + (u < frac ? 1 : 0));
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
  if ((b & 0x7FFFFFu) != 0) e += 1;       // not a power of two: round the exponent up
  return static_cast<uint8_t>(e > 254 ? 254 : e);
}

// ---------------------------------------------------------------- BF16
FP4_HD uint16_t bf16_bits_rne(float x) {
  const uint32_t u = float_bits(x);
  if (is_nan_f(x)) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

FP4_HD float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

FP4_HD float round_to_bf16(float x) { return bf16_bits_to_float(bf16_bits_rne(x)); }

}  // namespace fp4
