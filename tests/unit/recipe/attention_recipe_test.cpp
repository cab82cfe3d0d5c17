// The recipe section [attention] (Q-Attn): default off, parsing, --set overrides, TOML round trip and
// the errors for keys and values that cannot work.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "recipe_test_util.h"

namespace fp4 {
namespace {

using testing::expect_error;

TEST(AttentionRecipe, OffByDefaultAndAbsentFromTheText) {
  for (const char* name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    const Recipe r = load_recipe(name);
    EXPECT_FALSE(r.attention.q_attn) << name;
    EXPECT_EQ(to_toml(r).find("attention"), std::string::npos) << name;  // old run texts stay equal
  }
}

TEST(AttentionRecipe, ParsesTheSectionAndOverridesAndRoundTrips) {
  const Recipe base = load_recipe("tetrajet-v2-base");
  const Recipe r = parse_recipe(to_toml(base) + "\n[attention]\nq_attn = true\n", "test.toml");
  validate(r);
  EXPECT_TRUE(r.attention.q_attn);
  const Recipe again = parse_recipe(to_toml(r), "again.toml");
  EXPECT_TRUE(again.attention.q_attn);
  EXPECT_EQ(to_toml(again), to_toml(r));

  EXPECT_TRUE(load_recipe("bf16", {"attention.q_attn=true"}).attention.q_attn);
  EXPECT_TRUE(load_recipe("nvidia-nvfp4", {"recipe.attention.q_attn=true"}).attention.q_attn);
  EXPECT_FALSE(load_recipe("bf16", {"attention.q_attn=true", "attention.q_attn=false"}).attention.q_attn);
  const Recipe off = parse_recipe(to_toml(base) + "\n[attention]\nq_attn = false\n", "off.toml");
  EXPECT_FALSE(off.attention.q_attn);
}

TEST(AttentionRecipe, BadKeysAndValuesAreNamed) {
  expect_error([] { load_recipe("bf16", {"attention.q_attn=yes"}); }, "expected true or false, got 'yes'");
  expect_error([] { load_recipe("bf16", {"attention.q_attn=1"}); }, "attention.q_attn=1");
  expect_error([] { load_recipe("bf16", {"attention.qattn=true"}); }, "unknown key (expected q_attn)");
  expect_error([] { load_recipe("bf16", {"attention=true"}); }, "attention.q_attn");
  const std::string base = to_toml(load_recipe("bf16"));
  expect_error([&] { parse_recipe(base + "\n[attention]\nq_attn = \"on\"\n", "bad.toml"); },
               "bad.toml: 'attention.q_attn'");
  expect_error([&] { parse_recipe(base + "\n[attention]\nrounding = \"sr\"\n", "bad.toml"); },
               "unknown key (expected q_attn)");
  expect_error([&] { parse_recipe("attention = true\n" + base, "bad.toml"); }, "expected a table");
}

}  // namespace
}  // namespace fp4
