#include "report/ablation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/config.h"
#include "report/number_format.h"
#include "report/seeds.h"
#include "report/svg_plot.h"
#include "train/file_io.h"

namespace fp4 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(double v, const char* f) {
  return report_format::number(v, f);
}
std::string pct(double v) {
  return report_format::percent(v);
}

std::vector<std::string> labels_in_order(const std::vector<RunSummary>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs)
    if (std::find(out.begin(), out.end(), r.label) == out.end()) out.push_back(r.label);
  return out;
}

const RunSummary* find_run(const std::vector<RunSummary>& runs, const SeedGroup& g,
                           const std::string& label) {
  for (size_t i : g.runs)
    if (runs[i].label == label) return &runs[i];
  return nullptr;
}

std::string gap_text(const PairedInterval& g) {
  if (g.n == 0) return "-";
  std::string s = fmt(g.mean, "%+.4f");
  if (g.n >= 2) s += " [" + fmt(g.lo, "%+.4f") + ", " + fmt(g.hi, "%+.4f") + "]";
  return s;
}
std::string share_text(const ShareInterval& s) {
  if (s.n == 0) return "-";
  std::string t = pct(s.share);
  if (s.n >= 2) t += s.bounded ? " [" + pct(s.lo) + ", " + pct(s.hi) + "]" : " [unbounded]";
  return t;
}

}  // namespace

int64_t read_non_embedding_params(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return 0;
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("model") || !j["model"].is_object()) return 0;
  const auto& m = j["model"];
  for (const char* k : {"n_layers", "d_model", "d_ff", "vocab_size"})
    if (!m.contains(k) || !m[k].is_number_integer()) return 0;
  ModelConfig c;
  c.n_layers = m["n_layers"].get<int>();
  c.d_model = m["d_model"].get<int>();
  c.d_ff = m["d_ff"].get<int>();
  c.vocab_size = m["vocab_size"].get<int>();
  return c.parameter_count() - 2 * static_cast<int64_t>(c.vocab_size) * c.d_model;
}

std::vector<int64_t> token_budgets(const std::vector<RunSummary>& runs) {
  std::set<int64_t> s;
  for (const auto& r : runs) s.insert(r.tokens);
  return {s.begin(), s.end()};
}

std::vector<RunSummary> runs_at_budget(const std::vector<RunSummary>& runs, int64_t tokens) {
  std::vector<RunSummary> out;
  for (const auto& r : runs)
    if (r.tokens == tokens) out.push_back(r);
  return out;
}

std::vector<RecipeComparison> compare_recipes(const std::vector<RunSummary>& runs, const ReportOptions& opt) {
  const std::vector<SeedGroup> groups = group_by_seed(runs);
  std::vector<RecipeComparison> out;
  for (const std::string& label : labels_in_order(runs)) {
    if (label == opt.baseline) continue;
    RecipeComparison c;
    c.label = label;
    std::vector<double> gaps, x, y;
    for (const auto& g : groups) {
      const RunSummary* run = find_run(runs, g, label);
      const RunSummary* base = find_run(runs, g, opt.baseline);
      const RunSummary* ref = find_run(runs, g, opt.reference);
      if (!run) continue;
      c.tokens = run->tokens;
      if (run->non_embedding_params > 0)
        c.tokens_per_param =
            static_cast<double>(run->tokens) / static_cast<double>(run->non_embedding_params);
      if (!base || !std::isfinite(run->val_loss) || !std::isfinite(base->val_loss)) continue;
      gaps.push_back(run->val_loss - base->val_loss);
      if (ref && ref != run && std::isfinite(ref->val_loss)) {
        x.push_back(run->val_loss - base->val_loss);
        y.push_back(ref->val_loss - base->val_loss);
      }
    }
    if (c.tokens_per_param == 0) c.tokens_per_param = kNaN;
    c.gap = paired_mean_interval(gaps);
    c.share = share_closed_interval(x, y);
    out.push_back(c);
  }
  return out;
}

