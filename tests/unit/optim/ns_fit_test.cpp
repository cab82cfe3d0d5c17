// The Newton-Schulz coefficient fit and its references: the FP64 polar factor, the scalar map of the
// spectrum against whole matrices, the Gaussian spectrum model, and the fit lowering e_q under NVFP4.
#include "optim/ns_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ns_test_util.h"
#include "optim/newton_schulz.h"

namespace fp4 {
namespace {

using fp4::testing::fp32_with;
using fp4::testing::fresh_seed;
using fp4::testing::nvfp4_with;

// The FP64 polar reference: P P^T = I for wide X, P^T P = I for tall, and X P^T symmetric positive
// definite (X = S P with S = (X X^T)^(1/2)).
TEST(NsFit, PolarFactorIsOrthogonalAndAligned) {
  const uint64_t seed = fresh_seed();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{16, 40}, {40, 16}, {24, 24}}) {
    const NsSampleSet s = make_ns_samples(r, c, 1, seed);
    const std::vector<double>& p = s.polars[0];
    const std::vector<float>& x = s.inputs[0];
    const int64_t n = std::min(r, c);
    const bool tall = r > c;
    auto at = [&](const auto& m, int64_t i, int64_t j) { return tall ? m[j * c + i] : m[i * c + j]; };
    const int64_t len = std::max(r, c);
    double sum_trace = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double pp = 0, xp = 0, px = 0;
        for (int64_t t = 0; t < len; ++t) {
          pp += at(p, i, t) * at(p, j, t);
          xp += at(x, i, t) * at(p, j, t);
          px += at(x, j, t) * at(p, i, t);
        }
        EXPECT_NEAR(pp, i == j ? 1.0 : 0.0, 1e-9);
        EXPECT_NEAR(xp, px, 1e-6 * len);
        if (i == j) {
          EXPECT_GT(xp, 0.0);
          sum_trace += xp;
        }
      }
    // trace(X P^T) is the nuclear norm: the sum of the singular values.
    double nuc = 0;
    for (double v : singular_values(x.data(), r, c)) nuc += v;
    EXPECT_NEAR(sum_trace, nuc, 1e-6 * nuc);
  }
  std::vector<float> rank1(8 * 16);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j) rank1[i * 16 + j] = static_cast<float>((i + 1) * (j - 7));
  EXPECT_THROW(polar_factor(rank1.data(), 8, 16), Error);
}

// In FP32 the NS error of a matrix is the scalar map's error on its spectrum.
TEST(NsFit, MatrixErrorMatchesScalarErrorOfTheSpectrum) {
  const NsSampleSet s = make_ns_samples(48, 80, 2, fresh_seed());
  for (NsCoefficients k : {kMuonNsCoefficients, NsCoefficients{3.4509f, -4.5790f, 1.9325f}}) {
    double scalar = 0;
    for (const auto& x : s.inputs)
      scalar += ns_scalar_error(k, kNsDefaultSteps, singular_values(x.data(), 48, 80));
    EXPECT_NEAR(ns_polar_error(s, fp32_with(k)), scalar / 2, 2e-4);
  }
}

// The bidiagonal model's spectra look like real normal matrices': E sum s^2 = r c, similar extremes.
TEST(NsFit, GaussianSpectrumModelMatchesSampledMatrices) {
  const uint64_t seed = fresh_seed();
  const int64_t r = 64, c = 160;
  const std::vector<double> model = gaussian_singular_values(r, c, seed);
  ASSERT_EQ(model.size(), 64u);
  EXPECT_TRUE(std::is_sorted(model.rbegin(), model.rend()));
  const NsSampleSet s = make_ns_samples(r, c, 1, seed);
  const std::vector<double> real = singular_values(s.inputs[0].data(), r, c);
  double e2 = 0;
  for (double v : model) e2 += v * v;
  EXPECT_NEAR(e2 / (r * c), 1.0, 0.05);
  // Marchenko-Pastur edges sqrt(c) +- sqrt(r) = 20.6, 4.6; at this finite size the extreme singular values
  // of a 64 x 160 normal matrix have mean 20.24 (sd 0.37) and 4.88 (sd 0.235) (4000 samples, NumPy,
  // 2026-12-02). Bounds at 6 sd (of one draw, or of the difference of two), so a fresh seed fails only
  // when the model is wrong.
  EXPECT_NEAR(model.front(), real.front(), 6 * 0.37 * std::sqrt(2.0));
  EXPECT_NEAR(model.back(), real.back(), 6 * 0.235 * std::sqrt(2.0));
  EXPECT_NEAR(model.front(), 20.24, 6 * 0.37);
  EXPECT_NEAR(model.back(), 4.88, 6 * 0.235);
  for (auto bad : {std::pair<int64_t, int64_t>{0, 3}, {3, 0}})
    EXPECT_THROW(gaussian_singular_values(bad.first, bad.second, 1), Error);
}

