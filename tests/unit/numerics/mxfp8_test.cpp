// MXFP8 (numerics/mxfp8.h, RECIPES.md section 1): per 32 elements the smallest power-of-two scale with
// amax/scale <= 448, E4M3 elements of x/scale; zero and NaN blocks.
#include "numerics/mxfp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "numerics/quantize.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

TEST(Mxfp8, ScaleIsTheSmallestSufficientPowerOfTwoAndElementsAreE4m3) {
  FP4_SEEDED_RNG(g);
  const int64_t rows = 64, cols = 512;
  std::vector<float> x = test::gaussian(g, rows * cols);
  std::uniform_real_distribution<float> e(-100.0f, 100.0f);
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const float k = std::exp2(e(g));  // block magnitudes 2^-100 .. 2^100
    for (int i = 0; i < 32; ++i) x[b * 32 + i] *= k;
  }
  // Blocks whose amax is exactly 448 * 2^k, and one float above: the boundary of the rounding up.
  for (int i = 0; i < 32; ++i) x[i] = x[32 + i] = std::ldexp(static_cast<float>(i) / 32.0f, 5);
  x[31] = std::ldexp(448.0f, 5);
  x[63] = std::nextafter(std::ldexp(448.0f, 5), 1e30f);
  const Mxfp8Tensor q = quantize_mxfp8(x.data(), rows, cols);
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(rows * cols / 32));
  EXPECT_EQ(q.scales[0], 127 + 5);
  EXPECT_EQ(q.scales[1], 127 + 6);
  std::vector<float> d(rows * cols);
  dequantize(q, d.data());
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    double amax = 0.0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double(x[b * 32 + i])));
    const int code = q.scales[b];
    const double scale = std::ldexp(1.0, code - 127);
    ASSERT_LE(amax / scale, 448.0) << "block " << b;
    ASSERT_GT(amax / (scale / 2), 448.0) << "block " << b << ": a smaller power of two would do";
    for (int i = 0; i < 32; ++i) {
      const int64_t j = b * 32 + i;
      ASSERT_EQ(q.codes[j], test::ref_e4m3_encode(static_cast<float>(x[j] / scale))) << j;
      ASSERT_EQ(d[j], static_cast<float>(test::ref_e4m3_value(q.codes[j]) * scale)) << j;
      ASSERT_EQ(d[j], q.value(j / cols, j % cols));
      // Relative error of E4M3 rounding of a normal number is at most 2^-4.
      if (std::fabs(x[j]) / scale >= std::ldexp(1.0, -6)) {
        ASSERT_LE(std::fabs(d[j] - x[j]), std::ldexp(std::fabs(x[j]), -4));
      }
    }
  }
}

TEST(Mxfp8, TinyBlocksNearTheBottomOfUe8m0) {
  // amax32 / 448 below 2^-126 (FP32 subnormal): the scale still covers the block.
  std::vector<float> x(64, 0.0f);
  x[0] = std::ldexp(384.0f, -126);   // amax/448 = (6/7) 2^-126 > 2^-127: needs 2^-126, element 384
  x[32] = std::ldexp(448.0f, -128);  // amax/448 = 2^-128: 2^-127 (code 0) is enough, element 224
  const Mxfp8Tensor q = quantize_mxfp8(x.data(), 1, 64);
  EXPECT_EQ(q.scales[0], 1);
  EXPECT_EQ(q.scales[1], 0);
  EXPECT_EQ(q.value(0, 0), x[0]);
  EXPECT_EQ(q.value(0, 32), x[32]);
}

TEST(Mxfp8, ZeroBlockAndNanBlock) {
  FP4_SEEDED_RNG(g);
  std::vector<float> x = test::gaussian(g, 4 * 64);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;             // block 0: zeros
  x[64 + 7] = std::numeric_limits<float>::quiet_NaN();  // block 2: NaN
  x[96 + 3] = std::numeric_limits<float>::infinity();   // block 3: Inf
  x[96 + 9] = -std::numeric_limits<float>::infinity();
  std::vector<float> clean = x;
  clean[64 + 7] = clean[96 + 3] = clean[96 + 9] = 0.0f;
  const Mxfp8Tensor q = quantize_mxfp8(x.data(), 4, 64), qc = quantize_mxfp8(clean.data(), 4, 64);
  EXPECT_EQ(q.nonfinite, 3u);
  EXPECT_EQ(q.scales[0], 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q.value(0, i), 0.0f);
  EXPECT_EQ(q.scales[2], 0xFF);
  EXPECT_EQ(q.scales[3], 0xFF);
  for (int64_t j = 0; j < 4 * 64; ++j) {
    const int64_t b = j / 32;
    if (b == 2 || b == 3) {
      EXPECT_TRUE(std::isnan(q.value(j / 64, j % 64))) << j << " must not be silently finite";
    } else {
      EXPECT_EQ(q.codes[j], qc.codes[j]) << j;
      EXPECT_EQ(q.scales[b], qc.scales[b]) << j;
    }
  }
}

TEST(Mxfp8, RejectsShapes) {
  const std::vector<float> x(64, 1.0f);
  EXPECT_THROW(quantize_mxfp8(x.data(), 2, 16), Error);
  EXPECT_THROW(quantize_mxfp8(x.data(), 0, 32), Error);
  try {
    quantize_mxfp8(x.data(), 1, 48);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1 x 48]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4
