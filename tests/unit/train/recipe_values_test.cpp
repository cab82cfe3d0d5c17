// Recipe values as the run reads them: numbers range-checked where they are parsed (no wrap when narrowed
// to int, no "[1 0]" read as [10]) and bf16_layers checked against the model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "recipe/recipe_io.h"
#include "test_util.h"
#include "train/run_config.h"

namespace fp4 {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

Recipe with(const std::string& assignment) {
  return load_recipe("nvidia-nvfp4", {assignment});
}

TEST(RecipeValues, LayerListsParseOnlyWhatTheySay) {
  EXPECT_EQ(with("bf16_layers=[0, -1]").bf16_layers, (std::vector<int>{0, -1}));
  EXPECT_EQ(with("bf16_layers= [ 3 ,1 ] ").bf16_layers, (std::vector<int>{3, 1}));
  EXPECT_EQ(with("bf16_layers=2").bf16_layers, (std::vector<int>{2}));
  EXPECT_TRUE(with("bf16_layers=[]").bf16_layers.empty());
  EXPECT_THAT(error_of([] { with("bf16_layers=[1 0]"); }), HasSubstr("expected a block index"));
  EXPECT_THAT(error_of([] { with("bf16_layers=[4294967296]"); }), HasSubstr("got '4294967296'"));
  EXPECT_THAT(error_of([] { with("bf16_layers=[99999999999999999999]"); }), HasSubstr("an integer in ["));
  EXPECT_THAT(error_of([] { with("bf16_layers=[1,,2]"); }), HasSubstr("empty entry"));
  EXPECT_THAT(error_of([] { with("bf16_layers=[1,]"); }), HasSubstr("trailing ','"));
  EXPECT_THAT(error_of([] { with("bf16_layers=[1"); }), HasSubstr("closing ']'"));
  EXPECT_THAT(error_of([] { with("bf16_layers=[0.5]"); }), HasSubstr("expected a block index"));
}

TEST(RecipeValues, IntegersDoNotWrapWhenNarrowed) {
  // 2^32 + 16 used to be read as 16.
  EXPECT_THAT(error_of([] { with("linear.q1.rht=4294967312"); }),
              HasSubstr("an RHT size, an integer in [0, 65536]"));
  EXPECT_THAT(error_of([] { with("linear.q1.rht=-16"); }), HasSubstr("an RHT size"));
  EXPECT_THAT(error_of([] { parse_recipe("name = \"x\"\nbf16_layers = [4294967296]\n", "r.toml"); }),
              HasSubstr("r.toml: 'bf16_layers': block index 4294967296 is out of range"));
  EXPECT_THAT(error_of([] { parse_recipe("name = \"x\"\n[linear.q1]\nrht = 4294967312\n", "r.toml"); }),
              HasSubstr("r.toml: 'linear.q1.rht': expected an RHT size"));
  EXPECT_THAT(error_of([] { with("osci_reset.start=1e300"); }), HasSubstr("step number up to 1e12"));
  EXPECT_EQ(load_recipe("nvidia-nvfp4", {"linear.q5.rht=16", "linear.q6.rht=16"}).linear.q[4].rht_n, 16);
}

TEST(RecipeValues, Bf16LayersMustNameBlocksOfTheModel) {
  ModelConfig two = model_preset("tiny");
  two.n_layers = 2;
  for (int ok : {0, 1, -1, -2}) {
    Recipe r = with("bf16_layers=[" + std::to_string(ok) + "]");
    EXPECT_NO_THROW(check_bf16_layers(r, two)) << ok;
  }
  for (int bad : {2, 7, 99, -3, -99}) {
    Recipe r = with("bf16_layers=[" + std::to_string(bad) + "]");
    EXPECT_THAT(
        error_of([&] { check_bf16_layers(r, two); }),
        HasSubstr("bf16_layers names block " + std::to_string(bad) + ", but model 'tiny' has 2 blocks"))
        << bad;
  }
}

}  // namespace
}  // namespace fp4
