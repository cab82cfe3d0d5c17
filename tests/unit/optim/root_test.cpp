#include "optim/root.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/error.h"

namespace fp4 {
namespace {

std::mt19937_64 fresh_rng() {
  static std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
  std::printf("[ seed ] %llu\n", static_cast<unsigned long long>(s));
  return std::mt19937_64(s);
}

std::vector<float> normal(std::mt19937_64& rng, size_t n, float std = 1.0f) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// root-bf16 is ROOT's FP32 defaults with BF16 operands: the shape's table, not Q-Root's coefficients.
TEST(Root, NsOptionsPerPrecision) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{2048, 8192}, {48, 112}}) {
    const NsCoefficients table = ns_coefficients_for_shape(r, c);
    for (NsPrecision p : {NsPrecision::kFp32, NsPrecision::kBf16, NsPrecision::kNvfp4}) {
      RootOptions opt;
      opt.precision = p;
      const NsOptions ns = root_ns_options(opt, r, c, RngStream{5, 6});
      const NsCoefficients want = p == NsPrecision::kNvfp4 ? kQRootNsCoefficients : table;
      EXPECT_EQ(ns.precision, p);
      EXPECT_EQ(ns.steps, kNsDefaultSteps);
      EXPECT_FLOAT_EQ(ns.coef.a, want.a) << root_optimizer_name(p) << " " << r << "x" << c;
      EXPECT_FLOAT_EQ(ns.coef.b, want.b);
      EXPECT_FLOAT_EQ(ns.coef.c, want.c);
    }
  }
  EXPECT_EQ(root_optimizer_name(NsPrecision::kFp32), "root");
  EXPECT_EQ(root_optimizer_name(NsPrecision::kBf16), "root-bf16");
  EXPECT_EQ(root_optimizer_name(NsPrecision::kNvfp4), "q-root");
}

TEST(Root, AbsQuantileHandCases) {
  std::vector<float> v;
  for (int i = 1; i <= 101; ++i) v.push_back(i % 2 ? static_cast<float>(i) : -static_cast<float>(i));
  std::shuffle(v.begin(), v.end(), std::mt19937(5));
  EXPECT_EQ(abs_quantile(v, 0.99), 100.0f);   // position 99 of |v| sorted = 100
  EXPECT_EQ(abs_quantile(v, 0.995), 100.5f);  // halfway between 100 and 101
  EXPECT_EQ(abs_quantile(v, 1.0), 101.0f);
  EXPECT_EQ(abs_quantile(v, 0.0), 1.0f);
  EXPECT_EQ(abs_quantile(v, 0.5), 51.0f);
  const std::vector<float> three{-3.0f, 1.0f, 2.0f};
  EXPECT_EQ(abs_quantile(three, 0.5), 2.0f);
  EXPECT_EQ(abs_quantile(three, 0.75), 2.5f);
  EXPECT_EQ(abs_quantile(std::vector<float>{-7.0f}, 0.99), 7.0f);
  std::vector<float> c{-5.0f, 4.0f, 0.5f, -1.0f, 3.0f};  // |c| sorted 0.5 1 3 4 5; q 0.5 -> 3
  EXPECT_EQ(clip_to_abs_quantile(c, 0.5), 3.0f);
  EXPECT_EQ(c, (std::vector<float>{-3.0f, 3.0f, 0.5f, -1.0f, 3.0f}));
  EXPECT_THROW(abs_quantile(std::vector<float>{}, 0.5), Error);
  EXPECT_THROW(abs_quantile(three, 1.5), Error);
}

// abs_quantile agrees with a full sort on fresh random data (with ties and both signs).
TEST(Root, AbsQuantileMatchesSorting) {
  auto rng = fresh_rng();
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 1 + rng() % 3000;
    std::vector<float> v = normal(rng, n);
    for (size_t i = 0; i < n / 10; ++i) v[rng() % n] = v[rng() % n];
    const double q = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    std::vector<double> a(v.begin(), v.end());
    for (double& x : a) x = std::abs(x);
    std::sort(a.begin(), a.end());
    const double pos = q * (n - 1);
    const size_t lo = static_cast<size_t>(pos);
    const double want = lo + 1 < n ? a[lo] + (pos - lo) * (a[lo + 1] - a[lo]) : a[lo];
    EXPECT_NEAR(abs_quantile(v, q), want, 1e-6 * (1 + want)) << n << " " << q;
  }
}

