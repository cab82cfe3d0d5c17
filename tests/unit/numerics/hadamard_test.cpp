// Random Hadamard transform (numerics/hadamard.h, RECIPES.md section 3) and its use by the quantizer.
#include "numerics/hadamard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <set>
#include <vector>

#include "core/error.h"
#include "numerics/quantize.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

constexpr int kSizes[] = {16, 32, 64, 128};

RhtSigns random_signs(std::mt19937_64& g, int n) {
  RhtSigns s;
  s.n = n;
  for (int w = 0; w < 4; ++w) s.mask[w] = w * 32 < n ? static_cast<uint32_t>(g()) : 0u;
  return s;
}

// The signs flipped again and the plain Walsh-Hadamard transform (no signs): the inverse of rht_segment.
std::vector<float> inverse(std::vector<float> y, const RhtSigns& s) {
  RhtSigns none;
  none.n = s.n;
  rht_segment_n(y.data(), none);
  for (int i = 0; i < s.n; ++i)
    if (s.negative(i)) y[i] = -y[i];
  return y;
}

TEST(Rht, MatchesDenseSylvesterMatrix) {
  FP4_SEEDED_RNG(g);
  for (int n : kSizes) {
    for (int trial = 0; trial < 20; ++trial) {
      const RhtSigns s = random_signs(g, n);
      std::vector<float> x = test::gaussian(g, n);
      std::vector<float> y = x;
      rht_segment_n(y.data(), s);
      for (int j = 0; j < n; ++j) {
        // Sylvester H_n[i][j] = (-1)^popcount(i & j); x' = (x * s) H / sqrt(n).
        double want = 0.0, mag = 0.0;
        for (int i = 0; i < n; ++i) {
          const double xs = s.negative(i) ? -x[i] : x[i];
          want += (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -xs : xs);
          mag += std::fabs(xs);
        }
        want /= std::sqrt(static_cast<double>(n));
        ASSERT_NEAR(y[j], want, 1e-6 * mag) << "n " << n << " output " << j;
      }
    }
  }
}

// Bit-exactness between implementations rests on one butterfly order: signs, then stages h = 1, 2, 4, ...
// pairing (j, j + h) into (a + b, a - b), then the multiplication by 1/sqrt(n).
TEST(Rht, BitsFollowTheSpecifiedButterflyOrder) {
  FP4_SEEDED_RNG(g);
  for (int n : kSizes) {
    for (int trial = 0; trial < 200; ++trial) {
      const RhtSigns s = random_signs(g, n);
      std::vector<float> x = test::gaussian(g, n), want = x;
      for (int i = 0; i < n; ++i) want[i] = s.negative(i) ? -want[i] : want[i];
      for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            const float a = want[j], b = want[j + h];
            want[j] = a + b;
            want[j + h] = a - b;
          }
      for (float& v : want) v *= static_cast<float>(1.0 / std::sqrt(double(n)));
      rht_segment_n(x.data(), s);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(float_bits(x[i]), float_bits(want[i])) << "n " << n << " output " << i;
    }
  }
}

TEST(Rht, OrthogonalAndNormPreserving) {
  FP4_SEEDED_RNG(g);
  std::uniform_real_distribution<float> log_scale(-20.0f, 20.0f);
  for (int n : kSizes) {
    for (int trial = 0; trial < 200; ++trial) {
      const RhtSigns s = random_signs(g, n);
      std::vector<float> x = test::gaussian(g, n, std::exp2(log_scale(g)));
      std::vector<float> y = x;
      rht_segment_n(y.data(), s);
      double nx = 0.0, ny = 0.0, l1 = 0.0;
      for (int i = 0; i < n; ++i) {
        nx += double(x[i]) * x[i];
        ny += double(y[i]) * y[i];
        l1 += std::fabs(x[i]);
      }
      ASSERT_NEAR(ny, nx, 1e-5 * nx) << "n " << n;
      const std::vector<float> back = inverse(y, s);
      // Each of the 2 log2(n) butterfly stages and 2 scalings adds at most an FP32 half-ulp of l1.
      const double tol = (2.0 * std::log2(n) + 2.0) * std::ldexp(1.0, -24) * l1 * 2.0;
      for (int i = 0; i < n; ++i) ASSERT_NEAR(back[i], x[i], tol) << "n " << n << " element " << i;
    }
  }
}

TEST(Rht, NormsAreCorrectlyRounded) {
  for (int n : kSizes)
    EXPECT_EQ(rht_norm(n), static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)))) << n;
}

