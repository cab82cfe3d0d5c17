// ParameterSet: random tensor lists lay out back to back in one flat buffer (offsets, values and grads as
// views of it), names are found and unknown ones named, and misuse (a name twice, adding after allocate)
// is an error.
#include "nn/parameters.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace fp4 {
namespace {

TEST(Parameters, RandomListsLayOutBackToBack) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 100; ++trial) {
    ParameterSet ps;
    const int n = static_cast<int>(rng() % 8);
    std::vector<int64_t> numel;
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> shape(1 + rng() % 3);
      int64_t k = 1;
      for (auto& d : shape) k *= d = rng() % 6;  // zero-sized tensors included
      numel.push_back(k);
      EXPECT_EQ(ps.add("p" + std::to_string(i), shape, rng() % 2 == 0, ParamInit::kNormal), i);
    }
    ps.allocate();
    ASSERT_EQ(ps.size(), n);
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(ps.at(i).offset, offset);
      EXPECT_EQ(ps.at(i).info.numel(), numel[i]);
      EXPECT_EQ(ps.find("p" + std::to_string(i)), i);
      EXPECT_EQ(ps.value(i).data(), ps.values().data() + offset);
      EXPECT_EQ(static_cast<int64_t>(ps.grad(i).size()), numel[i]);
      offset += numel[i];
    }
    EXPECT_EQ(ps.numel(), offset);
    EXPECT_EQ(static_cast<int64_t>(ps.grads().size()), offset);
    for (const float v : ps.values()) ASSERT_EQ(v, 0.0f);  // allocate zeroes both buffers
    for (const float g : ps.grads()) ASSERT_EQ(g, 0.0f);
    // Writes through one tensor's grad view land in the flat buffer at its offset; zero_grads clears all.
    for (int i = 0; i < n; ++i)
      for (float& g : ps.grad(i)) g = static_cast<float>(i + 1);
    for (int i = 0; i < n; ++i)
      for (int64_t j = 0; j < numel[i]; ++j) ASSERT_EQ(ps.grads()[ps.at(i).offset + j], float(i + 1));
    ps.zero_grads();
    for (const float g : ps.grads()) ASSERT_EQ(g, 0.0f);
  }
}

TEST(Parameters, MisuseIsNamed) {
  ParameterSet ps;
  ps.add("w", {2, 3}, true, ParamInit::kNormal);
  try {
    ps.add("w", {4}, false, ParamInit::kOnes);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter w registered twice"), std::string::npos) << e.what();
  }
  ps.allocate();
  EXPECT_THROW(ps.add("late", {1}, false, ParamInit::kOnes), Error);
  EXPECT_EQ(ps.find("absent"), -1);
  try {
    ps.require("absent");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown parameter 'absent'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ps.require("w"), 0);
  ParameterSet empty;
  empty.allocate();
  EXPECT_EQ(empty.numel(), 0);
}

}  // namespace
}  // namespace fp4
