// Runs over several seeds: grouped by (recipe, seed), every gap taken against the baseline of the same
// seed, a recipe summarised over its seeds; runs without a recorded seed form a group of their own.
#include "report/seeds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../train/test_util.h"
#include "report/report.h"
#include "report_test_util.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using fp4::testing::config_with_seed;
using fp4::testing::kRecipes;
using fp4::testing::make_run_dir;
using fp4::testing::polylines;
using fp4::testing::printf_str;
using fp4::testing::read_text;
using fp4::testing::row_cells;
using fp4::testing::seed_name;
using fp4::testing::TempDir;

TEST(ReportSeeds, TwoSeedsGapsAreTakenAgainstTheBaselineOfTheSameSeed) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> base_loss(2.0, 4.0), offset(0.05, 0.3), gap(0.02, 0.2),
      frac(-0.3, 0.9);
  TempDir tmp;
  // final val loss per seed s (1, 2) and recipe k; seed 2's baseline is clearly apart from seed 1's
  double val[3][3];
  val[1][0] = base_loss(rng);
  val[2][0] = val[1][0] + offset(rng);
  for (int s : {1, 2}) {
    val[s][1] = val[s][0] + gap(rng);
    val[s][2] = val[s][0] + frac(rng) * (val[s][1] - val[s][0]);
  }
  std::vector<std::pair<int, int>> order;  // (seed, recipe), given to the report in a random order
  for (int s : {1, 2})
    for (int k = 0; k < 3; ++k) order.emplace_back(s, k);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<RunSummary> runs;
  for (auto [s, k] : order)
    runs.push_back(summarize_run(make_run_dir(tmp.path(), seed_name(s) + "-" + kRecipes[k], kRecipes[k],
                                              val[s][k], config_with_seed(s, kRecipes[k]), rng)));
  for (size_t i = 0; i < runs.size(); ++i) {
    ASSERT_TRUE(runs[i].seed.has_value());
    EXPECT_EQ(*runs[i].seed, static_cast<uint64_t>(order[i].first));
    EXPECT_EQ(runs[i].label, kRecipes[order[i].second]);
  }
  const ReportOptions opt;
  const auto groups = group_by_seed(runs);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].seed, std::optional<uint64_t>(1));
  EXPECT_EQ(groups[1].seed, std::optional<uint64_t>(2));

  // Per seed: gap to that seed's bf16 and the share of that seed's NVIDIA gap closed.
  const auto gaps = seed_gaps(runs, groups, opt);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto [s, k] = order[i];
    if (k == 0) {
      EXPECT_TRUE(std::isnan(gaps[i].gap));
      continue;
    }
    const double g = val[s][k] - val[s][0];
    EXPECT_NEAR(gaps[i].gap, g, 1e-12);
    EXPECT_GT(std::fabs(gaps[i].gap - (val[s][k] - val[3 - s][0])), 0.04);  // not the other seed's baseline
    EXPECT_NEAR(gaps[i].relative, g / val[s][0], 1e-12);
    if (k == 2)
      EXPECT_NEAR(gaps[i].closed, 1.0 - g / (val[s][1] - val[s][0]), 1e-9);
    else
      EXPECT_TRUE(std::isnan(gaps[i].closed));
  }

  // Over seeds: means, min..max, and the share of the mean gaps with the per-seed shares beside it.
  const auto recipes = summarize_over_seeds(runs, groups, gaps, opt);
  ASSERT_EQ(recipes.size(), 3u);
  for (const auto& r : recipes) {
    const int k =
        static_cast<int>(std::find(std::begin(kRecipes), std::end(kRecipes), r.label) - std::begin(kRecipes));
    ASSERT_LT(k, 3);
    EXPECT_EQ(r.seeds, (std::vector<std::optional<uint64_t>>{1, 2}));
    EXPECT_NEAR(r.mean_val_loss, (val[1][k] + val[2][k]) / 2, 1e-12);
    if (k == 0) {
      EXPECT_EQ(r.gap_seeds, 0);
      continue;
    }
    const double g1 = val[1][k] - val[1][0], g2 = val[2][k] - val[2][0];
    EXPECT_EQ(r.gap_seeds, 2);
    EXPECT_NEAR(r.mean_gap, (g1 + g2) / 2, 1e-12);
    EXPECT_NEAR(r.min_gap, std::min(g1, g2), 1e-12);
    EXPECT_NEAR(r.max_gap, std::max(g1, g2), 1e-12);
    if (k == 1) {
      EXPECT_EQ(r.share_seeds, 0);  // the reference against itself
      EXPECT_TRUE(r.per_seed_closed.empty());
      continue;
    }
    const double n1 = val[1][1] - val[1][0], n2 = val[2][1] - val[2][0];
    EXPECT_EQ(r.share_seeds, 2);
    EXPECT_NEAR(r.share_of_mean_gaps, 1.0 - (g1 + g2) / (n1 + n2), 1e-9);
    ASSERT_EQ(r.per_seed_closed.size(), 2u);
    EXPECT_EQ(r.per_seed_closed[0].first, std::optional<uint64_t>(1));
    EXPECT_NEAR(r.per_seed_closed[0].second, 1.0 - g1 / n1, 1e-9);
    EXPECT_NEAR(r.per_seed_closed[1].second, 1.0 - g2 / n2, 1e-9);
  }

  // The Markdown: a seed column in the per-run table, then the summary with its caption.
  ReportOptions o;
  o.svg_path = tmp / "curves.svg";
  const std::string md = write_report(runs, o);
  EXPECT_NE(md.find("| run | seed | tokens |"), std::string::npos) << md;
  for (int s : {1, 2}) {
    const auto cells = row_cells(md, {"tetrajet-v2-base", std::to_string(s)});
    ASSERT_EQ(cells.size(), 9u) << md;
    const double g = val[s][2] - val[s][0];
    EXPECT_EQ(cells[6], printf_str("%+.4f", g) + " (" + printf_str("%+.2f", 100 * g / val[s][0]) + "%)");
    EXPECT_EQ(cells[7], printf_str("%.1f", 100 * (1 - g / (val[s][1] - val[s][0]))) + "%");
  }
  EXPECT_NE(md.find("share of the mean gaps"), std::string::npos) << md;
  const auto sum = row_cells(md, {"tetrajet-v2-base", "2 (1, 2)"});
  ASSERT_EQ(sum.size(), 6u) << md;
  const double g1 = val[1][2] - val[1][0], g2 = val[2][2] - val[2][0];
  const double n1 = val[1][1] - val[1][0], n2 = val[2][1] - val[2][0];
  EXPECT_EQ(sum[2], printf_str("%.4f", (val[1][2] + val[2][2]) / 2));
  EXPECT_EQ(sum[3], printf_str("%+.4f", (g1 + g2) / 2) + " (" + printf_str("%+.4f", std::min(g1, g2)) + ".." +
                        printf_str("%+.4f", std::max(g1, g2)) + ")");
  EXPECT_EQ(sum[4], printf_str("%.1f", 100 * (1 - (g1 + g2) / (n1 + n2))) + "%");
  EXPECT_EQ(sum[5], printf_str("%.1f", 100 * (1 - g1 / n1)) + "% (seed 1), " +
                        printf_str("%.1f", 100 * (1 - g2 / n2)) + "% (seed 2)");

  // The pictures: "recipe (seed N)" labels, a colour per recipe, seed 2 dashed; gaps per own seed.
  const auto curves = polylines(read_text(o.svg_path));
  ASSERT_EQ(curves.size(), 6u);
  for (const auto& a : curves) {
    const bool seed2 = a.label.find("(seed 2)") != std::string::npos;
    EXPECT_TRUE(seed2 || a.label.find("(seed 1)") != std::string::npos) << a.label;
    EXPECT_EQ(a.dash.empty(), !seed2) << a.label;
    for (const auto& b : curves) {
      const bool same_recipe = a.label.substr(0, a.label.find(" (")) == b.label.substr(0, b.label.find(" ("));
      EXPECT_EQ(a.color == b.color, same_recipe) << a.label << " vs " << b.label;
    }
  }
  const auto gap_lines = polylines(read_text(gap_svg_path(o.svg_path)));
  ASSERT_EQ(gap_lines.size(), 4u);  // two non-baseline recipes per seed
  for (const auto& l : gap_lines) EXPECT_EQ(l.label.find("bf16"), std::string::npos);
}