TEST(Root, EligibleParameters) {
  EXPECT_TRUE(root_eligible({"blocks.0.attn.wqkv", {384, 128}, true}));
  EXPECT_TRUE(root_eligible({"blocks.3.mlp.w2", {128, 512}, true}));
  EXPECT_FALSE(root_eligible({"embed", {1000, 128}, false}));
  EXPECT_FALSE(root_eligible({"lm_head", {1000, 128}, true}));
  EXPECT_FALSE(root_eligible({"blocks.0.attn_norm", {128}, false}));
}

// Two steps against the formulas written out: momentum, Nesterov blend, clipping, NS, scaled update.
// The step work the whole-tensor shard plan balances: Newton-Schulz products for a ROOT matrix (the same
// for its transpose), an elementwise pass for everything AdamW steps, one cost per parameter in order.
TEST(Root, StepCostsFollowNewtonSchulzWorkAndElementCounts) {
  const std::vector<ParameterInfo> params = {{"embed", {1000, 128}, false},
                                             {"blocks.0.attn.wqkv", {384, 128}, true},
                                             {"blocks.0.attn_norm", {128}, false},
                                             {"blocks.0.mlp.w_down", {128, 384}, true},
                                             {"lm_head", {1000, 128}, true}};
  const std::vector<double> c = root_step_costs(params, 5);
  ASSERT_EQ(c.size(), params.size());
  const double r = 128, n = 384;
  EXPECT_EQ(c[0], 20.0 * 1000 * 128);
  EXPECT_EQ(c[1], 5 * (4 * r * r * n + 2 * r * r * r) + 100.0 * r * n);
  EXPECT_EQ(c[2], 20.0 * 128);
  EXPECT_EQ(c[3], c[1]);  // a matrix and its transpose do the same work
  EXPECT_EQ(c[4], c[0]);
  EXPECT_GT(root_step_costs(params, 6)[1], c[1]);  // more iterations, more work
  EXPECT_EQ(root_step_costs(params, 6)[0], c[0]);
  EXPECT_TRUE(root_step_costs({}, 5).empty());
}

TEST(Root, StepMatchesTheFormulas) {
  auto rng = fresh_rng();
  const int64_t r = 24, c = 40, n = r * c;
  RootOptions opt;
  opt.clip_quantile = 0.9;
  RootMatrix root("w", r, c);
  std::vector<float> w = normal(rng, n), w_ref = w, m_ref(n, 0.0f);
  const float lr = 0.03f, wd = 0.1f;
  for (int step = 0; step < 2; ++step) {
    const std::vector<float> g = normal(rng, n, 0.1f);
    std::vector<float> u(n);
    for (int64_t i = 0; i < n; ++i) {
      m_ref[i] = 0.95f * m_ref[i] + g[i];
      u[i] = g[i] + 0.95f * m_ref[i];
    }
    std::vector<float> mags(n);
    for (int64_t i = 0; i < n; ++i) mags[i] = std::abs(u[i]);
    std::sort(mags.begin(), mags.end());
    const double pos = 0.9 * (n - 1);
    const float eps = static_cast<float>(mags[size_t(pos)] +
                                         (pos - size_t(pos)) * (mags[size_t(pos) + 1] - mags[size_t(pos)]));
    int64_t clipped = 0;
    for (float& x : u) {
      clipped += std::abs(x) > eps;
      x = std::clamp(x, -eps, eps);
    }
    NsOptions ns;
    ns.coef = ns_coefficients_for_shape(r, c);
    const std::vector<float> x = newton_schulz(u, r, c, ns);
    for (int64_t i = 0; i < n; ++i) w_ref[i] -= lr * (0.2f * std::sqrt(40.0f) * x[i] + wd * w_ref[i]);

    const RootStepInfo info = root.step(w, g, lr, wd, opt);
    EXPECT_NEAR(info.clip_eps, eps, 1e-6f * eps);
    EXPECT_EQ(info.clipped, clipped);
    EXPECT_NEAR(static_cast<double>(clipped) / n, 0.1, 0.01);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(root.momentum()[i], m_ref[i], 1e-6f);
      ASSERT_NEAR(w[i], w_ref[i], 1e-5f);
    }
  }
  EXPECT_EQ(root.step_count(), 2);
}

// A zero gradient leaves only the decoupled weight decay: W <- W (1 - lr wd).
TEST(Root, ZeroGradientAppliesOnlyWeightDecay) {
  auto rng = fresh_rng();
  for (NsPrecision p : {NsPrecision::kFp32, NsPrecision::kNvfp4}) {
    std::vector<float> w = normal(rng, 16 * 32), w0 = w, g(16 * 32, 0.0f), m(16 * 32, 0.0f);
    RootOptions opt;
    opt.precision = p;
    const RootStepInfo info = root_step(w, g, m, 16, 32, 0.5f, 0.2f, opt, "w");
    EXPECT_EQ(info.clip_eps, 0.0f);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(w[i], w0[i] - 0.5f * (0.2f * w0[i]));
  }
}

