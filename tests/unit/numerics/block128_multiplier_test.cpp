// The block128 encode multiplier (RECIPES.md section 2, [ours, 2026-12-02]): e = min(RN(1/p), FLT_MAX), codes
// E2M1(RN(|x| * e)). Checks e against an independent reciprocal over every exponent (zero, subnormal, huge
// and NaN divisors included), and measures what the form changes against the true quotient E2M1(RN(|x| / p)):
// on the quantizer's own blocks the codes differ by one grid step at most, rarely on random data, more often
// on tie-heavy data built on the rounding boundaries (the figures docs/NUMERICS.md records).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "numerics/formats.h"
#include "numerics/nvfp4_block.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

constexpr float kFltMax = 3.40282347e+38f;

// min(1/p, FLT_MAX) through double: 1/p in double carries 53 bits, so rounding it to float gives the
// correctly rounded reciprocal except within 2^-53 of a float midpoint (never met by random draws here).
float ref_multiplier(float p) {
  if (std::isnan(p)) return p;
  if (p == 0.0f) return kFltMax;
  return std::min(static_cast<float>(1.0 / static_cast<double>(p)), kFltMax);
}

TEST(Block128Multiplier, IsTheRoundedReciprocalClampedToFltMax) {
  FP4_SEEDED_RNG(rng);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF);
  std::uniform_int_distribution<int> ep(0, 254);  // exponent 0: the subnormals
  for (int i = 0; i < 2'000'000; ++i) {
    const float p = bits_float((static_cast<uint32_t>(ep(rng)) << 23) | mant(rng));
    ASSERT_EQ(float_bits(block128_encode_multiplier(p)), float_bits(ref_multiplier(p))) << p;
  }
  EXPECT_EQ(block128_encode_multiplier(0.0f), kFltMax);
  EXPECT_EQ(block128_encode_multiplier(1.4e-45f), kFltMax);  // 1/p overflows
  EXPECT_EQ(block128_encode_multiplier(2.9387359e-39f), kFltMax);
  EXPECT_EQ(block128_encode_multiplier(0.375f), 1.0f / 0.375f);
  EXPECT_EQ(block128_encode_multiplier(kFltMax), 1.0f / kFltMax);  // a subnormal reciprocal
  EXPECT_EQ(block128_encode_multiplier(INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(block128_encode_multiplier(std::nanf(""))));
}

TEST(Block128Multiplier, ElementCodesAreE2m1OfTheScaledMagnitude) {
  FP4_SEEDED_RNG(rng);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> word;
  std::uniform_real_distribution<float> lp(-40.0f, 40.0f);
  for (int i = 0; i < 200'000; ++i) {
    const float p = std::exp2(lp(rng)), x = n(rng) * 6.0f * p, e = block128_encode_multiplier(p);
    const uint32_t w = word(rng);
    const float a = std::fabs(x) * e;
    const uint8_t sign = std::signbit(x) ? 8 : 0;
    ASSERT_EQ(nvfp4_encode_block128(x, e, false, 0), sign | e2m1_rtn_index(a)) << x << " " << p;
    ASSERT_EQ(nvfp4_encode_block128(x, e, true, w), sign | e2m1_sr_index(a, w)) << x << " " << p;
  }
  // Zeros keep their sign; a NaN multiplier (a non-finite block's NaN scale) gives index 7; p == 0
  // (e = FLT_MAX) saturates nonzero magnitudes, whose dequantized value q * p is 0 either way.
  EXPECT_EQ(nvfp4_encode_block128(-0.0f, 2.0f, false, 0), 8);
  EXPECT_EQ(nvfp4_encode_block128(0.0f, kFltMax, true, 0), 0);
  EXPECT_EQ(nvfp4_encode_block128(1.0f, std::nanf(""), false, 0), 7);
  EXPECT_EQ(nvfp4_encode_block128(-1e-30f, block128_encode_multiplier(0.0f), false, 0), 8 | 7);
}

// One quantizer 16-block of the given values: its scale, p and the codes of both forms (RTN and SR with the
// same words); counts the elements whose code differs and checks each difference is one grid step.
struct Diff {
  int64_t elements = 0, rtn = 0, sr = 0;
};

