// Presets that extend another (RECIPES.md section 4b): every preset loads, the shrunk presets resolve to
// exactly the recipe text they had when they were written out in full (so existing checkpoints, which store
// that text, still resume), a child changes only what it names, and bad chains are errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "recipe/recipe_io.h"
#include "recipe_test_util.h"

namespace fp4 {
namespace {

// A recipe holding only the given leading fields (name, description, linear policy, bf16 layers, optimizer).
Recipe policy_of(std::string name, std::string description, const LinearPolicy& linear,
                 std::vector<int> bf16_layers = {}, std::string optimizer = "adamw") {
  Recipe r;
  r.name = std::move(name);
  r.description = std::move(description);
  r.linear = linear;
  r.bf16_layers = std::move(bf16_layers);
  r.optimizer = std::move(optimizer);
  return r;
}

namespace fs = std::filesystem;
using testing::expect_error;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory of recipe files, removed at scope exit.
class RecipeDir {
 public:
  RecipeDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("fp4_recipe_test_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~RecipeDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }

 private:
  fs::path path_;
};

TEST(PresetExtends, EveryPresetLoadsAndRoundTripsThroughItsText) {
  const std::vector<std::string> names = recipe_preset_names();
  for (const char* expected : {"bf16", "nvidia-nvfp4", "nvidia-nvfp4-bf16tail", "tetrajet-v2-base",
                               "tetrajet-v2", "tetrajet-v2-memeff", "tetrajet-v2-lorasvd",
                               "tetrajet-v2-qadamw", "tetrajet-v2-qroot", "fullstack-fp4", "fp4train-max"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    const Recipe r = load_recipe(n);
    EXPECT_EQ(r.name, n);
    EXPECT_FALSE(r.description.empty());
    const std::string text = to_toml(r);
    EXPECT_EQ(text.find("extends"), std::string::npos);  // the run records the resolved recipe
    EXPECT_EQ(to_toml(parse_recipe(text, n + " (resolved)")), text);
  }
}

// The texts in preset_toml/ are to_toml of the presets before they were shrunk to `extends`.
TEST(PresetExtends, ShrunkPresetsResolveToTheirFormerFullText) {
  const fs::path dir = fs::path(FP4_SOURCE_DIR) / "tests/unit/recipe/preset_toml";
  int compared = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    SCOPED_TRACE(e.path().string());
    EXPECT_EQ(to_toml(load_recipe(e.path().stem().string())), read_text(e.path()));
    ++compared;
  }
  EXPECT_EQ(compared, 6);
}

TEST(PresetExtends, NewPresetsHoldWhatSection4bSays) {
  const Recipe base = load_recipe("tetrajet-v2-base");
  const Recipe full = load_recipe("tetrajet-v2");
  EXPECT_EQ(to_toml(policy_of(full.name, full.description, full.linear, full.bf16_layers, full.optimizer)),
            to_toml(policy_of(full.name, full.description, base.linear, base.bf16_layers, base.optimizer)));
  EXPECT_TRUE(full.out_control.enabled);
  EXPECT_DOUBLE_EQ(full.out_control.ratio, 0.1);
  EXPECT_EQ(full.out_control.round_to, 16);
  EXPECT_EQ(full.out_control.calib_start, 501);  // the authors' calibration steps
  EXPECT_EQ(full.out_control.calib_steps, 50);
  EXPECT_TRUE(full.osci_reset.enabled);
  EXPECT_EQ(full.osci_reset.window, 50);
  EXPECT_DOUBLE_EQ(full.osci_reset.threshold, 8);
  EXPECT_EQ(full.osci_reset.period, 200);
  EXPECT_DOUBLE_EQ(full.osci_reset.start, 0.65);
  EXPECT_DOUBLE_EQ(full.osci_reset.track_fraction, 1.0);

  Recipe memeff = load_recipe("tetrajet-v2-memeff");
  EXPECT_DOUBLE_EQ(memeff.osci_reset.track_fraction, 0.1);
  memeff.osci_reset.track_fraction = 1.0;
  memeff.name = full.name;
  memeff.description = full.description;
  EXPECT_EQ(to_toml(memeff), to_toml(full));  // nothing else differs

  const Recipe nvidia = load_recipe("nvidia-nvfp4");
  Recipe tail = load_recipe("nvidia-nvfp4-bf16tail");
  EXPECT_EQ(tail.bf16_layers, std::vector<int>{-1});
  tail.bf16_layers = {};
  tail.name = nvidia.name;
  tail.description = nvidia.description;
  EXPECT_EQ(to_toml(tail), to_toml(nvidia));

  const Recipe fs4 = load_recipe("fullstack-fp4");
  EXPECT_EQ(to_toml(policy_of("x", "", fs4.linear)), to_toml(policy_of("x", "", nvidia.linear)));
  EXPECT_TRUE(fs4.lora_svd.enabled);
  EXPECT_EQ(fs4.lora_svd.rank, 32);
  EXPECT_EQ(fs4.optimizer, "q-root+q-adamw");
  EXPECT_TRUE(fs4.attention.q_attn);
  EXPECT_FALSE(fs4.out_control.enabled);
  EXPECT_FALSE(fs4.osci_reset.enabled);

  const Recipe max = load_recipe("fp4train-max");
  EXPECT_EQ(to_toml(policy_of("x", "", max.linear)), to_toml(policy_of("x", "", base.linear)));
  EXPECT_TRUE(max.out_control.enabled && max.osci_reset.enabled && max.lora_svd.enabled &&
              max.attention.q_attn);
  EXPECT_EQ(max.optimizer, "q-root+q-adamw");
}

TEST(PresetExtends, ChildChangesOnlyWhatItNames) {
  RecipeDir dir;
  dir.write(
      "parent.toml",
      "name = \"parent\"\ndescription = \"the parent\"\noptimizer = \"q-adamw\"\nbf16_layers = [0, -1]\n"
      "[linear.q2]\nformat = \"nvfp4\"\nblock = \"1x16\"\nouter = \"block128\"\nrounding = \"rtn\"\n"
      "[lora_svd]\nrank = 8\nbeta = 0.5\n");
  const std::string child = dir.write("child.toml",
                                      "extends = \"parent\"\nname = \"child\"\nbf16_layers = [1]\n"
                                      "[linear.q2]\nrounding = \"sr\"\n[lora_svd]\nbeta = 2.0\n");
  const Recipe c = load_recipe(child);
  EXPECT_EQ(c.name, "child");
  EXPECT_EQ(c.description, "");  // a description is not inherited: it describes its own file
  EXPECT_EQ(c.optimizer, "q-adamw");
  EXPECT_EQ(c.bf16_layers, std::vector<int>{1});  // lists are replaced, not appended to
  EXPECT_EQ(c.linear[Operand::kQ2W].rounding, Rounding::kSr);
  EXPECT_EQ(c.linear[Operand::kQ2W].block, BlockShape::k1x16);  // the parent's fields of [linear.q2] stay
  EXPECT_EQ(c.linear[Operand::kQ2W].outer, OuterScale::kBlock128);
  EXPECT_EQ(c.lora_svd.rank, 8);
  EXPECT_DOUBLE_EQ(c.lora_svd.beta, 2.0);
  // A .toml path is taken relative to the extending file; a chain of three resolves in order.
  const std::string grandchild = dir.write(
      "grandchild.toml", "extends = \"child.toml\"\nname = \"grandchild\"\noptimizer = \"adamw\"\n");
  const Recipe g = load_recipe(grandchild);
  EXPECT_EQ(g.bf16_layers, std::vector<int>{1});
  EXPECT_EQ(g.optimizer, "adamw");
  EXPECT_EQ(g.linear[Operand::kQ2W].rounding, Rounding::kSr);
  // Overrides apply to the resolved recipe.
  EXPECT_EQ(load_recipe(grandchild, {"linear.q2.rounding=rtn"}).linear[Operand::kQ2W].rounding,
            Rounding::kRtn);
}

TEST(PresetExtends, BadChainsAreErrorsNamingTheFile) {
  RecipeDir dir;
  const std::string a = dir.write("a.toml", "extends = \"b\"\nname = \"a\"\n");
  dir.write("b.toml", "extends = \"a\"\nname = \"b\"\n");
  expect_error([&] { load_recipe(a); }, "cycle");
  expect_error([&] { load_recipe(a); }, "b.toml: 'extends'");
  const std::string self = dir.write("self.toml", "extends = \"self\"\nname = \"self\"\n");
  expect_error([&] { load_recipe(self); }, "cycle");
  const std::string orphan = dir.write("orphan.toml", "extends = \"no-such-preset\"\nname = \"orphan\"\n");
  expect_error([&] { load_recipe(orphan); }, "orphan.toml: 'extends': no recipe 'no-such-preset'");
  expect_error([&] { load_recipe(orphan); }, "tetrajet-v2-base");  // the presets are listed
  const std::string number = dir.write("number.toml", "extends = 3\nname = \"number\"\n");
  expect_error([&] { load_recipe(number); }, "number.toml: 'extends': expected the name of a preset");
  const std::string empty = dir.write("empty.toml", "extends = \"\"\nname = \"empty\"\n");
  expect_error([&] { load_recipe(empty); }, "expected the name of a preset");
  // An unknown key is reported in the file that holds it, child or parent.
  const std::string typo =
      dir.write("typo.toml", "extends = \"tetrajet-v2\"\nname = \"typo\"\noptimiser = \"adamw\"\n");
  expect_error([&] { load_recipe(typo); }, "typo.toml: unknown key 'optimiser'");
  dir.write("bad-parent.toml", "name = \"bad-parent\"\n[osci_reset]\nwindoww = 3\n");
  const std::string kid = dir.write("kid.toml", "extends = \"bad-parent\"\nname = \"kid\"\n");
  expect_error([&] { load_recipe(kid); }, "bad-parent.toml: 'osci_reset.windoww'");
  // Every file names itself.
  const std::string nameless = dir.write("nameless.toml", "extends = \"bf16\"\n");
  expect_error([&] { load_recipe(nameless); }, "nameless.toml: missing 'name'");
  // The resolved recipe is validated as a whole.
  const std::string invalid = dir.write(
      "invalid.toml", "extends = \"tetrajet-v2-lorasvd\"\nname = \"invalid\"\noptimizer = \"q-adamw\"\n");
  expect_error([&] { load_recipe(invalid); }, "only adamw and the root optimizers");
}

}  // namespace
}  // namespace fp4