std::string comparison_table(const std::vector<RecipeComparison>& rows, const ReportOptions& opt) {
  std::ostringstream t;
  const std::string tpp = rows.empty() ? "-" : fmt(rows.front().tokens_per_param, "%.3g");
  t << "Paired over seeds at " << (rows.empty() ? 0 : rows.front().tokens) << " tokens (" << tpp
    << " per non-embedding parameter): gap = final val loss minus the " << opt.baseline
    << " run of the same seed, mean [95% t interval, n - 1 degrees of freedom]; share of " << opt.reference
    << "'s gap closed = 1 - mean gap / mean " << opt.reference << " gap over the seeds with all three runs, "
    << "[95% Fieller interval: the ratios the paired t test does not reject; unbounded when " << opt.reference
    << "'s gap is not distinguishable from 0].\n\n";
  t << "| recipe | seeds | mean gap to " << opt.baseline << " [95% CI] | sd over seeds | share of "
    << opt.reference << "'s gap closed [95% CI] | gap excludes 0 |\n|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const bool clear = r.gap.n >= 2 && (r.gap.lo > 0 || r.gap.hi < 0);
    t << "| " << r.label << " | " << r.gap.n << " | " << gap_text(r.gap) << " | " << fmt(r.gap.sd, "%.4f")
      << " | " << (r.label == opt.reference ? "-" : share_text(r.share)) << " | "
      << (r.gap.n < 2 ? "-"
          : clear     ? "yes"
                      : "no")
      << " |\n";
  }
  return t.str();
}

std::string scan_table(const std::vector<std::vector<RecipeComparison>>& per_budget,
                       const ReportOptions& opt) {
  std::vector<std::string> labels;
  for (const auto& b : per_budget)
    for (const auto& r : b)
      if (std::find(labels.begin(), labels.end(), r.label) == labels.end()) labels.push_back(r.label);
  std::ostringstream t;
  t << "Scan over token budgets: mean gap to " << opt.baseline << " [95% CI] / share of " << opt.reference
    << "'s gap closed [95% CI], as in the tables above.\n\n| recipe |";
  for (const auto& b : per_budget)
    t << " " << (b.empty() ? "-" : fmt(b.front().tokens_per_param, "%.3g")) << " tokens/param |";
  t << "\n|---|";
  for (size_t i = 0; i < per_budget.size(); ++i) t << "---|";
  t << "\n";
  for (const auto& l : labels) {
    t << "| " << l << " |";
    for (const auto& b : per_budget) {
      const auto it =
          std::find_if(b.begin(), b.end(), [&](const RecipeComparison& r) { return r.label == l; });
      if (it == b.end()) {
        t << " - |";
        continue;
      }
      t << " " << gap_text(it->gap);
      if (l != opt.reference) t << " / " << share_text(it->share);
      t << " |";
    }
    t << "\n";
  }
  return t.str();
}

void write_scan_svg(const std::filesystem::path& path,
                    const std::vector<std::vector<RecipeComparison>>& per_budget, const ReportOptions& opt) {
  std::vector<std::string> labels;
  for (const auto& b : per_budget)
    for (const auto& r : b)
      if (std::find(labels.begin(), labels.end(), r.label) == labels.end()) labels.push_back(r.label);
  std::vector<PlotSeries> series;
  for (size_t k = 0; k < labels.size(); ++k) {
    PlotSeries line{labels[k] + " (mean over seeds)", {}, {}, false, static_cast<int>(k), 0};
    PlotSeries bounds{labels[k] + " (95% CI bounds)", {}, {}, true, static_cast<int>(k), 1};
    for (const auto& b : per_budget)
      for (const auto& r : b) {
        if (r.label != labels[k] || !std::isfinite(r.tokens_per_param) || r.gap.n == 0) continue;
        line.x.push_back(r.tokens_per_param), line.y.push_back(r.gap.mean);
        if (r.gap.n >= 2)
          for (double v : {r.gap.lo, r.gap.hi}) bounds.x.push_back(r.tokens_per_param), bounds.y.push_back(v);
      }
    PlotSeries points = line;
    points.markers = true;
    points.label = labels[k] + " (final val loss gap)";
    series.push_back(line), series.push_back(points);
    if (!bounds.x.empty()) series.push_back(bounds);
  }
  PlotSpec spec;
  spec.title = opt.title + ": final gap to " + opt.baseline + " against tokens per parameter";
  spec.x_label = "tokens per non-embedding parameter";
  spec.y_label = "val loss - " + opt.baseline + " val loss (nats/token)";
  spec.log_x = true;
  spec.legend_width = 330;
  double lo = 0, hi = 0;
  for (const auto& s : series)
    for (double v : s.y) lo = std::min(lo, v), hi = std::max(hi, v);
  spec.y_min = lo - 0.05 * (hi - lo + 1e-12);
  spec.y_max = hi + 0.05 * (hi - lo + 1e-12);
  write_file_atomically(path, render_svg(spec, series));
}

