#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/embedding_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kBackwardThreads = 128;

__global__ void embedding_forward_kernel(const int32_t* __restrict__ tokens, const float* __restrict__ table,
                                         float* __restrict__ out_f32, bf16* __restrict__ out_bf16,
                                         long long pairs, int half_d) {
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < pairs;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = idx / half_d;
    const int j = static_cast<int>(idx - row * half_d) * 2, d = 2 * half_d;
    const float2 v = load2(table + static_cast<long long>(tokens[row]) * d + j);
    store2(out_f32 + row * d + j, v);
    if (out_bf16 != nullptr) store2(out_bf16 + row * d + j, v);
  }
}

// One block per token group: sums the group's rows in position order, then adds to the table row.
__global__ void embedding_backward_kernel(const float* __restrict__ dout, const int32_t* __restrict__ ids,
                                          const int32_t* __restrict__ offsets,
                                          const int32_t* __restrict__ positions, float* __restrict__ dtable,
                                          int d) {
  const int g = blockIdx.x;
  const int begin = offsets[g], end = offsets[g + 1];
  float* row = dtable + static_cast<long long>(ids[g]) * d;
  for (int p = threadIdx.x; p < d / 2; p += blockDim.x) {
    float2 acc = make_float2(0.0f, 0.0f);
    for (int i = begin; i < end; ++i) {
      const float2 v = load2(dout + static_cast<long long>(positions[i]) * d + 2 * p);
      acc.x += v.x;
      acc.y += v.y;
    }
    const float2 old = load2(row + 2 * p);
    store2(row + 2 * p, make_float2(old.x + acc.x, old.y + acc.y));
  }
}

}  // namespace

void embedding_forward(const int32_t* tokens, const float* table, float* out_f32, bf16* out_bf16, int n,
                       int d, cudaStream_t stream) {
  FP4_CHECK(n >= 0 && d > 0 && d % 2 == 0, "embedding_forward: width must be even and positive, got ", d);
  const long long pairs = static_cast<long long>(n) * (d / 2);
  if (pairs == 0) return;
  embedding_forward_kernel<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(tokens, table, out_f32,
                                                                               out_bf16, pairs, d / 2);
  FP4_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void group_tokens(const int32_t* tokens, int n, TokenGroups& out) {
  out.positions.resize(static_cast<size_t>(n));
  std::iota(out.positions.begin(), out.positions.end(), 0);
  std::stable_sort(out.positions.begin(), out.positions.end(),
                   [tokens](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  out.ids.clear();
  out.offsets.clear();
  for (int i = 0; i < n; ++i) {
    const int32_t tok = tokens[out.positions[static_cast<size_t>(i)]];
    if (out.ids.empty() || out.ids.back() != tok) {
      out.ids.push_back(tok);
      out.offsets.push_back(i);
    }
  }
  out.offsets.push_back(n);
}

void embedding_backward(const float* dout, const int32_t* ids, const int32_t* offsets,
                        const int32_t* positions, int groups, float* dtable, int d, cudaStream_t stream) {
  FP4_CHECK(groups >= 0 && d > 0 && d % 2 == 0, "embedding_backward: width must be even and positive, got ",
            d);
  if (groups == 0) return;
  embedding_backward_kernel<<<groups, kBackwardThreads, 0, stream>>>(dout, ids, offsets, positions, dtable,
                                                                     d);
  FP4_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

}  // namespace fp4::cuda
