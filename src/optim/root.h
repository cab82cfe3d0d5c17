// ROOT (arXiv 2511.20626) for one weight matrix, and its NVFP4 variant Q-Root (RECIPES.md section 8.3):
//   M <- mu M + G;  U = G + mu M (Nesterov) or M;  eps = q-quantile of |U|;  B = clamp(U, -eps, eps);
//   X = NS(B) (5 Newton-Schulz steps, coefficients per shape);  W <- W - lr (0.2 sqrt(max(r, c)) X + wd W).
// The state is M in FP32. Only 2-D hidden matrices are ROOT's: embeddings, the LM head and every 1-D
// parameter (norm gains) are routed to AdamW by the engine (root_eligible says which). A fused matrix
// such as wqkv may be stepped as one matrix or as row slices (contiguous), at the engine's choice.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/parameter_info.h"
#include "optim/newton_schulz.h"

namespace fp4 {

// What steps the parameters ROOT does not (embedding, head, norm gains): AdamW as in ROOT's paper, or
// Q-AdamW as Full-Stack FP4 does (RECIPES.md 4b; the optimizer names with "+q-adamw").
enum class RootRest { kAdamW, kQAdamW };

struct RootOptions {
  float momentum = 0.95f;
  bool nesterov = true;
  // eps = this quantile of |U| (linear interpolation between order statistics, as torch.quantile);
  // 1 keeps every value (eps = max |U|). ROOT's code uses 0.90; our default follows the p99 of the spec.
  double clip_quantile = 0.99;
  float update_scale = 0.2f;  // times sqrt(max(rows, cols)): matches AdamW's update RMS
  int ns_steps = kNsDefaultSteps;
  NsPrecision precision = NsPrecision::kFp32;  // kNvfp4: Q-Root; kBf16: its BF16-operand baseline
  Rounding rounding = Rounding::kRtn;          // of Q-Root's NS operands
  // Unset: ns_coefficients_for_shape in FP32 and BF16, kQRootNsCoefficients in NVFP4 (the table diverges
  // there).
  std::optional<NsCoefficients> coefficients;
  RootRest rest = RootRest::kAdamW;
};

// Throws fp4::Error naming `what` unless momentum in [0, 1), clip_quantile in (0, 1], update_scale
// finite > 0 and ns_steps in [1, 16].
void check_root_options(const RootOptions& opt, const std::string& what);

// The q-quantile of |x[0..n)| with linear interpolation: position q (n - 1) of the sorted magnitudes.
float abs_quantile(std::span<const float> x, double q);

// Clamps x to [-eps, eps] with eps = abs_quantile(x, q); returns eps.
float clip_to_abs_quantile(std::span<float> x, double q);

// The optimizer name of ROOT with this Newton-Schulz precision: "root" (kFp32), "root-bf16" (kBf16) or
// "q-root" (kNvfp4), with "+q-adamw" appended when Q-AdamW steps the other parameters; the CPU
// RootOptimizer and the CUDA DeviceRoot both answer it.
std::string root_optimizer_name(NsPrecision p, RootRest rest = RootRest::kAdamW);

// The precision and rest optimizer a ROOT-family name asks for; nullopt for any other name.
struct RootChoice {
  NsPrecision precision;
  RootRest rest;
};
std::optional<RootChoice> parse_root_optimizer_name(const std::string& name);

// Whether ROOT updates this parameter: 2-D, and neither the embedding ("embed") nor the head ("lm_head").
bool root_eligible(const ParameterInfo& info);

// The relative work of one optimizer step on this parameter, to balance whole-tensor shards over ranks:
// for a ROOT matrix (r = min(rows, cols), c = max) ns_steps Newton-Schulz iterations of 4 r^2 c + 2 r^3
// multiply-adds, plus about 100 operations an element (momentum, quantile clipping, update); for an AdamW
// parameter about 20 an element. Only the ratios matter. One cost per parameter, in order.
std::vector<double> root_step_costs(const std::vector<ParameterInfo>& params, int ns_steps = kNsDefaultSteps);

struct RootStepInfo {
  float clip_eps = 0;   // the clipping threshold used
  int64_t clipped = 0;  // elements of U with |U| > eps
};

// The Newton-Schulz options of a ROOT step on a [rows x cols] matrix: opt's steps, precision and rounding,
// its coefficients or else the shape's table (FP32, BF16) / kQRootNsCoefficients (NVFP4), SR from `sr`.
// Shared by root_step and its device form (optim/cuda/root_cuda.cu).
NsOptions root_ns_options(const RootOptions& opt, int64_t rows, int64_t cols, RngStream sr);

// One ROOT step of the momentum matrix `m` and weight `w` ([rows x cols], row-major) with gradient `g`.
// `sr` seeds Q-Root's stochastic rounding (unused otherwise). Throws fp4::Error naming `name` on
// non-finite gradients, a diverged (non-finite) orthogonalization or bad hyper-parameters; w and m are
// unchanged when it throws.
RootStepInfo root_step(std::span<float> w, std::span<const float> g, std::span<float> m, int64_t rows,
                       int64_t cols, float lr, float weight_decay, const RootOptions& opt,
                       const std::string& name, RngStream sr = {});

// The state of one matrix: its momentum and step count (the Q-Root SR stream is (seed, id, step)).
class RootMatrix {
 public:
  RootMatrix(std::string name, int64_t rows, int64_t cols, uint32_t id = 0, uint64_t seed = 0);
  RootStepInfo step(std::span<float> w, std::span<const float> g, float lr, float weight_decay,
                    const RootOptions& opt);

  const std::string& name() const { return name_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step);
  std::span<float> momentum() { return m_; }
  std::span<const float> momentum() const { return m_; }

 private:
  std::string name_;
  int64_t rows_, cols_;
  uint32_t id_;
  uint64_t seed_;
  int64_t step_ = 0;
  std::vector<float> m_;
};

}  // namespace fp4