bool write_mean_gap_svg(const std::filesystem::path& path, const std::vector<RunSummary>& runs,
                        const ReportOptions& opt) {
  const std::vector<SeedGroup> groups = group_by_seed(runs);
  std::vector<PlotSeries> series;
  int color = 0;
  for (const std::string& label : labels_in_order(runs)) {
    if (label == opt.baseline) {
      ++color;
      continue;
    }
    // tokens -> gaps of the seeds that evaluated there
    std::map<double, std::vector<double>> at;
    int seeds = 0;
    for (const auto& g : groups) {
      const RunSummary* run = find_run(runs, g, label);
      const RunSummary* base = find_run(runs, g, opt.baseline);
      if (!run || !base) continue;
      ++seeds;
      const LossGap lg = loss_gap(*run, *base, opt.smoothing);
      for (size_t i = 0; i < lg.val_tokens.size(); ++i) at[lg.val_tokens[i]].push_back(lg.val_gap[i]);
    }
    PlotSeries s{label + " (mean of " + std::to_string(seeds) + " seeds)", {}, {}, false, color, 0};
    for (const auto& [tokens, gaps] : at) {
      if (static_cast<int>(gaps.size()) != seeds) continue;
      double sum = 0;
      for (double v : gaps) sum += v;
      s.x.push_back(tokens), s.y.push_back(sum / seeds);
    }
    ++color;
    if (s.x.empty()) continue;
    PlotSeries points = s;
    points.markers = true;
    points.label = label + " (validation points)";
    series.push_back(s), series.push_back(points);
  }
  if (series.empty()) return false;
  PlotSpec spec;
  spec.title = opt.title + ": validation loss minus the same seed's " + opt.baseline + "'s, mean over seeds";
  spec.x_label = "tokens";
  spec.y_label = "loss - " + opt.baseline + " loss (nats/token)";
  spec.legend_width = 330;
  write_file_atomically(path, render_svg(spec, series));
  return true;
}

