// Loading and writing recipes: what a run directory records (to_toml) reads back as the same recipe, also
// after random overrides; the override syntax's errors name the assignment and the key.
#include "recipe/recipe_io.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../error_of.h"
#include "core/error.h"

namespace fp4 {
namespace {

using testing::error_of;

// What a run directory records (to_toml) must read back as the same recipe: the report labels runs by it.
TEST(RecipeIo, TomlRoundTrips) {
  for (const char* name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    const Recipe r = load_recipe(name);
    const Recipe back = parse_recipe(to_toml(r), std::string(name) + " (to_toml)");
    EXPECT_EQ(back.name, r.name);
    EXPECT_EQ(to_toml(back), to_toml(r)) << name;
  }
}

// Random overrides of the numeric and list fields on random presets: the values land in the recipe and
// survive to_toml and parse_recipe.
TEST(RecipeIo, RandomOverridesRoundTripThroughTheToml) {
  std::mt19937 rng(std::random_device{}());
  // Enabled, so that to_toml writes the sections (it leaves out the ones that are off), on the presets that
  // take all three (OutControl needs re-quantized Q4/Q6, LoRA-SVD an optimizer that resets moments).
  const std::vector<std::string> enable = {"osci_reset.enabled=true", "out_control.enabled=true",
                                           "lora_svd.enabled=true", "optimizer=adamw"};
  std::vector<std::string> presets;
  for (const std::string& p : recipe_preset_names()) {
    try {
      load_recipe(p, enable);
      presets.push_back(p);
    } catch (const Error&) {
    }
  }
  ASSERT_GE(presets.size(), 3u) << "too few presets take OsciReset, OutControl and LoRA-SVD together";
  for (int trial = 0; trial < 40; ++trial) {
    const std::string preset = presets[rng() % presets.size()];
    const int window = 1 + static_cast<int>(rng() % 1000), period = window + static_cast<int>(rng() % 500);
    const int rank = 1 + static_cast<int>(rng() % 64);
    const int first = static_cast<int>(rng() % 8), last = -1 - static_cast<int>(rng() % 8);
    const int round_to = 16 * (1 + static_cast<int>(rng() % 16));
    std::vector<std::string> overrides = enable;
    overrides.insert(
        overrides.end(),
        {"osci_reset.window=" + std::to_string(window), "osci_reset.period=" + std::to_string(period),
         "recipe.lora_svd.rank=" + std::to_string(rank),
         "bf16_layers=[" + std::to_string(first) + ", " + std::to_string(last) + "]",
         "out_control.round_to=" + std::to_string(round_to)});
    SCOPED_TRACE(preset);
    const Recipe r = load_recipe(preset, overrides);
    EXPECT_EQ(r.osci_reset.window, window);
    EXPECT_EQ(r.lora_svd.rank, rank);
    EXPECT_EQ(r.bf16_layers, (std::vector<int>{first, last}));
    EXPECT_EQ(r.out_control.round_to, round_to);
    const Recipe back = parse_recipe(to_toml(r), preset + " (to_toml)");
    EXPECT_EQ(back.osci_reset.window, window);
    EXPECT_EQ(back.osci_reset.period, period);
    EXPECT_EQ(back.lora_svd.rank, rank);
    EXPECT_EQ(back.bf16_layers, r.bf16_layers);
    EXPECT_EQ(back.out_control.round_to, round_to);
    EXPECT_EQ(to_toml(back), to_toml(r));
  }
}

TEST(RecipeIo, OverrideErrorsNameTheAssignment) {
  Recipe r = load_recipe("bf16");
  const struct {
    std::string assignment, says;
  } cases[] = {
      {"optimizer", "expected key=value"},
      {"nonsense=1", "unknown key 'nonsense'"},
      {"linear.q7.format=nvfp4", "unknown operand 'linear.q7'"},
      {"linear.q1=nvfp4", "expected linear.qN.field"},
      {"bf16_layers=[0, -1", "lacks its closing ']'"},
      {"bf16_layers=[0,,1]", "empty entry"},
      {"linear.rht_signs=sometimes", "expected 'fixed' or 'per_call'"},
      {"osci_reset.enabled=yes", "expected true or false"},
      {"osci_reset.speed=2", "unknown key (expected enabled, window"},
      {"out_control.round_to=24", "recipe override 'out_control.round_to=24'"},
      {"attention.q_attn=1", "expected true or false"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of([&] { apply_recipe_override(r, c.assignment); });
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.assignment << ": " << msg;
    EXPECT_NE(msg.find(c.assignment.substr(0, c.assignment.find('='))), std::string::npos) << msg;
  }
  const std::string msg = error_of([] { load_recipe("no-such-preset"); });
  EXPECT_NE(msg.find("unknown recipe 'no-such-preset' (presets in "), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