TEST(Rht, SignsFromSeedUseTheReservedBlockIndex) {
  FP4_SEEDED_RNG(g);
  const RngStream st{g(), g()};
  const Philox4 r = philox_block(st, uint64_t{1} << 63);  // RECIPES.md section 5: index 2^63
  const RhtSigns s128 = rht_signs_from_seed(st, 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(s128.negative(i), ((r.v[i / 32] >> (i % 32)) & 1u) != 0) << i;
  for (int n : kSizes) {
    const RhtSigns s = rht_signs_from_seed(st, n);
    EXPECT_EQ(s.n, n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(s.negative(i), s128.negative(i)) << "n " << n << " sign " << i;
    for (int i = n; i < 128; ++i) EXPECT_FALSE(s.negative(i)) << "bits past n must stay clear, n " << n;
  }
}

TEST(Rht, SameSeedSameSignsOtherStreamsOtherSigns) {
  FP4_SEEDED_RNG(g);
  const RngStream st{g(), g()};
  const RhtSigns a = rht_signs_from_seed(st, 128), b = rht_signs_from_seed(st, 128);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(a.mask[w], b.mask[w]);
  std::set<uint32_t> masks16;
  int negatives = 0;
  for (uint64_t d = 1; d <= 200; ++d) {
    const RhtSigns o = rht_signs_from_seed({st.seed, st.stream + d}, 128);
    bool differs = false;
    for (int w = 0; w < 4; ++w) differs |= o.mask[w] != a.mask[w];
    EXPECT_TRUE(differs) << "stream +" << d << " repeats the 128 signs";
    masks16.insert(rht_signs_from_seed({st.seed, st.stream + d}, 16).mask[0]);
    for (int w = 0; w < 4; ++w) negatives += std::popcount(o.mask[w]);
  }
  EXPECT_GE(masks16.size(), 195u);  // 200 draws of 16 bits: about 0.3 collisions expected
  // 25600 fair coins: mean 12800, sd 80.
  EXPECT_NEAR(negatives, 12800, 600);
}

TEST(Rht, NvidiaFixedSigns) {
  const int want[16] = {+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1};
  const RhtSigns s = rht_signs_nvidia16();
  EXPECT_EQ(s.n, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(s.negative(i) ? -1 : +1, want[i]) << "sign " << i;
  EXPECT_EQ(s.mask[1] | s.mask[2] | s.mask[3], 0u);
}

// rht16_sign_words: xoring the raw input words (BF16 pairs or FP32) and converting gives the negations
// rht_segment<16> applies, so the transform without signs of those values is rht_segment<16> of the
// original, bit for bit (NaN outputs: NaN); on raw words of every kind (zeros, subnormals, infinities, NaNs).
TEST(Rht, SignWordsOnRawWordsAreTheSegmentsNegations) {
  FP4_SEEDED_RNG(g);
  RhtSigns none;
  none.n = 16;
  for (bool bf16 : {true, false}) {
    for (int trial = 0; trial < 500; ++trial) {
      const RhtSigns s = trial == 0 ? rht_signs_nvidia16() : random_signs(g, 16);
      const Rht16SignWords sw = rht16_sign_words(s, bf16);
      uint32_t raw[16];
      for (uint32_t& w : raw) w = static_cast<uint32_t>(g());
      if (trial == 1) std::fill(std::begin(raw), std::end(raw), 0u);  // all +0
      float x[16], flipped[16];
      for (int i = 0; i < 16; ++i) {
        const uint32_t w = bf16 ? raw[i >> 1] : raw[i], m = bf16 ? sw.w[i >> 1] : sw.w[i];
        // BF16 -> FP32: element 2j is the low half of word j, 2j + 1 the high half.
        auto value = [&](uint32_t word) {
          return bits_float(!bf16 ? word : (i & 1) != 0 ? (word & 0xFFFF0000u) : (word << 16));
        };
        x[i] = value(w);
        flipped[i] = value(w ^ m);
        ASSERT_EQ(float_bits(flipped[i]), float_bits(s.negative(i) ? -x[i] : x[i]))
            << (bf16 ? "bf16" : "f32") << " element " << i;
      }
      for (int i = 0; i < 16; ++i) {
        ASSERT_EQ(sw.w[i] & (bf16 ? 0x7FFF7FFFu : 0x7FFFFFFFu), 0u)
            << "word " << i << " holds only sign bits";
      }
      rht_segment<16>(x, s);
      rht_segment<16>(flipped, none);
      for (int i = 0; i < 16; ++i) {
        if (std::isnan(x[i]))  // IEEE fixes no sign or payload of a NaN sum (the quantizers only count NaNs)
          ASSERT_TRUE(std::isnan(flipped[i])) << (bf16 ? "bf16" : "f32") << " output " << i;
        else
          ASSERT_EQ(float_bits(flipped[i]), float_bits(x[i])) << (bf16 ? "bf16" : "f32") << " output " << i;
      }
    }
  }
}

// The quantizer with rht_n transforms every rht_n segment of every row with the same signs, then
// quantizes as without RHT.
TEST(Rht, QuantizerAppliesTheTransformPerSegment) {
  FP4_SEEDED_RNG(g);
  const int64_t rows = 8, cols = 256;
  const std::vector<float> x = test::gaussian(g, rows * cols);
  for (int n : kSizes) {
    for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128}) {
      QuantSpec with{QuantFormat::kNvfp4, BlockShape::k1x16, outer, Rounding::kSr, n};
      QuantSpec without = with;
      without.rht_n = 0;
      const QuantRandomness rnd{{g(), g()}, rht_signs_from_seed({g(), g()}, n)};
      std::vector<float> t = x;
      for (int64_t i = 0; i < rows * cols; i += n) rht_segment_n(&t[i], rnd.signs);
      const Nvfp4Tensor a = quantize_nvfp4(x.data(), rows, cols, with, rnd);
      const Nvfp4Tensor b = quantize_nvfp4(t.data(), rows, cols, without, rnd);
      EXPECT_EQ(a.codes, b.codes) << "n " << n;
      EXPECT_EQ(a.scales, b.scales) << "n " << n;
      EXPECT_EQ(a.outer_scales, b.outer_scales) << "n " << n;
      EXPECT_EQ(amax_nvfp4_input(x.data(), rows, cols, with, rnd),
                amax_nvfp4_input(t.data(), rows, cols, without, rnd));
    }
  }
}

TEST(Rht, QuantizerRejectsSignsOfAnotherLength) {
  const std::vector<float> x(32 * 128, 1.0f);
  QuantSpec spec{QuantFormat::kNvfp4, BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 32};
  const QuantRandomness rnd{{1, 2}, rht_signs_nvidia16()};
  EXPECT_THROW(quantize_nvfp4(x.data(), 32, 128, spec, rnd), Error);
}

}  // namespace
}  // namespace fp4
