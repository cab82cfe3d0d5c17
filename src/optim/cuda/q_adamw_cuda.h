// Q-AdamW's step on the GPU (RECIPES.md section 8.2, docs/OPTIMIZERS.md): the packed moments of every
// parameter piece are decoded, updated as cpu::adamw_update does with the ratio bound, mixed and
// re-quantized with the tensor amax and the Philox streams of the CPU QAdamW (optim/q_adamw.cpp), so the
// parameters and every state byte equal the CPU optimizer's. A piece is the part of one parameter tensor a
// rank keeps (whole tiles; the whole tensor on one process); tile t of tensor i rounds with the stream
// {q_adamw_sr_key(seed, step, i, moment), t}, t counted from the tensor's first element.
//
// Three kernels per step over all pieces: (A, q_adamw_measure) decode, update on the side, mix, tensor amax;
// (B, q_adamw_write) the same arithmetic again, writing the weights and quantizing every 128-element tile
// with the complete amax, then (C) the tensor scales. Between A and B a data-parallel step combines the
// ranks' amaxes and faults (q_adamw_all_reduce_amax), so every tensor is scaled by its whole amax. Nothing
// waits for the host; the step is skipped on the device when control->skip is set, and when a new moment
// is not finite (the CPU throws there) A records the tensor in `fault` and B and C change nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/communicator.h"
#include "optim/cuda/adamw_cuda.h"

namespace fp4::cuda {

inline constexpr int64_t kQAdamTileElements = 128;
inline constexpr int64_t kQAdamCodeBytes = 64;  // per tile: 128 E2M1 codes, low nibble first
inline constexpr int64_t kQAdamScaleBytes = 8;  // per tile: 8 E4M3 block scales
inline constexpr uint32_t kQAdamNoFault = 0xFFFFFFFFu;

// One piece of the packed state (device array, in parameter order): whole tiles of one parameter tensor.
struct QAdamPiece {
  int64_t offset = 0;      // its first element in the flat parameter buffers
  int64_t numel = 0;       // its elements (only the tensor's last tile may be partial)
  int64_t first_tile = 0;  // its first tile in the state buffers (tiles of earlier pieces come first)
  int64_t tile0 = 0;       // the tensor's index of that tile (0 for a whole tensor): the SR stream
  int32_t param = 0;       // the tensor: its amax, scale and SR key slot
  int32_t decay = 0;       // 1: weight decay applies
};

// The packed moments (device pointers); index 0 is m, 1 is v.
struct QAdamPacked {
  uint8_t* codes[2] = {nullptr, nullptr};   // [tiles x 64]
  uint8_t* scales[2] = {nullptr, nullptr};  // [tiles x 8]
  float* scale[2] = {nullptr, nullptr};     // [tensors x 2]: S_dec and amax of each tensor (all tensors)
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

// Writes the state of all-zero moments of the pieces (as QAdamW's constructor: quantized with amax 0 and
// key 0) and the scales of all n_tensors tensors. `amax` is scratch of 2 * n_tensors floats.
void q_adamw_init(const QAdamPacked& state, const QAdamPiece* pieces, int n_pieces, int64_t total_tiles,
                  int n_tensors, float* amax, cudaStream_t stream);

// Step part A: amax (2 * n_tensors floats) receives each tensor's amax of the new mixed moments over these
// pieces, fault (one word) kQAdamNoFault or the smallest 2 * tensor + moment whose new moment is not finite.
// The moments do not depend on the weights, so A does not read them.
void q_adamw_measure(const float* grads, const QAdamPacked& state, const QAdamPiece* pieces, int n_pieces,
                     int64_t total_tiles, int n_tensors, const QAdamStepArgs& args,
                     const StepControl* control, float* amax, uint32_t* fault, cudaStream_t stream);

// Between A and B of a data-parallel step: every rank's amax and fault combined (the max of each amax, the
// smallest fault) through one F64 all-reduce of `slots` (device scratch of
// comm.world_size() * (2 * n_tensors + 1) doubles), in which each rank fills only its own row, so the sum
// is exact. Afterwards amax and fault are the same on every rank and equal one process's.
void q_adamw_all_reduce_amax(float* amax, uint32_t* fault, int n_tensors, double* slots, Communicator& comm,
                             cudaStream_t stream);

// Step part B: values (and values_bf16, may be null) of the pieces updated from grads * control->clip_coef,
// their packed moments rewritten with the tensor amaxes, then the scales of every tensor; nothing changes
// when control->skip is set or fault holds a fault.
void q_adamw_write(float* values, const float* grads, bf16* values_bf16, const QAdamPacked& state,
                   const QAdamPiece* pieces, int n_pieces, int64_t total_tiles, int n_tensors,
                   const QAdamStepArgs& args, const StepControl* control, const float* amax,
                   const uint32_t* fault, cudaStream_t stream);

}  // namespace fp4::cuda
