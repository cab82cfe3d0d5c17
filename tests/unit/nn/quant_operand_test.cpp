// QuantOperand on random shapes: dense operands keep their values (4 bytes each), with RHT each segment is
// an orthogonal transform (norm kept, undone by the transposed Hadamard); quantized ones are the NVFP4
// round trip of the packed tensor; transposed() transposes; shape faults name the operand.
#include "nn/quant_operand.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn_test_util.h"
#include "numerics/hadamard.h"
#include "numerics/quantize.h"

namespace fp4 {
namespace {

using fp4::testing::gaussian;

QuantSpec nvfp4(int rht_n) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.rht_n = rht_n;
  return s;
}

TEST(QuantOperand, DenseKeepsTheValuesAndRhtKeepsEachSegmentsNorm) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t rows = 1 + rng() % 9, cols = 16 * (1 + rng() % 8);
    const auto x = gaussian(static_cast<size_t>(rows * cols), rng, 1.0f);
    const QuantRandomness rnd{RngStream{rng(), 1}, rht_signs_from_seed(RngStream{rng(), 2}, 16)};
    const QuantOperand plain(x.data(), rows, cols, QuantSpec{}, rnd, "X");
    EXPECT_FALSE(plain.quantized());
    EXPECT_EQ(plain.values(), x);
    EXPECT_EQ(plain.stored_bytes(), 4 * rows * cols);
    EXPECT_EQ(plain.nonfinite(), 0u);
    QuantSpec rht;
    rht.rht_n = 16;
    const QuantOperand turned(x.data(), rows, cols, rht, rnd, "X");
    EXPECT_FALSE(turned.quantized());
    const auto y = turned.values();
    ASSERT_EQ(y.size(), x.size());
    for (int64_t seg = 0; seg < rows * cols; seg += 16) {
      double nx = 0, ny = 0;
      for (int k = 0; k < 16; ++k)
        nx += double(x[seg + k]) * x[seg + k], ny += double(y[seg + k]) * y[seg + k];
      EXPECT_NEAR(ny, nx, 1e-5 * nx) << "segment " << seg / 16;
    }
    EXPECT_NE(y, x);
  }
}

TEST(QuantOperand, QuantizedIsThePackedRoundTrip) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t rows = 16 * (1 + rng() % 4), cols = 128 * (1 + rng() % 3);
    const auto x = gaussian(static_cast<size_t>(rows * cols), rng, 2.0f);
    const QuantSpec spec = nvfp4(trial % 2 ? 16 : 0);
    const QuantRandomness rnd{RngStream{rng(), 1}, rht_signs_from_seed(RngStream{rng(), 2}, 16)};
    const QuantOperand q(x.data(), rows, cols, spec, rnd, "W");
    ASSERT_TRUE(q.quantized());
    EXPECT_EQ(q.rows(), rows);
    EXPECT_EQ(q.cols(), cols);
    const Nvfp4Tensor want = quantize_nvfp4(x.data(), rows, cols, spec, rnd);
    EXPECT_EQ(q.packed().codes, want.codes);
    EXPECT_EQ(q.stored_bytes(), want.packed_bytes());
    EXPECT_LT(q.stored_bytes(), rows * cols);  // well under a byte per element
    std::vector<float> deq(x.size());
    dequantize(want, deq.data());
    EXPECT_EQ(q.values(), deq);
  }
}

TEST(QuantOperand, TransposedAndShapeFaults) {
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 1 + rng() % 7, cols = 1 + rng() % 11;
  const auto x = gaussian(static_cast<size_t>(rows * cols), rng, 1.0f);
  const auto t = transposed(x.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(t[c * rows + r], x[r * cols + c]);
  EXPECT_EQ(transposed(t.data(), cols, rows), x);
  QuantSpec rht;
  rht.rht_n = 16;
  const std::vector<float> odd(3 * 24, 1.0f);
  try {
    QuantOperand(odd.data(), 3, 24, rht, QuantRandomness{}, "dY^T");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dY^T: RHT16 needs the reduction dimension (24)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(QuantOperand(odd.data(), 3, 24, nvfp4(0), QuantRandomness{}, "X"), Error);
}

}  // namespace
}  // namespace fp4
