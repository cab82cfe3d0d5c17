// Q-Attn's error on the attention scores (issue 21, Full-Stack FP4's Q-Attn claim), measured on the CPU:
// per head, S = s Q K^T (s = 1/sqrt(head_dim), causal part) from Q-Attn's NVFP4 operands (QAttentionCpu's own
// Q^ and K^) and from BF16-rounded operands (BF16 attention), each against the FP64 scores of the FP32
// inputs; and what the score error does downstream: the softmax rows' total variation distance and the
// output's relative error, against FP64. `fp4train qattn-error` prints the means with their intervals.
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

// One value per (sample, head), in that order, so a caller can take means and intervals over the heads;
// relative errors are Frobenius over the causal entries (scores) or the output, total variation is
// 0.5 sum |p - p_ref| per query row, averaged over rows.
struct QAttnErrors {
  std::vector<double> scores_fp4, scores_bf16;  // ||S - S_ref||_F / ||S_ref||_F
  std::vector<double> scores_fp4_vs_bf16;       // ||S_fp4 - S_bf16||_F / ||S_bf16||_F
  std::vector<double> probs_tv_fp4, probs_tv_bf16;
  std::vector<double> out_fp4, out_bf16;  // ||O - O_ref||_F / ||O_ref||_F
};

// Throws fp4::Error on a bad option (sizes, kind, scale, samples).
QAttnErrors q_attn_errors(const QAttnErrorOptions& opt);

}  // namespace fp4
