// The CPU measurement of Q-Root's claim (fp4train optim-claims): e_q, the error NVFP4 operands add to the
// Newton-Schulz iteration, after each step, beside the FP32 map's polar error.
#include "optim/q_root_error.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/ns_fit.h"

namespace fp4 {
namespace {

TEST(QRootClaims, EqMeasuresTheFourBitIterationAgainstTheFp32One) {
  // NVFP4 operands round each product's inputs by up to ~9.5% (relative, per element), so after one step the
  // iterate differs from the FP32 one by a few percent; the measurement is a pure function of its inputs.
  const NsStepErrors e = ns_step_errors(32, 64, kQRootNsCoefficients, 3, 1.0, "normal", 2, 5);
  ASSERT_EQ(e.e_q.size(), 3u);
  for (double x : e.e_q) EXPECT_TRUE(x > 0.001 && x < 0.5) << x;
  // BF16 operands round by at most 2^-9 relative, NVFP4's by up to ~9.5%: the BF16 iteration is far closer
  // to the FP32 one than the NVFP4 iteration is, and not equal to it.
  EXPECT_GT(e.e_bf16, 0);
  EXPECT_LT(e.e_bf16, 0.25 * e.e_q.back()) << e.e_bf16 << " vs e_q " << e.e_q.back();
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