// Least squares L(W) = |W A - Y|^2 / (2 N): ROOT and Q-Root steps bring the loss down.
TEST(Root, StepsDecreaseLeastSquaresLoss) {
  auto rng = fresh_rng();
  const int64_t r = 32, c = 48, nsamp = 96;
  const std::vector<float> a = normal(rng, c * nsamp), w_true = normal(rng, r * c, 0.3f);
  std::vector<float> y(r * nsamp, 0.0f);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t j = 0; j < nsamp; ++j) y[i * nsamp + j] += w_true[i * c + k] * a[k * nsamp + j];
  auto loss_and_grad = [&](const std::vector<float>& w, std::vector<float>& g) {
    std::vector<double> e(r * nsamp, 0.0);
    double loss = 0;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < nsamp; ++j) {
        double s = -y[i * nsamp + j];
        for (int64_t k = 0; k < c; ++k) s += w[i * c + k] * a[k * nsamp + j];
        e[i * nsamp + j] = s;
        loss += s * s / (2.0 * nsamp);
      }
    for (int64_t i = 0; i < r; ++i)
      for (int64_t k = 0; k < c; ++k) {
        double s = 0;
        for (int64_t j = 0; j < nsamp; ++j) s += e[i * nsamp + j] * a[k * nsamp + j];
        g[i * c + k] = static_cast<float>(s / nsamp);
      }
    return loss;
  };
  for (NsPrecision p : {NsPrecision::kFp32, NsPrecision::kNvfp4, NsPrecision::kBf16}) {
    RootOptions opt;
    opt.precision = p;
    RootMatrix root("w", r, c, 7, 99);
    std::vector<float> w(r * c, 0.0f), g(r * c);
    const double l0 = loss_and_grad(w, g);
    double l = l0;
    for (int step = 0; step < 60; ++step) {
      const float lr = 0.12f * (1.0f - step / 60.0f);  // linear decay: ROOT's update has a fixed size
      root.step(w, g, lr, 0.0f, opt);
      l = loss_and_grad(w, g);
    }
    std::printf("  %-9s least squares: loss %.4f -> %.4f\n", root_optimizer_name(p).c_str(), l0, l);
    EXPECT_LT(l, 0.05 * l0);
  }
}

TEST(Root, RefusesBadInputsAndLeavesStateUnchanged) {
  std::vector<float> w(8 * 16, 1.0f), g(8 * 16, 0.5f), m(8 * 16, 0.25f);
  RootOptions opt;
  g[5] = std::nanf("");
  try {
    root_step(w, g, m, 8, 16, 0.1f, 0.0f, opt, "blocks.1.mlp.w1");
    FAIL() << "NaN gradient accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.1.mlp.w1"), std::string::npos) << e.what();
  }
  g[5] = 0.5f;
  EXPECT_THROW(root_step(w, g, m, 8, 15, 0.1f, 0.0f, opt, "w"), Error);
  EXPECT_THROW(root_step(w, g, m, 8, 16, -0.1f, 0.0f, opt, "w"), Error);
  RootOptions bad = opt;
  bad.momentum = 1.0f;
  EXPECT_THROW(root_step(w, g, m, 8, 16, 0.1f, 0.0f, bad, "w"), Error);
  bad = opt;
  bad.clip_quantile = 0.0;
  EXPECT_THROW(root_step(w, g, m, 8, 16, 0.1f, 0.0f, bad, "w"), Error);
  // Muon's quintic in NVFP4 diverges on a wide random matrix: a clear error, nothing written.
  std::mt19937_64 rng(3);
  std::vector<float> w2 = normal(rng, 64 * 192), w2_0 = w2, g2 = normal(rng, 64 * 192), m2(64 * 192, 0.0f);
  bad = opt;
  bad.precision = NsPrecision::kNvfp4;
  bad.coefficients = kMuonNsCoefficients;
  EXPECT_THROW(root_step(w2, g2, m2, 64, 192, 0.1f, 0.0f, bad, "w"), Error);
  EXPECT_EQ(w2, w2_0);
  for (float v : m2) EXPECT_EQ(v, 0.0f);
  for (float v : m) EXPECT_EQ(v, 0.25f);
}

}  // namespace
}  // namespace fp4
