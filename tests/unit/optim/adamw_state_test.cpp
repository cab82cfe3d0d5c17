// The AdamW state layout: find_adam_state finds every tensor of random parameter lists in order and reads
// the step; a missing tensor, a wrong dtype or shape, or a negative step is an error naming the tensor.
#include "optim/adamw_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/state_index.h"

namespace fp4 {
namespace {

std::vector<StateTensor> layout(const std::vector<ParameterInfo>& params, int64_t step, std::mt19937& rng) {
  std::vector<StateTensor> s;
  std::normal_distribution<float> d;
  for (const auto& p : params)
    for (const std::string& prefix :
         {std::string(), std::string(kAdamMomentPrefix[0]), std::string(kAdamMomentPrefix[1])}) {
      std::vector<float> v(static_cast<size_t>(p.numel()));
      for (auto& x : v) x = d(rng);
      s.push_back(f32_state_tensor(prefix + p.name, p.shape, v));
    }
  s.push_back(adam_step_tensor(step));
  std::shuffle(s.begin(), s.end(), rng);  // the index finds them by name, not position
  return s;
}

std::string error_of(const std::vector<StateTensor>& s, const std::vector<ParameterInfo>& params) {
  const StateIndex index(s);
  try {
    find_adam_state(index, params);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an fp4::Error";
  return "";
}

TEST(AdamWState, FindsEveryTensorOfRandomLayouts) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<ParameterInfo> params(rng() % 6);
    for (size_t i = 0; i < params.size(); ++i)
      params[i] = {"p" + std::to_string(i),
                   {1 + static_cast<int64_t>(rng() % 5), 1 + static_cast<int64_t>(rng() % 4)}};
    const int64_t step = trial == 0 ? 0 : static_cast<int64_t>(rng()) << (rng() % 30);
    const auto s = layout(params, step, rng);
    const StateIndex index(s);
    const AdamState st = find_adam_state(index, params);
    EXPECT_EQ(st.step, step);
    ASSERT_EQ(st.values.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(st.values[i]->name, params[i].name);
      EXPECT_EQ(st.m[i]->name, "adamw.m." + params[i].name);
      EXPECT_EQ(st.v[i]->name, "adamw.v." + params[i].name);
      EXPECT_EQ(st.m[i]->shape, params[i].shape);
    }
  }
  const StateTensor t = adam_step_tensor(-5);
  EXPECT_EQ(t.name, "adamw.step");
  EXPECT_EQ(t.dtype, "I64");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(t.bytes.size(), 8u);
}

TEST(AdamWState, BrokenLayoutsAreNamed) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<ParameterInfo> params = {{"a", {2, 3}}, {"b", {4}}};
  const auto good = layout(params, 7, rng);
  auto without = [&](const std::string& name) {
    auto s = good;
    std::erase_if(s, [&](const StateTensor& t) { return t.name == name; });
    return s;
  };
  for (const char* name : {"a", "adamw.m.b", "adamw.v.a", "adamw.step"}) {
    const std::string msg = error_of(without(name), params);
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
  auto reshaped = good;
  for (auto& t : reshaped)
    if (t.name == "adamw.v.b") t.shape = {2, 2};
  EXPECT_NE(error_of(reshaped, params).find("adamw.v.b"), std::string::npos);
  auto retyped = good;
  for (auto& t : retyped)
    if (t.name == "adamw.step") t.dtype = "F32", t.bytes.resize(4);
  EXPECT_NE(error_of(retyped, params).find("adamw.step"), std::string::npos);
  auto negative = good;
  for (auto& t : negative)
    if (t.name == "adamw.step") t = adam_step_tensor(-1);
  const std::string msg = error_of(negative, params);
  EXPECT_NE(msg.find("'adamw.step' holds a negative step -1"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