TEST(ReportSeeds, TwoRunsOfOneRecipeAndSeedAreAnErrorNamingBoth) {
  std::mt19937 rng(std::random_device{}());
  TempDir tmp;
  const uint64_t seed = rng() % 1000;
  std::vector<RunSummary> runs = {
      summarize_run(make_run_dir(tmp.path(), "first", "bf16", 3.0, config_with_seed(seed, "bf16"), rng)),
      summarize_run(
          make_run_dir(tmp.path(), "other", "nvidia-nvfp4", 3.1, config_with_seed(seed + 1, "x"), rng)),
      summarize_run(make_run_dir(tmp.path(), "again", "bf16", 3.2, config_with_seed(seed, "bf16"), rng))};
  ReportOptions opt;
  opt.svg_path = tmp / "c.svg";
  const std::string msg = fp4::testing::error_of([&] { write_report(runs, opt); });
  EXPECT_NE(msg.find((tmp / "first").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find((tmp / "again").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("seed " + std::to_string(seed)), std::string::npos) << msg;
  // Without recorded seeds too: two bf16 runs of unknown seed cannot be told apart.
  const std::vector<RunSummary> old = {
      summarize_run(make_run_dir(tmp.path(), "old-a", "bf16", 3.0, "", rng)),
      summarize_run(make_run_dir(tmp.path(), "old-b", "bf16", 3.0, "{}", rng))};
  const std::string msg2 = fp4::testing::error_of([&] { group_by_seed(old); });
  EXPECT_NE(msg2.find((tmp / "old-a").string()), std::string::npos) << msg2;
  EXPECT_NE(msg2.find((tmp / "old-b").string()), std::string::npos) << msg2;
}

TEST(ReportSeeds, RunsWithoutASeedFormAGroupOfTheirOwn) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> base_loss(2.0, 4.0), gap(0.02, 0.2);
  TempDir tmp;
  const double b1 = base_loss(rng), b0 = b1 + 0.5, t1 = gap(rng), t0 = gap(rng);
  // One run has no config.json, the other one without train.seed.
  const auto old_base = make_run_dir(tmp.path(), "old-bf16", "bf16", b0, "", rng);
  const auto old_tj = make_run_dir(tmp.path(), "old-tj", "tetrajet-v2-base", b0 + t0,
                                   "{\"train\": {\"steps\": 60}, \"recipe\": {\"name\": \"t\"}}", rng);
  EXPECT_FALSE(read_run_seed(old_base).has_value());
  EXPECT_FALSE(read_run_seed(old_tj).has_value());
  std::vector<RunSummary> runs = {
      summarize_run(old_tj),
      summarize_run(make_run_dir(tmp.path(), "b1", "bf16", b1, config_with_seed(1, "bf16"), rng)),
      summarize_run(old_base),
      summarize_run(
          make_run_dir(tmp.path(), "t1", "tetrajet-v2-base", b1 + t1, config_with_seed(1, "t"), rng))};
  const auto groups = group_by_seed(runs);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].seed, std::optional<uint64_t>(1));
  EXPECT_FALSE(groups[1].seed.has_value());  // the unknown seed sorts last
  EXPECT_EQ(groups[1].runs, (std::vector<size_t>{0, 2}));
  const auto gaps = seed_gaps(runs, groups, ReportOptions{});
  EXPECT_NEAR(gaps[0].gap, t0, 1e-12);  // against the seedless bf16 run, not seed 1's
  EXPECT_NEAR(gaps[3].gap, t1, 1e-12);
  ReportOptions opt;
  opt.svg_path = tmp / "c.svg";
  const std::string md = write_report(runs, opt);
  EXPECT_EQ(row_cells(md, {"tetrajet-v2-base", "?"})[6].substr(0, 7), printf_str("%+.4f", t0)) << md;
  // Said in the table's notes and by seed_notes (the CLI prints those on stderr).
  EXPECT_NE(md.find("Seed `?`"), std::string::npos) << md;
  const auto notes = seed_notes(runs);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find(old_tj.string()), std::string::npos);
  EXPECT_NE(notes[1].find(old_base.string()), std::string::npos);
  EXPECT_NE(md.find(old_base.string()), std::string::npos);
  // A config.json that is broken, or whose seed is not a count, is an error naming it.
  std::ofstream(old_base / "config.json") << "{\"train\": {\"seed\": ";
  EXPECT_NE(fp4::testing::error_of([&] { read_run_seed(old_base); }).find("config.json"), std::string::npos);
  std::ofstream(old_base / "config.json") << "{\"train\": {\"seed\": -3}}";
  const std::string msg = fp4::testing::error_of([&] { read_run_seed(old_base); });
  EXPECT_NE(msg.find("train.seed"), std::string::npos) << msg;
  EXPECT_NE(msg.find((old_base / "config.json").string()), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
