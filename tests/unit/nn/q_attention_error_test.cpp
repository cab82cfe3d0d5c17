// The Q-Attn score-error measurement (nn/q_attention_error.h): NVFP4 operands err far more than BF16 ones,
// both errors are nonzero and bounded, the downstream errors follow, sharper attention (a larger logit
// scale) makes the softmax more sensitive, the result is a pure function of its options, bad options are
// refused by name.
#include "nn/q_attention_error.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../error_of.h"

namespace fp4 {
namespace {

using testing::error_of;

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

QAttnErrorOptions small(uint64_t seed) {
  QAttnErrorOptions o;
  o.t = 64;
  o.head_dim = 32;
  o.heads = 2;
  o.samples = 1;
  o.seed = seed;
  return o;
}

TEST(QAttnError, Nvfp4ErrsFarMoreThanBf16AndTheErrorsPropagate) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const char* kind : {"normal", "outliers"}) {
    QAttnErrorOptions o = small(seed);
    o.kind = kind;
    const QAttnErrors e = q_attn_errors(o);
    // E2M1 with E4M3 block scales rounds an operand by up to ~9.5% (relative, per element); BF16 by 2^-9.
    EXPECT_GT(mean(e.scores_fp4), 0.01) << kind;
    EXPECT_LT(mean(e.scores_fp4), 0.5) << kind;
    EXPECT_GT(mean(e.scores_bf16), 0) << kind;
    EXPECT_LT(mean(e.scores_bf16), 0.02) << kind;
    EXPECT_GT(mean(e.scores_fp4), 5 * mean(e.scores_bf16)) << kind;
    EXPECT_NEAR(mean(e.scores_fp4_vs_bf16), mean(e.scores_fp4), 0.5 * mean(e.scores_fp4)) << kind;
    EXPECT_GT(mean(e.probs_tv_fp4), mean(e.probs_tv_bf16)) << kind;
    EXPECT_GT(mean(e.out_fp4), mean(e.out_bf16)) << kind;
    for (const auto* v : {&e.probs_tv_fp4, &e.probs_tv_bf16})
      for (double x : *v) {
        EXPECT_GE(x, 0) << kind;
        EXPECT_LE(x, 1) << kind;
      }
  }
}

TEST(QAttnError, SharperAttentionIsMoreSensitiveAndTheMeasureIsDeterministic) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  QAttnErrorOptions o = small(seed);
  const QAttnErrors flat = q_attn_errors(o);
  o.logit_scale = 8;
  const QAttnErrors sharp = q_attn_errors(o);
  // Score errors scale with the scores; the softmax's total variation grows with the logits' spread.
  EXPECT_GT(mean(sharp.probs_tv_fp4), mean(flat.probs_tv_fp4));
  const QAttnErrors again = q_attn_errors(o);
  EXPECT_EQ(again.scores_fp4, sharp.scores_fp4);
  EXPECT_EQ(again.out_bf16, sharp.out_bf16);
  EXPECT_EQ(sharp.scores_fp4.size(), 2u);  // one value per (sample, head)
}

TEST(QAttnError, BadOptionsAreNamed) {
  QAttnErrorOptions o = small(1);
  o.head_dim = 24;
  EXPECT_NE(error_of([&] { q_attn_errors(o); }).find("head_dim must be a multiple of 16"), std::string::npos);
  o = small(1);
  o.kind = "cauchy";
  EXPECT_NE(error_of([&] { q_attn_errors(o); }).find("kind must be normal or outliers"), std::string::npos);
  o = small(1);
  o.logit_scale = 0;
  EXPECT_NE(error_of([&] { q_attn_errors(o); }).find("logit_scale must be positive"), std::string::npos);
  o = small(1);
  o.t = 0;
  EXPECT_NE(error_of([&] { q_attn_errors(o); }).find("t, heads and samples"), std::string::npos);
}

}  // namespace
}  // namespace fp4
