// Q-Attn's error on the attention scores (issue 21, Full-Stack FP4's Q-Attn claim), measured on the CPU:
// per head, S = s Q K^T (s = 1/sqrt(head_dim), causal part) from Q-Attn's NVFP4 operands (QAttentionCpu's own
// Q^ and K^) and from BF16-rounded operands (BF16 attention), each against the FP64 scores of the FP32
// inputs; and what the score error does downstream: the softmax rows' total variation distance and the
// output's relative error, against FP64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4 {

struct QAttnErrorOptions {
  int t = 512;                  // sequence length (causal)
  int head_dim = 64;            // the OLMo-2 configs' head size
  int heads = 4;                // heads per sample, each an independent matrix pair
  std::string kind = "normal";  // "normal": QK-normed Gaussian rows; "outliers": 4 channels at 10x first
  double logit_scale = 1;       // Q multiplied by this after the norm: sharper attention for > 1
  int samples = 2;
  uint64_t seed = 1;
};

// Means over samples and heads; relative errors are Frobenius over the causal entries (scores) or the
// output, total variation is 0.5 sum |p - p_ref| per query row, averaged over rows.
struct QAttnErrors {
  double scores_fp4 = 0, scores_bf16 = 0;  // ||S - S_ref||_F / ||S_ref||_F
  double scores_fp4_vs_bf16 = 0;           // ||S_fp4 - S_bf16||_F / ||S_bf16||_F
  double probs_tv_fp4 = 0, probs_tv_bf16 = 0;
  double out_fp4 = 0, out_bf16 = 0;  // ||O - O_ref||_F / ||O_ref||_F
};

// Throws fp4::Error on a bad option (sizes, kind, scale, samples).
QAttnErrors q_attn_errors(const QAttnErrorOptions& opt);

// Markdown: one row per (kind, logit scale) at the given sequence length and head size.
std::string q_attn_error_table(int t, int head_dim, const std::vector<std::string>& kinds,
                               const std::vector<double>& logit_scales, int samples, uint64_t seed);

}  // namespace fp4
