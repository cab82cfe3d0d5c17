// Token embedding on the GPU (cpu::embedding_forward / embedding_backward). The table is the FP32
// master; the backward is deterministic: positions are grouped by token on the host, and each group's
// rows are summed in position order by one block (no atomics).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// out_f32 [n][d] = table[tokens[i]]; out_bf16 (may be null) receives the same rows rounded to BF16.
// Tokens must be in range (the engine checks them on the host). d must be even.
void embedding_forward(const int32_t* tokens, const float* table, float* out_f32, bf16* out_bf16, int n,
                       int d, cudaStream_t stream);

// The rows of a micro-batch grouped by token id.
struct TokenGroups {
  std::vector<int32_t> ids;        // distinct token ids, ascending
  std::vector<int32_t> offsets;    // ids.size() + 1 entries into positions
  std::vector<int32_t> positions;  // row indices, grouped by token, ascending within a group
  int groups() const { return static_cast<int>(ids.size()); }
};
// Fills `out` (its vectors keep their capacity between calls).
void group_tokens(const int32_t* tokens, int n, TokenGroups& out);

// dtable[ids[g]] += sum over the rows of group g of dout[row] (dout FP32 [n][d], dtable FP32 [vocab][d]).
// ids, offsets, positions are the device copies of a TokenGroups.
void embedding_backward(const float* dout, const int32_t* ids, const int32_t* offsets,
                        const int32_t* positions, int groups, float* dtable, int d, cudaStream_t stream);

}  // namespace fp4::cuda
