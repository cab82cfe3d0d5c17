// `fp4train report RUN_DIRS...`: loss curves of several runs as one SVG picture and a comparison table
// (validation loss and perplexity, gap to the BF16 run, fraction of the NVIDIA recipe's gap closed).
// Runs of several seeds are compared seed by seed and summarised over seeds (report/seeds.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fp4 {

// One closed OsciReset window of a weight (metrics.jsonl "osci_reset" lines): elements tracked, elements
// with risk R >= threshold (reset to their grid point), the mean R, and (lines written since flips are
// counted) the flips: elements whose Q(w) changed, summed over the window's steps, and the flip rate
// flips / (tracked * steps). Older lines leave flips empty.
struct OsciLayerRecord {
  std::string name;
  int64_t tracked = 0, reset = 0;
  double mean_risk = 0;
  std::optional<int64_t> flips;
  double flip_rate = 0;
};
struct OsciWindowRecord {
  int64_t step = 0;  // the step that closed the window
  std::vector<OsciLayerRecord> layers;
};
// OutControl's freeze (the "out_control" line): per linear, input channels kept in MXFP8 and their share of
// ||X||^2 over the calibration.
struct OutControlLayerRecord {
  std::string name;
  int64_t channels = 0, in_features = 0;
  double share = 0;
};

struct RunSummary {
  std::string dir;
  std::string label;             // the recipe name (from recipe.toml), else the directory name
  std::optional<uint64_t> seed;  // train.seed from config.json; empty when the run records none
  int64_t last_step = 0;
  int64_t tokens = 0;
  double final_train_loss = 0;                     // mean over the last 5% of logged steps
  double val_loss = 0, val_ppl = 0;                // the last evaluation (NaN when the run has none)
  double tokens_per_s = 0;                         // median over the logged steps
  std::vector<double> train_tokens, train_loss;    // every logged train record
  std::vector<double> val_tokens, val_losses;      // every evaluation
  int64_t non_embedding_params = 0;                // from config.json's [model] (0: not recorded)
  std::vector<OsciWindowRecord> osci;              // every closed OsciReset window
  int64_t out_control_step = 0;                    // the step OutControl froze (0: never)
  std::vector<OutControlLayerRecord> out_control;  // its channels per linear
};

// Reads <dir>/metrics.jsonl (recipe.toml for the label, config.json for the seed). Throws fp4::Error
// naming the file.
RunSummary summarize_run(const std::filesystem::path& dir);

struct ReportOptions {
  std::filesystem::path svg_path = "loss_curves.svg";
  std::string baseline = "bf16";           // label of the run the gaps are measured against
  std::string reference = "nvidia-nvfp4";  // label whose gap the others are compared with
  std::string title = "fp4train: loss curves";
  double smoothing = 0.9;  // EMA factor for the training-loss lines
};

// A run's loss minus the baseline's, at the tokens both logged: the validation points and the
// training-loss EMAs (same smoothing as the picture). Tokens that only one run logged are skipped.
struct LossGap {
  std::vector<double> val_tokens, val_gap;
  std::vector<double> train_tokens, train_gap;
};
LossGap loss_gap(const RunSummary& run, const RunSummary& baseline, double smoothing);

// Where the gap picture goes: the curves' path with "-gap" before the extension.
std::filesystem::path gap_svg_path(const std::filesystem::path& svg_path);

// With runs of several token budgets (final token counts) the tables and pictures above are those of the
// largest budget (the main comparison); every budget gets the paired-statistics table (report/ablation.h) and
// the scan over tokens per parameter is drawn. OsciReset's and OutControl's records get tables and pictures.
// Writes the SVG of the curves and, when a baseline run and another run of its seed are among the
// runs, the SVG of every run's gap to its own seed's baseline (gap_svg_path); returns the table
// (Markdown). Runs are grouped by seed; gaps and shares are taken within a seed, never across. With
// one seed (or none recorded) the table has one row per run; with several, the per-run table gets a
// seed column and is followed by a per-recipe summary over seeds. Two runs of one recipe and one
// seed are an error naming both directories.
std::string write_report(const std::vector<RunSummary>& runs, const ReportOptions& opt);

}  // namespace fp4
