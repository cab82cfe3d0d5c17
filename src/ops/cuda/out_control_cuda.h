// Device helpers of OutControl (docs/OUT_CONTROL.md): per-channel calibration sums and the column
// gathers, scatters, transposes and concatenations of the split linear layer
// (nn/cuda/quant_linear_split_cuda.cu). Every call queues on `stream` and synchronizes nothing. Matrices are
// row-major.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4::cuda {

// sums[i] += ||x[:, i]||_2 and sums[cols + i] += ||x[:, i]||^2 for x [rows x cols] BF16 (FP64 sums; the
// squares of BF16 values are exact in FP64, so only the summation order differs from the CPU's).
void column_norm_sums_cuda(const uint16_t* x, int64_t rows, int64_t cols, double* sums, cudaStream_t stream);

// Two column sets of src [rows x cols] (FP32 or BF16) in one pass, in src's type: dst_a [rows x pa] = the
// columns idx[0..ka), dst_b [rows x pb] = the columns idx[ka..ka+kb), zeros in the padding columns.
void gather_column_sets_cuda(const void* src, QuantIoType dtype, int64_t rows, int64_t cols,
                             const int32_t* idx, int64_t ka, int64_t pa, void* dst_a, int64_t kb, int64_t pb,
                             void* dst_b, cudaStream_t stream);

// dst[:, idx[j]] = src[:, j] (or += when add) for j < k; src [rows x src_ld], dst [rows x cols].
void scatter_columns_cuda(const float* src, int64_t src_ld, int64_t rows, const int32_t* idx, int64_t k,
                          float* dst, int64_t cols, bool add, cudaStream_t stream);

// dst [cols x dst_ld] FP32 with dst[c][r] = src[r][c] for r < rows, c < cols, and zeros in the columns
// rows..dst_ld (dst_ld >= rows); src [rows x src_ld] (FP32 or BF16).
void transpose_cuda(const void* src, QuantIoType dtype, int64_t rows, int64_t cols, int64_t src_ld,
                    float* dst, int64_t dst_ld, cudaStream_t stream);

// dst [rows x (ca + cb)] BF16 = [a | b], a [rows x ca] and b [rows x cb] each FP32 (rounded to nearest
// even) or BF16 (copied).
void concat_columns_bf16_cuda(const void* a, QuantIoType ta, int64_t ca, const void* b, QuantIoType tb,
                              int64_t cb, int64_t rows, uint16_t* dst, cudaStream_t stream);

}  // namespace fp4::cuda