// ROOT's shape-specific coefficients beat Muon's at their exact shapes on normal matrices. The shapes are
// too large to orthogonalize in a unit test, so the FP32 error is taken from sampled spectra (the test
// above shows it equals the matrix error).
TEST(NsFit, TableCoefficientsBeatMuonAtTheirShapes) {
  const uint64_t seed = fresh_seed();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{2048, 2048}, {2048, 3072}, {2048, 8192}}) {
    const std::vector<double> sv = gaussian_singular_values(r, c, seed);
    const double table = ns_scalar_error(ns_coefficients_for_shape(r, c), kNsDefaultSteps, sv);
    const double muon = ns_scalar_error(kMuonNsCoefficients, kNsDefaultSteps, sv);
    std::printf("  %ldx%ld fp32 NS error: table %.4f, muon %.4f\n", static_cast<long>(r),
                static_cast<long>(c), table, muon);
    EXPECT_LT(table, muon - 0.02) << r << "x" << c;
  }
}

// With NVFP4 operands the fast quintics diverge (a measured fact this project documents): Muon's and the
// table's coefficients blow singular values up, Q-Root's default stays bounded near its FP32 error.
TEST(NsFit, Nvfp4NeedsStableCoefficients) {
  const uint64_t seed = fresh_seed();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{64, 64}, {64, 192}, {192, 64}}) {
    const NsSampleSet s = make_ns_samples(r, c, 2, seed);
    const double muon4 = ns_polar_error(s, nvfp4_with(kMuonNsCoefficients));
    const double e32 = ns_polar_error(s, fp32_with(kQRootNsCoefficients));
    const double e4 = ns_polar_error(s, nvfp4_with(kQRootNsCoefficients));
    double diff = 0, ref = 0;
    const std::vector<float> a = newton_schulz(s.inputs[0], r, c, fp32_with(kQRootNsCoefficients));
    const std::vector<float> b = newton_schulz(s.inputs[0], r, c, nvfp4_with(kQRootNsCoefficients));
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (a[i] - b[i]) * (a[i] - b[i]);
      ref += a[i] * a[i];
    }
    std::printf(
        "  %ldx%ld NS error: muon nvfp4 %.3g; q-root coefficients fp32 %.4f nvfp4 %.4f, "
        "|nvfp4 - fp32| / |fp32| %.4f\n",
        static_cast<long>(r), static_cast<long>(c), muon4, e32, e4, std::sqrt(diff / ref));
    EXPECT_FALSE(muon4 < 1.0) << r << "x" << c;  // diverged (or NaN)
    EXPECT_LT(e4, 0.45) << r << "x" << c;
    EXPECT_LT(e4, e32 + 0.15) << r << "x" << c;  // NVFP4's noise floor is ~0.13 here
    EXPECT_LT(std::sqrt(diff / ref), 0.3) << r << "x" << c;
    EXPECT_GT(std::sqrt(diff / ref), 1e-3) << "NVFP4 operands should perturb the result";
  }
}

