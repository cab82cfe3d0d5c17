// The recipe section [out_control]: parsing, --set overrides, TOML round trip and the errors for values
// that cannot work.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "recipe_test_util.h"

namespace fp4 {
namespace {

using testing::expect_error;

TEST(OutControlRecipe, DefaultsAreOffWithTheAuthorsValues) {
  const Recipe r = load_recipe("tetrajet-v2-base");
  EXPECT_FALSE(r.out_control.enabled);
  EXPECT_EQ(r.out_control.calib_start, 501);
  EXPECT_EQ(r.out_control.calib_steps, 50);
  EXPECT_DOUBLE_EQ(r.out_control.ratio, 0.1);
  EXPECT_EQ(r.out_control.round_to, 128);
  EXPECT_EQ(to_toml(r).find("out_control"), std::string::npos);  // recipes without it keep their text
}

TEST(OutControlRecipe, ParsesTheSectionAndOverridesAndRoundTrips) {
  const Recipe base = load_recipe("tetrajet-v2-base");
  const std::string text = to_toml(base) +
                           "\n[out_control]\nenabled = true\ncalib_start = 7\ncalib_steps = 3\nratio = 0.25\n"
                           "round_to = 16\n";
  const Recipe r = parse_recipe(text, "test.toml");
  validate(r);
  EXPECT_TRUE(r.out_control.enabled);
  EXPECT_EQ(r.out_control.calib_start, 7);
  EXPECT_EQ(r.out_control.calib_steps, 3);
  EXPECT_DOUBLE_EQ(r.out_control.ratio, 0.25);
  EXPECT_EQ(r.out_control.round_to, 16);
  const Recipe again = parse_recipe(to_toml(r), "again.toml");
  EXPECT_EQ(to_toml(again), to_toml(r));
  EXPECT_EQ(again.out_control.calib_start, 7);

  const Recipe o =
      load_recipe("tetrajet-v2-base",
                  {"out_control.enabled=true", "out_control.ratio=0.3", "recipe.out_control.round_to=32",
                   "out_control.calib_start=2", "out_control.calib_steps=9"});
  EXPECT_TRUE(o.out_control.enabled);
  EXPECT_DOUBLE_EQ(o.out_control.ratio, 0.3);
  EXPECT_EQ(o.out_control.round_to, 32);
  EXPECT_EQ(o.out_control.calib_start, 2);
  EXPECT_EQ(o.out_control.calib_steps, 9);
}

TEST(OutControlRecipe, BadValuesAreClearErrors) {
  const auto with = [](const std::string& a) {
    return load_recipe("tetrajet-v2-base", {"out_control.enabled=true", a});
  };
  for (const char* bad : {"out_control.ratio=0", "out_control.ratio=1", "out_control.ratio=1.5",
                          "out_control.ratio=-0.1", "out_control.ratio=abc"})
    expect_error([&] { with(bad); }, "fraction in (0, 1)");
  for (const char* bad : {"out_control.round_to=24", "out_control.round_to=0", "out_control.round_to=8",
                          "out_control.round_to=-16"})
    expect_error([&] { with(bad); }, "multiple of 16");
  for (const char* bad :
       {"out_control.calib_start=0", "out_control.calib_steps=-3", "out_control.calib_steps=2.5"})
    expect_error([&] { with(bad); }, "positive number of steps");
  expect_error([&] { with("out_control.enabled=yes"); }, "true or false");
  expect_error([&] { with("out_control.window=5"); }, "out_control.window");
  expect_error([] { parse_recipe("name = \"x\"\n[out_control]\nratio = 2.0\n", "x.toml"); },
               "x.toml: 'out_control.ratio'");
  // The NVIDIA recipe reuses Q2 for dX: the MXFP8 channels would never be re-quantized.
  expect_error([] { load_recipe("nvidia-nvfp4", {"out_control.enabled=true"}); }, "reuse");
  expect_error([] { load_recipe("bf16", {"out_control.enabled=true"}); },
               "out_control splits the NVFP4 forward");
}

}  // namespace
}  // namespace fp4
