#include "recipe/optimizer_names.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace fp4 {
namespace {

TEST(OptimizerNames, EveryListedNameIsKnownAndNothingElse) {
  std::istringstream list(known_optimizers());
  std::string name;
  int n = 0;
  while (std::getline(list, name, ',')) {
    if (name.front() == ' ') name.erase(0, 1);
    EXPECT_TRUE(is_known_optimizer(name)) << name;
    ++n;
  }
  EXPECT_EQ(n, 5);
  for (const char* bad : {"", "AdamW", "adam", "q-adamw ", "sgd", "root2", "root-bf16 ", "root_bf16", "bf16"})
    EXPECT_FALSE(is_known_optimizer(bad)) << bad;
}

}  // namespace
}  // namespace fp4
