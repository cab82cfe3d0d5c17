// Device helpers shared by the layer kernels: deterministic warp/block sums and two-element loads and
// stores of FP32 or BF16 rows (all row widths and strides of the model are even).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fp4::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Butterfly sum: every lane ends with the same total, in a fixed order (deterministic).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block, returned to every thread. `scratch` is 32 floats of shared memory; every
// thread of the block must call it (it synchronizes).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < n_warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float2 load2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store2(float* p, float2 v) {
  *reinterpret_cast<float2*>(p) = v;
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float2 v) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __float22bfloat162_rn(v);
}

__device__ __forceinline__ float load1(const float* p) {
  return *p;
}
__device__ __forceinline__ float load1(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ void store1(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store1(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

// Blocks for a grid-stride loop over `count` items with `threads` per block (capped: the loop covers the
// rest).
inline int grid_for(long long count, int threads, int max_blocks = 65535) {
  const long long b = (count + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

}  // namespace fp4::cuda
