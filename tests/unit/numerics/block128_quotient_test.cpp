// block128_quotient (reciprocal + two residual corrections) must equal the IEEE division a / p that
// RECIPES.md section 2 specifies, on random pairs over the whole exponent range and on hard cases, and
// give the same E2M1 codes (RTN and SR) everywhere, including where its last bits may differ.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "numerics/nvfp4_block.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

void expect_division(float a, float p) {
  const float got = block128_quotient(a, block128_divisor(p));
  const float want = a / p;
  ASSERT_EQ(e2m1_rtn_index(std::fabs(got)), e2m1_rtn_index(std::fabs(want))) << a << " / " << p;
  ASSERT_EQ(e2m1_sr_index(std::fabs(got), 0x12345678u), e2m1_sr_index(std::fabs(want), 0x12345678u))
      << a << " / " << p;
  // Bits may differ only for quotients below 2^-100 (the residual underflows) or above 2^100 (a 2^-e may
  // overflow; the quantizer's quotients are below 8).
  if (!(std::fabs(want) >= 7.888609052210118e-31f && std::fabs(want) < 1.2676506002282294e+30f)) return;
  ASSERT_EQ(float_bits(got), float_bits(want)) << a << " / " << p;
}

TEST(Block128Quotient, EqualsIeeeDivisionOnRandomPairs) {
  FP4_SEEDED_RNG(rng);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF), sign(0, 1);
  std::uniform_int_distribution<int> ea(1, 254), ep(1, 254);
  for (int i = 0; i < 4'000'000; ++i) {
    const float a = bits_float((sign(rng) << 31) | (static_cast<uint32_t>(ea(rng)) << 23) | mant(rng));
    const float p = bits_float((static_cast<uint32_t>(ep(rng)) << 23) | mant(rng));
    expect_division(a, p);
  }
}

TEST(Block128Quotient, EqualsIeeeDivisionInTheQuantizersRange) {
  // The quantizer divides |x| <= amax16 by p ~ amax16 / 6: quotients in [0, ~7], divisors near the data.
  FP4_SEEDED_RNG(rng);
  std::uniform_real_distribution<float> q(0.0f, 7.0f);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF);
  std::uniform_int_distribution<int> ep(2, 252);
  for (int i = 0; i < 4'000'000; ++i) {
    const float p = bits_float((static_cast<uint32_t>(ep(rng)) << 23) | mant(rng));
    expect_division(q(rng) * p, p);
  }
}

TEST(Block128Quotient, HardCases) {
  // Divisors with all-ones or single-bit significands, dividends at significand extremes, midpoints,
  // the edges of the reciprocal path's range and the division fallback outside it.
  const float divisors[] = {1.0f,
                            3.0f,
                            0.99999994f,
                            1.99999988f,
                            1.00000012f,
                            6.0f,
                            448.0f,
                            1.0f / 3.0f,
                            1.1754943508222875e-38f,
                            8.5070591730234616e+37f,
                            1e-39f,
                            1e38f,
                            3e-45f};
  const float dividends[] = {0.0f,  1.0f, 16777215.0f, 8388607.5f,      1.99999988f, 0.25f,
                             0.75f, 5.0f, 6.0f,        3.40282347e+38f, 1e-30f,      1.4e-45f};
  for (float p : divisors)
    for (float a : dividends) {
      expect_division(a, p);
      expect_division(-a, p);
    }
  EXPECT_EQ(block128_divisor(0.0f).r, 0.0f);
  EXPECT_EQ(block128_divisor(1e-39f).r, 0.0f);         // subnormal divisor: the fallback divides
  EXPECT_EQ(block128_divisor(1e38f).r, 0.0f);          // beyond 2^126
  const Block128Divisor d = block128_divisor(0.375f);  // 1.5 * 2^-2
  EXPECT_EQ(d.m, 1.5f);
  EXPECT_EQ(d.scale, 4.0f);
}

