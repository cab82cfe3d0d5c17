// fp4train report for ablations: the tables and pictures of runs at several budgets with OsciReset and
// OutControl records.
#include "report/ablation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "../train/test_util.h"
#include "report/report.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using fp4::testing::TempDir;
using ::testing::HasSubstr;

TEST(Ablation, BlockOfNames) {
  EXPECT_EQ(block_of("blocks.0.attn.wqkv"), 0);
  EXPECT_EQ(block_of("blocks.17.mlp.w_down"), 17);
  EXPECT_EQ(block_of("lm_head"), -1);
  EXPECT_EQ(block_of("blocks..x"), -1);
  EXPECT_EQ(block_of("blocks.a1.x"), -1);
}

// A run directory: config.json (seed, an olmo2-1m-bytes-like model), recipe.toml, metrics with a final eval.
fs::path make_run(const fs::path& root, const std::string& recipe, int seed, int64_t steps, double final_val,
                  const std::string& extra_lines = "") {
  const fs::path dir = root / ("b" + std::to_string(steps)) / (recipe + "-s" + std::to_string(seed));
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.toml") << "name = \"" << recipe << "\"\n";
  std::ofstream(dir / "config.json") << "{\"train\": {\"seed\": " << seed
                                     << "}, \"model\": {\"n_layers\": 4, \"d_model\": 128, \"d_ff\": 384, "
                                        "\"vocab_size\": 384}}\n";
  std::ofstream m(dir / "metrics.jsonl");
  m.precision(17);
  for (int64_t s = 10; s <= steps; s += 10)
    m << "{\"type\":\"train\",\"step\":" << s << ",\"tokens\":" << s * 1000
      << ",\"loss\":" << final_val + 1.0 / s << "}\n";
  m << "{\"type\":\"eval\",\"step\":" << steps / 2 << ",\"tokens\":" << steps * 500
    << ",\"val_loss\":" << final_val + 0.2 << ",\"val_ppl\":1}\n";
  m << extra_lines;
  m << "{\"type\":\"eval\",\"step\":" << steps << ",\"tokens\":" << steps * 1000
    << ",\"val_loss\":" << final_val << ",\"val_ppl\":" << std::exp(final_val) << "}\n";
  return dir;
}

TEST(Ablation, NonEmbeddingParametersFromTheConfig) {
  TempDir tmp;
  const fs::path d = make_run(tmp.path(), "bf16", 1, 100, 2.0);
  EXPECT_EQ(read_non_embedding_params(d), 854144);  // 4 x 213,504 + 128 (configs/models/olmo2-1m-bytes.toml)
  EXPECT_EQ(read_non_embedding_params(tmp.path()), 0);
}

