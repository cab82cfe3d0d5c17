// The CPU measurements of Full-Stack FP4's optimizer claims (fp4train optim-claims): Q-Root's e_q and
// Q-AdamW's second-moment errors and state bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "optim/ns_fit.h"
#include "optim/q_adamw_error.h"
#include "optim/q_root_error.h"
#include "optim/quantized_moments.h"

namespace fp4 {
namespace {

TEST(QAdamWClaims, StateBytesAreThePackedMoments) {
  std::mt19937 rng(std::random_device{}());
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{127}, int64_t{128}, int64_t{129}, int64_t{5000},
                    static_cast<int64_t>(1 + rng() % 20000)}) {
    std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    std::normal_distribution<float> g;
    for (size_t i = 0; i < m.size(); ++i) m[i] = g(rng), v[i] = m[i] * m[i];
    EXPECT_EQ(q_adamw_state_bytes(n), encode_first_moment(m, RngStream{1, 0}).packed_bytes() +
                                          encode_second_moment(v, RngStream{1, 1}).packed_bytes())
        << n;
  }
}

TEST(QAdamWClaims, PlainStorageFlushesTheSmallSecondMomentsTheCodecKeeps) {
  // Two populations 2^-20 apart in one 16-block: plain NVFP4 (E2M1 x E4M3 block scale) cannot hold both,
  // the codec stores sqrt(v) and so needs only 2^-10.
  std::vector<float> v(4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 16 == 0) ? 1.0f : 1e-6f * (1 + (i % 7) * 0.1f);
  const SecondMomentErrors e = second_moment_errors(v, 1e-8f, 3);
  EXPECT_GT(e.plain_flushed, 0.9);
  EXPECT_LT(e.codec_flushed, e.plain_flushed);
  EXPECT_LT(e.codec_step_err, e.plain_step_err);
  // Exact zeros stay zero and do not count as flushed.
  std::vector<float> z(256, 0.0f);
  z[3] = 1.0f;
  const SecondMomentErrors ze = second_moment_errors(z, 1e-8f, 3);
  EXPECT_EQ(ze.plain_flushed, 0.0);
  EXPECT_LT(ze.plain_rel_l2, 1e-6);
}

TEST(QRootClaims, EqMeasuresTheFourBitIterationAgainstTheFp32One) {
  // NVFP4 operands round each product's inputs by up to ~9.5% (relative, per element), so after one step the
  // iterate differs from the FP32 one by a few percent; the measurement is a pure function of its inputs.
  const NsStepErrors e = ns_step_errors(32, 64, kQRootNsCoefficients, 3, 1.0, "normal", 2, 5);
  ASSERT_EQ(e.e_q.size(), 3u);
  for (double x : e.e_q) EXPECT_TRUE(x > 0.001 && x < 0.5) << x;
  EXPECT_GT(e.fp32_polar_error, 0);
  EXPECT_LT(e.fp32_polar_error, 1);
  EXPECT_EQ(ns_step_errors(32, 64, kQRootNsCoefficients, 3, 1.0, "normal", 2, 5).e_q, e.e_q);
  // Zero steps of NS is the normalized input in both precisions; one step more error than none is the rule
  // checked here through the FP32 polar error, which must fall with steps for the convergent classical map.
  const NsStepErrors longer = ns_step_errors(32, 64, kQRootNsCoefficients, 6, 1.0, "normal", 2, 5);
  EXPECT_LT(longer.fp32_polar_error, e.fp32_polar_error);
  // p99 clipping changes the input of heavy-tailed samples, so it changes e_q.
  EXPECT_NE(ns_step_errors(32, 64, kQRootNsCoefficients, 3, 0.99, "t3", 2, 5).e_q,
            ns_step_errors(32, 64, kQRootNsCoefficients, 3, 1.0, "t3", 2, 5).e_q);
  EXPECT_THROW(ns_step_errors(32, 64, kQRootNsCoefficients, 0, 1.0, "normal", 2, 5), Error);
  EXPECT_THROW(ns_sample_matrix(4, 4, "cauchy", 1, 0), Error);
}

}  // namespace
}  // namespace fp4
