// Q-AdamW's claims measured on the CPU (Full-Stack FP4, RECIPES.md section 8.2): the second moment's
// reconstruction error of the codec (optim/quantized_moments.h) against plain NVFP4 storage of v, and the
// optimizer-state bytes of Q-AdamW against BF16-state and FP32-state AdamW.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace fp4 {

// One tensor v >= 0 stored two ways and decoded: the codec (sqrt(v) around its 128-tile mean, H16, NVFP4
// with SR) and plain NVFP4 (v itself, 1x16 blocks, tensor outer scale, RTN).
struct SecondMomentErrors {
  int64_t size = 0;
  double codec_rel_l2 = 0, plain_rel_l2 = 0;  // ||v^ - v||_2 / ||v||_2
  // median over elements of |(sqrt(v) + eps) / (sqrt(v^) + eps) - 1|: the relative error of Adam's step size
  double codec_step_err = 0, plain_step_err = 0;
  double codec_flushed = 0, plain_flushed = 0;  // share of v > 0 decoded as 0
};
SecondMomentErrors second_moment_errors(std::span<const float> v, float eps, uint64_t seed);

// A synthetic second moment with heavy tails: the EMA (beta2 0.95, 200 steps) of g^2 for g = r_i c_j z,
// row and column scales log-normal(0, 1), z Student t with 3 degrees of freedom; rows x cols elements.
std::vector<float> synthetic_second_moment(int64_t rows, int64_t cols, uint64_t seed);

// Optimizer-state bytes of one tensor of n elements: FP32 AdamW 8n, BF16 AdamW 4n, Q-AdamW the packed
// codes, block scales, outer scales and tile means of m and v (QuantizedMoment::packed_bytes).
int64_t q_adamw_state_bytes(int64_t n);

// Markdown: per model, parameters, optimizer-state bytes (and per parameter) for FP32, BF16 and Q-AdamW,
// Q-AdamW against BF16-state, and the same with FP32 master weights and FP32 gradients added.
std::string optimizer_memory_table(const std::vector<ModelConfig>& models);

}  // namespace fp4
