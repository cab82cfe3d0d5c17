// 128-byte-swizzled BF16 tiles in shared memory, the layout wgmma reads (attention_wgmma.cuh): a tile of
// kRows rows and a multiple of 64 columns is stored as column blocks of 64 (128 bytes a row), block after
// block; inside a block, row r's 16-byte chunk c sits at r*128 + ((c ^ (r % 8)) * 16). Tiles start on
// 1024-byte boundaries, so the XOR pattern is the hardware's (address bits 4-6 ^= bits 7-9) and both the
// tensor core and ldmatrix read eight rows of one chunk column from eight different bank groups.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/attention/attention_ptx.cuh"
#include "ops/cuda/attention/attention_tiles.cuh"
#include "ops/cuda/attention/attention_wgmma.cuh"

namespace fp4::cuda::attn {

// Byte offset of element (r, c) in a swizzled tile of kRows rows.
template <int kRows>
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return static_cast<uint32_t>((c >> 6) * (kRows * 128) + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) +
                               (c & 7) * 2);
}

// copy_rows_async into the 128-byte-swizzled tile at shared address dst.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void copy_tile_sw128(uint32_t dst, const __nv_bfloat16* src, int64_t ld, int row0,
                                                int row_end, int tid) {
  static_assert(kCols % 64 == 0, "the swizzled layout holds 64-column blocks");
  copy_rows_async<kRows, kCols, kThreads>([dst](int r, int col) { return dst + sw128_offset<kRows>(r, col); },
                                          src, ld, row0, row_end, tid);
}

// copy_tile_sw128 for a thread count that need not divide the tile's 16-byte chunks (three warpgroups
// and a 64-column tile, for example): the last round of chunks goes to the first threads only.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void copy_tile_sw128_any(uint32_t dst, const __nv_bfloat16* src, int64_t ld,
                                                    int row0, int row_end, int tid) {
  static_assert(kCols % 64 == 0, "the swizzled layout holds 64-column blocks");
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    const int chunk = i * kThreads + tid;
    if (kChunks % kThreads != 0 && chunk >= kChunks) break;
    const int r = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    const bool valid = row0 + r < row_end;
    const __nv_bfloat16* g = src + (valid ? static_cast<int64_t>(row0 + r) * ld : 0) + col;
    cp_async_16(dst + sw128_offset<kRows>(r, col), g, valid);
  }
}

// The mma A fragment A[m][k] = tile[m0 + m][k0 + k] of a swizzled tile (ldmatrix, as load_a).
template <int kRows>
__device__ __forceinline__ FragA load_a_sw128(uint32_t tile, int m0, int k0, int lane) {
  uint32_t r[4];
  ldmatrix_x4(r, tile + sw128_offset<kRows>(m0 + (lane & 15), k0 + (lane >> 4) * 8));
  return FragA{{r[0], r[1], r[2], r[3]}};
}

// Descriptor of the 16-column k-step kk of rows row0.. of a swizzled tile read K-major (the tile's rows are
// the M or N index, its columns the reduction index).
template <int kRows>
__device__ __forceinline__ uint64_t desc_k_major(uint32_t tile, int row0, int kk) {
  return sw128_desc(tile + (kk >> 2) * (kRows * 128) + row0 * 128 + (kk & 3) * 32, 16, 1024);
}

// Descriptor of the 16-row k-step kk of a swizzled tile read MN-major (the tile's rows are the reduction
// index, its columns from col0 on the M or N index; col0 a multiple of 8 inside one 64-column block or a
// multiple of 64).
template <int kRows>
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t tile, int col0, int kk) {
  return sw128_desc(tile + (col0 >> 6) * (kRows * 128) + (col0 & 63) * 2 + kk * 16 * 128, kRows * 128, 1024);
}

}  // namespace fp4::cuda::attn
