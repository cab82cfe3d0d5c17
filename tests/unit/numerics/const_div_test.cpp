// const_div_rn must be the IEEE quotient RN(x / y) for every divisor the quantizers use: exhaustively over
// the significands of one binade (every other binade down to 2^-90 is an exact power-of-two scaling of it),
// then on random dividends of every exponent; const_div_or_ieee for all x, the tiny ones included.
#include "numerics/const_div.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "numerics/formats.h"
#include "numerics/nvfp4_block.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

// The divisors of quant_common.cuh's make_params: E4M3 bounds and targets of nvfp4_block128_outer and
// nvfp4_scale_block128.
const float kQuantizerDivisors[] = {kE4m3Max, kFourOverSixTensorBound, kNvfp4Target, kNvfp4HeadroomTarget};

TEST(ConstDiv, SplitReciprocalHighPartIsTheRoundedReciprocal) {
  for (float y : kQuantizerDivisors) {
    const ConstDivisor d = make_const_divisor(y);
    EXPECT_EQ(float_bits(d.zh), float_bits(1.0f / y)) << y;
    EXPECT_LT(std::fabs(d.zl), std::fabs(d.zh) * 1.2e-7f) << y;  // below half an ulp of zh
  }
}

TEST(ConstDiv, EqualsIeeeDivisionOnEverySignificand) {
  for (float y : kQuantizerDivisors) {
    const ConstDivisor d = make_const_divisor(y);
    int64_t wrong = 0;
    for (uint32_t m = 0; m < (1u << 23); ++m) {
      const float x = bits_float((127u << 23) | m);  // [1, 2)
      if (float_bits(const_div_rn(x, d)) != float_bits(x / y)) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "divisor " << y;
  }
}

TEST(ConstDiv, EqualsIeeeDivisionOnRandomDividendsOfEveryExponent) {
  FP4_SEEDED_RNG(rng);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF), sign(0, 1);
  std::uniform_int_distribution<uint32_t> exp_exact(37, 254), exp_tiny(0, 36);  // 2^-90 is exponent field 37
  for (float y : kQuantizerDivisors) {
    const ConstDivisor d = make_const_divisor(y);
    for (int i = 0; i < 300'000; ++i) {
      const float x = bits_float((sign(rng) << 31) | (exp_exact(rng) << 23) | mant(rng));
      ASSERT_EQ(float_bits(const_div_rn(x, d)), float_bits(x / y)) << x << " / " << y;
      ASSERT_EQ(float_bits(const_div_or_ieee(x, d)), float_bits(x / y)) << x << " / " << y;
      const float t = bits_float((sign(rng) << 31) | (exp_tiny(rng) << 23) | mant(rng));  // subnormals too
      ASSERT_EQ(float_bits(const_div_or_ieee(t, d)), float_bits(t / y)) << t << " / " << y;
    }
    for (float x : {0.0f, -0.0f, kConstDivMinExact, -kConstDivMinExact, 3.40282347e+38f, 1.17549435e-38f,
                    1.4e-45f, 4.2e-45f}) {
      EXPECT_EQ(float_bits(const_div_or_ieee(x, d)), float_bits(x / y)) << x << " / " << y;
    }
  }
}

TEST(ConstDiv, TheTinyRangeReallyNeedsTheIeeeDivision) {
  // Why const_div_or_ieee exists: 3 * 2^-149 / 6 is a tie that rounds to 0, the constant form gives 2^-149.
  const ConstDivisor d = make_const_divisor(6.0f);
  const float x = 4.203895392974451e-45f;  // 3 * 2^-149
  EXPECT_EQ(x / 6.0f, 0.0f);
  EXPECT_NE(const_div_rn(x, d), 0.0f);
  EXPECT_EQ(const_div_or_ieee(x, d), 0.0f);
}

// The block128 scale steps by constant division against nvfp4_block128_outer / nvfp4_scale_block128's
// quotient, for every recipe setting (Four Over Six's bound 256, sr_headroom's target 96/17): amaxes of every
// exponent, subnormals and zero included, and 16-block amaxes at or below their segment's.
TEST(ConstDiv, Block128ScaleStepsEqualTheReference) {
  FP4_SEEDED_RNG(rng);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF), expo(0, 254);
  std::uniform_real_distribution<float> frac(0.0f, 1.0f);
  for (bool fos : {false, true}) {
    for (float target : {kNvfp4Target, kNvfp4HeadroomTarget}) {
      if (fos && target != kNvfp4Target) continue;  // Four Over Six always maps to 6
      const Block128Divisors d = make_block128_divisors(fos, target);
      for (int i = 0; i < 400'000; ++i) {
        const float amax128 = i == 0 ? 0.0f : bits_float((expo(rng) << 23) | mant(rng));
        const float want_outer = nvfp4_block128_outer(amax128, fos, target);
        const float outer = nvfp4_block128_outer_cd(amax128, d, fos, target);
        ASSERT_EQ(float_bits(outer), float_bits(want_outer)) << "amax128 " << amax128 << " fos " << fos;
        // A 16-block amax at or below the segment's: a fraction of it, or a value of any smaller exponent.
        const float amax16 = (i & 1) ? amax128 * frac(rng) : bits_float((expo(rng) << 23) | mant(rng));
        if (!(amax16 <= amax128)) continue;
        ASSERT_EQ(float_bits(nvfp4_block128_inner_quotient_cd(amax16, outer, d)),
                  float_bits(amax16 / outer / target))
            << "amax16 " << amax16 << " s_out " << outer;
      }
    }
  }
}

}  // namespace
}  // namespace fp4
