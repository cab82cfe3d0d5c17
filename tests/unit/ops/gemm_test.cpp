// The CPU GEMM against a naive double loop: every transpose combination on odd shapes (1 included), padded
// leading dimensions, random alpha and beta, and the degenerate sizes m = 0, n = 0 and k = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

// C = alpha op(A) op(B) + beta C in double, with op(A) [m,k] and op(B) [k,n] read through their strides.
std::vector<double> naive_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                               const std::vector<float>& a, int lda, const std::vector<float>& b, int ldb,
                               double beta, const std::vector<float>& c, int ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += double(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      out[i * ldc + j] = alpha * s + (beta == 0 ? 0.0 : beta * c[i * ldc + j]);
    }
  return out;
}

TEST(Gemm, MatchesANaiveLoopOnOddShapesAndStrides) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int sizes[] = {1, 2, 3, 7, 17, 33, 64, 65};
  std::uniform_real_distribution<float> coef(-2.0f, 2.0f);
  for (int trial = 0; trial < 120; ++trial) {
    const bool ta = trial % 2, tb = (trial / 2) % 2;
    const int m = sizes[rng() % 8], n = sizes[rng() % 8], k = sizes[rng() % 8];
    const int pad = rng() % 2 ? 0 : 1 + static_cast<int>(rng() % 5);  // leading dimensions beyond the rows
    const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    const auto a = test::normal_vector(rng, static_cast<size_t>(a_rows) * lda);
    const auto b = test::normal_vector(rng, static_cast<size_t>(b_rows) * ldb);
    auto c = test::normal_vector(rng, static_cast<size_t>(m) * ldc);
    const float alpha = trial % 5 == 0 ? 1.0f : coef(rng);
    const float beta = trial % 3 == 0 ? 0.0f : coef(rng);
    const auto want = naive_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    const auto before = c;
    cpu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < ldc; ++j) {
        const size_t at = static_cast<size_t>(i) * ldc + j;
        if (j >= n) {
          ASSERT_EQ(c[at], before[at]) << "padding column " << j << " was written";
          continue;
        }
        // float accumulation over k terms of unit scale
        ASSERT_NEAR(c[at], want[at], 1e-5 * (k + 1) * (1 + std::fabs(alpha)))
            << "ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k << " at " << i << ","
            << j;
      }
  }
}

// beta = 0 overwrites C, whatever it held (the engines pass uninitialised workspaces).
TEST(Gemm, BetaZeroIgnoresWhatCHeld) {
  std::mt19937 rng(test::fresh_seed());
  const int m = 5, n = 3, k = 4;
  const auto a = test::normal_vector(rng, m * k), b = test::normal_vector(rng, k * n);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  const auto want = naive_gemm(false, false, m, n, k, 1.0, a, k, b, n, 0.0, std::vector<float>(m * n), n);
  for (int i = 0; i < m * n; ++i) EXPECT_NEAR(c[i], want[i], 1e-5) << i;
}

TEST(Gemm, EmptySizesTouchNothingAndKZeroScalesC) {
  std::mt19937 rng(test::fresh_seed());
  const auto a = test::normal_vector(rng, 64), b = test::normal_vector(rng, 64);
  auto c = test::normal_vector(rng, 64);
  const auto before = c;
  cpu::gemm(false, false, 0, 4, 3, 1.0f, a.data(), 3, b.data(), 4, 0.5f, c.data(), 4);
  cpu::gemm(true, true, 4, 0, 3, 1.0f, a.data(), 4, b.data(), 3, 0.5f, c.data(), 1);
  EXPECT_EQ(c, before);
  // k = 0: op(A) op(B) is the zero matrix, so C = beta C.
  cpu::gemm(false, false, 4, 4, 0, 1.0f, a.data(), 1, b.data(), 4, 0.5f, c.data(), 4);
  for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(c[i], 0.5f * before[i]) << i;
  EXPECT_EQ(c[16], before[16]);
}

TEST(Gemm, BlasDescriptionAndAdviceAgree) {
  const std::string d = cpu::blas_description();
  EXPECT_EQ(d.rfind("OpenBLAS ", 0), 0u) << d;
  EXPECT_NE(d.find("thread"), std::string::npos) << d;
  const std::string better = cpu::blas_better_coretype();
  const std::string advice = cpu::blas_advice();
  EXPECT_EQ(better.empty(), advice.empty());
  if (!better.empty()) {
    EXPECT_NE(advice.find("OPENBLAS_CORETYPE=" + better), std::string::npos) << advice;
  }
  EXPECT_TRUE(better.empty() || better == "SkylakeX" || better == "Haswell") << better;
}

}  // namespace
}  // namespace fp4
