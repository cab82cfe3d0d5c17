#include "report/tables.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "report/number_format.h"

namespace fp4 {
namespace {

using report_format::percent;
std::string fmt(double v, const char* f = "%.4f") {
  return report_format::number(v, f);
}

std::string seed_list(const std::vector<std::optional<uint64_t>>& seeds) {
  std::string s;
  for (const auto& x : seeds) s += (s.empty() ? "" : ", ") + seed_text(x);
  return s;
}

}  // namespace

std::string run_table(const std::vector<RunSummary>& runs, const std::vector<SeedGroup>& groups,
                      const std::vector<SeedGap>& gaps, const ReportOptions& opt) {
  const bool several = groups.size() > 1;
  std::ostringstream t;
  t << "| run" << (several ? " | seed" : "")
    << " | tokens | train loss (last 5%) | val loss | val ppl | gap to " << opt.baseline
    << (several ? " of the same seed" : "") << " (val loss) | share of " << opt.reference << "'s gap closed"
    << (several ? " (same seed)" : "") << " | tokens/s |\n|---|---|---|---|---|---|---|---|"
    << (several ? "---|" : "") << "\n";
  for (const auto& g : groups)
    for (size_t i : g.runs) {
      const RunSummary& r = runs[i];
      const SeedGap& s = gaps[i];
      const std::string gap_text =
          std::isfinite(s.gap) ? fmt(s.gap, "%+.4f") + " (" + fmt(100.0 * s.relative, "%+.2f") + "%)" : "-";
      t << "| " << r.label << (several ? " | " + seed_text(g.seed) : "") << " | " << r.tokens << " | "
        << fmt(r.final_train_loss) << " | " << fmt(r.val_loss) << " | " << fmt(r.val_ppl, "%.3f") << " | "
        << gap_text << " | " << percent(s.closed) << " | " << fmt(r.tokens_per_s, "%.0f") << " |\n";
    }
  return t.str();
}

std::string seed_summary_table(const std::vector<RecipeOverSeeds>& recipes, const ReportOptions& opt) {
  const std::string& b = opt.baseline;
  const std::string& ref = opt.reference;
  std::ostringstream t;
  t << "Over seeds: every gap is to the " << b
    << " run of the same seed; mean and (min..max) over the seeds that "
    << "have one. Share closed = 1 - mean gap / mean " << ref
    << " gap, both over the seeds where the recipe, " << ref << " and " << b
    << " all ran: the share of the mean gaps, not the mean of the per-seed shares (those "
    << "are listed beside it).\n\n";
  t << "| recipe | seeds | mean val loss | mean gap to " << b << " (min..max) | share of " << ref
    << "'s mean gap closed | per-seed shares |\n|---|---|---|---|---|---|\n";
  for (const auto& r : recipes) {
    const size_t n = r.seeds.size();
    std::string gap = "-";
    if (r.gap_seeds > 0) {
      gap = fmt(r.mean_gap, "%+.4f") + " (" + fmt(r.min_gap, "%+.4f") + ".." + fmt(r.max_gap, "%+.4f") + ")";
      if (static_cast<size_t>(r.gap_seeds) < n)
        gap += ", over " + std::to_string(r.gap_seeds) + " of " + std::to_string(n) + " seeds";
    }
    std::string share = r.share_seeds > 0 ? percent(r.share_of_mean_gaps) : "-";
    if (r.share_seeds > 0 && static_cast<size_t>(r.share_seeds) < n)
      share += ", over " + std::to_string(r.share_seeds) + " of " + std::to_string(n) + " seeds";
    std::string per_seed;
    for (const auto& [seed, closed] : r.per_seed_closed)
      per_seed += (per_seed.empty() ? "" : ", ") + percent(closed) + " (seed " + seed_text(seed) + ")";
    t << "| " << r.label << " | " << n << " (" << seed_list(r.seeds) << ") | " << fmt(r.mean_val_loss)
      << " | " << gap << " | " << share << " | " << (per_seed.empty() ? "-" : per_seed) << " |\n";
  }
  return t.str();
}

}  // namespace fp4
