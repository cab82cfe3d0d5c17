// Q-AdamW's step on the GPU (RECIPES.md section 8.2, docs/OPTIMIZERS.md): the packed moments of every
// parameter tensor are decoded, updated as cpu::adamw_update does with the ratio bound, mixed and
// re-quantized with the tensor amax and the Philox streams of the CPU QAdamW (optim/q_adamw.cpp), so the
// parameters and every state byte equal the CPU optimizer's. One process only: a tensor is one piece whose
// tile t rounds with the stream {q_adamw_sr_key(seed, step, tensor, moment), t}.
//
// Three kernels per step over all tensors: (A) decode, update on the side, mix, tensor amax; (B) the same
// arithmetic again, writing the weights and quantizing every 128-element tile with the complete amax;
// (C) the tensor scales. Nothing waits for the host; the step is skipped on the device when
// control->skip is set, and when a new moment is not finite (the CPU throws there) A records the tensor in
// `fault` and B and C change nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "optim/cuda/adamw_cuda.h"

namespace fp4::cuda {

inline constexpr int64_t kQAdamTileElements = 128;
inline constexpr int64_t kQAdamCodeBytes = 64;  // per tile: 128 E2M1 codes, low nibble first
inline constexpr int64_t kQAdamScaleBytes = 8;  // per tile: 8 E4M3 block scales
inline constexpr uint32_t kQAdamNoFault = 0xFFFFFFFFu;

// One parameter tensor of the packed state (device array, in parameter order).
struct QAdamTensor {
  int64_t offset = 0;  // its first element in the flat parameter buffers
  int64_t numel = 0;
  int64_t first_tile = 0;  // its tile 0 in the state buffers (tiles of earlier tensors come first)
  int32_t decay = 0;       // 1: weight decay applies
};

// The packed moments (device pointers); index 0 is m, 1 is v.
struct QAdamPacked {
  uint8_t* codes[2] = {nullptr, nullptr};   // [tiles x 64]
  uint8_t* scales[2] = {nullptr, nullptr};  // [tiles x 8]
  float* scale[2] = {nullptr, nullptr};     // [tensors x 2]: S_dec and amax of each tensor
  uint16_t* mean = nullptr;                 // [tiles]: BF16 mean of sqrt(v) per tile
};

// The step's scalars, formed on the host exactly as cpu::adamw_update and QAdamW::step form them.
struct QAdamStepArgs {
  float decay_on = 1.0f;   // 1 - lr * weight_decay (tensors with decay = 1; others use 1)
  float step_size = 0.0f;  // lr / bias_correction1
  float bc2_sqrt = 1.0f;   // sqrt(bias_correction2)
  float beta1 = 0.0f, beta2 = 0.0f, one_minus_beta1 = 1.0f, one_minus_beta2 = 1.0f, eps = 1e-8f;
  float ratio_bound = 0.0f;
  uint64_t seed = 0;  // the run seed
  int64_t step = 0;   // 1-based step of this update
};
QAdamStepArgs q_adamw_step_args(const cpu::AdamWArgs& args, uint64_t seed, int64_t step);

// Writes the state of all-zero moments (as QAdamW's constructor: quantized with amax 0 and key 0).
// `amax` is scratch of 2 * n_tensors floats.
void q_adamw_init(const QAdamPacked& state, const QAdamTensor* tensors, int n_tensors, int64_t total_tiles,
                  float* amax, cudaStream_t stream);

// One Q-AdamW step: values (and values_bf16, may be null) updated from grads * control->clip_coef, the packed
// moments rewritten. amax (2 * n_tensors floats) is scratch; fault (one word) receives kQAdamNoFault or the
// smallest 2 * tensor + moment whose new moment is not finite (then nothing changes).
void q_adamw_step(float* values, const float* grads, bf16* values_bf16, const QAdamPacked& state,
                  const QAdamTensor* tensors, int n_tensors, int64_t total_tiles, const QAdamStepArgs& args,
                  const StepControl* control, float* amax, uint32_t* fault, cudaStream_t stream);

}  // namespace fp4::cuda
