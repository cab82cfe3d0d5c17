// fp4train report: the table's arithmetic (gaps, share of the reference gap closed) and the picture.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "report/report.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;

fs::path make_run(const fs::path& root, const std::string& recipe, double final_val, std::mt19937& rng) {
  const fs::path dir = root / ("run-" + recipe);
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.toml") << "name = \"" << recipe << "\"\n";
  std::ofstream m(dir / "metrics.jsonl");
  m.precision(17);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  for (int step = 1; step <= 100; ++step)
    m << "{\"type\":\"train\",\"step\":" << step << ",\"tokens\":" << step * 1000 << ",\"loss\":"
      << final_val + 3.0 / step + noise(rng) << ",\"tokens_per_s\":" << 5000 + step << "}\n";
  m << "{\"type\":\"eval\",\"step\":50,\"tokens\":50000,\"val_loss\":" << final_val + 0.1 << ",\"val_ppl\":1}\n";
  m << "{\"type\":\"eval\",\"step\":100,\"tokens\":100000,\"val_loss\":" << final_val
    << ",\"val_ppl\":" << std::exp(final_val) << "}\n";
  return dir;
}

TEST(Report, TableGivesGapsAndTheShareOfTheReferenceGapClosed) {
  std::mt19937 rng(std::random_device{}());
  const fs::path root = fs::temp_directory_path() / ("fp4-report-" + std::to_string(rng()));
  std::uniform_real_distribution<double> base_loss(3.0, 4.0), gap(0.05, 0.2);
  const double b = base_loss(rng), g = gap(rng);
  std::vector<RunSummary> runs = {summarize_run(make_run(root, "bf16", b, rng)),
                                  summarize_run(make_run(root, "nvidia-nvfp4", b + g, rng)),
                                  summarize_run(make_run(root, "tetrajet-v2-base", b + 0.25 * g, rng))};
  EXPECT_EQ(runs[2].label, "tetrajet-v2-base");
  EXPECT_EQ(runs[2].last_step, 100);
  EXPECT_DOUBLE_EQ(runs[2].val_loss, b + 0.25 * g);
  EXPECT_NEAR(runs[2].final_train_loss, b + 0.25 * g + 3.0 / 97.5, 0.02);
  ReportOptions opt;
  opt.svg_path = root / "curves.svg";
  const std::string table = write_report(runs, opt);
  EXPECT_NE(table.find("75.0%"), std::string::npos) << table;  // 1 - 0.25 g / g
  std::ifstream svg(opt.svg_path);
  const std::string text((std::istreambuf_iterator<char>(svg)), {});
  EXPECT_NE(text.find("<svg"), std::string::npos);
  size_t lines = 0;
  for (size_t p = text.find("<polyline"); p != std::string::npos; p = text.find("<polyline", p + 1)) ++lines;
  EXPECT_EQ(lines, 3u);
  fs::remove_all(root);
}

TEST(Report, ADirectoryWithoutMetricsIsNamed) {
  const fs::path dir = fs::temp_directory_path() / "fp4-report-empty-dir";
  fs::create_directories(dir);
  try {
    summarize_run(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl"), std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp4

namespace fp4 {
namespace {

// What a run directory records (to_toml) must read back as the same recipe: the report labels runs by it.
TEST(Report, RecipeTomlRoundTrips) {
  for (const char* name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    const Recipe r = load_recipe(name);
    const Recipe back = parse_recipe(to_toml(r), std::string(name) + " (to_toml)");
    EXPECT_EQ(back.name, r.name);
    EXPECT_EQ(to_toml(back), to_toml(r)) << name;
  }
}

}  // namespace
}  // namespace fp4
