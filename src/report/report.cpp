#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "recipe/recipe_io.h"
#include "report/ablation.h"
#include "report/seeds.h"
#include "report/svg_plot.h"
#include "report/tables.h"
#include "train/file_io.h"

namespace fp4 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

// A metrics.jsonl line is one JSON object; `where` is "<file>:<line>" for the errors.
nlohmann::json parse_record(const std::string& line, const std::string& where) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  FP4_CHECK(!j.is_discarded(), where,
            ": not valid JSON (a torn or damaged line); accepted: one JSON object per line");
  FP4_CHECK(j.is_object(), where, ": ", j.dump().substr(0, 80),
            " is not a JSON object; accepted: one JSON object per line");
  return j;
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where,
                            const std::string& what, const char* accepted) {
  FP4_CHECK(j.contains(key), where, ": ", what, " has no \"", key, "\" field; accepted: ", accepted);
  return j[key];
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where,
                         const std::string& what) {
  const auto& v = field(j, key, where, what, "a string");
  FP4_CHECK(v.is_string(), where, ": ", what, "'s \"", key, "\" is ", v.dump().substr(0, 80),
            "; accepted: a string");
  return v.get<std::string>();
}

int64_t integer_field(const nlohmann::json& j, const char* key, const std::string& where,
                      const std::string& what) {
  const auto& v = field(j, key, where, what, "an integer >= 0");
  FP4_CHECK((v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) ||
                (v.is_number_integer() && v.get<int64_t>() >= 0),
            where, ": ", what, "'s \"", key, "\" is ", v.dump().substr(0, 80), "; accepted: an integer >= 0");
  return v.get<int64_t>();
}

// A number, or null: the trainer writes a non-finite value (a diverged loss) as null, read back as NaN.
double number_field(const nlohmann::json& j, const char* key, const std::string& where,
                    const std::string& what) {
  const auto& v = field(j, key, where, what, "a number or null");
  FP4_CHECK(v.is_number() || v.is_null(), where, ": ", what, "'s \"", key, "\" is ", v.dump().substr(0, 80),
            "; accepted: a number or null");
  return v.is_null() ? kNaN : v.get<double>();
}

const nlohmann::json& array_field(const nlohmann::json& j, const char* key, const std::string& where,
                                  const std::string& what) {
  const auto& v = field(j, key, where, what, "an array");
  FP4_CHECK(v.is_array(), where, ": ", what, "'s \"", key, "\" is ", v.dump().substr(0, 80),
            "; accepted: an array");
  return v;
}

std::vector<double> ema(const std::vector<double>& v, double smoothing) {
  std::vector<double> out;
  double e = v.empty() ? 0 : v.front();
  for (double x : v) out.push_back(e = smoothing * e + (1 - smoothing) * x);
  return out;
}

