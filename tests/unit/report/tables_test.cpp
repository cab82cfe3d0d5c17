// The Markdown tables of fp4train report: a seed without a baseline gets "-" cells and a summary over the
// seeds that have one; with one seed the table is the single-seed one, byte for byte.
#include "report/tables.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../train/test_util.h"
#include "report/report.h"
#include "report/seeds.h"
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
using fp4::testing::TempDir;

TEST(ReportSeeds, ASeedWithoutBaselineGetsNoGap) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> base_loss(2.0, 4.0), gap(0.02, 0.2);
  TempDir tmp;
  const double b = base_loss(rng), n1 = gap(rng), t1 = gap(rng), n3 = gap(rng), t3 = gap(rng);
  std::vector<RunSummary> runs = {
      summarize_run(make_run_dir(tmp.path(), "b1", "bf16", b, config_with_seed(1, "bf16"), rng)),
      summarize_run(make_run_dir(tmp.path(), "n1", "nvidia-nvfp4", b + n1, config_with_seed(1, "n"), rng)),
      summarize_run(
          make_run_dir(tmp.path(), "t1", "tetrajet-v2-base", b + t1, config_with_seed(1, "t"), rng)),
      summarize_run(make_run_dir(tmp.path(), "n3", "nvidia-nvfp4", b + n3, config_with_seed(3, "n"), rng)),
      summarize_run(
          make_run_dir(tmp.path(), "t3", "tetrajet-v2-base", b + t3, config_with_seed(3, "t"), rng))};
  ReportOptions opt;
  opt.svg_path = tmp / "c.svg";
  const std::string md = write_report(runs, opt);
  for (const char* r : {"nvidia-nvfp4", "tetrajet-v2-base"}) {
    const auto cells = row_cells(md, {r, "3"});
    ASSERT_EQ(cells.size(), 9u) << md;
    EXPECT_EQ(cells[6], "-") << md;
    EXPECT_EQ(cells[7], "-") << md;
    EXPECT_NE(row_cells(md, {r, "1"})[6], "-") << md;
  }
  // The summary's gap statistics come from seed 1 alone, and say so.
  const auto sum = row_cells(md, {"tetrajet-v2-base", "2 (1, 3)"});
  ASSERT_EQ(sum.size(), 6u) << md;
  EXPECT_EQ(sum[3], printf_str("%+.4f", t1) + " (" + printf_str("%+.4f", t1) + ".." +
                        printf_str("%+.4f", t1) + "), over 1 of 2 seeds")
      << md;
  EXPECT_EQ(sum[4], printf_str("%.1f", 100 * (1 - t1 / n1)) + "%, over 1 of 2 seeds") << md;
  // Only seed 1 has gap lines.
  const auto lines = polylines(read_text(gap_svg_path(opt.svg_path)));
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) EXPECT_NE(l.label.find("(seed 1)"), std::string::npos) << l.label;
}

// The table as `fp4train report` printed it before seeds were read (written out independently here).
std::string single_seed_table(const std::vector<RunSummary>& runs, const std::string& base,
                              const std::string& ref) {
  auto find = [&](const std::string& l) {
    return std::find_if(runs.begin(), runs.end(), [&](const RunSummary& r) { return r.label == l; });
  };
  const auto b = find(base), n = find(ref);
  std::string t = "| run | tokens | train loss (last 5%) | val loss | val ppl | gap to " + base +
                  " (val loss) | share of " + ref +
                  "'s gap closed | tokens/s |\n|---|---|---|---|---|---|---|---|\n";
  for (auto r = runs.begin(); r != runs.end(); ++r) {
    const double g = r->val_loss - b->val_loss, ng = n->val_loss - b->val_loss;
    t += "| " + r->label + " | " + std::to_string(r->tokens) + " | " +
         printf_str("%.4f", r->final_train_loss) + " | " + printf_str("%.4f", r->val_loss) + " | " +
         printf_str("%.3f", r->val_ppl) + " | " +
         (r == b ? "-" : printf_str("%+.4f", g) + " (" + printf_str("%+.2f", 100 * g / b->val_loss) + "%)") +
         " | " + (r == b || r == n ? "-" : printf_str("%.1f", 100 * (1 - g / ng)) + "%") + " | " +
         printf_str("%.0f", r->tokens_per_s) + " |\n";
  }
  return t;
}

TEST(ReportSeeds, OneSeedGivesTheSingleSeedTableByteForByte) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> base_loss(2.0, 4.0), gap(0.02, 0.2), frac(-0.3, 0.9);
  TempDir tmp;
  const uint64_t seed = rng() % 100000;
  const double b = base_loss(rng), n = gap(rng), t = frac(rng) * n;
  std::vector<int> order = {0, 1, 2};
  std::shuffle(order.begin(), order.end(), rng);
  const double vals[3] = {b, b + n, b + t};
  std::vector<RunSummary> seeded, seedless;
  for (int k : order) {
    seeded.push_back(summarize_run(make_run_dir(tmp.path(), std::string("s-") + kRecipes[k], kRecipes[k],
                                                vals[k], config_with_seed(seed, kRecipes[k]), rng)));
    seedless.push_back(summarize_run(
        make_run_dir(tmp.path(), std::string("o-") + kRecipes[k], kRecipes[k], vals[k], "", rng)));
  }
  for (const auto* runs : {&seeded, &seedless}) {
    ReportOptions opt;
    opt.svg_path = tmp / "c.svg";
    EXPECT_EQ(write_report(*runs, opt), single_seed_table(*runs, "bf16", "nvidia-nvfp4"));
    // The pictures keep plain labels and solid lines.
    for (const auto& p : {opt.svg_path, gap_svg_path(opt.svg_path)}) {
      const std::string svg = read_text(p);
      EXPECT_EQ(svg.find("(seed"), std::string::npos);
      EXPECT_EQ(svg.find("stroke-dasharray"), std::string::npos);
    }
  }
}

