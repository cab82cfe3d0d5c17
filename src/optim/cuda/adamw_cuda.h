// The optimizer step on the GPU: per-parameter gradient sums of squares, the global norm and the
// clipping factor (clip_grad_norm semantics), and AdamW (cpu::adamw_update, bit for bit) which also
// refreshes the BF16 copy of the weights. The clipping factor and the non-finite check stay on the device:
// nothing here waits for the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/communicator.h"
#include "ops/ops.h"

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// A piece of one parameter inside the flat FP32 buffers (values, gradients, moments share the layout).
struct ParamChunk {
  int64_t begin = 0;  // element offset into the flat buffers
  int32_t count = 0;
  int32_t param = 0;  // index of the parameter it belongs to
};
constexpr int32_t kParamChunkElements = 1 << 14;

// Chunks of at most kParamChunkElements, in parameter order, for parameters at `offsets` of `sizes`.
// first_chunk receives sizes.size() + 1 entries: parameter p owns chunks [first_chunk[p], first_chunk[p+1]).
std::vector<ParamChunk> make_param_chunks(const std::vector<int64_t>& offsets,
                                          const std::vector<int64_t>& sizes,
                                          std::vector<int32_t>& first_chunk);

// Written by grad_norm_and_clip on the device, read by adamw_step and (once per step) by the host.
struct StepControl {
  double grad_norm = 0;    // global L2 norm before clipping
  float clip_coef = 1.0f;  // multiplies the gradients in the update (1: no clipping)
  int32_t skip = 0;        // 1: a gradient or the loss is not finite, the update must not run
};

// param_sumsq[p] = sum of squares of parameter p's gradient (double, fixed order; chunk_partials holds
// one double per chunk). Then control: grad_norm = sqrt(sum_p param_sumsq[p]), clip_coef =
// max_norm / (norm + 1e-6) when below 1 (max_norm <= 0 disables), skip when the norm or loss_sums[0]
// (may be null) is not finite.
void grad_norm_and_clip(const float* grads, const ParamChunk* chunks, int n_chunks,
                        const int32_t* first_chunk, int n_params, double* chunk_partials, double* param_sumsq,
                        const double* loss_sums, float max_norm, StepControl* control, cudaStream_t stream);

// With data parallelism, after grad_norm_and_clip over this rank's parameters (max_norm 0): the sum of its
// param_sumsq[0, n_params) and its non-finite flag are summed over the ranks through comm (scalars: 2
// doubles of device scratch), then clip_grad_norm's rule on the job's norm is written to control.
void all_reduce_norm_and_clip(const double* param_sumsq, int n_params, double* scalars, float max_norm,
                              StepControl* control, Communicator& comm, cudaStream_t stream);

// AdamW over every chunk with g = grad * control->clip_coef (no-op when control->skip). Parameters with
// decay_flags[p] == 0 get weight_decay 0. values_bf16 (may be null) receives the updated weights in BF16.
void adamw_step(float* values, float* m, float* v, const float* grads, bf16* values_bf16,
                const ParamChunk* chunks, int n_chunks, const uint8_t* decay_flags,
                const cpu::AdamWArgs& args, const StepControl* control, cudaStream_t stream);

}  // namespace fp4::cuda
