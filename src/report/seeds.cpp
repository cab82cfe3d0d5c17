#include "report/seeds.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace fp4 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Unknown seeds sort after every known one.
bool seed_less(const std::optional<uint64_t>& a, const std::optional<uint64_t>& b) {
  if (a && b) return *a < *b;
  return a.has_value() && !b.has_value();
}

const RunSummary* find_in(const std::vector<RunSummary>& runs, const SeedGroup& g, const std::string& label) {
  for (size_t i : g.runs)
    if (runs[i].label == label) return &runs[i];
  return nullptr;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? kNaN : s / static_cast<double>(v.size());
}

}  // namespace

std::optional<uint64_t> read_run_seed(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW("report: ", path.string(), " is not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("train") || !j["train"].is_object() || !j["train"].contains("seed"))
    return std::nullopt;
  const auto& s = j["train"]["seed"];
  FP4_CHECK(s.is_number_unsigned(), "report: ", path.string(),
            ": train.seed must be a non-negative integer, got ", s.dump());
  return s.get<uint64_t>();
}

std::string seed_text(const std::optional<uint64_t>& seed) {
  return seed ? std::to_string(*seed) : "?";
}

std::vector<SeedGroup> group_by_seed(const std::vector<RunSummary>& runs) {
  std::vector<SeedGroup> groups;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const SeedGroup& x) { return x.seed == runs[i].seed; });
    if (g == groups.end()) {
      groups.push_back({runs[i].seed, {}});
      g = groups.end() - 1;
    }
    for (size_t k : g->runs)
      FP4_CHECK(runs[k].label != runs[i].label, "report: ", runs[k].dir, " and ", runs[i].dir,
                " are both recipe '", runs[i].label, "' with ",
                runs[i].seed ? "seed " + std::to_string(*runs[i].seed) : std::string("no seed recorded"),
                ": give one run per recipe and seed");
    g->runs.push_back(i);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const SeedGroup& a, const SeedGroup& b) { return seed_less(a.seed, b.seed); });
  return groups;
}

std::vector<SeedGap> seed_gaps(const std::vector<RunSummary>& runs, const std::vector<SeedGroup>& groups,
                               const ReportOptions& opt) {
  std::vector<SeedGap> out(runs.size(), SeedGap{kNaN, kNaN, kNaN, kNaN});
  for (const auto& g : groups) {
    const RunSummary* base = find_in(runs, g, opt.baseline);
    const RunSummary* ref = find_in(runs, g, opt.reference);
    if (!base) continue;
    const double ref_gap = ref ? ref->val_loss - base->val_loss : kNaN;
    for (size_t i : g.runs) {
      const RunSummary& r = runs[i];
      if (&r == base) continue;
      SeedGap& s = out[i];
      s.gap = r.val_loss - base->val_loss;
      s.relative = s.gap / base->val_loss;
      s.reference_gap = ref_gap;
      if (ref && &r != ref && std::fabs(ref_gap) > 0) s.closed = 1.0 - s.gap / ref_gap;
    }
  }
  return out;
}

std::vector<RecipeOverSeeds> summarize_over_seeds(const std::vector<RunSummary>& runs,
                                                  const std::vector<SeedGroup>& groups,
                                                  const std::vector<SeedGap>& gaps,
                                                  const ReportOptions& opt) {
  std::vector<RecipeOverSeeds> out;
  for (const auto& r : runs)
    if (std::none_of(out.begin(), out.end(), [&](const RecipeOverSeeds& x) { return x.label == r.label; }))
      out.push_back({r.label, {}, kNaN, 0, kNaN, kNaN, kNaN, 0, kNaN, {}});
  for (auto& rec : out) {
    std::vector<double> losses, run_gaps, share_gaps, share_ref_gaps;
    for (const auto& g : groups)  // ascending seeds
      for (size_t i : g.runs) {
        if (runs[i].label != rec.label) continue;
        rec.seeds.push_back(g.seed);
        if (std::isfinite(runs[i].val_loss)) losses.push_back(runs[i].val_loss);
        const SeedGap& s = gaps[i];
        if (std::isfinite(s.gap)) run_gaps.push_back(s.gap);
        if (rec.label != opt.reference && std::isfinite(s.gap) && std::isfinite(s.reference_gap)) {
          share_gaps.push_back(s.gap);
          share_ref_gaps.push_back(s.reference_gap);
        }
        if (std::isfinite(s.closed)) rec.per_seed_closed.emplace_back(g.seed, s.closed);
      }
    rec.mean_val_loss = mean(losses);
    rec.gap_seeds = static_cast<int>(run_gaps.size());
    if (!run_gaps.empty()) {
      rec.mean_gap = mean(run_gaps);
      rec.min_gap = *std::min_element(run_gaps.begin(), run_gaps.end());
      rec.max_gap = *std::max_element(run_gaps.begin(), run_gaps.end());
    }
    const double ref_mean = mean(share_ref_gaps);
    if (!share_gaps.empty() && std::fabs(ref_mean) > 0) {
      rec.share_seeds = static_cast<int>(share_gaps.size());
      rec.share_of_mean_gaps = 1.0 - mean(share_gaps) / ref_mean;
    }
  }
  return out;
}

std::vector<std::string> seed_notes(const std::vector<RunSummary>& runs) {
  std::vector<std::string> notes;
  for (const auto& r : runs)
    if (!r.seed)
      notes.push_back(r.dir +
                      " records no train.seed (no config.json, or an older one without it): it is compared "
                      "only with the other runs without a seed (seed ?), never with a seeded run");
  return notes;
}

}  // namespace fp4