// run_table and seed_summary_table on hand-made summaries with random values: the row order follows the
// groups, a seed column only with several groups ("?" for no seed), "-" for every non-finite value, and
// "over k of n seeds" where a statistic lacks seeds.
TEST(Tables, CellsFromHandMadeSummaries) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> loss(2.0, 4.0), small(-0.2, 0.2), share(-0.5, 1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<RunSummary> runs(3);
  const char* labels[] = {"bf16", "nvidia-nvfp4", "x<y>"};
  for (int i = 0; i < 3; ++i) {
    runs[i].label = labels[i];
    runs[i].tokens = static_cast<int64_t>(rng() % 1000000);
    runs[i].final_train_loss = loss(rng);
    runs[i].val_loss = loss(rng);
    runs[i].val_ppl = std::exp(runs[i].val_loss);
    runs[i].tokens_per_s = 1000 + rng() % 9000;
  }
  runs[1].val_loss = runs[1].val_ppl = nan;  // a run that never evaluated
  const double g = small(rng), c = share(rng);
  const std::vector<SeedGap> gaps = {{nan, nan, nan, nan}, {nan, nan, nan, nan}, {g, g / 3, 0.1, c}};
  ReportOptions opt;

  // One group: no seed column, rows in the group's order (here reversed).
  const std::string one = run_table(runs, {{std::nullopt, {2, 1, 0}}}, gaps, opt);
  EXPECT_EQ(one.find("| seed"), std::string::npos) << one;
  EXPECT_LT(one.find("| x<y> |"), one.find("| nvidia-nvfp4 |")) << one;
  EXPECT_LT(one.find("| nvidia-nvfp4 |"), one.find("| bf16 |")) << one;
  const auto x = row_cells(one, {"x<y>"});
  ASSERT_EQ(x.size(), 8u) << one;
  EXPECT_EQ(x[1], std::to_string(runs[2].tokens));
  EXPECT_EQ(x[2], printf_str("%.4f", runs[2].final_train_loss));
  EXPECT_EQ(x[5], printf_str("%+.4f", g) + " (" + printf_str("%+.2f", 100 * g / 3) + "%)");
  EXPECT_EQ(x[6], printf_str("%.1f", 100 * c) + "%");
  EXPECT_EQ(x[7], printf_str("%.0f", runs[2].tokens_per_s));
  const auto n = row_cells(one, {"nvidia-nvfp4"});
  ASSERT_EQ(n.size(), 8u);
  EXPECT_EQ(n[3], "-");
  EXPECT_EQ(n[4], "-");
  EXPECT_EQ(n[5], "-");
  EXPECT_EQ(n[6], "-");

  // Two groups: a seed column after the label, the seedless group's runs marked "?".
  const std::string two = run_table(runs, {{7, {0, 2}}, {std::nullopt, {1}}}, gaps, opt);
  EXPECT_NE(two.find("| run | seed | tokens |"), std::string::npos) << two;
  EXPECT_NE(two.find("of the same seed"), std::string::npos) << two;
  EXPECT_EQ(row_cells(two, {"x<y>", "7"}).size(), 9u) << two;
  EXPECT_EQ(row_cells(two, {"nvidia-nvfp4", "?"}).size(), 9u) << two;

  // The summary: statistics over fewer seeds than the recipe ran say so; no per-seed shares give "-".
  RecipeOverSeeds r;
  r.label = "x<y>";
  r.seeds = {1, 4, std::nullopt};
  r.mean_val_loss = loss(rng);
  r.gap_seeds = 2;
  r.mean_gap = small(rng), r.min_gap = r.mean_gap - 0.01, r.max_gap = r.mean_gap + 0.02;
  r.share_seeds = 3;
  r.share_of_mean_gaps = share(rng);
  r.per_seed_closed = {{1, c}, {std::nullopt, c / 2}};
  RecipeOverSeeds base;
  base.label = "bf16";
  base.seeds = {1};
  base.mean_val_loss = nan;
  const std::string sum = seed_summary_table({base, r}, opt);
  EXPECT_EQ(sum.rfind("Over seeds: every gap is to the bf16 run of the same seed", 0), 0u) << sum;
  const auto cells = row_cells(sum, {"x<y>"});
  ASSERT_EQ(cells.size(), 6u) << sum;
  EXPECT_EQ(cells[1], "3 (1, 4, ?)");
  EXPECT_EQ(cells[2], printf_str("%.4f", r.mean_val_loss));
  EXPECT_EQ(cells[3], printf_str("%+.4f", r.mean_gap) + " (" + printf_str("%+.4f", r.min_gap) + ".." +
                          printf_str("%+.4f", r.max_gap) + "), over 2 of 3 seeds");
  EXPECT_EQ(cells[4], printf_str("%.1f", 100 * r.share_of_mean_gaps) + "%");
  EXPECT_EQ(cells[5],
            printf_str("%.1f", 100 * c) + "% (seed 1), " + printf_str("%.1f", 50 * c) + "% (seed ?)");
  EXPECT_EQ(row_cells(sum, {"bf16"}), (std::vector<std::string>{"bf16", "1 (1)", "-", "-", "-", "-"})) << sum;
}

}  // namespace
}  // namespace fp4