// Mean over fresh normal samples of e_q (NVFP4 vs FP32 NS, same coefficients, RTN) and FP32 polar error.
std::pair<double, double> eq_and_polar(const NsSampleSet& set, const NsCoefficients& coef) {
  double eq = 0, polar = 0;
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    NsOptions o;
    o.coef = coef;
    const std::vector<float> f32 = newton_schulz(set.inputs[i], set.rows, set.cols, o);
    const std::vector<float> f4 = newton_schulz(set.inputs[i], set.rows, set.cols, nvfp4_with(coef));
    double num = 0, den = 0, pn = 0, pd = 0;
    for (size_t j = 0; j < f32.size(); ++j) {
      num += (double(f4[j]) - f32[j]) * (double(f4[j]) - f32[j]);
      den += double(f32[j]) * f32[j];
      pn += (f32[j] - set.polars[i][j]) * (f32[j] - set.polars[i][j]);
      pd += set.polars[i][j] * set.polars[i][j];
    }
    eq += std::sqrt(num / den) / set.inputs.size();
    polar += std::sqrt(pn / pd) / set.inputs.size();
  }
  return {eq, polar};
}

// The NVFP4 fit minimizes e_q and never returns worse than its start; its FP32 polar error stays no worse.
TEST(NsFit, FitLowersEqAndKeepsFp32PolarError) {
  const uint64_t seed = fresh_seed();
  const int64_t r = 32, c = 96;
  NsFitSettings fs;
  fs.max_evals = 40;
  const NsFitResult fit = fit_ns_coefficients(r, c, 4, seed, true, fs);
  EXPECT_LE(fit.evals, 40);
  EXPECT_LE(fit.error, fit.start_error);
  const NsSampleSet train = make_ns_samples(r, c, 4, seed);
  const auto [eq_fit, polar_fit] = eq_and_polar(train, fit.coef);
  const auto [eq_def, polar_def] = eq_and_polar(train, kQRootNsCoefficients);
  EXPECT_NEAR(eq_fit, fit.error, 1e-9);
  EXPECT_NEAR(eq_def, fit.start_error, 1e-9);
  EXPECT_LE(polar_fit, polar_def + 1e-12);  // the constraint on the fitting samples
  const NsSampleSet held = make_ns_samples(r, c, 8, seed + 1);
  const auto [heq_fit, hpolar_fit] = eq_and_polar(held, fit.coef);
  const auto [heq_def, hpolar_def] = eq_and_polar(held, kQRootNsCoefficients);
  std::printf(
      "  fit %ldx%ld: (%.4f, %.4f, %.4f); held-out e_q default %.4f fitted %.4f, polar %.4f -> %.4f\n",
      static_cast<long>(r), static_cast<long>(c), fit.coef.a, fit.coef.b, fit.coef.c, heq_def, heq_fit,
      hpolar_def, hpolar_fit);
  // Fresh inputs: no worse beyond what a 4-sample fit's generalization spreads. The constraint holds on the
  // fitting samples only; on 8 fresh samples the ratios fitted / default over 1500 seeds were: e_q mean
  // 1.007, sd 0.015, max 1.074; FP32 polar error mean 0.914, sd 0.104, max 1.183 (the polar error of one
  // sample hangs on its smallest singular values). With 2 fitting samples and 3 fresh ones (this test until
  // 2026-12-07) the polar ratio reached 1.42 in 800 seeds and failed CI at 1.10 against a bound of 1.02.
  EXPECT_LE(heq_fit, heq_def * 1.15);
  EXPECT_LE(hpolar_fit, hpolar_def * 1.35);
}

TEST(NsFit, BadShapesAndOptionsAreRefused) {
  NsFitSettings fs;
  EXPECT_THROW(fit_ns_coefficients(0, 16, 1, 1, true, fs), Error);
  EXPECT_THROW(fit_ns_coefficients(16, 16, 0, 1, true, fs), Error);
  fs.max_evals = 2;
  EXPECT_THROW(fit_ns_coefficients(16, 16, 1, 1, true, fs), Error);
  fs.max_evals = 10;
  fs.steps = 0;
  EXPECT_THROW(fit_ns_coefficients(16, 16, 1, 1, true, fs), Error);
}

}  // namespace
}  // namespace fp4
