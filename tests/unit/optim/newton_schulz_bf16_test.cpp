// NsPrecision::kBf16 (the Newton-Schulz of "root-bf16", Q-Root's fair baseline): every product's operands
// are BF16-rounded (nearest even) and accumulated in FP32, the rest is kFp32's. Checked against a
// step-by-step reference built from the FP32 GEMM on pre-rounded operands (bit for bit), against kFp32
// (close, not equal), on a zero and a rank-1 matrix, and for the orthogonalization error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "numerics/formats.h"
#include "ops/ops.h"
#include "optim/newton_schulz.h"
#include "optim/ns_fit.h"

namespace fp4 {
namespace {

uint64_t fresh_seed() {
  static std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
  std::printf("[ seed ] %llu\n", static_cast<unsigned long long>(s));
  return s;
}

NsOptions with(NsPrecision p, NsCoefficients k = kMuonNsCoefficients, int steps = kNsDefaultSteps) {
  NsOptions o;
  o.precision = p;
  o.coef = k;
  o.steps = steps;
  return o;
}

std::vector<float> rounded(const std::vector<float>& x, bool bf16) {
  std::vector<float> out(x);
  if (bf16)
    for (float& v : out) v = round_to_bf16(v);
  return out;
}

// The kFp32 iteration written out with the FP32 GEMM, each product's operands rounded to BF16 first when
// `bf16` (else as they are): the normalization (double sum, float scale), the wide orientation and the
// exact symmetrization as newton_schulz documents them.
std::vector<float> reference(const std::vector<float>& b, int64_t rows, int64_t cols, const NsOptions& o,
                             bool bf16) {
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols;
  const int ri = static_cast<int>(r), ci = static_cast<int>(c);
  double sq = 0;
  for (float v : b) sq += static_cast<double>(v) * v;
  const float inv = static_cast<float>(1.0 / (std::sqrt(sq) + o.norm_eps));
  std::vector<float> x(r * c), a(r * r), a2(r * r), p(r * r);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[tall ? j * c + i : i * c + j] = b[i * cols + j] * inv;
  for (int s = 0; s < o.steps; ++s) {
    const std::vector<float> xr = rounded(x, bf16);
    cpu::gemm(false, true, ri, ri, ci, 1.0f, xr.data(), ci, xr.data(), ci, 0.0f, a.data(), ri);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = i + 1; j < r; ++j) a[j * r + i] = a[i * r + j];
    const std::vector<float> ar = rounded(a, bf16);
    cpu::gemm(false, false, ri, ri, ri, 1.0f, ar.data(), ri, ar.data(), ri, 0.0f, a2.data(), ri);
    for (int64_t i = 0; i < r * r; ++i) p[i] = o.coef.b * a[i] + o.coef.c * a2[i];
    const std::vector<float> pr = rounded(p, bf16);
    std::vector<float> next = x;  // the a X term keeps the FP32 X
    cpu::gemm(false, false, ri, ci, ri, 1.0f, pr.data(), ri, xr.data(), ci, o.coef.a, next.data(), ci);
    x = next;
  }
  std::vector<float> out(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[tall ? j * c + i : i * c + j];
  return out;
}

double rel_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    n += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(d / n);
}

// The operands really are BF16: kBf16 equals the reference on BF16-rounded operands bit for bit, the
// reference without rounding equals kFp32 bit for bit, and kBf16 differs from kFp32 (generic inputs have
// no BF16-exact iterates). Odd shapes in both orientations and one to three steps.
TEST(NewtonSchulzBf16, OperandsAreRoundedToBf16) {
  const uint64_t seed = fresh_seed();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{37, 53}, {53, 37}, {29, 29}, {1, 17}, {23, 5}}) {
    const std::vector<float> b = make_ns_samples(r, c, 1, seed).inputs[0];
    for (int steps = 1; steps <= 3; ++steps) {
      const NsOptions h = with(NsPrecision::kBf16, kMuonNsCoefficients, steps);
      const NsOptions f = with(NsPrecision::kFp32, kMuonNsCoefficients, steps);
      const std::vector<float> got = newton_schulz(b, r, c, h), fp32 = newton_schulz(b, r, c, f);
      EXPECT_EQ(got, reference(b, r, c, h, true)) << r << "x" << c << ", " << steps << " steps";
      EXPECT_EQ(fp32, reference(b, r, c, f, false)) << r << "x" << c << ", " << steps << " steps";
      EXPECT_NE(got, fp32) << r << "x" << c << ", " << steps << " steps";
      // Rounding only the first product's operand X is already visible in the result.
      EXPECT_GT(rel_diff(got, fp32), 1e-5) << r << "x" << c << ", " << steps << " steps";
    }
  }
}

// An input whose normalized iterates are BF16-exact at step one: X = B / ||B|| with B = 2 I (square,
// ||B||_F = 2 sqrt(n), n = 4: X = I / 2). Then A = I / 4, A^2 = I / 16 and P are BF16-exact, so one kBf16
// step equals one kFp32 step bit for bit; the differences above come from rounding, not from other
// arithmetic.
TEST(NewtonSchulzBf16, Bf16ExactIteratesGiveTheFp32Result) {
  const int64_t n = 4;
  std::vector<float> b(n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) b[i * n + i] = 2.0f;
  const NsCoefficients k{2.0f, -1.5f, 0.5f};  // BF16-exact coefficients keep P = b A + c A^2 exact
  NsOptions h = with(NsPrecision::kBf16, k, 1), f = with(NsPrecision::kFp32, k, 1);
  h.norm_eps = f.norm_eps = 0.0f;
  EXPECT_EQ(newton_schulz(b, n, n, h), newton_schulz(b, n, n, f));
}

