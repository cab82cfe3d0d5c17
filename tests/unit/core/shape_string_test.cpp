#include "core/shape_string.h"

#include <gtest/gtest.h>

namespace fp4 {
namespace {

TEST(ShapeString, PrintsDimensionsInBrackets) {
  EXPECT_EQ(shape_string({}), "[]");
  EXPECT_EQ(shape_string({7}), "[7]");
  EXPECT_EQ(shape_string({2, 0, 3}), "[2, 0, 3]");
}

}  // namespace
}  // namespace fp4
