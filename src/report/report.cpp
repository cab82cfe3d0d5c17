#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "report/svg_plot.h"
#include "train/file_io.h"
#include "train/metrics.h"

namespace fp4 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(double v, const char* f = "%.4f") {
  if (!std::isfinite(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string run_label(const std::filesystem::path& dir) {
  std::ifstream in(dir / "recipe.toml");
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      return parse_recipe(ss.str(), (dir / "recipe.toml").string()).name;
    } catch (const Error&) {
      // a recipe file from another version: fall back to the directory name
    }
  }
  return dir.filename().string();
}

std::vector<double> ema(const std::vector<double>& v, double smoothing) {
  std::vector<double> out;
  double e = v.empty() ? 0 : v.front();
  for (double x : v) out.push_back(e = smoothing * e + (1 - smoothing) * x);
  return out;
}

// Appends a(x) - b(x) for the x values both series hold (each sorted by x, as logged).
void matched_difference(const std::vector<double>& xa, const std::vector<double>& ya, const std::vector<double>& xb,
                        const std::vector<double>& yb, std::vector<double>& x, std::vector<double>& d) {
  size_t j = 0;
  for (size_t i = 0; i < xa.size(); ++i) {
    while (j < xb.size() && xb[j] < xa[i]) ++j;
    if (j < xb.size() && xb[j] == xa[i]) {
      x.push_back(xa[i]);
      d.push_back(ya[i] - yb[j]);
    }
  }
}

}  // namespace

LossGap loss_gap(const RunSummary& run, const RunSummary& baseline, double smoothing) {
  LossGap g;
  matched_difference(run.val_tokens, run.val_losses, baseline.val_tokens, baseline.val_losses, g.val_tokens,
                     g.val_gap);
  matched_difference(run.train_tokens, ema(run.train_loss, smoothing), baseline.train_tokens,
                     ema(baseline.train_loss, smoothing), g.train_tokens, g.train_gap);
  return g;
}

std::filesystem::path gap_svg_path(const std::filesystem::path& svg_path) {
  auto p = svg_path;
  return p.replace_filename(svg_path.stem().string() + "-gap" + svg_path.extension().string());
}

RunSummary summarize_run(const std::filesystem::path& dir) {
  const auto metrics = dir / "metrics.jsonl";
  FP4_CHECK(std::filesystem::exists(metrics), "report: ", dir.string(), " has no metrics.jsonl (is it a run directory?)");
  RunSummary s;
  s.dir = dir.string();
  s.label = run_label(dir);
  s.val_loss = s.val_ppl = kNaN;
  std::vector<double> speeds;
  for (const auto& j : read_metrics(metrics)) {
    const std::string type = j.value("type", "");
    if (type == "train") {
      s.train_tokens.push_back(j.value("tokens", 0.0));
      s.train_loss.push_back(j.value("loss", kNaN));
      s.last_step = std::max<int64_t>(s.last_step, j.value("step", int64_t{0}));
      s.tokens = std::max<int64_t>(s.tokens, j.value("tokens", int64_t{0}));
      if (j.value("tokens_per_s", 0.0) > 0) speeds.push_back(j.value("tokens_per_s", 0.0));
    } else if (type == "eval") {
      s.val_tokens.push_back(j.value("tokens", 0.0));
      s.val_losses.push_back(j.value("val_loss", kNaN));
      s.val_loss = j.value("val_loss", kNaN);
      s.val_ppl = j.value("val_ppl", kNaN);
    }
  }
  FP4_CHECK(!s.train_loss.empty(), "report: ", metrics.string(), " holds no training records");
  const size_t tail = std::max<size_t>(1, s.train_loss.size() / 20);
  double sum = 0;
  for (size_t i = s.train_loss.size() - tail; i < s.train_loss.size(); ++i) sum += s.train_loss[i];
  s.final_train_loss = sum / static_cast<double>(tail);
  if (!speeds.empty()) {
    std::nth_element(speeds.begin(), speeds.begin() + speeds.size() / 2, speeds.end());
    s.tokens_per_s = speeds[speeds.size() / 2];
  }
  return s;
}

std::string write_report(const std::vector<RunSummary>& runs, const ReportOptions& opt) {
  FP4_CHECK(!runs.empty(), "report: no runs given");
  std::vector<PlotSeries> series;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunSummary& r = runs[i];
    series.push_back(
        {r.label + " (train, EMA)", r.train_tokens, ema(r.train_loss, opt.smoothing), false, static_cast<int>(i), false});
    if (!r.val_losses.empty())
      series.push_back({r.label + " (validation)", r.val_tokens, r.val_losses, true, static_cast<int>(i), false});
  }
  PlotSpec spec;
  spec.title = opt.title;
  spec.x_label = "tokens";
  spec.y_label = "loss (nats/token)";
  write_file_atomically(opt.svg_path, render_svg(spec, series));

  auto find = [&](const std::string& label) -> const RunSummary* {
    for (const auto& r : runs)
      if (r.label == label) return &r;
    return nullptr;
  };
  const RunSummary* base = find(opt.baseline);
  const RunSummary* ref = find(opt.reference);
  if (base && runs.size() > 1) {
    std::vector<PlotSeries> gaps;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (&runs[i] == base) continue;
      LossGap g = loss_gap(runs[i], *base, opt.smoothing);
      const int color = static_cast<int>(i);
      gaps.push_back({runs[i].label + " (train, EMA)", g.train_tokens, g.train_gap, false, color, false});
      if (!g.val_gap.empty()) gaps.push_back({runs[i].label + " (validation)", g.val_tokens, g.val_gap, true, color, false});
    }
    PlotSpec gap_spec = spec;
    gap_spec.title = opt.title + ": loss minus " + opt.baseline + "'s";
    gap_spec.y_label = "loss - " + opt.baseline + " loss (nats/token)";
    write_file_atomically(gap_svg_path(opt.svg_path), render_svg(gap_spec, gaps));
  }
  const double ref_gap = (base && ref) ? ref->val_loss - base->val_loss : kNaN;
  std::ostringstream t;
  t << "| run | tokens | train loss (last 5%) | val loss | val ppl | gap to " << opt.baseline << " (val loss) | "
    << "share of " << opt.reference << "'s gap closed | tokens/s |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : runs) {
    const double gap = base ? r.val_loss - base->val_loss : kNaN;
    const bool comparable = base && ref && &r != base && &r != ref && std::fabs(ref_gap) > 0;
    const double closed = comparable ? 1.0 - gap / ref_gap : kNaN;
    const std::string gap_text = base && &r != base
                                     ? fmt(gap, "%+.4f") + " (" + fmt(100.0 * gap / base->val_loss, "%+.2f") + "%)"
                                     : "-";
    t << "| " << r.label << " | " << r.tokens << " | " << fmt(r.final_train_loss) << " | " << fmt(r.val_loss)
      << " | " << fmt(r.val_ppl, "%.3f") << " | " << gap_text << " | "
      << (comparable ? fmt(100.0 * closed, "%.1f") + "%" : "-") << " | " << fmt(r.tokens_per_s, "%.0f") << " |\n";
  }
  return t.str();
}

}  // namespace fp4
