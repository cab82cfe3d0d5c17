// NaN/Inf inputs (RECIPES.md section 1): counted, their block carries the E4M3 NaN scale 0x7F and
// dequantizes to NaN, every other block is as if the bad elements were 0; never silent zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "numerics/formats.h"
#include "numerics/quantize.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

QuantSpec make(BlockShape block, OuterScale outer, Rounding rounding, int rht_n = 0, bool fos = false) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = block;
  s.outer = outer;
  s.rounding = rounding;
  s.rht_n = rht_n;
  s.four_over_six = fos ? FourOverSix::kMse : FourOverSix::kOff;
  return s;
}

TEST(Nonfinite, PoisonsOnlyItsBlockInEveryMode) {
  FP4_SEEDED_RNG(g);
  const int64_t rows = 32, cols = 256;
  const QuantSpec specs[] = {
      make(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn),
      make(BlockShape::k1x16, OuterScale::kTensor, Rounding::kSr),
      make(BlockShape::k16x16, OuterScale::kTensor, Rounding::kRtn),
      make(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kRtn),
      make(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kSr),
      make(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 0, true),
      make(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kRtn, 0, true),
      make(BlockShape::k1x16, OuterScale::kTensor, Rounding::kSr, 16),
      make(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kSr, 16),
  };
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (const QuantSpec& spec : specs) {
    SCOPED_TRACE(describe(spec));
    std::vector<float> x = test::gaussian(g, rows * cols, 2.0f), clean = x;
    std::set<int64_t> bad;
    std::uniform_int_distribution<int64_t> pos(0, rows * cols - 1);
    for (int k = 0; k < 6; ++k) {
      const int64_t i = pos(g);
      x[i] = bad_values[k % 3];
      bad.insert(i);
      // The reference holds 0 where the quantizer sees no finite value: the bad element, or with RHT16
      // its whole segment (all 16 transformed values are non-finite; the RHT of zeros is zeros).
      if (spec.rht_n) {
        for (int64_t j = i / 16 * 16; j < i / 16 * 16 + 16; ++j) clean[j] = 0.0f;
      } else {
        clean[i] = 0.0f;
      }
    }
    const QuantRandomness rnd{{g(), g()}, rht_signs_from_seed({g(), g()}, 16)};
    const Nvfp4Tensor q = quantize_nvfp4(x.data(), rows, cols, spec, rnd);
    const Nvfp4Tensor qc = quantize_nvfp4(clean.data(), rows, cols, spec, rnd);
    // A block is poisoned when its 1x16 block (16x16 tile) holds a bad element; with RHT16 the segment
    // that spreads the bad value is that same block, and all 16 transformed values are non-finite.
    std::set<std::pair<int64_t, int64_t>> poisoned;  // (row, block)
    for (int64_t i : bad) {
      const int64_t r = i / cols, b = (i % cols) / 16;
      if (spec.block == BlockShape::k16x16) {
        for (int64_t rr = r / 16 * 16; rr < r / 16 * 16 + 16; ++rr) poisoned.insert({rr, b});
      } else {
        poisoned.insert({r, b});
      }
    }
    EXPECT_EQ(q.nonfinite, spec.rht_n ? 16 * poisoned.size() : bad.size());
    EXPECT_EQ(q.outer_scales, qc.outer_scales);
    std::vector<float> d(rows * cols), dc(rows * cols);
    std::vector<uint16_t> b16(rows * cols);
    dequantize(q, d.data());
    dequantize(qc, dc.data());
    dequantize_bf16(q, b16.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        if (poisoned.count({r, c / 16})) {
          ASSERT_EQ(q.scale(r, c), 0x7F) << "[" << r << "," << c << "]";
          ASSERT_TRUE(std::isnan(d[i])) << "[" << r << "," << c << "] dequantized to " << d[i];
          ASSERT_TRUE(std::isnan(bf16_bits_to_float(b16[i])));
        } else {
          ASSERT_EQ(q.scale(r, c), qc.scale(r, c)) << "[" << r << "," << c << "]";
          ASSERT_EQ(q.code(r, c), qc.code(r, c)) << "[" << r << "," << c << "]";
          ASSERT_EQ(float_bits(d[i]), float_bits(dc[i]));
        }
      }
  }
}

TEST(Nonfinite, AllNanTensor) {
  const std::vector<float> x(16 * 128, std::numeric_limits<float>::quiet_NaN());
  for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128}) {
    const Nvfp4Tensor q =
        quantize_nvfp4(x.data(), 16, 128, make(BlockShape::k1x16, outer, Rounding::kRtn), {});
    EXPECT_EQ(q.nonfinite, x.size());
    for (uint8_t s : q.scales) ASSERT_EQ(s, 0x7F);
    std::vector<float> d(x.size());
    dequantize(q, d.data());
    for (float v : d) ASSERT_TRUE(std::isnan(v));
  }
}

}  // namespace
}  // namespace fp4
