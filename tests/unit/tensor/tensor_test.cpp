// Tensor: numel is the product of the shape on random shapes (zero-sized ones included), new elements are
// zero, shrinking keeps the storage, and bad shapes or dims are errors naming the shape.
#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../error_of.h"
#include "core/error.h"

namespace fp4 {
namespace {

using testing::error_of;

TEST(Tensor, NumelIsTheProductAndNewElementsAreZero) {
  std::mt19937 rng(std::random_device{}());
  Tensor t;
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.shape().empty());
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> shape(rng() % 5);  // rank 0 is a scalar: one element
    int64_t n = 1;
    for (auto& d : shape) n *= d = rng() % 8 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 9);
    const int64_t before = t.numel();
    for (auto& v : t.span()) v = 1.5f;  // so that a kept old value would show
    t.resize(shape);
    ASSERT_EQ(t.numel(), n);
    EXPECT_EQ(t.shape(), shape);
    EXPECT_EQ(static_cast<int64_t>(t.span().size()), n);
    for (int64_t i = before; i < n; ++i) ASSERT_EQ(t.data()[i], 0.0f) << "element " << i << " of " << n;
    for (int i = 0; i < static_cast<int>(shape.size()); ++i) EXPECT_EQ(t.dim(i), shape[i]);
  }
  t.resize({3, 4});
  for (auto& v : t.span()) v = 2.0f;
  t.zero();
  for (const float v : t.span()) EXPECT_EQ(v, 0.0f);
}

// A buffer resized between batch shapes is not reallocated once it has held the largest.
TEST(Tensor, ShrinkingKeepsTheStorage) {
  Tensor t({64, 33});
  const float* p = t.data();
  t.resize({7, 5});
  EXPECT_EQ(t.data(), p);
  t.resize({64, 33});
  EXPECT_EQ(t.data(), p);
  const Tensor c({2, 3});
  EXPECT_EQ(c.span().data(), c.data());
}

TEST(Tensor, BadShapesAndDimsAreNamed) {
  Tensor t({2, 3});
  EXPECT_EQ(t.shape_string(), "[2, 3]");
  std::string msg = error_of([&] { t.resize({4, -1, 2}); });
  EXPECT_NE(msg.find("[4, -1, 2] has a negative dimension"), std::string::npos) << msg;
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));  // unchanged by the failed resize
  EXPECT_EQ(t.numel(), 6);
  msg = error_of([&] { t.dim(2); });
  EXPECT_NE(msg.find("tensor of shape [2, 3] has no dim 2"), std::string::npos) << msg;
  EXPECT_THROW(t.dim(-1), Error);
}

}  // namespace
}  // namespace fp4
