// The Markdown tables of `fp4train report` (report.h says what they hold).
#pragma once

#include <string>
#include <vector>

#include "report/report.h"
#include "report/seeds.h"

namespace fp4 {

// One row per run, in group order (seeds ascending, the runs of a seed in the order given); with
// several groups a seed column follows the run's label.
std::string run_table(const std::vector<RunSummary>& runs, const std::vector<SeedGroup>& groups,
                      const std::vector<SeedGap>& gaps, const ReportOptions& opt);

// The per-recipe summary over seeds, preceded by a caption saying how its numbers are formed.
std::string seed_summary_table(const std::vector<RecipeOverSeeds>& recipes, const ReportOptions& opt);

}  // namespace fp4
