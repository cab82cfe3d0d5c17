#include "recipe/optimizer_names.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace fp4 {
namespace {

TEST(OptimizerNames, EveryListedNameIsKnownAndNothingElse) {
  // The ROOT forms shard whole tensors and can reset LoRA-SVD's factors, with or without "+q-adamw".
  for (const char* root : {"root", "q-root+q-adamw", "root-bf16+q-adamw"}) {
    EXPECT_TRUE(optimizer_needs_whole_tensors(root)) << root;
    EXPECT_TRUE(optimizer_resets_factor_moments(root)) << root;
  }
  EXPECT_FALSE(optimizer_needs_whole_tensors("q-adamw"));
  EXPECT_FALSE(optimizer_resets_factor_moments("q-adamw"));
  EXPECT_TRUE(optimizer_resets_factor_moments("adamw"));
  std::istringstream list(known_optimizers());
  std::string name;
  int n = 0;
  while (std::getline(list, name, ',')) {
    if (name.front() == ' ') name.erase(0, 1);
    EXPECT_TRUE(is_known_optimizer(name)) << name;
    ++n;
  }
  EXPECT_EQ(n, 8);
  for (const char* bad : {"", "AdamW", "adam", "q-adamw ", "sgd", "root2", "root-bf16 ", "root_bf16", "bf16",
                          "q-root+adamw", "q-root+", "+q-adamw", "q-adamw+q-root", "q-root+q-adamw "})
    EXPECT_FALSE(is_known_optimizer(bad)) << bad;
}

}  // namespace
}  // namespace fp4
