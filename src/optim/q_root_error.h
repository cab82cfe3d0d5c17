// Q-Root's error measured as RECIPES.md section 8.3 (corrected) defines it: e_q = ||NS_fp4(X) -
// NS_fp32(X)||_F /
// ||NS_fp32(X)||_F, the error NVFP4 operands add to the Newton-Schulz iteration with the same coefficients
// and clipping, after each of the iteration's steps; beside it the FP32 map's own distance to the polar
// factor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/newton_schulz.h"

namespace fp4 {

// Sample inputs: "normal" (i.i.d. standard normal) or "t3" (Student t with 3 degrees of freedom, heavy-tailed
// as momentum matrices with outlier entries are). Sample i of `seed` is deterministic.
std::vector<float> ns_sample_matrix(int64_t rows, int64_t cols, const std::string& kind, uint64_t seed,
                                    int i);

struct NsStepErrors {
  std::vector<double> e_q;      // [k - 1]: mean e_q after k steps, k = 1..steps
  double fp32_polar_error = 0;  // mean ||NS_fp32(X) - polar(X)||_F / ||polar(X)||_F after all steps
  // The same measure for BF16 operands (root-bf16, Q-Root's baseline on tensor cores): mean
  // ||NS_bf16(X) - NS_fp32(X)||_F / ||NS_fp32(X)||_F after all steps.
  double e_bf16 = 0;
};
// Means over `samples` inputs of `kind`; clip_quantile < 1 clamps each input to its |x| quantile first
// (ROOT's clipping, the same input for both precisions). NVFP4 with RTN operands.
NsStepErrors ns_step_errors(int64_t rows, int64_t cols, const NsCoefficients& coef, int steps,
                            double clip_quantile, const std::string& kind, int samples, uint64_t seed);

struct QRootTableOptions {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  int samples = 4;
  uint64_t seed = 1;
  int fit_samples = 4;  // for the fitted (shape-aware) coefficients
  int fit_evals = 120;
};
// Markdown: per shape and input kind, rows for Muon's coefficients, Q-Root's default and coefficients
// fitted on that shape in NVFP4, each without clipping and with p99 clipping: e_q per step, the BF16
// iteration's error against the FP32 one after all steps (e_bf16) and the FP32 map's polar error.
std::string q_root_error_table(const QRootTableOptions& opt);

}  // namespace fp4
