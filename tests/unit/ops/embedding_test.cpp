#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

TEST(Embedding, ForwardGathersRowsAndBackwardScattersWithRepeats) {
  std::mt19937 rng(test::fresh_seed());
  const int v = 6, d = 5;
  const auto table = test::normal_vector(rng, static_cast<size_t>(v) * d);
  const std::vector<int32_t> tokens = {3, 0, 3, 5, 3};
  std::vector<float> out(tokens.size() * d);
  cpu::embedding_forward(out.data(), tokens.data(), table.data(), static_cast<int>(tokens.size()), d);
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int j = 0; j < d; ++j) EXPECT_EQ(out[i * d + j], table[tokens[i] * d + j]);

  const auto dout = test::normal_vector(rng, out.size());
  std::vector<float> dtable(table.size(), 0.5f);
  cpu::embedding_backward(dtable.data(), dout.data(), tokens.data(), static_cast<int>(tokens.size()), d);
  for (int row = 0; row < v; ++row)
    for (int j = 0; j < d; ++j) {
      double want = 0.5;
      for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] == row) want += dout[i * d + j];
      EXPECT_NEAR(dtable[row * d + j], want, 1e-6);
    }
}

}  // namespace
}  // namespace fp4
