// The NVFP4 quantizer of RECIPES.md section 2, one 16-element block at a time, as __host__ __device__
// functions. The CPU reference (quantize_cpu.cpp) and every CUDA kernel call exactly these, so their
// results are bit-identical. All arithmetic is IEEE FP32 in the order the specification writes it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "numerics/const_div.h"
#include "numerics/formats.h"
#include "numerics/hd.h"

namespace fp4 {

inline constexpr float kNvfp4Target = 6.0f;                   // block maximum maps to the E2M1 maximum
inline constexpr float kNvfp4HeadroomTarget = 96.0f / 17.0f;  // sr_headroom (Quartet II): 6 * 16/17
inline constexpr float kFourOverSixTensorBound = 256.0f;      // E4M3 bound of the tensor scale with 4/6

// ------------------------------------------------------------------ per-tensor ("tensor") outer scale
struct TensorScale {
  float s_enc = 1.0f;  // (448 * target) / amax
  float s_dec = 1.0f;  // 1 / s_enc
};

// As TransformerEngine's reference: S_enc = (bound * target) / amax, min(S_enc, FLT_MAX), 0 -> 1.
FP4_HD TensorScale nvfp4_tensor_scale(float amax, bool four_over_six, float target) {
  const float bound = four_over_six ? kFourOverSixTensorBound : kE4m3Max;
  const float t = four_over_six ? kNvfp4Target : target;
  float s_enc = (bound * t) / amax;
  s_enc = min_f(s_enc, kFloatMax);
  if (s_enc == 0.0f) s_enc = 1.0f;
  return TensorScale{s_enc, 1.0f / s_enc};
}

// Encode multiplier of a block from its *rounded* E4M3 scale: min(1 / (s_b * S_dec), FLT_MAX).
FP4_HD float nvfp4_encode_multiplier(uint8_t scale_code, float s_dec) {
  return min_f(1.0f / (e4m3_decode(scale_code) * s_dec), kFloatMax);
}

FP4_HD float clamp6(float v) {
  return max_f(-kE2m1Max, min_f(v, kE2m1Max));
}

// Standard scale of a block (or 16x16 tile) with amax16: E4M3_RNE(min(amax16 * (S_enc * (1/target)), 448)).
FP4_HD uint8_t nvfp4_scale_tensor(float amax16, const TensorScale& ts, float target) {
  const float mult = ts.s_enc * (1.0f / target);  // the multiplier is formed first
  return e4m3_encode(min_f(amax16 * mult, kE4m3Max));
}

// Four Over Six on a 1x16 block, tensor outer scale: map the block max to 4 or to 6, keep the candidate
// with the lower squared error (ties -> 6). `amax` is the tensor amax.
FP4_HD uint8_t nvfp4_scale_tensor_4o6(const float* v, float amax16, float amax, const TensorScale& ts) {
  const float base = (amax16 / 6.0f) * ts.s_enc;
  const uint8_t s4 = e4m3_encode(min_f(base * 1.5f, kE4m3Max));
  const uint8_t s6 = e4m3_encode(min_f(base, kE4m3Max));
  float err[2] = {0.0f, 0.0f};
  const uint8_t cand[2] = {s4, s6};
  FP4_UNROLL
  for (int c = 0; c < 2; ++c) {
    const float s = e4m3_decode(cand[c]);
    const float e = nvfp4_encode_multiplier(cand[c], ts.s_dec);
    FP4_UNROLL
    for (int i = 0; i < 16; ++i) {
      const float q = e2m1_decode(e2m1_encode_rtn(clamp6(v[i] * e)));
      const float d = add_rn(mul_rn(mul_rn(q, s), amax) / 1536.0f, -v[i]);
      err[c] = add_rn(err[c], mul_rn(d, d));
    }
  }
  return err[0] < err[1] ? s4 : s6;
}

// Element code with a tensor outer scale: E2M1(clamp(x * e_b, -6, 6)), RTN or SR. The index functions
// saturate at 6 themselves, so the clamp is implicit; a NaN element keeps its own sign bit (its block's
// scale is the NaN code and the element is counted as non-finite).
FP4_HD uint8_t nvfp4_encode_tensor(float x, float e_b, bool stochastic, uint32_t random) {
  const float v = mul_rn(x, e_b);
  return stochastic ? e2m1_encode_sr(v, random) : e2m1_encode_rtn(v);
}

// e2m1_decode(nvfp4_encode_tensor(x, e_b, true, random)) without forming the code, for kernels that want
// the value: in e2m1_sr_index's scaled form (|v| * 2^-126: index in bits 22-24, fraction below) rounding up
// adds one to the index field and the fraction is dropped, so those bits with v's sign are the grid value
// times 2^-126 (e2m1_decode's form); the min saturates above 6, inf and NaN to 6 as the index's min(7) does.
FP4_HD float nvfp4_sr_value_tensor(float x, float e_b, uint32_t random) {
  const float v = mul_rn(x, e_b);
  const uint32_t s = float_bits(mul_rn(abs_for_mul(v), kTwoPowMinus126));
  const uint32_t up = (random >> 10) < (s & 0x3FFFFFu) ? (1u << 22) : 0u;
  const uint32_t grid = (s & ~0x3FFFFFu) + up;
  const uint32_t sat = std::min(grid, 7u << 22);
  return mul_rn(bits_float(sat | (float_bits(v) & 0x80000000u)), kTwoPow126);
}

// Dequantized value with a tensor outer scale: (q * s_b) * S_dec.
FP4_HD float nvfp4_decode_tensor(uint8_t code, uint8_t scale_code, float s_dec) {
  return (e2m1_decode(code) * e4m3_decode(scale_code)) * s_dec;
}

// ------------------------------------------------------------------ per-1x128 ("block128") outer scale
// s_out = amax128 / bound / target (two divisions, left to right), not rounded; 0 -> 1.
FP4_HD float nvfp4_block128_outer(float amax128, bool four_over_six, float target) {
  const float bound = four_over_six ? kFourOverSixTensorBound : kE4m3Max;
  const float t = four_over_six ? kNvfp4Target : target;
  float s_out = amax128 / bound / t;
  if (s_out == 0.0f) s_out = 1.0f;
  return s_out;
}

// Inner scale: t = amax16 / s_out / target; E4M3_RNE(t); t == 0 -> 2^-9 (code 0x01).
FP4_HD uint8_t nvfp4_scale_block128(float amax16, float s_out, float target) {
  const float t = amax16 / s_out / target;
  return t == 0.0f ? uint8_t{0x01} : e4m3_encode(t);
}

// The same two scale steps by constant divisions (const_div.h), bit for bit: the divisors of
// nvfp4_block128_outer (the E4M3 bound, then its target) and nvfp4_scale_block128's target. The GPU kernels
// use these; tests/unit/numerics/const_div_test.cpp compares them with the two functions above.
struct Block128Divisors {
  ConstDivisor bound, outer_target, target;
};

inline Block128Divisors make_block128_divisors(bool four_over_six, float target) {
  return Block128Divisors{make_const_divisor(four_over_six ? kFourOverSixTensorBound : kE4m3Max),
                          make_const_divisor(four_over_six ? kNvfp4Target : target),
                          make_const_divisor(target)};
}

inline constexpr float kOuterConstDivMin = 8.271806125530277e-25f;  // 2^-80: amax128 / bound stays >= 2^-90

// nvfp4_block128_outer(amax128, four_over_six, target) for a finite amax128 >= 0; one below 2^-80 (but not
// 0) takes that function itself, whose first quotient would leave const_div_rn's exact range.
FP4_HD float nvfp4_block128_outer_cd(float amax128, const Block128Divisors& d, bool four_over_six,
                                     float target) {
  if (!(amax128 >= kOuterConstDivMin || amax128 == 0.0f))
    return nvfp4_block128_outer(amax128, four_over_six, target);
  const float s = const_div_rn(const_div_rn(amax128, d.bound), d.outer_target);
  return s == 0.0f ? 1.0f : s;
}

// The quotient t = amax16 / s_out / target of nvfp4_scale_block128 (finite amax16 >= 0, s_out > 0).
FP4_HD float nvfp4_block128_inner_quotient_cd(float amax16, float s_out, const Block128Divisors& d) {
  return const_div_or_ieee(amax16 / s_out, d.target);
}

// The encode multiplier of a block128 16-block (RECIPES.md section 2, [ours, 2026-12-02]): e = min(RN(1/p),
// FLT_MAX) from the rounded p = s_in * s_out, formed once per 16-block; an element's scaled magnitude is then
// RN(|x| * e) instead of the quotient RN(|x| / p). A NaN p (a non-finite block's NaN scale) gives a NaN e and
// NaN magnitudes (code index 7); p == 0 gives e = FLT_MAX (dequantized values q * p are 0 either way).
// docs/NUMERICS.md records how often the codes differ from the true quotient's
// (tests/unit/numerics/block128_multiplier_test.cpp).
FP4_HD float block128_encode_multiplier(float p) {
#if defined(__CUDA_ARCH__)
  return min_f(__frcp_rn(p), kFloatMax);  // RN(1/p), the value of 1.0f / p
#else
  return min_f(1.0f / p, kFloatMax);
#endif
}

// Whether p is a divisor the GPU's direct block path takes (kept as a range: the path's RTN without
// saturation also needs a normal scale code, quant_common.cuh block128_direct).
FP4_HD bool block128_direct_ok(float p) {
  return p >= 5.421010862427522e-20f && p <= 1.8446744073709552e+19f;
}

// Element code with block128 scales: E2M1(RN(|x| * e)), e = block128_encode_multiplier(p), sign restored.
FP4_HD uint8_t nvfp4_encode_block128(float x, float e, bool stochastic, uint32_t random) {
  const uint8_t sign = sign_bit_e2m1(x);
  const float a = mul_rn(abs_f(x), e);
  return sign | (stochastic ? e2m1_sr_index(a, random) : e2m1_rtn_index(a));
}

// Four Over Six with block128 scales: as the tensor form, with s_out in place of S_dec. The error of a
// candidate is measured against its dequantized value q * (s * s_out).
FP4_HD uint8_t nvfp4_scale_block128_4o6(const float* v, float amax16, float s_out) {
  const float base = amax16 / s_out / 6.0f;
  const uint8_t s4 = e4m3_encode(min_f(base * 1.5f, kE4m3Max));
  const uint8_t s6 = e4m3_encode(min_f(base, kE4m3Max));
  float err[2] = {0.0f, 0.0f};
  const uint8_t cand[2] = {s4, s6};
  FP4_UNROLL
  for (int c = 0; c < 2; ++c) {
    const float p = e4m3_decode(cand[c]) * s_out;
    const float e = block128_encode_multiplier(p);
    FP4_UNROLL
    for (int i = 0; i < 16; ++i) {
      const float q = e2m1_decode(nvfp4_encode_block128(v[i], e, false, 0));
      const float d = add_rn(mul_rn(q, p), -v[i]);
      err[c] = add_rn(err[c], mul_rn(d, d));
    }
  }
  return err[0] < err[1] ? s4 : s6;
}

FP4_HD float nvfp4_decode_block128(uint8_t code, uint8_t scale_code, float s_out) {
  return e2m1_decode(code) * (e4m3_decode(scale_code) * s_out);
}

// ------------------------------------------------------------------ helpers shared by the tensor loops
// Max |v| over finite elements, and whether any element is NaN or infinite. The common all-finite case
// costs one max and one multiply-add per element: v * 0 is 0 for finite v and NaN for NaN or inf.
FP4_HD float amax_finite16(const float* v, bool& nonfinite) {
  float m = 0.0f, probe = 0.0f;
  FP4_UNROLL
  for (int i = 0; i < 16; ++i) {
    m = max_nonnan(m, abs_f(v[i]));
#if defined(__CUDA_ARCH__)
    probe = fma_rn(v[i], 0.0f, probe);
#else
    probe += v[i] * 0.0f;  // the same value as the fused form: v * 0 is exact
#endif
  }
  if (probe == probe) return m;
  nonfinite = true;
  m = 0.0f;
  FP4_UNROLL
  for (int i = 0; i < 16; ++i)
    if (is_finite_f(v[i])) m = max_f(m, abs_f(v[i]));
  return m;
}

FP4_HD uint8_t pack_e2m1(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xF) | (odd << 4));
}

}  // namespace fp4
