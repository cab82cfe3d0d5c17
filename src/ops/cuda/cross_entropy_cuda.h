// Cross-entropy with z-loss over BF16 logits on the GPU (cpu::cross_entropy): the loss of each row and,
// for training, the logits' gradient written in place over the logits (one buffer for both).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// logits [n][v] BF16, only columns < v_real take part (padded ids are excluded from the softmax).
// Per row: row_loss = ce + z_loss * lse^2 and row_ce = ce, both 0 for an ignored row (target < 0).
// Targets must be < v_real (the engine checks them on the host). With `backward`, the row is replaced by
// grad_scale * (softmax * (1 + 2 z_loss lse) - onehot(target)), 0 on padded columns and ignored rows.
// One block per row; FP32 arithmetic, online softmax (one pass for the loss, one for the gradient).
void cross_entropy(bf16* logits, const int32_t* targets, float* row_loss, float* row_ce, int n, int v,
                   int v_real, float z_loss, float grad_scale, bool backward, cudaStream_t stream);

// sums[0] += sum_i row_loss[i], sums[1] += sum_i row_ce[i], in double, in a fixed order (one block).
void accumulate_loss_sums(const float* row_loss, const float* row_ce, int n, double* sums,
                          cudaStream_t stream);

}  // namespace fp4::cuda