TEST(Ablation, ReportOfTwoBudgetsGivesPairedTablesTheScanAndTelemetry) {
  TempDir tmp;
  const double base[3] = {2.000, 2.010, 1.990};
  const double gap_nv[3] = {0.050, 0.048, 0.055}, gap_x[3] = {0.030, 0.035, 0.025};
  const std::string osci =
      "{\"type\":\"osci_reset\",\"step\":150,\"tracked\":1000,\"reset\":30,\"layers\":["
      "{\"name\":\"blocks.0.attn.wqkv\",\"tracked\":600,\"reset\":24,\"mean_risk\":2.5},"
      "{\"name\":\"blocks.1.attn.wqkv\",\"tracked\":400,\"reset\":6,\"mean_risk\":1.0}]}\n"
      // A later window with flips (as written since they are counted): 3 steps, rates 0.1 and 0.05.
      "{\"type\":\"osci_reset\",\"step\":350,\"tracked\":1000,\"reset\":10,\"flips\":240,"
      "\"flip_rate\":0.08,\"layers\":["
      "{\"name\":\"blocks.0.attn.wqkv\",\"tracked\":600,\"reset\":4,\"mean_risk\":2.0,\"flips\":180,"
      "\"flip_rate\":0.1},"
      "{\"name\":\"blocks.1.attn.wqkv\",\"tracked\":400,\"reset\":6,\"mean_risk\":1.5,\"flips\":60,"
      "\"flip_rate\":0.05}]}\n";
  const std::string oc =
      "{\"type\":\"out_control\",\"step\":60,\"channels\":48,\"layers\":["
      "{\"name\":\"blocks.0.attn.wqkv\",\"channels\":16,\"in_features\":128,\"share\":0.25},"
      "{\"name\":\"blocks.0.mlp.w_down\",\"channels\":32,\"in_features\":384,\"share\":0.5}]}\n";
  std::vector<RunSummary> runs;
  for (int64_t steps : {200, 400})
    for (int s = 0; s < 3; ++s) {
      const double shrink = steps == 200 ? 2.0 : 1.0;  // the smaller budget has twice the gaps
      runs.push_back(summarize_run(make_run(tmp.path(), "bf16", s + 1, steps, base[s])));
      runs.push_back(
          summarize_run(make_run(tmp.path(), "nvidia-nvfp4", s + 1, steps, base[s] + shrink * gap_nv[s])));
      runs.push_back(summarize_run(
          make_run(tmp.path(), "tetrajet-v2", s + 1, steps, base[s] + shrink * gap_x[s], osci + oc)));
    }
  ASSERT_EQ(runs[2].osci.size(), 2u);
  EXPECT_FALSE(runs[2].osci[0].layers[0].flips.has_value());
  ASSERT_TRUE(runs[2].osci[1].layers[1].flips.has_value());
  EXPECT_EQ(*runs[2].osci[1].layers[1].flips, 60);
  EXPECT_EQ(runs[2].osci[1].layers[1].flip_rate, 0.05);
  ASSERT_EQ(runs[2].out_control.size(), 2u);
  ReportOptions opt;
  opt.svg_path = tmp.path() / "abl.svg";
  const std::string md = write_report(runs, opt);
  // Main budget (400 steps = 400,000 tokens, 0.468 tokens per non-embedding parameter): the hand numbers.
  EXPECT_THAT(md, HasSubstr("Paired over seeds at 400000 tokens (0.468 per non-embedding parameter)"));
  EXPECT_THAT(
      md,
      HasSubstr("| tetrajet-v2 | 3 | +0.0300 [+0.0176, +0.0424] | 0.0050 | 41.2% [-0.5%, 70.6%] | yes |"));
  // The smaller budget: gaps doubled, the share unchanged (a ratio).
  EXPECT_THAT(
      md,
      HasSubstr("| tetrajet-v2 | 3 | +0.0600 [+0.0352, +0.0848] | 0.0100 | 41.2% [-0.5%, 70.6%] | yes |"));
  EXPECT_THAT(md, HasSubstr("| tetrajet-v2 | +0.0600 [+0.0352, +0.0848] / 41.2% [-0.5%, 70.6%] | +0.0300"));
  // OsciReset: 30 of 1000 reset, mean R weighted by tracked (600 x 2.5 + 400 x 1) / 1000 = 1.9, per block
  // 4%, 1.5%.
  // No flips recorded in that window: "-"; in the later one the tracked-weighted flip rate
  // (600 x 0.1 + 400 x 0.05) / 1000 = 0.08, mean R (600 x 2 + 400 x 1.5) / 1000 = 1.8.
  EXPECT_THAT(md, HasSubstr("| tetrajet-v2 | 1 | 150 | 1000 | 30 | 3.0% | 1.900 | - | 4.0%, 1.5% |"));
  EXPECT_THAT(md, HasSubstr("| tetrajet-v2 | 1 | 350 | 1000 | 10 | 1.0% | 1.800 | 0.08 | 0.7%, 1.5% |"));
  EXPECT_THAT(md, HasSubstr("Pictures: " + (tmp.path() / "abl-osci.svg").string() + ", " +
                            (tmp.path() / "abl-oscirisk.svg").string() + ", " +
                            (tmp.path() / "abl-osciflips.svg").string() + "\n"));
  EXPECT_THAT(md, HasSubstr("| tetrajet-v2 | 2 | 60 | 48 of 512 | 25.0%, 50.0% |"));
  for (const char* f : {"abl.svg", "abl-gap.svg", "abl-gapmean.svg", "abl-scan.svg", "abl-osci.svg",
                        "abl-oscirisk.svg", "abl-osciflips.svg", "abl-outcontrol.svg"})
    EXPECT_TRUE(fs::exists(tmp.path() / f)) << f;
  // The flip picture draws each weight's rate (one series per weight, named by recipe and weight).
  std::ifstream in(tmp.path() / "abl-osciflips.svg");
  const std::string svg{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_THAT(svg, HasSubstr("tetrajet-v2 blocks.0.attn.wqkv"));
  EXPECT_THAT(svg, HasSubstr("tetrajet-v2 blocks.1.attn.wqkv"));
  EXPECT_THAT(svg, HasSubstr("flip rate"));
}

// Runs whose records predate flip counting: the table says "-" and no flip picture is drawn.
TEST(Ablation, OsciRecordsWithoutFlipsGetNoFlipPicture) {
  TempDir tmp;
  const std::string osci =
      "{\"type\":\"osci_reset\",\"step\":50,\"tracked\":64,\"reset\":8,\"layers\":["
      "{\"name\":\"blocks.0.mlp.w_down\",\"tracked\":64,\"reset\":8,\"mean_risk\":3.0}]}\n";
  const std::vector<RunSummary> runs = {
      summarize_run(make_run(tmp.path(), "tetrajet-v2", 1, 100, 2.0, osci))};
  const std::string md = osci_report(runs, tmp.path() / "x.svg");
  EXPECT_THAT(md, HasSubstr("| tetrajet-v2 | 1 | 50 | 64 | 8 | 12.5% | 3.000 | - | 12.5% |"));
  EXPECT_THAT(md, HasSubstr("Pictures: " + (tmp.path() / "x-osci.svg").string() + ", " +
                            (tmp.path() / "x-oscirisk.svg").string() + "\n"));
  EXPECT_TRUE(fs::exists(tmp.path() / "x-osci.svg"));
  EXPECT_FALSE(fs::exists(tmp.path() / "x-osciflips.svg"));
}

}  // namespace
}  // namespace fp4
