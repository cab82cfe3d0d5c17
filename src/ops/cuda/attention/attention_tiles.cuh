// Shared-memory tiles of the attention kernels: asynchronous global->shared tile copies, and the ldmatrix
// addressing that turns a tile into mma fragments (attention_ptx.cuh gives the fragment layouts).
// Tiles are row-major BF16 with a row stride of (columns + 8) elements: the 16-byte pad puts the eight
// rows an 8x8 ldmatrix reads in eight different bank groups, so the loads are conflict-free.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/attention/attention_ptx.cuh"

namespace fp4::cuda::attn {

using bf16 = __nv_bfloat16;

// Copies rows row0 .. row0+kRows-1 (kCols elements each) of the row-major global matrix src (row stride
// ld elements, 16-byte aligned rows) into shared memory, 16 bytes per cp.async; rows at or past row_end
// become zeros. dst_of(r, col) is the shared address of tile element (r, col): the tile's layout.
template <int kRows, int kCols, int kThreads, class DstOf>
__device__ __forceinline__ void copy_rows_async(DstOf dst_of, const bf16* src, int64_t ld, int row0,
                                                int row_end, int tid) {
  constexpr int kChunksPerRow = kCols / 8;  // 16-byte chunks
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kCols % 8 == 0 && kChunks % kThreads == 0, "tile must split evenly over the threads");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int chunk = i * kThreads + tid;
    const int r = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    const int row = row0 + r;
    const bool valid = row < row_end;
    const bf16* g =
        src + (valid ? static_cast<int64_t>(row) * ld : 0) + col;  // a readable address either way
    cp_async_16(dst_of(r, col), g, valid);
  }
}

// copy_rows_async into a padded row-major tile dst (row stride kStride).
template <int kRows, int kCols, int kStride, int kThreads>
__device__ __forceinline__ void copy_tile_async(bf16* dst, const bf16* src, int64_t ld, int row0, int row_end,
                                                int tid) {
  copy_rows_async<kRows, kCols, kThreads>([dst](int r, int col) { return smem_u32(dst + r * kStride + col); },
                                          src, ld, row0, row_end, tid);
}

// A fragment A[m][k] = tile[m0 + m][k0 + k] of a tile stored [m][k].
template <int kStride>
__device__ __forceinline__ FragA load_a(const bf16* tile, int m0, int k0, int lane) {
  uint32_t r[4];
  ldmatrix_x4(r, smem_u32(tile + (m0 + (lane & 15)) * kStride + k0 + (lane >> 4) * 8));
  return FragA{{r[0], r[1], r[2], r[3]}};
}

// A fragment A[m][k] = tile[k0 + k][m0 + m] of a tile stored transposed, [k][m].
template <int kStride>
__device__ __forceinline__ FragA load_a_trans(const bf16* tile, int m0, int k0, int lane) {
  uint32_t r[4];
  ldmatrix_x4_trans(
      r, smem_u32(tile + (k0 + (lane & 7) + (lane >> 4) * 8) * kStride + m0 + ((lane >> 3) & 1) * 8));
  return FragA{{r[0], r[1], r[2], r[3]}};
}

// The B fragments of columns n0..n0+7 (b0) and n0+8..n0+15 (b1), B[k][n] = tile[n0 + n][k0 + k], of a
// tile stored [n][k] (B is the transpose of the tile: keys as columns of Q K^T, for example).
template <int kStride>
__device__ __forceinline__ void load_b_pair(FragB& b0, FragB& b1, const bf16* tile, int n0, int k0,
                                            int lane) {
  uint32_t r[4];
  ldmatrix_x4(r, smem_u32(tile + (n0 + (lane & 7) + (lane >> 4) * 8) * kStride + k0 + ((lane >> 3) & 1) * 8));
  b0 = FragB{{r[0], r[1]}};
  b1 = FragB{{r[2], r[3]}};
}

// The same pair, B[k][n] = tile[k0 + k][n0 + n], of a tile stored [k][n] (V in P V, for example).
template <int kStride>
__device__ __forceinline__ void load_b_pair_trans(FragB& b0, FragB& b1, const bf16* tile, int n0, int k0,
                                                  int lane) {
  uint32_t r[4];
  ldmatrix_x4_trans(
      r, smem_u32(tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + n0 + (lane >> 4) * 8));
  b0 = FragB{{r[0], r[1]}};
  b1 = FragB{{r[2], r[3]}};
}

// The BF16 A fragment of a 16 x 16 block held as two FP32 accumulators, lo = columns 0..7 and hi = columns
// 8..15: the C layout of two adjacent n-blocks is the A layout of one k-step, so no data moves between lanes.
__device__ __forceinline__ FragA accum_to_a(const FragC& lo, const FragC& hi) {
  return FragA{{pack_bf16(lo.x[0], lo.x[1]), pack_bf16(lo.x[2], lo.x[3]), pack_bf16(hi.x[0], hi.x[1]),
                pack_bf16(hi.x[2], hi.x[3])}};
}

}  // namespace fp4::cuda::attn
