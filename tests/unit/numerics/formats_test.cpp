// E2M1, E4M3, UE8M0 and BF16 against independent slow references (numerics/formats.h).
#include "numerics/formats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "numerics_test_util.h"

namespace fp4 {
namespace {

using test::kE2m1Grid;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// A float with uniformly random bits: every class (NaN, inf, subnormal, huge) appears.
float random_bits_float(std::mt19937_64& g) {
  return bits_float(static_cast<uint32_t>(g()));
}

TEST(E2m1, EveryCodeDecodesToItsGridValueAndRoundTrips) {
  for (int code = 0; code < 16; ++code) {
    const float v = e2m1_decode(static_cast<uint8_t>(code));
    const float mag = kE2m1Grid[code & 7];
    EXPECT_EQ(std::fabs(v), mag) << "code " << code;
    EXPECT_EQ(std::signbit(v), (code & 8) != 0) << "code " << code;  // 0x8 is -0
    EXPECT_EQ(e2m1_encode_rtn(v), code) << "code " << code;
    EXPECT_EQ(e2m1_encode_sr(v, 0xFFFFFFFFu), code) << "grid value must survive SR, code " << code;
    EXPECT_EQ(e2m1_encode_sr(v, 0u), code) << "code " << code;
  }
}

TEST(E2m1, RoundToNearestTiesAsRecipes) {
  // RECIPES.md section 1: ties go to the even code.
  const std::pair<float, float> ties[] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                                          {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f}};
  for (auto [x, want] : ties) {
    EXPECT_EQ(e2m1_decode(e2m1_encode_rtn(x)), want) << x;
    EXPECT_EQ(e2m1_decode(e2m1_encode_rtn(-x)), -want) << -x;
    // One ulp to either side leaves the tie and goes to the nearer neighbour.
    EXPECT_GT(e2m1_decode(e2m1_encode_rtn(std::nextafter(x, kInf))), x);
    EXPECT_LT(e2m1_decode(e2m1_encode_rtn(std::nextafter(x, 0.0f))), x);
  }
  for (float big : {6.0f, 6.5f, 7.0f, 100.0f, 3e38f, kInf}) {
    EXPECT_EQ(e2m1_encode_rtn(big), 0x7) << big;
    EXPECT_EQ(e2m1_encode_rtn(-big), 0xF) << -big;
  }
  EXPECT_EQ(e2m1_encode_rtn(-0.0f), 0x8);
  EXPECT_EQ(e2m1_encode_rtn(-0.1f), 0x8);  // rounds to -0: the sign is kept
}

TEST(E2m1, RoundToNearestMatchesReference) {
  FP4_SEEDED_RNG(g);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::vector<float> xs;
  for (int i = 0; i < 1000000; ++i) xs.push_back(u(g));
  for (int i = 0; i < 7; ++i) {  // every midpoint and its float neighbours
    const float mid = 0.5f * (kE2m1Grid[i] + kE2m1Grid[i + 1]);
    for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      xs.push_back(m);
      xs.push_back(-m);
    }
  }
  for (float x : xs) {
    const int want = (std::signbit(x) ? 8 : 0) | test::ref_e2m1_index(std::fabs(x));
    ASSERT_EQ(e2m1_encode_rtn(x), want) << "x = " << x;
  }
}

TEST(E4m3, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const float v = e4m3_decode(static_cast<uint8_t>(code));
    const double want = test::ref_e4m3_value(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << "code " << code;
    } else {
      EXPECT_EQ(static_cast<double>(v), want) << "code " << code;
    }
    EXPECT_EQ(std::signbit(v), (code & 0x80) != 0) << "code " << code;
    EXPECT_EQ(e4m3_encode(v), code) << "code " << code;
  }
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));
}

TEST(E4m3, EncodeIsRneSatfiniteAgainstReference) {
  FP4_SEEDED_RNG(g);
  std::vector<float> xs;
  for (int i = 0; i < 1500000; ++i) xs.push_back(random_bits_float(g));
  // Log-uniform magnitudes over the whole E4M3 range, subnormals included.
  std::uniform_real_distribution<float> lg(-13.0f, 10.0f);
  for (int i = 0; i < 1500000; ++i) xs.push_back(std::exp2(lg(g)) * (g() & 1 ? -1.0f : 1.0f));
  // Every midpoint between neighbouring finite magnitudes, and one float to either side of it.
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>(0.5 * (test::ref_e4m3_value(c) + test::ref_e4m3_value(c + 1)));
    ASSERT_EQ(static_cast<double>(mid), 0.5 * (test::ref_e4m3_value(c) + test::ref_e4m3_value(c + 1)));
    for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      xs.push_back(m);
      xs.push_back(-m);
    }
  }
  for (float big : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 3e38f, kInf})
    for (float s : {1.0f, -1.0f}) xs.push_back(s * big);
  xs.push_back(kNan);
  xs.push_back(-kNan);
  xs.push_back(0.0f);
  xs.push_back(-0.0f);
  for (float x : xs)
    ASSERT_EQ(e4m3_encode(x), test::ref_e4m3_encode(x)) << "x = " << x << " bits " << float_bits(x);
}

