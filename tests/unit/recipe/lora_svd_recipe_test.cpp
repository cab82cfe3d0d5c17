// The recipe section [lora_svd]: defaults, the preset, parsing, --set overrides, TOML round trip and the
// errors for values that cannot work.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "recipe_test_util.h"

namespace fp4 {
namespace {

using testing::expect_error;

TEST(LoraSvdRecipe, DefaultsAreOffWithTheSpecValues) {
  const Recipe r = load_recipe("tetrajet-v2-base");
  EXPECT_FALSE(r.lora_svd.enabled);
  EXPECT_EQ(r.lora_svd.rank, 32);
  EXPECT_DOUBLE_EQ(r.lora_svd.beta, 1.0);
  EXPECT_EQ(r.lora_svd.realign_every, 2048);
  EXPECT_EQ(to_toml(r).find("lora_svd"), std::string::npos);  // recipes without it keep their text
}

TEST(LoraSvdRecipe, ThePresetIsTetraJetV2BaseWithLoraSvd) {
  const Recipe base = load_recipe("tetrajet-v2-base");
  const Recipe r = load_recipe("tetrajet-v2-lorasvd");
  EXPECT_TRUE(r.lora_svd.enabled);
  EXPECT_EQ(r.lora_svd.rank, 32);
  EXPECT_DOUBLE_EQ(r.lora_svd.beta, 1.0);
  EXPECT_EQ(r.lora_svd.realign_every, 2048);
  Recipe same = r;  // everything else is the base recipe's
  same.name = base.name;
  same.description = base.description;
  same.lora_svd = LoraSvdConfig{};
  EXPECT_EQ(to_toml(same), to_toml(base));
}

TEST(LoraSvdRecipe, ParsesTheSectionAndOverridesAndRoundTrips) {
  const Recipe base = load_recipe("tetrajet-v2-base");
  const Recipe r = parse_recipe(
      to_toml(base) + "\n[lora_svd]\nenabled = true\nrank = 8\nbeta = 0.5\nrealign_every = 7\n", "test.toml");
  validate(r);
  EXPECT_TRUE(r.lora_svd.enabled);
  EXPECT_EQ(r.lora_svd.rank, 8);
  EXPECT_DOUBLE_EQ(r.lora_svd.beta, 0.5);
  EXPECT_EQ(r.lora_svd.realign_every, 7);
  const Recipe again = parse_recipe(to_toml(r), "again.toml");
  EXPECT_EQ(to_toml(again), to_toml(r));
  EXPECT_EQ(again.lora_svd.rank, 8);
  EXPECT_DOUBLE_EQ(again.lora_svd.beta, 0.5);

  const Recipe o = load_recipe("tetrajet-v2-base", {"lora_svd.enabled=true", "lora_svd.rank=4",
                                                    "recipe.lora_svd.beta=-1.5", "lora_svd.realign_every=1"});
  EXPECT_TRUE(o.lora_svd.enabled);
  EXPECT_EQ(o.lora_svd.rank, 4);
  EXPECT_DOUBLE_EQ(o.lora_svd.beta, -1.5);
  EXPECT_EQ(o.lora_svd.realign_every, 1);
  EXPECT_FALSE(load_recipe("tetrajet-v2-lorasvd", {"lora_svd.enabled=false"}).lora_svd.enabled);
}

TEST(LoraSvdRecipe, BadValuesAreClearErrors) {
  const auto with = [](const std::string& a) { return load_recipe("tetrajet-v2-lorasvd", {a}); };
  for (const char* bad : {"lora_svd.rank=0", "lora_svd.rank=-3", "lora_svd.rank=2.5", "lora_svd.rank=x"})
    expect_error([&] { with(bad); }, "expected a positive rank");
  for (const char* bad : {"lora_svd.realign_every=0", "lora_svd.realign_every=-1", "lora_svd.realign_every="})
    expect_error([&] { with(bad); }, "expected a positive number of steps");
  for (const char* bad : {"lora_svd.beta=nan", "lora_svd.beta=inf", "lora_svd.beta=-inf", "lora_svd.beta=0",
                          "lora_svd.beta=abc"})
    expect_error([&] { with(bad); }, "finite nonzero");
  expect_error([&] { with("lora_svd.enabled=1"); }, "true or false");
  expect_error([&] { with("lora_svd.ranks=4"); }, "lora_svd.ranks");
  expect_error([] { parse_recipe("name = \"x\"\n[lora_svd]\nrank = 0\n", "x.toml"); },
               "x.toml: 'lora_svd.rank'");
  expect_error([] { parse_recipe("name = \"x\"\nlora_svd = 3\n", "x.toml"); }, "expected a table");
  // A recipe built in code skips the field parser: validate() catches the same values.
  Recipe r = load_recipe("tetrajet-v2-lorasvd");
  r.lora_svd.rank = 0;
  expect_error([&] { validate(r); }, "lora_svd.rank (0)");
  r = load_recipe("tetrajet-v2-lorasvd");
  r.lora_svd.realign_every = 0;
  expect_error([&] { validate(r); }, "lora_svd.realign_every (0)");
  r = load_recipe("tetrajet-v2-lorasvd");
  r.lora_svd.beta = std::numeric_limits<double>::quiet_NaN();
  expect_error([&] { validate(r); }, "lora_svd.beta");
  // Nothing to protect without quantized linears; the moment reset is AdamW's.
  expect_error([] { load_recipe("bf16", {"lora_svd.enabled=true"}); }, "quantizes none");
  expect_error([] { load_recipe("tetrajet-v2-lorasvd", {"optimizer=q-adamw"}); },
               "adamw and the root optimizers implement");
  // The ROOT optimizers reset the factors' momentum, whatever their Newton-Schulz precision and whatever
  // steps their other parameters (the factors are ROOT matrices).
  for (const char* opt : {"root", "root-bf16", "q-root", "root+q-adamw", "q-root+q-adamw"})
    EXPECT_EQ(load_recipe("tetrajet-v2-lorasvd", {std::string("optimizer=") + opt}).optimizer, opt);
}

}  // namespace
}  // namespace fp4
