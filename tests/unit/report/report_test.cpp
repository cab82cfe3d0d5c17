// fp4train report: the table's arithmetic (gaps, share of the reference gap closed) and the picture.
#include "report/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "report/svg_plot.h"

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

// ---- Several seeds: runs grouped by (recipe, seed), gaps taken within a seed, a summary over seeds. ----

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "../train/test_util.h"
#include "report/seeds.h"

namespace fp4 {
namespace {

using fp4::testing::TempDir;

// A run directory as the trainer leaves it: metrics.jsonl, recipe.toml and config.json. `config` is
// the config.json text; empty: no config.json (a run from before the trainer wrote one).
// "s<seed>", built by appending (GCC 12 warns falsely on "literal" + std::string&&).
std::string seed_name(int seed) {
  std::string n = "s";
  n += std::to_string(seed);
  return n;
}

fs::path make_run_dir(const fs::path& root, const std::string& name, const std::string& recipe,
                      double final_val, const std::string& config, std::mt19937& rng) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.toml") << "name = \"" << recipe << "\"\n";
  if (!config.empty()) std::ofstream(dir / "config.json") << config;
  std::ofstream m(dir / "metrics.jsonl");
  m.precision(17);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  std::uniform_int_distribution<int> speed(4000, 6000);
  for (int step = 1; step <= 60; ++step)
    m << "{\"type\":\"train\",\"step\":" << step << ",\"tokens\":" << step * 2048
      << ",\"loss\":" << final_val + 2.0 / step + noise(rng) << ",\"tokens_per_s\":" << speed(rng) << "}\n";
  for (int step : {20, 40, 60}) {
    const double v = step == 60 ? final_val : final_val + 0.3 / step + noise(rng);
    m << "{\"type\":\"eval\",\"step\":" << step << ",\"tokens\":" << step * 2048 << ",\"val_loss\":" << v
      << ",\"val_ppl\":" << std::exp(v) << "}\n";
  }
  return dir;
}

// The shape of the trainer's config.json (docs/results/runs-*/bf16.config.json), with the given seed.
std::string config_with_seed(uint64_t seed, const std::string& recipe) {
  return "{\n  \"model\": {\"preset\": \"olmo2-30m\", \"d_model\": 384},\n  \"recipe\": {\"name\": \"" +
         recipe + "\", \"overrides\": {}},\n  \"train\": {\n    \"eval_every\": 20,\n    \"seed\": " +
         std::to_string(seed) + ",\n    \"steps\": 60\n  }\n}\n";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The cells of the Markdown row whose first cells are `first` (label, then seed when given).
std::vector<std::string> row_cells(const std::string& table, const std::vector<std::string>& first) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line);
    std::getline(ls, cell, '|');  // before the first bar
    while (std::getline(ls, cell, '|')) {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    if (cells.size() >= first.size() && std::equal(first.begin(), first.end(), cells.begin())) return cells;
  }
  ADD_FAILURE() << "no row starting with " << first[0] << " in\n" << table;
  return {};
}

std::string printf_str(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Each polyline of an SVG: (legend label, stroke colour, dash attribute or "").
struct Line {
  std::string label, color, dash;
};
std::vector<Line> polylines(const std::string& svg) {
  std::vector<Line> out;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    const size_t end = svg.find("/>", p);
    const std::string tag = svg.substr(p, end - p);
    Line l;
    const size_t c = tag.find("stroke='") + 8;
    l.color = tag.substr(c, tag.find('\'', c) - c);
    const size_t d = tag.find("stroke-dasharray='");
    if (d != std::string::npos) l.dash = tag.substr(d + 18, tag.find('\'', d + 18) - d - 18);
    const size_t t = svg.find("<text", end), open = svg.find('>', t) + 1;  // its legend entry follows it
    l.label = svg.substr(open, svg.find("</text>", open) - open);
    out.push_back(l);
  }
  return out;
}

constexpr const char* kRecipes[] = {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"};

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

TEST(SvgPlot, DashIndexGivesDistinctPatternsAndZeroIsSolid) {
  std::vector<PlotSeries> series;
  for (int d = 0; d < 4; ++d) series.push_back({seed_name(d), {0, 1, 2}, {1.0, 0.5, 0.2 * d}, false, 0, d});
  const auto lines = polylines(render_svg(PlotSpec{}, series));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(lines[0].dash.empty());
  for (int a = 1; a < 4; ++a) {
    EXPECT_FALSE(lines[a].dash.empty());
    for (int b = a + 1; b < 4; ++b) EXPECT_NE(lines[a].dash, lines[b].dash);
  }
  // Validation points: filled for dash 0, rings otherwise (the plot's and the legend's).
  const std::string points =
      render_svg(PlotSpec{}, {{"a", {0, 1}, {1, 2}, true, 3, 0}, {"b", {0, 1}, {2, 1}, true, 3, 2}});
  size_t filled = 0, rings = 0;
  for (size_t p = points.find("<circle"); p != std::string::npos; p = points.find("<circle", p + 1)) {
    const std::string tag = points.substr(p, points.find("/>", p) - p);
    if (tag.find("fill='white'") != std::string::npos)
      ++rings;
    else if (tag.find("stroke=") == std::string::npos)
      ++filled;
  }
  EXPECT_EQ(filled, 3u);
  EXPECT_EQ(rings, 3u);
}

}  // namespace
}  // namespace fp4
