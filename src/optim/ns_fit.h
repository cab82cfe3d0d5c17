// Measuring and fitting Newton-Schulz coefficients (RECIPES.md section 8.3): the NS error of a matrix X is
// ||NS(X) - polar(X)||_F / ||polar(X)||_F, polar(X) = U V^T for X = U S V^T. The reference polar factor is
// computed in FP64 (Jacobi eigendecomposition of the small Gram matrix: polar = (X X^T)^(-1/2) X).
// Sample matrices are i.i.d. standard normal, drawn from the counter-based RNG.
// In exact arithmetic NS acts on each singular value by the scalar map s -> a s + b s^3 + c s^5 (applied
// `steps` times after s /= sqrt(sum s^2), i.e. X / ||X||_F), so for FP32 the error follows from the spectrum
// alone; the scalar functions below use that to check large shapes (2048 x 8192) without forming the matrix.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "optim/newton_schulz.h"

namespace fp4 {

struct NsSampleSet {
  int64_t rows = 0, cols = 0;
  std::vector<std::vector<float>> inputs;   // each rows x cols, row-major
  std::vector<std::vector<double>> polars;  // polar factor of each input, FP64
};

// `count` standard-normal rows x cols matrices (sample i uses Philox stream i of `seed`) and their polars.
NsSampleSet make_ns_samples(int64_t rows, int64_t cols, int count, uint64_t seed);

// The polar factor U V^T of x [rows x cols] in FP64. Throws fp4::Error when x is (numerically) rank
// deficient, where the polar factor is not unique.
std::vector<double> polar_factor(const float* x, int64_t rows, int64_t cols);

// The min(rows, cols) singular values of x, descending (FP64, from the Gram matrix's eigenvalues).
std::vector<double> singular_values(const float* x, int64_t rows, int64_t cols);

// Mean over the samples of the relative NS error with the given options (FP32 or NVFP4).
double ns_polar_error(const NsSampleSet& samples, const NsOptions& opt);

// Exact-arithmetic NS on a spectrum: the singular values of NS(X) given those of X (any scale: normalized
// here by the Frobenius norm, as NS normalizes X), in the input's order.
std::vector<double> ns_scalar_map(const NsCoefficients& coef, int steps, const std::vector<double>& sigma);

// The same error in exact arithmetic from singular values alone (any scale: normalized here).
double ns_scalar_error(const NsCoefficients& coef, int steps, const std::vector<double>& sigma);

// Singular values of one standard-normal rows x cols matrix without forming it: the Dumitriu-Edelman
// bidiagonal model (chi-distributed entries) with the eigenvalues of B^T B found by Sturm bisection.
std::vector<double> gaussian_singular_values(int64_t rows, int64_t cols, uint64_t seed);

struct NsFitSettings {
  // Unset: Muon's point in FP32; Q-Root's stable default in NVFP4, where Muon's point diverges and a
  // search started there lands on the edge of stability (held-out errors 0.29-0.53 in our runs).
  std::optional<NsCoefficients> start;
  int steps = kNsDefaultSteps;
  int max_evals = 160;                 // objective evaluations of the Nelder-Mead search
  double initial_step = 0.08;          // the first simplex moves each coefficient by this fraction
  Rounding rounding = Rounding::kRtn;  // of the NVFP4 operands when quantized
};

struct NsFitResult {
  NsCoefficients coef;
  // quantized: mean e_q (NVFP4 vs FP32 NS, same coefficients); FP32: mean polar error. Never above start.
  double start_error = 0;  // of the start point on the fitting samples
  double error = 0;        // of coef on the fitting samples
  int evals = 0;
};

// Fits (a, b, c) for rows x cols by Nelder-Mead from the start point over `samples` normal matrices drawn
// with `seed`. quantized (Q-Root): minimizes e_q subject to the FP32 polar error being no worse than the
// start's (rejection); otherwise minimizes the FP32 polar error.
NsFitResult fit_ns_coefficients(int64_t rows, int64_t cols, int samples, uint64_t seed, bool quantized,
                                const NsFitSettings& settings = {});

}  // namespace fp4
