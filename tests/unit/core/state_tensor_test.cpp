#include "core/state_tensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace fp4 {
namespace {

TEST(StateTensor, F32TensorHoldsTheBytesOfItsDataIncludingNonFinite) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> data(1 + rng() % 97);
  for (auto& x : data) x = nd(rng);
  data[0] = std::numeric_limits<float>::quiet_NaN();
  if (data.size() > 1) data[1] = -std::numeric_limits<float>::infinity();
  if (data.size() > 2) data[2] = -0.0f;
  const StateTensor t = f32_state_tensor("w", {static_cast<int64_t>(data.size())}, data);
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(t.dtype, "F32");
  ASSERT_EQ(t.bytes.size(), data.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(t.bytes.data(), data.data(), t.bytes.size()), 0);
  EXPECT_TRUE(f32_state_tensor("e", {0}, {}).bytes.empty());
}

}  // namespace
}  // namespace fp4
