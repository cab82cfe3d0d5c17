// Pieces shared by the warp-per-row norm backward kernels (RMSNorm, QK-norm + RoPE): the grid that runs
// at once on the device within the scratch's partial rows, and the fixed-order sum of the warps'
// weight-gradient registers into one partial row per block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.h"

namespace fp4::cuda {

// Warps of a warp-per-row backward block: rows r0 + warp, r0 + warp + kNormRowWarps, ...
constexpr int kNormRowWarps = 8;
constexpr int kNormRowThreads = 32 * kNormRowWarps;

// One wave of blocks of kKernel (as many as are resident at once, so no block waits for a second wave),
// never more than norm_backward_tiling(n).blocks, the partial rows the caller's scratch holds. Rows per
// block are a multiple of the warps so every warp walks the same number of rows. `parts`: blocks per row
// range (grid.y), which share the wave.
template <auto kKernel>
NormTiling resident_norm_tiling(int n, int parts = 1) {
  static const int per_sm = [] {  // one query per kernel (the template argument)
    int b = 0;
    FP4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kKernel, kNormRowThreads, 0));
    return b < 1 ? 1 : b;
  }();
  int device = 0, sms = 0;
  FP4_CUDA_CHECK(cudaGetDevice(&device));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const NormTiling cap = norm_backward_tiling(n);
  long long blocks = static_cast<long long>(per_sm) * sms / parts;
  if (blocks < 1) blocks = 1;
  if (blocks > cap.blocks) blocks = cap.blocks;
  NormTiling t;
  t.rows_per_block = static_cast<int>((n + blocks - 1) / blocks);
  t.rows_per_block = (t.rows_per_block + kNormRowWarps - 1) / kNormRowWarps * kNormRowWarps;
  t.blocks = (n + t.rows_per_block - 1) / t.rows_per_block;  // <= blocks: rows only grew
  return t;
}

// Sums acc (each lane's weight-gradient registers) over the block's warps in warp order into `buf`
// (kCount * 32 floats of shared memory, laid out [kCount][lane]); every thread may read buf afterwards.
// Deterministic: the order never depends on timing. Every thread of the block must call it.
template <int kCount>
__device__ __forceinline__ void sum_over_warps(const float (&acc)[kCount], float* buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int w = 0; w < warps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int i = 0; i < kCount; ++i) buf[i * 32 + lane] = w == 0 ? acc[i] : buf[i * 32 + lane] + acc[i];
    }
    __syncthreads();
  }
}

// Eight row elements held in registers in their stored form between a row's reduction and its output
// pass (BF16: four registers instead of eight), widened to FP32 where used.
template <typename T>
struct Held8;
template <>
struct Held8<__nv_bfloat16> {
  uint4 u;
  __device__ __forceinline__ void load(const __nv_bfloat16* p) { u = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void get(float (&v)[8]) const { widen8(u, v); }
};
template <>
struct Held8<float> {
  float f[8];
  __device__ __forceinline__ void load(const float* p) { load8(p, f); }
  __device__ __forceinline__ void get(float (&v)[8]) const {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = f[i];
  }
};

}  // namespace fp4::cuda
