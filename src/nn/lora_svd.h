// The linear algebra of LoRA-SVD projections (RECIPES.md section 8.1, docs/LORA_SVD.md): an orthonormal
// basis of col(L2) by Cholesky-QR, the split of a weight gradient into its part in that subspace and the
// rest, a seeded randomized SVD, and the function-preserving realignment of W = W_res + beta L2 L1.
// Matrices are row-major FP32 unless a comment says double.
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/philox.h"

namespace fp4 {

// U [rows x r] with orthonormal columns and col(U) = col(a) for a [rows x r], r <= rows: Cholesky-QR in
// FP32 done twice (G = A^T A, R = chol(G), A <- A R^-1). When the first Gram matrix is too ill-conditioned
// for an FP32 Cholesky, that pass uses the shifted Gram G + s I (s from the FP32 rounding bound), which
// keeps col(U) and leaves U conditioned well enough for two more unshifted passes. For an `a` that is
// rank-deficient at FP32 precision, U still has orthonormal columns and col(a) inside col(U), its extra
// directions set by rounding; when the passes cannot produce an orthonormal U it falls back to Gram-Schmidt
// twice in double, with a zero column for each direction `a` lacks. An all-zero `a` gives U = 0.
std::vector<float> cholesky_qr2(const float* a, int rows, int r);

// p [out x in] = U (U^T g): the component of g [out x in] in col(U), U [out x r] orthonormal columns.
// The rest of the gradient is g - p.
void project_onto_columns(const float* u, int out, int r, const float* g, int in, float* p);

// The leading `rank` singular triplets of a [rows x cols], in double, descending singular values:
// u [rows x rank], s [rank], v [cols x rank] (row-major).
struct TruncatedSvd {
  int rows = 0, cols = 0, rank = 0;
  std::vector<double> u, s, v;
};

struct RandomizedSvdOptions {
  int oversample = 8;   // sketch columns beyond the rank
  int power_iters = 2;  // subspace iterations, each re-orthonormalised
};

// Randomized SVD (Halko, Martinsson, Tropp): a Gaussian sketch drawn from `sketch` (element i of the
// [cols x k] sketch uses the stream's words 2i and 2i+1, Box-Muller), subspace iteration, then an exact
// SVD (one-sided Jacobi) of the small projected matrix. rank <= min(rows, cols).
TruncatedSvd randomized_svd(const float* a, int rows, int cols, int rank, RngStream sketch,
                            const RandomizedSvdOptions& opt = {});

// Realignment in place: W_eff = W_res + beta L2 L1 (w_res [out x in], l1 [r x in], l2 [out x r]);
// with its top-r SVD U S V^T: L2 = U (S/|beta|)^(1/2), L1 = sign(beta) (S/|beta|)^(1/2) V^T, so that
// beta L2 L1 = U S V^T, and W_res = W_eff - beta L2 L1 from the stored FP32 factors (W_eff is kept up to
// FP32 rounding).
void realign_low_rank(float* w_res, float* l1, float* l2, int out, int in, int r, double beta,
                      RngStream sketch);

}  // namespace fp4
