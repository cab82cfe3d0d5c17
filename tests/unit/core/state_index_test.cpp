#include "core/state_index.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/state_tensor.h"

namespace fp4 {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StateIndex, RequireFindsATensorWhoseDtypeShapeAndSizeAgree) {
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 1 + rng() % 5, cols = 1 + rng() % 7;
  std::vector<float> w(static_cast<size_t>(rows * cols), 1.5f);
  std::vector<StateTensor> state{f32_state_tensor("w", {rows, cols}, w),
                                 StateTensor{"step", "I64", {1}, std::vector<uint8_t>(8)},
                                 StateTensor{"codes", "U8", {3}, std::vector<uint8_t>(3)},
                                 StateTensor{"half", "BF16", {2}, std::vector<uint8_t>(4)}};
  const StateIndex index(state);
  EXPECT_EQ(&index.require("w", "F32", {rows, cols}), &state[0]);
  EXPECT_EQ(&index.require("step", "I64", {1}), &state[1]);
  EXPECT_EQ(&index.require("codes", "U8", {3}), &state[2]);
  EXPECT_EQ(&index.require("half", "BF16", {2}), &state[3]);
  EXPECT_TRUE(index.has("w"));
  EXPECT_FALSE(index.has("v"));
}

TEST(StateIndex, RequireNamesTheTensorAndWhatDisagrees) {
  std::vector<StateTensor> state{StateTensor{"w", "F32", {2, 3}, std::vector<uint8_t>(24)},
                                 StateTensor{"short", "F32", {4}, std::vector<uint8_t>(15)},
                                 StateTensor{"odd", "F16", {1}, std::vector<uint8_t>(2)}};
  const StateIndex index(state);
  const std::string missing = message_of([&] { index.require("v", "F32", {2, 3}); });
  EXPECT_NE(missing.find("'v' is missing"), std::string::npos) << missing;
  const std::string dtype = message_of([&] { index.require("w", "BF16", {2, 3}); });
  EXPECT_NE(dtype.find("dtype F32, expected BF16"), std::string::npos) << dtype;
  const std::string shape = message_of([&] { index.require("w", "F32", {3, 2}); });
  EXPECT_NE(shape.find("shape [2, 3], expected [3, 2]"), std::string::npos) << shape;
  const std::string bytes = message_of([&] { index.require("short", "F32", {4}); });
  EXPECT_NE(bytes.find("holds 15 bytes, expected 16"), std::string::npos) << bytes;
  const std::string unknown = message_of([&] { index.require("odd", "F16", {1}); });
  EXPECT_NE(unknown.find("cannot size"), std::string::npos) << unknown;
}

}  // namespace
}  // namespace fp4