// Appends a(x) - b(x) for the x values both series hold (each sorted by x, as logged).
void matched_difference(const std::vector<double>& xa, const std::vector<double>& ya,
                        const std::vector<double>& xb, const std::vector<double>& yb, std::vector<double>& x,
                        std::vector<double>& d) {
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
  FP4_CHECK(std::filesystem::exists(metrics), "report: ", dir.string(),
            " has no metrics.jsonl (is it a run directory?)");
  RunSummary s;
  s.dir = dir.string();
  s.label = run_label(dir);
  s.seed = read_run_seed(dir);
  s.non_embedding_params = read_non_embedding_params(dir);
  s.val_loss = s.val_ppl = kNaN;
  std::vector<double> speeds;
  std::istringstream in(read_file(metrics));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = metrics.string() + ":" + std::to_string(n);
    const nlohmann::json j = parse_record(line, where);
    const std::string type = string_field(j, "type", where, "a record");
    const std::string what = "a \"" + type + "\" record";
    if (type == "train") {
      const int64_t step = integer_field(j, "step", where, what);
      const int64_t tokens = integer_field(j, "tokens", where, what);
      s.train_loss.push_back(number_field(j, "loss", where, what));
      s.train_tokens.push_back(static_cast<double>(tokens));
      s.last_step = std::max(s.last_step, step);
      s.tokens = std::max(s.tokens, tokens);
      const double speed = j.contains("tokens_per_s") ? number_field(j, "tokens_per_s", where, what) : kNaN;
      if (speed > 0) speeds.push_back(speed);
    } else if (type == "osci_reset") {
      OsciWindowRecord w;
      w.step = integer_field(j, "step", where, what);
      for (const auto& l : array_field(j, "layers", where, what)) {
        const std::string layer = what + "'s layer";
        FP4_CHECK(l.is_object(), where, ": ", what, "'s \"layers\" holds ", l.dump(),
                  "; accepted: objects with name, tracked, reset, mean_risk (and flips, flip_rate)");
        OsciLayerRecord rec{string_field(l, "name", where, layer), integer_field(l, "tracked", where, layer),
                            integer_field(l, "reset", where, layer),
                            number_field(l, "mean_risk", where, layer)};
        if (l.contains("flips") || l.contains("flip_rate")) {  // both, or neither (lines of older versions)
          rec.flips = integer_field(l, "flips", where, layer);
          rec.flip_rate = number_field(l, "flip_rate", where, layer);
        }
        w.layers.push_back(std::move(rec));
      }
      s.osci.push_back(std::move(w));
    } else if (type == "out_control") {
      s.out_control_step = integer_field(j, "step", where, what);
      s.out_control.clear();
      for (const auto& l : array_field(j, "layers", where, what)) {
        const std::string layer = what + "'s layer";
        FP4_CHECK(l.is_object(), where, ": ", what, "'s \"layers\" holds ", l.dump(),
                  "; accepted: objects with name, channels, in_features, share");
        s.out_control.push_back(
            {string_field(l, "name", where, layer), integer_field(l, "channels", where, layer),
             integer_field(l, "in_features", where, layer), number_field(l, "share", where, layer)});
      }
    } else if (type == "eval") {
      s.val_tokens.push_back(number_field(j, "tokens", where, what));
      s.val_losses.push_back(number_field(j, "val_loss", where, what));
      s.val_loss = s.val_losses.back();
      s.val_ppl = number_field(j, "val_ppl", where, what);
    }
    // Other types (error, init_from, lines of later versions) carry nothing the report shows.
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

namespace {

// The curves, the gap picture and the tables of runs of one budget.
std::string single_budget_report(const std::vector<RunSummary>& runs, const ReportOptions& opt) {
  const std::vector<SeedGroup> groups = group_by_seed(runs);
  const bool several = groups.size() > 1;
  // A colour per recipe (in the order recipes first appear), a dash pattern per seed.
  std::vector<std::string> recipes;
  std::vector<int> color(runs.size()), dash(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    auto it = std::find(recipes.begin(), recipes.end(), runs[i].label);
    color[i] = static_cast<int>(it - recipes.begin());
    if (it == recipes.end()) recipes.push_back(runs[i].label);
  }
  for (size_t k = 0; k < groups.size(); ++k)
    for (size_t i : groups[k].runs) dash[i] = static_cast<int>(k);
  auto name = [&](size_t i) {
    return several ? runs[i].label + " (seed " + seed_text(runs[i].seed) + ")" : runs[i].label;
  };

  PlotSpec spec;
  spec.title = opt.title;
  spec.x_label = "tokens";
  spec.y_label = "loss (nats/token)";
  if (several) spec.legend_width = 310;  // room for the seed in each label
  std::vector<PlotSeries> series;
  for (const auto& g : groups)
    for (size_t i : g.runs) {
      const RunSummary& r = runs[i];
      series.push_back({name(i) + " (train, EMA)", r.train_tokens, ema(r.train_loss, opt.smoothing), false,
                        color[i], dash[i]});
      if (!r.val_losses.empty())
        series.push_back({name(i) + " (validation)", r.val_tokens, r.val_losses, true, color[i], dash[i]});
    }
  write_file_atomically(opt.svg_path, render_svg(spec, series));

  // Each run's gap to the baseline of its own seed.
  std::vector<PlotSeries> gap_series;
  for (const auto& g : groups) {
    const RunSummary* base = nullptr;
    for (size_t i : g.runs)
      if (runs[i].label == opt.baseline) base = &runs[i];
    if (!base) continue;
    for (size_t i : g.runs) {
      if (&runs[i] == base) continue;
      const LossGap lg = loss_gap(runs[i], *base, opt.smoothing);
      gap_series.push_back(
          {name(i) + " (train, EMA)", lg.train_tokens, lg.train_gap, false, color[i], dash[i]});
      if (!lg.val_gap.empty())
        gap_series.push_back({name(i) + " (validation)", lg.val_tokens, lg.val_gap, true, color[i], dash[i]});
    }
  }
  if (!gap_series.empty()) {
    PlotSpec gap_spec = spec;
    gap_spec.title = opt.title + ": loss minus " + (several ? "the same seed's " : "") + opt.baseline + "'s";
    gap_spec.y_label = "loss - " + opt.baseline + " loss (nats/token)";
    write_file_atomically(gap_svg_path(opt.svg_path), render_svg(gap_spec, gap_series));
  }

  const std::vector<SeedGap> gaps = seed_gaps(runs, groups, opt);
  std::string out = run_table(runs, groups, gaps, opt);
  if (several) out += "\n" + seed_summary_table(summarize_over_seeds(runs, groups, gaps, opt), opt);
  const std::vector<std::string> notes = seed_notes(runs);
  if (several && !notes.empty()) {
    out += "\nSeed `?`:";
    for (const auto& n : notes) out += " " + n + ".";
    out += "\n";
  }
  return out;
}

}  // namespace

std::string write_report(const std::vector<RunSummary>& runs, const ReportOptions& opt) {
  FP4_CHECK(!runs.empty(), "report: no runs given");
  const std::vector<int64_t> budgets = token_budgets(runs);
  const std::vector<RunSummary> main = runs_at_budget(runs, budgets.back());
  std::string out;
  if (budgets.size() > 1)
    out += "Runs at " + std::to_string(budgets.size()) +
           " token budgets: the tables and curves below are those of " + "the largest, " +
           std::to_string(budgets.back()) + " tokens (the main comparison).\n\n";
  out += single_budget_report(main, opt);
  std::vector<std::vector<RecipeComparison>> per_budget;
  bool paired = false;
  for (int64_t b : budgets) {
    per_budget.push_back(compare_recipes(runs_at_budget(runs, b), opt));
    for (const auto& c : per_budget.back()) paired = paired || c.gap.n >= 2;
  }
  if (paired) {
    for (size_t k = budgets.size(); k-- > 0;) out += "\n" + comparison_table(per_budget[k], opt);
    if (write_mean_gap_svg(svg_with_suffix(opt.svg_path, "-gapmean"), main, opt))
      out += "\nMean gap curves over seeds: " + svg_with_suffix(opt.svg_path, "-gapmean").string() + "\n";
  }
  if (budgets.size() > 1) {
    out += "\n" + scan_table(per_budget, opt);
    write_scan_svg(svg_with_suffix(opt.svg_path, "-scan"), per_budget, opt);
    out += "\nScan picture: " + svg_with_suffix(opt.svg_path, "-scan").string() + "\n";
  }
  if (const std::string o = osci_report(main, opt.svg_path); !o.empty()) out += "\n" + o;
  if (const std::string o = out_control_report(main, opt.svg_path); !o.empty())
    out += "\n" + o + "\nPicture: " + svg_with_suffix(opt.svg_path, "-outcontrol").string() + "\n";
  return out;
}

}  // namespace fp4
