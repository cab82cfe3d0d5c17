// Newton-Schulz orthogonalization of a momentum matrix (RECIPES.md section 8.3), the core of Muon and
// ROOT: X <- B / ||B||_F, then `steps` times X <- a X + (b A + c A^2) X with A = X X^T. The iteration is
// run in the wide orientation (rows <= cols) so A is the smaller Gram matrix; a tall input is transposed
// in and out, which gives the same result as the A = X^T X form. Three precisions:
//  - kFp32: every product an FP32 GEMM (OpenBLAS);
//  - kBf16 (Q-Root's fair baseline, "root-bf16"): every product's operands rounded to BF16 (nearest even),
//    accumulated in FP32 with an FP32 result; normalization, coefficients and the polynomial's sums and
//    scalings (a X, b A, c A^2) as kFp32, so X in the a X term stays FP32;
//  - kNvfp4 (Q-Root): every matrix product has its operands quantized to NVFP4 (1x16 blocks along the
//    product's reduction dimension, the symmetric A in 16x16 tiles, per-tensor FP32 outer scale) and is
//    accumulated in FP32. Sums and scalings (a X, b A) stay FP32. Dimensions that are not multiples of 16
//    are zero-padded: zero rows and columns stay zero through the iteration, so the result is unchanged.
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/philox.h"
#include "numerics/quant_spec.h"
#include "numerics/quantize.h"

namespace fp4 {

// The quintic's coefficients: X <- a X + b (X X^T) X + c (X X^T)^2 X.
struct NsCoefficients {
  float a = 3.4445f;
  float b = -4.7750f;
  float c = 2.0315f;
};

inline constexpr NsCoefficients kMuonNsCoefficients{3.4445f, -4.7750f, 2.0315f};
inline constexpr int kNsDefaultSteps = 5;
// Q-Root's default [ours]: with NVFP4 operands (~9.5% relative rounding error each) the fast quintics
// (Muon's, ROOT's table, even coefficients fitted on one shape) push singular values past ~1.5 where the
// map diverges. The classical quintic (p(1) = 1, p'(1) = p''(1) = 0: the Taylor series of s (s^2)^(-1/2)
// around 1) converges slower but contracts every perturbation; fit_ns_coefficients improves on it per
// shape. Measured errors: docs/OPTIMIZERS_ROOT.md.
inline constexpr NsCoefficients kQRootNsCoefficients{1.875f, -1.25f, 0.375f};

// The ROOT table, keyed by the unordered shape {min(rows, cols), max(rows, cols)} because NS of X^T is
// NS(X)^T: (2048,2048), (2048,3072), (2048,8192); every other shape gets Muon's coefficients.
NsCoefficients ns_coefficients_for_shape(int64_t rows, int64_t cols);

enum class NsPrecision : uint8_t { kFp32, kNvfp4, kBf16 };

// "FP32", "NVFP4" or "BF16": the operand format, for messages.
const char* ns_precision_name(NsPrecision p);

struct NsOptions {
  NsCoefficients coef = kMuonNsCoefficients;
  int steps = kNsDefaultSteps;
  NsPrecision precision = NsPrecision::kFp32;
  Rounding rounding = Rounding::kRtn;  // kNvfp4 only; kSr draws from `sr` (one sub-stream per operand)
  RngStream sr{};
  float norm_eps = 1e-7f;  // X = B / (||B||_F + norm_eps): a zero B gives a zero X
};

// Q-Root's quantization of one NS product operand: NVFP4 with `block` along the operand's rows, tensor
// outer scale, opt.rounding; SR from sub-stream `operand` (4 per iteration: X, A, P, X^T) of opt.sr. The
// CPU iteration and its device form (optim/cuda/newton_schulz_cuda.cu) both quantize with these.
QuantSpec ns_operand_spec(BlockShape block, const NsOptions& opt);
QuantRandomness ns_operand_randomness(const NsOptions& opt, uint64_t operand);

// out[rows x cols] = NS(b) (row-major; out may equal b). Throws fp4::Error on empty shapes, steps outside
// [0, 16] or non-finite input.
void newton_schulz(const float* b, int64_t rows, int64_t cols, const NsOptions& opt, float* out);
std::vector<float> newton_schulz(const std::vector<float>& b, int64_t rows, int64_t cols,
                                 const NsOptions& opt);

}  // namespace fp4
