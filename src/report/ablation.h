// `fp4train report` for recipe ablations: paired statistics per token budget, the scan over tokens per
// non-embedding parameter, mean gap curves over seeds, and OsciReset's and OutControl's telemetry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "report/paired_stats.h"
#include "report/report.h"

namespace fp4 {

// Non-embedding parameters of the model in <dir>/config.json (its blocks and the final norm: model/config.h's
// count less the embedding and the untied head); 0 when the file or its [model] fields are missing.
int64_t read_non_embedding_params(const std::filesystem::path& dir);

// The distinct final token counts of the runs, ascending.
std::vector<int64_t> token_budgets(const std::vector<RunSummary>& runs);
std::vector<RunSummary> runs_at_budget(const std::vector<RunSummary>& runs, int64_t tokens);

// One recipe at one budget, against the baseline and the reference of the same seeds.
struct RecipeComparison {
  std::string label;
  int64_t tokens = 0;
  double tokens_per_param = 0;  // NaN when the runs record no model
  PairedInterval gap;           // final val loss minus the same seed's baseline's
  ShareInterval share;          // of the reference's gap closed, over the seeds with all three runs
};
// Runs of one budget; recipes in the order they first appear, the baseline left out.
std::vector<RecipeComparison> compare_recipes(const std::vector<RunSummary>& runs, const ReportOptions& opt);

// Markdown: the paired table of one budget (with a caption saying how the intervals are formed).
std::string comparison_table(const std::vector<RecipeComparison>& rows, const ReportOptions& opt);
// Markdown: gap and share per recipe (rows) and budget (columns).
std::string scan_table(const std::vector<std::vector<RecipeComparison>>& per_budget,
                       const ReportOptions& opt);

// <stem>-scan.svg: mean gap against tokens per parameter (log x) with the 95% bounds as hollow markers.
void write_scan_svg(const std::filesystem::path& path,
                    const std::vector<std::vector<RecipeComparison>>& per_budget, const ReportOptions& opt);
// <stem>-gapmean.svg: per recipe, the mean over seeds of the validation gap to the same seed's baseline,
// at the tokens every seed evaluated. False when there is nothing to draw.
bool write_mean_gap_svg(const std::filesystem::path& path, const std::vector<RunSummary>& runs,
                        const ReportOptions& opt);

// OsciReset: <stem>-osci.svg (share of tracked elements reset, per block, over steps), <stem>-oscirisk.svg
// (mean risk R, tracked-weighted, per block) and, when the records hold flips, <stem>-osciflips.svg (flip
// rate per weight over steps), for the lowest seed of each recipe with records; a Markdown table per window
// (with the share reset and the mean flip rate) followed by the pictures' paths. Empty string when no run
// has records.
std::string osci_report(const std::vector<RunSummary>& runs, const std::filesystem::path& svg_stem);
// OutControl: <stem>-outcontrol.svg (each linear's share of ||X||^2 in its MXFP8 channels) and a table.
std::string out_control_report(const std::vector<RunSummary>& runs, const std::filesystem::path& svg_stem);

// "<dir>/<stem><suffix>.svg" for the curves' path "<dir>/<stem>.svg".
std::filesystem::path svg_with_suffix(const std::filesystem::path& svg_path, const std::string& suffix);

// The block index of a parameter name "blocks.<i>.<...>" (-1 for other names).
int block_of(const std::string& name);

}  // namespace fp4