void compare_block(const float (&v)[16], float s_out, std::mt19937_64& rng, Diff& d) {
  float amax16 = 0.0f;
  for (float x : v) amax16 = std::max(amax16, std::fabs(x));
  const uint8_t s = nvfp4_scale_block128(amax16, s_out, 6.0f);
  const float p = e4m3_decode(s) * s_out;
  const float e = block128_encode_multiplier(p);
  std::uniform_int_distribution<uint32_t> word;
  for (float x : v) {
    const float quotient = p == 0.0f ? 0.0f : std::fabs(x) / p;
    const uint32_t w = word(rng);
    const int rtn_m = nvfp4_encode_block128(x, e, false, 0) & 7, rtn_q = e2m1_rtn_index(quotient);
    const int sr_m = nvfp4_encode_block128(x, e, true, w) & 7, sr_q = e2m1_sr_index(quotient, w);
    ASSERT_LE(std::abs(rtn_m - rtn_q), 1) << x << " / " << p;
    ASSERT_LE(std::abs(sr_m - sr_q), 1) << x << " / " << p;
    d.rtn += rtn_m != rtn_q;
    d.sr += sr_m != sr_q;
    ++d.elements;
  }
}

TEST(Block128Multiplier, CodesDifferFromTheTrueQuotientRarelyOnRandomData) {
  FP4_SEEDED_RNG(rng);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> lscale(-30.0f, 30.0f);
  Diff d;
  for (int b = 0; b < 400'000; ++b) {
    const float scale = std::exp2(lscale(rng));
    float v[16];
    for (float& x : v) x = n(rng) * scale;
    // s_out as the quantizer forms it from a 128-block whose amax is at most 4x this block's.
    float amax16 = 0.0f;
    for (float x : v) amax16 = std::max(amax16, std::fabs(x));
    const float s_out = nvfp4_block128_outer(amax16 * (1.0f + 3.0f * (b % 7) / 6.0f), false, 6.0f);
    compare_block(v, s_out, rng, d);
  }
  std::printf(
      "block128 multiplier vs quotient, random Gaussian blocks: %lld elements, RTN codes differ %lld "
      "(%.2e), SR %lld (%.2e)\n",
      static_cast<long long>(d.elements), static_cast<long long>(d.rtn), double(d.rtn) / d.elements,
      static_cast<long long>(d.sr), double(d.sr) / d.elements);
  EXPECT_LE(double(d.rtn) / d.elements, 1e-5);
  EXPECT_LE(double(d.sr) / d.elements, 1e-5);
}

TEST(Block128Multiplier, CodesOnTieHeavyDataDifferByOneStepAtMost) {
  // Elements on the RTN boundaries of their block: x = RN(m * p) for the E2M1 midpoints m (0.25, 0.75,
  // 1.25, 1.75, 2.5, 3.5, 5) and one ulp either side, so the two forms' last-bit differences decide ties.
  FP4_SEEDED_RNG(rng);
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::uniform_real_distribution<float> lscale(-30.0f, 30.0f), u(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 6), off(-1, 1);
  Diff d;
  for (int b = 0; b < 100'000; ++b) {
    // A block whose amax is 6 * p (so its scale is exact and p known): p = s_in * s_out.
    const float s_out = std::exp2(lscale(rng));
    const float s_in = e4m3_decode(static_cast<uint8_t>(0x08 + static_cast<int>(u(rng) * 0x60)));
    const float p = s_in * s_out;
    float v[16];
    v[0] = 6.0f * p;
    for (int i = 1; i < 16; ++i) {
      const float x = mids[pick(rng)] * p;
      const int o = off(rng);
      v[i] = o == 0 ? x : std::nextafter(x, o > 0 ? INFINITY : 0.0f);
      if (u(rng) < 0.5f) v[i] = -v[i];
    }
    compare_block(v, s_out, rng, d);
  }
  std::printf(
      "block128 multiplier vs quotient, tie-heavy blocks: %lld elements, RTN codes differ %lld "
      "(%.2e), SR %lld (%.2e)\n",
      static_cast<long long>(d.elements), static_cast<long long>(d.rtn), double(d.rtn) / d.elements,
      static_cast<long long>(d.sr), double(d.sr) / d.elements);
  EXPECT_GT(d.elements, 0);
}

}  // namespace
}  // namespace fp4
