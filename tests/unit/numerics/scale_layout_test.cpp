// cuBLASLt block-scale layout (numerics/quantize.h): 128x4 tiles of 512 bytes, tiles row-major, inside a
// tile offset (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4; padded with zeros to 128 rows x 4 columns.
#include <gtest/gtest.h>

#include <vector>

#include "numerics/quantize.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

TEST(ScaleLayout, OffsetIsABijectionOntoThePaddedBuffer) {
  FP4_SEEDED_RNG(g);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {128, 4}, {129, 5}, {300, 7}, {256, 8}, {1, 17}};
  std::uniform_int_distribution<int64_t> r(1, 600), c(1, 40);
  for (int i = 0; i < 6; ++i) shapes.push_back({r(g), c(g)});
  for (auto [rows, cols] : shapes) {
    const int64_t prow = (rows + 127) / 128 * 128, pcol = (cols + 3) / 4 * 4;
    std::vector<int> hits(prow * pcol, 0);
    for (int64_t rr = 0; rr < prow; ++rr)
      for (int64_t cc = 0; cc < pcol; ++cc) {
        const int64_t off = cublaslt_scale_offset(rr, cc, cols);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, prow * pcol) << rows << "x" << cols << " (" << rr << "," << cc << ")";
        ++hits[off];
      }
    for (int64_t k = 0; k < prow * pcol; ++k) ASSERT_EQ(hits[k], 1) << rows << "x" << cols << " offset " << k;
  }
}

TEST(ScaleLayout, SpotValues) {
  // 2 column tiles (scale_cols 5..8).
  EXPECT_EQ(cublaslt_scale_offset(0, 0, 8), 0);
  EXPECT_EQ(cublaslt_scale_offset(0, 3, 8), 3);
  EXPECT_EQ(cublaslt_scale_offset(1, 0, 8), 16);
  EXPECT_EQ(cublaslt_scale_offset(31, 0, 8), 31 * 16);
  EXPECT_EQ(cublaslt_scale_offset(32, 0, 8), 4);
  EXPECT_EQ(cublaslt_scale_offset(64, 1, 8), 9);
  EXPECT_EQ(cublaslt_scale_offset(127, 3, 8), 31 * 16 + 3 * 4 + 3);  // last byte of the first tile: 511
  EXPECT_EQ(cublaslt_scale_offset(0, 4, 8), 512);                    // next tile along the columns
  EXPECT_EQ(cublaslt_scale_offset(128, 0, 8), 1024);                 // next row of tiles
  EXPECT_EQ(cublaslt_scale_offset(128, 0, 5), 1024);                 // 5 columns pad to 8: two tiles
  EXPECT_EQ(cublaslt_scale_offset(200, 6, 8), 1024 + 512 + (200 % 32) * 16 + 2 * 4 + 2);
}

TEST(ScaleLayout, ConversionPlacesEveryScaleAndZeroPads) {
  FP4_SEEDED_RNG(g);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{130, 6}, {128, 4}, {7, 3}, {512, 16}}) {
    std::vector<uint8_t> s(rows * cols);
    for (auto& b : s) b = static_cast<uint8_t>(1 + g() % 255);  // never 0, so padding is recognisable
    const std::vector<uint8_t> out = to_cublaslt_scale_layout(s.data(), rows, cols);
    const int64_t prow = (rows + 127) / 128 * 128, pcol = (cols + 3) / 4 * 4;
    ASSERT_EQ(out.size(), static_cast<size_t>(prow * pcol));
    std::vector<char> real(out.size(), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t off = cublaslt_scale_offset(r, c, cols);
        ASSERT_EQ(out[off], s[r * cols + c]);
        real[off] = 1;
      }
    for (size_t k = 0; k < out.size(); ++k) {
      if (!real[k]) {
        ASSERT_EQ(out[k], 0) << "padding byte " << k << " of " << rows << "x" << cols;
      }
    }
  }
}

}  // namespace
}  // namespace fp4