TEST(E4m3, EdgeValues) {
  EXPECT_EQ(e4m3_encode(kInf), 0x7E);
  EXPECT_EQ(e4m3_encode(-kInf), 0xFE);
  EXPECT_EQ(e4m3_encode(kNan), 0x7F);
  EXPECT_EQ(e4m3_encode(-kNan), 0xFF);
  EXPECT_EQ(e4m3_encode(1e30f), 0x7E);
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);   // tie between 0 and 2^-9 -> 0 (even)
  EXPECT_EQ(e4m3_encode(std::ldexp(3.0f, -10)), 0x02);   // tie between 2^-9 and 2*2^-9 -> 2 (even)
  EXPECT_EQ(e4m3_encode(std::ldexp(15.0f, -10)), 0x08);  // tie between 7*2^-9 and 2^-6 -> 2^-6 (0x08)
  EXPECT_EQ(e4m3_encode(-std::ldexp(1.0f, -12)), 0x80);  // underflow keeps the sign
  EXPECT_EQ(e4m3_encode(432.0f), 0x7E);                  // tie 416 / 448 -> 448 (mantissa 6, even)
  EXPECT_EQ(e4m3_encode(17.0f), 0x58);                   // tie 16 / 18 -> 16 (exponent 4+7, mantissa 0)
}

// Reference BF16: the nearer of the two bracketing BF16 values, ties to the even one; past the largest
// finite value the upper neighbour is 2^128 (infinity).
uint16_t ref_bf16(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xFFFF) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next magnitude up, same sign
  auto value = [](uint16_t b) {
    if ((b & 0x7FFF) == 0x7F80) return std::copysign(std::ldexp(1.0, 128), (b & 0x8000) ? -1.0 : 1.0);
    return static_cast<double>(bf16_bits_to_float(b));
  };
  const double dl = std::fabs(static_cast<double>(x) - value(lo)), dh = std::fabs(value(hi) - x);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16, RneMatchesReference) {
  FP4_SEEDED_RNG(g);
  for (int i = 0; i < 2000000; ++i) {
    float x = random_bits_float(g);
    if (i % 4 == 0) x = bits_float((float_bits(x) & 0xFFFF0000u) | 0x8000u);  // exact ties
    const uint16_t got = bf16_bits_rne(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(bf16_bits_to_float(got))) << float_bits(x);
      continue;
    }
    ASSERT_EQ(got, ref_bf16(x)) << "x = " << x << " bits " << float_bits(x);
  }
  EXPECT_EQ(bf16_bits_rne(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even (1.0)
  EXPECT_EQ(bf16_bits_rne(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie -> even (1 + 2^-6)
  EXPECT_EQ(bf16_bits_rne(kInf), 0x7F80);
  EXPECT_EQ(bf16_bits_rne(3.4028235e38f), 0x7F80);  // rounds past the largest BF16: overflow to inf
  EXPECT_EQ(round_to_bf16(-0.0f), -0.0f);
  EXPECT_TRUE(std::signbit(round_to_bf16(-0.0f)));
}

// Reference ceil(log2 r) as a UE8M0 code, clamped to [0, 254], from frexp in double.
int ref_ue8m0_ceil(float r) {
  int ex = 0;
  const double m = std::frexp(static_cast<double>(r), &ex);  // r = m * 2^ex, m in [0.5, 1)
  const int e = (m == 0.5) ? ex - 1 : ex;
  return std::clamp(e + 127, 0, 254);
}

TEST(Ue8m0, EveryCodeRoundTrips) {
  for (int e = 0; e < 255; ++e) {
    const float v = ue8m0_decode(static_cast<uint8_t>(e));
    EXPECT_EQ(static_cast<double>(v), std::ldexp(1.0, e - 127)) << "code " << e;
    EXPECT_EQ(ue8m0_ceil_log2(v), e) << "code " << e;
  }
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xFF)));
}

TEST(Ue8m0, CeilLog2OnPowersOfTwoAndNeighbours) {
  for (int k = -149; k <= 127; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(ue8m0_ceil_log2(p), std::clamp(k + 127, 0, 254)) << "2^" << k;
    EXPECT_EQ(ue8m0_ceil_log2(std::nextafter(p, kInf)), std::clamp(k + 128, 0, 254)) << "above 2^" << k;
    if (k > -149) {
      EXPECT_EQ(ue8m0_ceil_log2(std::nextafter(p, 0.0f)), std::clamp(k + 127, 0, 254)) << "below 2^" << k;
    }
  }
  EXPECT_EQ(ue8m0_ceil_log2(0.0f), 0);
  EXPECT_EQ(ue8m0_ceil_log2(3.0f), 129);  // 2^2 = 4 >= 3
}

TEST(Ue8m0, CeilLog2MatchesReferenceOnRandomFloats) {
  FP4_SEEDED_RNG(g);
  for (int i = 0; i < 1000000; ++i) {
    const float r = bits_float(static_cast<uint32_t>(g()) & 0x7FFFFFFFu);
    if (!(r > 0.0f) || !std::isfinite(r)) continue;
    const int code = ue8m0_ceil_log2(r);
    ASSERT_EQ(code, ref_ue8m0_ceil(r)) << "r = " << r;
    if (code < 254) {
      ASSERT_GE(ue8m0_decode(static_cast<uint8_t>(code)), r) << "scale below r = " << r;
    }
  }
}

}  // namespace
}  // namespace fp4
