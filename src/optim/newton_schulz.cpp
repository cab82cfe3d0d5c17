#include "optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "numerics/host_arrays.h"
#include "numerics/quantize.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

int64_t round_up16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// src [rows x cols] -> dst [cols x rows].
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// The values an NVFP4 operand stands for: x [rows x cols] quantized along cols, dequantized to FP32.
std::vector<float> fake_quant(const std::vector<float>& x, int64_t rows, int64_t cols, BlockShape block,
                              const NsOptions& opt, uint64_t operand) {
  const Nvfp4Tensor q =
      quantize_nvfp4(x.data(), rows, cols, ns_operand_spec(block, opt), ns_operand_randomness(opt, operand));
  std::vector<float> out(x.size());
  dequantize(q, out.data());
  return out;
}

// The iteration on a wide X [r x c] (r <= c), in place. FP32, NVFP4 or BF16 operands per opt.precision;
// sums and the a X term stay FP32 in every precision.
void iterate(std::vector<float>& x, int64_t r, int64_t c, const NsOptions& opt) {
  const bool q = opt.precision == NsPrecision::kNvfp4, h = opt.precision == NsPrecision::kBf16;
  const int ri = static_cast<int>(r), ci = static_cast<int>(c);
  std::vector<float> a(r * r), a2(r * r), poly(r * r), next(r * c), xt;
  for (int s = 0; s < opt.steps; ++s) {
    const uint64_t op = static_cast<uint64_t>(s) * 4;
    // A = X X^T: both operands are X (quantized along c, or BF16-rounded).
    std::vector<float> xq;
    if (q) xq = fake_quant(x, r, c, BlockShape::k1x16, opt, op);
    if (h) xq = bf16_rounded(x);
    const float* xa = q || h ? xq.data() : x.data();
    cpu::gemm(false, true, ri, ri, ci, 1.0f, xa, ci, xa, ci, 0.0f, a.data(), ri);
    // BLAS need not return bit-symmetric A; 16x16 tiles of a symmetric A make A^ and A^^T the same values.
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = i + 1; j < r; ++j) a[j * r + i] = a[i * r + j];
    // A^2 = A A: A in 16x16 tiles (or BF16-rounded) serves as both operands.
    std::vector<float> aq;
    if (q) aq = fake_quant(a, r, r, BlockShape::k16x16, opt, op + 1);
    if (h) aq = bf16_rounded(a);
    const float* aa = q || h ? aq.data() : a.data();
    cpu::gemm(false, false, ri, ri, ri, 1.0f, aa, ri, aa, ri, 0.0f, a2.data(), ri);
    for (int64_t i = 0; i < r * r; ++i) poly[i] = opt.coef.b * a[i] + opt.coef.c * a2[i];
    // next = a X + P X: P quantized along its columns, X along its rows (X^T along r).
    next = x;
    if (q) {
      const std::vector<float> pq = fake_quant(poly, r, r, BlockShape::k1x16, opt, op + 2);
      xt.resize(r * c);
      transpose(x.data(), r, c, xt.data());
      const std::vector<float> xtq = fake_quant(xt, c, r, BlockShape::k1x16, opt, op + 3);
      cpu::gemm(false, true, ri, ci, ri, 1.0f, pq.data(), ri, xtq.data(), ri, opt.coef.a, next.data(), ci);
    } else if (h) {
      // X was rounded for A above and has not changed since.
      const std::vector<float> pq = bf16_rounded(poly);
      cpu::gemm(false, false, ri, ci, ri, 1.0f, pq.data(), ri, xq.data(), ci, opt.coef.a, next.data(), ci);
    } else {
      cpu::gemm(false, false, ri, ci, ri, 1.0f, poly.data(), ri, x.data(), ci, opt.coef.a, next.data(), ci);
    }
    std::swap(x, next);
  }
}

}  // namespace

const char* ns_precision_name(NsPrecision p) {
  switch (p) {
    case NsPrecision::kFp32:
      return "FP32";
    case NsPrecision::kNvfp4:
      return "NVFP4";
    case NsPrecision::kBf16:
      return "BF16";
  }
  return "unknown";
}

QuantSpec ns_operand_spec(BlockShape block, const NsOptions& opt) {
  QuantSpec spec;
  spec.format = QuantFormat::kNvfp4;
  spec.block = block;
  spec.outer = OuterScale::kTensor;
  spec.rounding = opt.rounding;
  return spec;
}

QuantRandomness ns_operand_randomness(const NsOptions& opt, uint64_t operand) {
  QuantRandomness rnd;
  rnd.sr = RngStream{opt.sr.seed, opt.sr.stream * 64 + operand};
  return rnd;
}

NsCoefficients ns_coefficients_for_shape(int64_t rows, int64_t cols) {
  const int64_t lo = std::min(rows, cols), hi = std::max(rows, cols);
  if (lo == 2048 && hi == 2048) return {3.4916f, -4.8224f, 2.1095f};
  if (lo == 2048 && hi == 3072) return {3.4509f, -4.5790f, 1.9325f};
  if (lo == 2048 && hi == 8192) return {2.9794f, -3.6674f, 1.6207f};
  return kMuonNsCoefficients;
}

void newton_schulz(const float* b, int64_t rows, int64_t cols, const NsOptions& opt, float* out) {
  FP4_CHECK(rows > 0 && cols > 0, "newton_schulz: empty matrix [", rows, " x ", cols, "]");
  FP4_CHECK(opt.steps >= 0 && opt.steps <= 16, "newton_schulz: steps must be in [0, 16], got ", opt.steps);
  FP4_CHECK(rows < (int64_t{1} << 30) / std::max<int64_t>(cols, 1), "newton_schulz: matrix [", rows, " x ",
            cols, "] is too large for a 32-bit BLAS");
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols;
  const bool q = opt.precision == NsPrecision::kNvfp4;
  const int64_t rp = q ? round_up16(r) : r, cp = q ? round_up16(c) : c;

  // X = B / (||B||_F + eps) in the wide orientation, zero-padded to (rp, cp).
  double sq = 0.0;
  for (int64_t i = 0; i < rows * cols; ++i) sq += static_cast<double>(b[i]) * b[i];
  FP4_CHECK(std::isfinite(sq), "newton_schulz: input [", rows, " x ", cols, "] has non-finite values");
  const float inv = static_cast<float>(1.0 / (std::sqrt(sq) + opt.norm_eps));
  std::vector<float> x(rp * cp, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t wi = tall ? j : i, wj = tall ? i : j;
      x[wi * cp + wj] = b[i * cols + j] * inv;
    }
  iterate(x, rp, cp, opt);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = tall ? x[j * cp + i] : x[i * cp + j];
}

std::vector<float> newton_schulz(const std::vector<float>& b, int64_t rows, int64_t cols,
                                 const NsOptions& opt) {
  FP4_CHECK(static_cast<int64_t>(b.size()) == rows * cols, "newton_schulz: buffer holds ", b.size(),
            " values, shape [", rows, " x ", cols, "] needs ", rows * cols);
  std::vector<float> out(b.size());
  newton_schulz(b.data(), rows, cols, opt, out.data());
  return out;
}

}  // namespace fp4
