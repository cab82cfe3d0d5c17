// fp4train report: the table's arithmetic (gaps, share of the reference gap closed), the loss gaps and the
// pictures written beside it.
#include "report/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"

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
    m << "{\"type\":\"train\",\"step\":" << step << ",\"tokens\":" << step * 1000
      << ",\"loss\":" << final_val + 3.0 / step + noise(rng) << ",\"tokens_per_s\":" << 5000 + step << "}\n";
  m << "{\"type\":\"eval\",\"step\":50,\"tokens\":50000,\"val_loss\":" << final_val + 0.1
    << ",\"val_ppl\":1}\n";
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
  // The gap picture: one line per non-baseline run, next to the curves.
  std::ifstream gap_svg(root / "curves-gap.svg");
  const std::string gap_text((std::istreambuf_iterator<char>(gap_svg)), {});
  size_t gap_lines = 0;
  for (size_t p = gap_text.find("<polyline"); p != std::string::npos; p = gap_text.find("<polyline", p + 1))
    ++gap_lines;
  EXPECT_EQ(gap_lines, 2u);
  EXPECT_NE(gap_text.find("tetrajet-v2-base (validation)"), std::string::npos);
  fs::remove_all(root);
}

TEST(Report, LossGapMatchesTokensAndSubtracts) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.0, 5.0);
  RunSummary base, run;
  for (int k = 1; k <= 40; ++k) {
    base.train_tokens.push_back(100.0 * k);
    base.train_loss.push_back(u(rng));
    if (k % 3 == 0) continue;  // the run logged fewer steps: those tokens are skipped
    run.train_tokens.push_back(100.0 * k);
    run.train_loss.push_back(u(rng));
  }
  base.val_tokens = {1000, 2000, 4000};
  base.val_losses = {u(rng), u(rng), u(rng)};
  run.val_tokens = {1000, 3000, 4000};
  run.val_losses = {u(rng), u(rng), u(rng)};
  const LossGap g = loss_gap(run, base, 0.0);  // no smoothing: raw differences
  ASSERT_EQ(g.val_tokens, (std::vector<double>{1000, 4000}));
  EXPECT_DOUBLE_EQ(g.val_gap[0], run.val_losses[0] - base.val_losses[0]);
  EXPECT_DOUBLE_EQ(g.val_gap[1], run.val_losses[2] - base.val_losses[2]);
  ASSERT_EQ(g.train_tokens, run.train_tokens);
  for (size_t i = 0; i < g.train_tokens.size(); ++i) {
    const size_t b = static_cast<size_t>(g.train_tokens[i] / 100.0) - 1;
    EXPECT_DOUBLE_EQ(g.train_gap[i], run.train_loss[i] - base.train_loss[b]);
  }
  EXPECT_EQ(gap_svg_path("out/curves.svg"), fs::path("out/curves-gap.svg"));
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