int block_of(const std::string& name) {
  constexpr std::string_view kPrefix = "blocks.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const auto dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return -1;
  int v = 0;
  for (size_t i = kPrefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::filesystem::path svg_with_suffix(const std::filesystem::path& svg_path, const std::string& suffix) {
  auto p = svg_path;
  return p.replace_filename(svg_path.stem().string() + suffix + svg_path.extension().string());
}

std::string osci_report(const std::vector<RunSummary>& runs, const std::filesystem::path& svg_path) {
  // The lowest seed of each recipe with records (seeds sorted by group_by_seed within a label).
  std::vector<const RunSummary*> chosen;
  for (const std::string& label : labels_in_order(runs)) {
    const RunSummary* best = nullptr;
    for (const auto& r : runs)
      if (r.label == label && !r.osci.empty() &&
          (!best || (r.seed && (!best->seed || *r.seed < *best->seed))))
        best = &r;
    if (best) chosen.push_back(best);
  }
  if (chosen.empty()) return "";
  std::vector<PlotSeries> reset_series, risk_series, flip_series;
  bool any_flips = false;
  std::ostringstream t;
  t << "OsciReset windows (one row per closed window; 'reset' = tracked elements with risk R >= threshold, "
       "set to their grid point; 'flip rate' = flips / (tracked x steps), a flip being a tracked element "
       "whose quantized value Q(w) changed from one step to the next, tracked-weighted over the window's "
       "weights; '-' where the run did not record flips):\n\n"
    << "| recipe | seed | step | tracked | reset (R >= threshold) | share reset | mean R | flip rate | share "
       "reset per block |\n"
    << "|---|---|---|---|---|---|---|---|---|\n";
  for (size_t k = 0; k < chosen.size(); ++k) {
    const RunSummary& r = *chosen[k];
    int blocks = 0;
    for (const auto& w : r.osci)
      for (const auto& l : w.layers) blocks = std::max(blocks, block_of(l.name) + 1);
    std::vector<PlotSeries> per_reset(static_cast<size_t>(blocks)), per_risk(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) {
      const std::string name = r.label + " block " + std::to_string(b);
      per_reset[b] = {name, {}, {}, true, b, static_cast<int>(k)};
      per_risk[b] = {name, {}, {}, true, b, static_cast<int>(k)};
    }
    // Flip rate per weight: a colour per block, a dash pattern per linear of the block (in the order met).
    std::vector<std::string> weights, kinds;
    std::vector<PlotSeries> per_flip;
    for (const auto& w : r.osci) {
      int64_t tracked = 0, reset = 0;
      double risk_sum = 0, flip_sum = 0;
      int64_t flip_tracked = 0;
      std::vector<int64_t> bt(static_cast<size_t>(blocks)), br(static_cast<size_t>(blocks));
      std::vector<double> brisk(static_cast<size_t>(blocks));
      for (const auto& l : w.layers) {
        tracked += l.tracked, reset += l.reset, risk_sum += l.mean_risk * static_cast<double>(l.tracked);
        if (l.flips) {
          flip_sum += l.flip_rate * static_cast<double>(l.tracked), flip_tracked += l.tracked;
          auto it = std::find(weights.begin(), weights.end(), l.name);
          if (it == weights.end()) {
            // The linear's name within its block ("attn.wqkv" of "blocks.3.attn.wqkv").
            const size_t dot = block_of(l.name) >= 0 ? l.name.find('.', std::string_view("blocks.").size())
                                                     : std::string::npos;
            const std::string kind = dot == std::string::npos ? l.name : l.name.substr(dot + 1);
            auto kt = std::find(kinds.begin(), kinds.end(), kind);
            if (kt == kinds.end()) kt = kinds.insert(kinds.end(), kind);
            weights.push_back(l.name);
            per_flip.push_back({r.label + " " + l.name,
                                {},
                                {},
                                true,
                                std::max(0, block_of(l.name)),
                                static_cast<int>(kt - kinds.begin())});
            it = weights.end() - 1;
          }
          PlotSeries& ps = per_flip[static_cast<size_t>(it - weights.begin())];
          ps.x.push_back(static_cast<double>(w.step)), ps.y.push_back(l.flip_rate);
        }
        const int b = block_of(l.name);
        if (b < 0) continue;
        bt[b] += l.tracked, br[b] += l.reset, brisk[b] += l.mean_risk * static_cast<double>(l.tracked);
      }
      std::string per_block;
      for (int b = 0; b < blocks; ++b) {
        if (bt[b] == 0) continue;
        const double share = static_cast<double>(br[b]) / static_cast<double>(bt[b]);
        per_reset[b].x.push_back(static_cast<double>(w.step)), per_reset[b].y.push_back(share);
        per_risk[b].x.push_back(static_cast<double>(w.step)), per_risk[b].y.push_back(brisk[b] / bt[b]);
        per_block += (per_block.empty() ? "" : ", ") + pct(share);
      }
      t << "| " << r.label << " | " << seed_text(r.seed) << " | " << w.step << " | " << tracked << " | "
        << reset << " | " << pct(tracked ? static_cast<double>(reset) / tracked : kNaN) << " | "
        << fmt(tracked ? risk_sum / tracked : kNaN, "%.3f") << " | "
        << fmt(flip_tracked ? flip_sum / static_cast<double>(flip_tracked) : kNaN, "%.3g") << " | "
        << per_block << " |\n";
    }
    for (int b = 0; b < blocks; ++b) {
      reset_series.push_back(per_reset[b]);
      risk_series.push_back(per_risk[b]);
    }
    any_flips = any_flips || !per_flip.empty();
    flip_series.insert(flip_series.end(), per_flip.begin(), per_flip.end());
  }
  PlotSpec spec;
  spec.title = "OsciReset: share of tracked elements reset per window (R >= threshold)";
  spec.x_label = "step (window end)";
  spec.y_label = "share of tracked elements reset";
  spec.legend_width = 300;
  write_file_atomically(svg_with_suffix(svg_path, "-osci"), render_svg(spec, reset_series));
  spec.title = "OsciReset: mean oscillation risk R = dist_Q / dist_M per window";
  spec.y_label = "mean R (tracked-weighted over the block's linears)";
  write_file_atomically(svg_with_suffix(svg_path, "-oscirisk"), render_svg(spec, risk_series));
  t << "\nPictures: " << svg_with_suffix(svg_path, "-osci").string() << ", "
    << svg_with_suffix(svg_path, "-oscirisk").string();
  if (any_flips) {
    spec.title = "OsciReset: flip rate per weight and window (Q(w) changes per tracked element and step)";
    spec.y_label = "flip rate";
    spec.legend_width = 360;
    write_file_atomically(svg_with_suffix(svg_path, "-osciflips"), render_svg(spec, flip_series));
    t << ", " << svg_with_suffix(svg_path, "-osciflips").string();
  }
  t << "\n";
  return t.str();
}

std::string out_control_report(const std::vector<RunSummary>& runs, const std::filesystem::path& svg_path) {
  std::vector<const RunSummary*> with;
  for (const auto& r : runs)
    if (!r.out_control.empty()) with.push_back(&r);
  if (with.empty()) return "";
  std::vector<std::string> labels = labels_in_order(runs);
  std::ostringstream t;
  t << "OutControl (input channels frozen in MXFP8, and each linear's share of ||X||^2 in them over the "
       "calibration, in the order of the picture's x axis):\n\n"
    << "| recipe | seed | frozen at step | channels (all linears) | share of ||X||^2 per linear |\n"
    << "|---|---|---|---|---|\n";
  std::vector<PlotSeries> series;
  std::vector<std::string> names;
  for (const RunSummary* r : with) {
    const int color = static_cast<int>(std::find(labels.begin(), labels.end(), r->label) - labels.begin());
    PlotSeries s{r->label + " (seed " + seed_text(r->seed) + ")",
                 {},
                 {},
                 true,
                 color,
                 static_cast<int>(series.size() % 4)};
    int64_t channels = 0, in_features = 0;
    std::string shares;
    for (size_t i = 0; i < r->out_control.size(); ++i) {
      const auto& l = r->out_control[i];
      s.x.push_back(static_cast<double>(i)), s.y.push_back(l.share);
      channels += l.channels, in_features += l.in_features;
      shares += (shares.empty() ? "" : ", ") + pct(l.share);
    }
    t << "| " << r->label << " | " << seed_text(r->seed) << " | " << r->out_control_step << " | " << channels
      << " of " << in_features << " | " << shares << " |\n";
    if (names.empty())
      for (const auto& l : r->out_control) names.push_back(l.name);
    series.push_back(s);
  }
  std::string axis = "linear index:";
  for (size_t i = 0; i < names.size(); ++i) axis += " " + std::to_string(i) + "=" + names[i];
  PlotSpec spec;
  spec.title = "OutControl: share of each linear's input ||X||^2 in its MXFP8 channels";
  spec.x_label = names.size() <= 8 ? axis : "linear index (order of the table)";
  spec.y_label = "share of ||X||^2";
  spec.y_min = 0, spec.y_max = 1;
  spec.legend_width = 300;
  write_file_atomically(svg_with_suffix(svg_path, "-outcontrol"), render_svg(spec, series));
  return t.str();
}

}  // namespace fp4
