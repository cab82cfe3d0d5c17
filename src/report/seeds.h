// Comparing recipes over several seeds: runs are grouped by (recipe, seed), every gap is taken against
// the baseline run of the same seed, and a recipe's per-seed gaps are summarised over its seeds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "report/report.h"

namespace fp4 {

// train.seed of <dir>/config.json; nullopt when the run has no config.json or it holds no train.seed
// (runs written before the trainer recorded it). Throws fp4::Error naming the file when it is not JSON
// or the seed is not a non-negative integer.
std::optional<uint64_t> read_run_seed(const std::filesystem::path& dir);

// "1", or "?" for a run that records no seed.
std::string seed_text(const std::optional<uint64_t>& seed);

// The runs of one seed (indices into the runs given). Runs without a seed form one group of their
// own, never merged with a seeded one.
struct SeedGroup {
  std::optional<uint64_t> seed;
  std::vector<size_t> runs;  // in the order given
};

// Groups by seed, ascending, the runs without a seed last. Throws fp4::Error naming both directories
// when two runs share a recipe label and a seed.
std::vector<SeedGroup> group_by_seed(const std::vector<RunSummary>& runs);

// A run's final validation loss against the runs of its own seed; NaN where the comparison does not exist.
struct SeedGap {
  double gap = 0;  // val loss minus the same seed's baseline's (NaN: no baseline, or the baseline itself)
  double relative = 0;       // gap / the baseline's val loss
  double reference_gap = 0;  // the same seed's reference run's gap (NaN when either run is missing)
  double closed = 0;         // 1 - gap / reference_gap; NaN for the baseline and the reference themselves
};
std::vector<SeedGap> seed_gaps(const std::vector<RunSummary>& runs, const std::vector<SeedGroup>& groups,
                               const ReportOptions& opt);

// One recipe over its seeds, from the per-seed values.
struct RecipeOverSeeds {
  std::string label;
  std::vector<std::optional<uint64_t>> seeds;  // the seeds it ran with, ascending
  double mean_val_loss = 0;                    // over its runs that evaluated (NaN: none did)
  int gap_seeds = 0;  // seeds with a baseline run, over which the gap statistics are taken
  double mean_gap = 0, min_gap = 0, max_gap = 0;
  // 1 - mean gap / mean reference gap, both over the seeds where this recipe, the reference and the
  // baseline all ran (share_seeds of them): the share of the mean gaps, not the mean of the shares.
  int share_seeds = 0;
  double share_of_mean_gaps = 0;
  std::vector<std::pair<std::optional<uint64_t>, double>> per_seed_closed;  // (seed, share closed)
};
// Recipes in the order they first appear in runs.
std::vector<RecipeOverSeeds> summarize_over_seeds(const std::vector<RunSummary>& runs,
                                                  const std::vector<SeedGroup>& groups,
                                                  const std::vector<SeedGap>& gaps, const ReportOptions& opt);

// One line per run that records no seed, saying how it is grouped (empty when every run has one).
std::vector<std::string> seed_notes(const std::vector<RunSummary>& runs);

}  // namespace fp4
