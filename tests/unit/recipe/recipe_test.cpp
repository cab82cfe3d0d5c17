// Recipe's own logic: which blocks keep BF16 (negative indices count from the end), whether a policy
// quantizes anything, and the names of the linear kinds.
#include "recipe/recipe.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace fp4 {
namespace {

// A policy that quantizes only operand `o`.
LinearPolicy only(Operand o) {
  LinearPolicy p;
  p[o].format = QuantFormat::kNvfp4;
  return p;
}

TEST(Recipe, PolicyForKeepsTheListedBlocksInBf16OnRandomLists) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int n_layers = 1 + static_cast<int>(rng() % 12);
    Recipe r;
    r.linear = only(static_cast<Operand>(rng() % kNumOperands));
    r.linear.rht_fresh_signs = rng() % 2 == 0;
    std::set<int> bf16;  // the block indices the list names
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
      const int idx = static_cast<int>(rng() % n_layers);
      const bool from_end = rng() % 2 == 0;
      r.bf16_layers.push_back(from_end ? idx - n_layers : idx);
      bf16.insert(idx);
    }
    if (trial == 0) r.bf16_layers = {0, -1}, bf16 = {0, n_layers - 1};  // the preset form: first and last
    for (int layer = 0; layer < n_layers; ++layer)
      for (int k = 0; k < kNumLinearKinds; ++k) {
        const LinearPolicy p = r.policy_for(layer, n_layers, static_cast<LinearKind>(k));
        const bool keep = bf16.count(layer) > 0;
        EXPECT_EQ(p.quantized(), !keep) << "layer " << layer << " of " << n_layers;
        if (!keep) {
          EXPECT_EQ(p.rht_fresh_signs, r.linear.rht_fresh_signs);
        }
        if (keep) {
          EXPECT_FALSE(p.rht_fresh_signs);
        }
      }
  }
}

TEST(Recipe, QuantizedWhenAnyOperandIs) {
  EXPECT_FALSE(LinearPolicy{}.quantized());
  for (int o = 0; o < kNumOperands; ++o) {
    EXPECT_TRUE(only(static_cast<Operand>(o)).quantized()) << o;
    LinearPolicy p = only(static_cast<Operand>(o));
    EXPECT_EQ(p[static_cast<Operand>(o)].format, QuantFormat::kNvfp4);
    p.q[o].format = QuantFormat::kNone;
    EXPECT_FALSE(p.quantized());
  }
}

TEST(Recipe, LinearKindNames) {
  EXPECT_EQ(to_string(LinearKind::kQkv), "qkv");
  EXPECT_EQ(to_string(LinearKind::kAttnOut), "attn_out");
  EXPECT_EQ(to_string(LinearKind::kGateUp), "gate_up");
  EXPECT_EQ(to_string(LinearKind::kDown), "down");
  EXPECT_EQ(to_string(static_cast<LinearKind>(kNumLinearKinds)), "?");
}

}  // namespace
}  // namespace fp4
