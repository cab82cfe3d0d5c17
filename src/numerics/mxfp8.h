// MXFP8 (RECIPES.md section 1): E4M3 elements with one UE8M0 scale per 32 elements along the reduction
// dimension, scale = 2^ceil(log2(amax32 / 448)) (rounded up so the block maximum does not overflow).
#pragma once

#include <cstdint>

#include "numerics/formats.h"
#include "numerics/hd.h"

namespace fp4 {

inline constexpr int kMxfp8Block = 32;

// Scale exponent code of a block from its finite amax. amax == 0 gives code 0 (2^-127): the block is 0.
FP4_HD uint8_t mxfp8_scale_code(float amax32) {
  return ue8m0_ceil_log2(amax32 / kE4m3Max);
}

// Element: E4M3_RNE_satfinite(x / 2^e). Division by a power of two is exact unless it underflows, where
// IEEE rounding is the same on every implementation.
FP4_HD uint8_t mxfp8_encode(float x, uint8_t scale_code) {
  return e4m3_encode(x / ue8m0_decode(scale_code));
}

FP4_HD float mxfp8_decode(uint8_t code, uint8_t scale_code) {
  return e4m3_decode(code) * ue8m0_decode(scale_code);
}

}  // namespace fp4
