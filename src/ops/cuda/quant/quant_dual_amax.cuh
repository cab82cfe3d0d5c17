// The tensor-scale amax pre-pass of NVIDIA's operand pairs in one read of x: the row operand's amax
// (no RHT) and the column operand's amax after its RHT16 (or none), for an original BF16 source. It replaces
// amax_nvfp4_cuda (rows) plus the general dual kernel's amax-only form (columns), which read x twice and
// ran the general kernel's code. Same tile layout as quant_dual_fast.cuh; max is exact and order-free, so
// both results equal the reference's bits.
#pragma once

#include "ops/cuda/quant/quant_dual_fast.cuh"

namespace fp4::dual {

inline constexpr int kAmaxTileBytes = kFastTile * kFastTile * 2;

// amax_rows may be null (the row operand is not tensor-scaled). a.amax_c_out receives the column amax.
template <bool kColRht>
__global__ void __launch_bounds__(kFastThreads, 3) amax_dual_fast_kernel(DualArgs a, float* amax_rows) {
  extern __shared__ float4 dual_amax_smem[];
  __shared__ uint32_t scratch[2][kFastThreads / 32];
  uint16_t* tile = reinterpret_cast<uint16_t*>(dual_amax_smem);
  const int64_t row_tiles = (a.rows + kFastTile - 1) / kFastTile;
  const int64_t r0 = (blockIdx.x % row_tiles) * kFastTile, c0 = (blockIdx.x / row_tiles) * kFastTile;
  const int nr = static_cast<int>(a.rows - r0 < kFastTile ? a.rows - r0 : kFastTile);
  const int nc = static_cast<int>(a.cols - c0 < kFastTile ? a.cols - c0 : kFastTile);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Phase 1 (as fast_rows): thread = one 16-column block of 4 tile rows; rows' amax; the tile with the column
  // RHT's signs applied. Positions outside the tensor hold zeros, which change no maximum.
  const uint32_t col_neg = kColRht ? (a.signs_c.mask[0] & 0xFFFFu) : 0u;
  const int j = lane & 7, cl = 16 * j, h = (j >> 2) & 1;
  float row_max = 0.0f;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int rl = s * 32 + warp * 4 + (lane >> 3);
    qk::Raw16<QuantIoType::kBF16> raw;
    if (rl < nr && cl < nc)
      qk::load_raw16<QuantIoType::kBF16>(a.x, (r0 + rl) * a.cols + c0 + cl, raw);
    else
      qk::zero_raw16<QuantIoType::kBF16>(raw);
    if (amax_rows != nullptr) {
      float v[16];
      bool bad = false;
      qk::convert16<QuantIoType::kBF16>(raw, v);
      row_max = max_f(row_max, qk::amax16_bf16(raw.w, v, bad));
    }
    const uint32_t flip = ((col_neg >> (rl & 15)) & 1u) != 0 ? 0x80008000u : 0u;
    uint4* dst = reinterpret_cast<uint4*>(tile + rl * kFastTile + cl);
    const uint4 w0 = h ? raw.w[1] : raw.w[0], w1 = h ? raw.w[0] : raw.w[1];
    dst[h] = make_uint4(w0.x ^ flip, w0.y ^ flip, w0.z ^ flip, w0.w ^ flip);
    dst[h ^ 1] = make_uint4(w1.x ^ flip, w1.y ^ flip, w1.z ^ flip, w1.w ^ flip);
  }
  if (amax_rows != nullptr) qk::block_max_to<kFastThreads>(float_bits(row_max), scratch[0], amax_rows);
  __syncthreads();

  // Phase 2 (as fast_cols' amax pass): thread = tile column, rows hh * 64 .. + 63 as four T-blocks.
  const int hh = warp >> 2, tc = (warp & 3) * 32 + lane;
  float col_max = 0.0f;
  unsigned unused = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int rb = hh * 64 + 16 * k;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i)
      v[i] = bits_float(static_cast<uint32_t>(tile[(rb + i) * kFastTile + tc]) << 16);
    if constexpr (kColRht) qk::rht16_presigned(v);
    bool bad = false;
    col_max = max_f(col_max, block_amax(v, bad, unused));
  }
  qk::block_max_to<kFastThreads>(float_bits(col_max), scratch[1], a.amax_c_out);
}

}  // namespace fp4::dual