// kBf16 stays close to kFp32: the relative Frobenius distance of the outputs, and the orthogonalization
// (polar) error of each, on random matrices of odd shapes. BF16's unit roundoff is 2^-8 = 0.0039; measured
// over repeated runs of these shapes: distance 0.002-0.006, polar errors within 0.001 of each other.
TEST(NewtonSchulzBf16, CloseToFp32OnRandomMatrices) {
  const uint64_t seed = fresh_seed();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{37, 53}, {53, 37}, {31, 31}, {19, 97}, {64, 24}}) {
    const NsSampleSet s = make_ns_samples(r, c, 2, seed);
    for (NsCoefficients k : {kMuonNsCoefficients, ns_coefficients_for_shape(2048, 8192)}) {
      double d = 0;
      for (const std::vector<float>& b : s.inputs) {
        const std::vector<float> h = newton_schulz(b, r, c, with(NsPrecision::kBf16, k));
        const std::vector<float> f = newton_schulz(b, r, c, with(NsPrecision::kFp32, k));
        d = std::max(d, rel_diff(h, f));
      }
      EXPECT_LT(d, 0.08) << r << "x" << c;
      const double eh = ns_polar_error(s, with(NsPrecision::kBf16, k));
      const double ef = ns_polar_error(s, with(NsPrecision::kFp32, k));
      std::printf("  %ldx%ld a=%.4f: |bf16 - fp32| / |fp32| %.4f, polar error fp32 %.5f bf16 %.5f\n",
                  static_cast<long>(r), static_cast<long>(c), k.a, d, ef, eh);
      EXPECT_LT(std::abs(eh - ef), 0.01) << r << "x" << c;
    }
  }
}

// A zero matrix stays zero; a rank-1 matrix u v^T keeps its singular vectors and its one singular value
// (1 after normalization) follows the scalar map of the quintic, within BF16 rounding.
TEST(NewtonSchulzBf16, ZeroAndRankOneMatrices) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{32, 48}, {21, 13}}) {
    const std::vector<float> z(r * c, 0.0f);
    for (float v : newton_schulz(z, r, c, with(NsPrecision::kBf16))) EXPECT_EQ(v, 0.0f);
  }
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<float> nd;
  for (auto [r, c] : {std::pair<int64_t, int64_t>{27, 45}, {45, 27}, {16, 16}}) {
    std::vector<float> u(r), v(c), b(r * c);
    for (float& x : u) x = nd(rng);
    for (float& x : v) x = nd(rng);
    double nu = 0, nv = 0;
    for (float x : u) nu += static_cast<double>(x) * x;
    for (float x : v) nv += static_cast<double>(x) * x;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) b[i * c + j] = u[i] * v[j];
    const double sigma = ns_scalar_map(kMuonNsCoefficients, kNsDefaultSteps, {1.0})[0];
    for (NsPrecision p : {NsPrecision::kFp32, NsPrecision::kBf16}) {
      const bool h = p == NsPrecision::kBf16;
      const std::vector<float> y = newton_schulz(b, r, c, with(p));
      double worst = 0, top = 0;
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {
          const double want = sigma * u[i] * v[j] / std::sqrt(nu * nv);
          worst = std::max(worst, std::abs(y[i * c + j] - want));
          top = std::max(top, std::abs(want));
        }
      // Relative to the largest entry: BF16 errors of a few 2^-8 after five steps, FP32 ones far below.
      std::printf("  %ldx%ld %s rank 1: worst error %.3g of the largest entry\n", static_cast<long>(r),
                  static_cast<long>(c), h ? "bf16" : "fp32", worst / top);
      EXPECT_LT(worst, (h ? 0.06 : 5e-4) * top) << r << "x" << c;
      const std::vector<double> sv = singular_values(y.data(), r, c);
      EXPECT_NEAR(sv[0], sigma, h ? 0.02 : 1e-4) << r << "x" << c;
      if (sv.size() > 1) {
        EXPECT_LT(sv[1], 0.02) << r << "x" << c << ": rank 1 stays rank 1";
      }
    }
  }
}

TEST(NewtonSchulzBf16, PrecisionNamesAndEdgeCases) {
  EXPECT_STREQ(ns_precision_name(NsPrecision::kFp32), "FP32");
  EXPECT_STREQ(ns_precision_name(NsPrecision::kBf16), "BF16");
  EXPECT_STREQ(ns_precision_name(NsPrecision::kNvfp4), "NVFP4");
  // In place equals out of place; zero steps is the normalization alone, the same as kFp32's.
  const std::vector<float> b = make_ns_samples(20, 36, 1, fresh_seed()).inputs[0];
  std::vector<float> x = b;
  newton_schulz(x.data(), 20, 36, with(NsPrecision::kBf16), x.data());
  EXPECT_EQ(x, newton_schulz(b, 20, 36, with(NsPrecision::kBf16)));
  EXPECT_EQ(newton_schulz(b, 20, 36, with(NsPrecision::kBf16, kMuonNsCoefficients, 0)),
            newton_schulz(b, 20, 36, with(NsPrecision::kFp32, kMuonNsCoefficients, 0)));
}

}  // namespace
}  // namespace fp4
