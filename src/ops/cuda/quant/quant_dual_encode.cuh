// Element encoding of one 1x16 NVFP4 block for the specialized dual kernel: the same bits as
// nvfp4_encode_block128 / nvfp4_encode_tensor (src/numerics/nvfp4_block.h), written so that the common
// case has no per-element branch and no byte arithmetic. The E2M1 index is kept as "grid bits": the bits
// of a * 2^-126 after rounding, index in bits 22..24 (e2m1_grid_index's form), bits above 24 zero.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/formats.h"
#include "numerics/nvfp4_block.h"
#include "numerics/philox.h"
#include "ops/cuda/quant/quant_common.cuh"

namespace fp4::dual {

inline constexpr float kIndex7Bits = 6.0f * kTwoPowMinus126;  // bits 7 << 22

// e2m1_rtn_index(a) << 22, with zero bits below (a rounded value is a grid point or saturates).
__device__ __forceinline__ uint32_t rtn_grid_bits(float a) {
  const float binade = bits_float(float_bits(a) & 0x7F800000u);
  const float magic = mul_rn(max_f(1.0f, binade), 6291456.0f);
  const float r = mul_rn(add_rn(add_rn(a, magic), -magic), kTwoPowMinus126);
  return float_bits(fminf(r, kIndex7Bits));  // fminf keeps the number: NaN saturates to index 7 as well
}

// e2m1_sr_index(a, random) in bits 22..24 (bits below are left over): with u = random >> 10 and
// c = ~random >> 10 = 2^22 - 1 - u, the carry of s + c out of the low 22 bits is (u < (s & 0x3FFFFF)),
// exactly the reference's round-up decision. a >= 0 (or a NaN without its sign), so s + c cannot wrap.
__device__ __forceinline__ uint32_t sr_grid_bits(float a, uint32_t random) {
  const uint32_t s = float_bits(mul_rn(a, kTwoPowMinus126));
  return min(s + (~random >> 10), 0x01FFFFFFu);
}

// Shifts the codes in w up by one nibble and puts below them the code of grid bits g and the sign of x.
// Elements are pushed last first, so element 0 ends in the low nibble.
__device__ __forceinline__ uint32_t push_code(uint32_t w, uint32_t g, float x) {
  const uint32_t top = (g << 6) | (float_bits(x) & 0x80000000u);  // sign at 31, index at 28..30
  return __funnelshift_l(top, w, 4);                              // (w << 4) | (top >> 28)
}

// The E2M1 value of grid bits g with the sign of x: e2m1_decode of the code push_code stores.
__device__ __forceinline__ float grid_value(uint32_t g, float x) {
  return mul_rn(bits_float((g & 0x01C00000u) | (float_bits(x) & 0x80000000u)), kTwoPow126);
}

// The element loop of encode_block: quot(v[i]) is RN(|v[i]| * e) (block128) and rtn its rounding.
template <bool kB128, bool kSr, bool kWantQ, typename Quotient, typename Rtn>
__device__ __forceinline__ uint2 encode_elements(const float (&v)[16], float mult, const PhiloxStream32& rng,
                                                 uint32_t ctr0, float (&q)[16], Quotient quot, Rtn rtn) {
  uint32_t w[2] = {0, 0};
  Philox4 r[2] = {{{0, 0, 0, 0}}, {{0, 0, 0, 0}}};
  if constexpr (kSr) r[0] = philox_block32(rng, ctr0 >> 1), r[1] = philox_block32(rng, (ctr0 >> 1) + 1);
#pragma unroll
  for (int i = 15; i >= 0; --i) {
    const float x = kB128 ? v[i] : mul_rn(v[i], mult);  // the value whose sign the code carries
    const float a = kB128 ? quot(v[i]) : fabsf(x);
    const uint32_t gb = kSr ? sr_grid_bits(a, sr16_word(r[i >> 3], i)) : rtn(a);
    w[i >> 3] = push_code(w[i >> 3], gb, x);
    if constexpr (kWantQ) q[i] = grid_value(gb, x);
  }
  return make_uint2(w[0], w[1]);
}

// Codes of a block (8 bytes, low nibble = element 0) and, when asked, the E2M1 values q of those codes.
// mult is p = s_in * s_out (block128) or e_b (tensor). ctr0 = (operand index of element 0) / 4: the SR
// words (16 bits each, philox_sr_word) come from Philox blocks ctr0 / 2 and ctr0 / 2 + 1. The 32-bit counter
// (the host checks that the operand has fewer than 2^34 elements) lets the stream's share of the Philox
// rounds be computed once (philox_block32); the words are the same. Block128 magnitudes are RN(|x| * e)
// with the block's encode multiplier e = block128_encode_multiplier(p) (nvfp4_block.h); with `direct`
// (qk::block128_direct: a normal scale code, the common case) they stay below 6.4 and RTN needs no
// saturation. A NaN p (the NaN scale of a non-finite block) gives NaN magnitudes, code index 7.
// kDirect = false compiles the direct form out: an unrolled caller would carry both element loops per copy
// (the aligned column pass's four kept blocks grew from 6.7k to 10.7k instructions and ran 1.5x slower).
template <bool kB128, bool kSr, bool kWantQ, bool kDirect = true>
__device__ __forceinline__ uint2 encode_block(float (&v)[16], float mult, bool direct,
                                              const PhiloxStream32& rng, uint32_t ctr0, float (&q)[16]) {
  const float e = kB128 ? block128_encode_multiplier(mult) : mult;
  if constexpr (kB128 && kDirect) {
    if (direct) {
      return encode_elements<true, kSr, kWantQ>(
          v, mult, rng, ctr0, q, [&](float x) { return mul_rn(fabsf(x), e); },
          [](float a) { return e2m1_rtn_bits_below7(a); });
    }
  }
  return encode_elements<kB128, kSr, kWantQ>(
      v, mult, rng, ctr0, q, [&](float x) { return mul_rn(fabsf(x), e); },
      [](float a) { return rtn_grid_bits(a); });
}

}  // namespace fp4::dual