// block128_quotient_direct (the divisor as it is) against the reference form: the same E2M1 codes (RTN and
// SR with random words) everywhere in its range, the same bits wherever the quotient can reach a nonzero
// code (q >= 2^-25).
void expect_direct_matches(float a, float p, uint32_t word) {
  const float want = block128_quotient(a, block128_divisor(p));
  const float got = block128_quotient_direct(a, block128_recip(p));
  ASSERT_EQ(e2m1_rtn_index(got), e2m1_rtn_index(want)) << a << " / " << p;
  ASSERT_EQ(e2m1_sr_index(got, word), e2m1_sr_index(want, word)) << a << " / " << p << " word " << word;
  if (want >= 2.9802322387695312e-8f) {
    ASSERT_EQ(float_bits(got), float_bits(want)) << a << " / " << p;
  }
}

TEST(Block128QuotientDirect, RangeIsTwoToThePlusMinus64) {
  EXPECT_TRUE(block128_direct_ok(5.421010862427522e-20f));   // 2^-64
  EXPECT_TRUE(block128_direct_ok(1.8446744073709552e+19f));  // 2^64
  EXPECT_FALSE(block128_direct_ok(5.4210105e-20f));
  EXPECT_FALSE(block128_direct_ok(1.8446746e+19f));
  EXPECT_FALSE(block128_direct_ok(0.0f));
  EXPECT_FALSE(block128_direct_ok(std::nanf("")));
}

TEST(Block128QuotientDirect, EqualsTheReferenceFormOnQuantizerQuotients) {
  FP4_SEEDED_RNG(rng);
  std::uniform_real_distribution<float> q(0.0f, 7.0f);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF), word;
  std::uniform_int_distribution<int> ep(127 - 64, 127 + 63);  // p in [2^-64, 2^64)
  for (int i = 0; i < 3'000'000; ++i) {
    const float p = bits_float((static_cast<uint32_t>(ep(rng)) << 23) | mant(rng));
    expect_direct_matches(q(rng) * p, p, word(rng));
  }
}

TEST(Block128QuotientDirect, EqualsTheReferenceFormOnSmallAndSubnormalDividends) {
  // Elements far below their block's scale: quotients down to nothing, dividends down to the subnormals.
  FP4_SEEDED_RNG(rng);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF), word;
  std::uniform_int_distribution<int> ep(127 - 64, 127 + 63), ea(0, 200);
  for (int i = 0; i < 3'000'000; ++i) {
    const float p = bits_float((static_cast<uint32_t>(ep(rng)) << 23) | mant(rng));
    const float a = bits_float((static_cast<uint32_t>(ea(rng)) << 23) | mant(rng));
    if (!(a / p < 7.0f)) continue;
    expect_direct_matches(a, p, word(rng));
  }
  // Quotients at the E2M1 midpoints and the SR threshold 2^-24 (q * 2^-126 = half the least subnormal).
  const float ps[] = {5.421010862427522e-20f, 1.0f, 0.375f, 3.0f, 1.8446744073709552e+19f, 6.0f / 448.0f};
  const float qs[] = {0.25f,
                      0.75f,
                      1.25f,
                      1.75f,
                      2.5f,
                      3.5f,
                      5.0f,
                      6.0f,
                      6.375f,
                      5.9604644775390625e-8f,
                      2.9802322387695312e-8f,
                      1.4e-45f};
  for (float p : ps)
    for (float qv : qs)
      for (int ulps = -3; ulps <= 3; ++ulps) {
        const float a = bits_float(static_cast<uint32_t>(static_cast<int32_t>(float_bits(qv * p)) + ulps));
        expect_direct_matches(a, p, 0u);
        expect_direct_matches(a, p, 0xFFFFFFFFu);
        expect_direct_matches(a, p, 0x80000000u);
      }
}

TEST(E2m1RtnBitsBelow7, EqualsTheReferenceIndexOnEveryFloatFrom2ToTheMinus30To7) {
  int64_t wrong = 0;
  for (uint32_t b = 97u << 23; bits_float(b) < 7.0f; ++b)
    if (e2m1_rtn_bits_below7(bits_float(b)) != static_cast<uint32_t>(e2m1_rtn_index(bits_float(b))) << 22)
      ++wrong;
  EXPECT_EQ(wrong, 0);
  for (float a : {0.0f, 1.4e-45f, 1e-38f, 9.3e-10f})  // below 2^-30: index 0
    EXPECT_EQ(e2m1_rtn_bits_below7(a), 0u) << a;
}

}  // namespace
}  // namespace fp4
