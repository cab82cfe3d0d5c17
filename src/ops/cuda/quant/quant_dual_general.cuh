// The general form of the fused dual quantizer (every mode quantize.h's quantize_dual takes), and its
// amax-only form (the tensor-scale pre-pass of the column operand). quant_dual.cu sends the recipes' operand
// pairs to the specialized kernel of quant_dual_fast.cuh and everything else here; the two launchers are
// compiled in their own translation units (quant_dual_general_*.cu) so the build compiles them in parallel.
//
// The kernel, one pass over x: a thread block owns a 128 x 128 tile. Phase 1 quantizes the tile's rows
// (along cols, as quantize_nvfp4 does) and leaves in shared memory what phase 2 needs to rebuild the column
// operand's source exactly: the 4-bit codes and per-block multipliers of the row quantization (aligned
// source; the dequantized value q * p is recomputed bit for bit), the BF16 input itself (original BF16
// source), or FP32 values (FP32 original input, and RHT segments longer than 16 that transform in place).
// Phase 2 reads the tile column-wise, so each thread holds 64 consecutive elements of one row of T = x^T,
// applies the RHT along T's rows, and quantizes them into the [cols x rows] operand. A 128-tall tile holds
// whole block128 groups and RHT segments of T. The small tiles (20 KB codes, 32 KB BF16 instead of 64 KB
// FP32) let three thread blocks share an SM, which hides the global loads of one behind another's work.
#pragma once

#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_dual_args.cuh"
#include "ops/cuda/quant/quant_dual_general.h"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4::dual_general {

using qk::Raw16;

constexpr int kThreads = 256;
constexpr int kTile = 128;
constexpr int kRowItems = kTile / (kThreads / 8);  // phase 1: rows per thread (4)

enum class TileKind { kF32, kBF16, kCodes };

// Bytes of dynamic shared memory per tile kind.
constexpr int tile_bytes(TileKind k) {
  return k == TileKind::kF32    ? kTile * kTile * 4
         : k == TileKind::kBF16 ? kTile * kTile * 2
                                : kTile * kTile + kTile * (kTile / 16) * 4;  // code bytes + block multipliers
}

// FP32 tile: float index of element (r, c). A row is 32 chunks of 16 bytes; chunk k sits at
// k ^ ((k >> 2) & 7), so phase 1's row-wise 16-byte stores (8 lanes, one 16-element block each) and
// phase 2's column-wise 4-byte loads (32 consecutive columns) both touch 32 distinct banks.
__device__ __forceinline__ int tile_index(int r, int c) {
  const int k = c >> 2;
  return r * kTile + ((k ^ ((k >> 2) & 7)) << 2) + (c & 3);
}

__device__ __forceinline__ void store_tile16(float* tile, int r, int c, const float (&v)[16]) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
    *reinterpret_cast<float4*>(tile + tile_index(r, c + 4 * q)) =
        make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

// Codes tile: one byte per element ([128][128], row-major), then the block multipliers transposed,
// mult[c / 16][r], so a thread walking down a column reads 16 consecutive multipliers as float4s.
// mult is e4m3(scale) * s_out (block128) or e4m3(scale) (tensor: S_dec is applied after), exactly the
// factors of nvfp4_decode_block128 / nvfp4_decode_tensor.
__device__ __forceinline__ float* codes_mult(uint8_t* smem) {
  return reinterpret_cast<float*>(smem + kTile * kTile);
}

// 16 packed nibbles (low nibble first) -> 16 bytes in element order.
__device__ __forceinline__ uint4 nibbles_to_bytes(uint2 packed) {
  const uint32_t lo0 = packed.x & 0x0F0F0F0Fu, hi0 = (packed.x >> 4) & 0x0F0F0F0Fu;
  const uint32_t lo1 = packed.y & 0x0F0F0F0Fu, hi1 = (packed.y >> 4) & 0x0F0F0F0Fu;
  return make_uint4(__byte_perm(lo0, hi0, 0x5140), __byte_perm(lo0, hi0, 0x7362),
                    __byte_perm(lo1, hi1, 0x5140), __byte_perm(lo1, hi1, 0x7362));
}

// Column block: tile rows r0 .. r0 + 15 of tile column cl, as FP32 values of the column operand's source.
template <TileKind K>
__device__ __forceinline__ void load_col16(const uint8_t* smem, int r0, int cl, bool block128, float s_dec,
                                           float (&v)[16]) {
  if constexpr (K == TileKind::kF32) {
    const float* tile = reinterpret_cast<const float*>(smem);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = tile[tile_index(r0 + i, cl)];
  } else if constexpr (K == TileKind::kBF16) {
    const uint16_t* tile = reinterpret_cast<const uint16_t*>(smem);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = bits_float(static_cast<uint32_t>(tile[(r0 + i) * kTile + cl]) << 16);
  } else {
    const float4* m4 =
        reinterpret_cast<const float4*>(codes_mult(const_cast<uint8_t*>(smem)) + (cl >> 4) * kTile + r0);
    float m[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 f = m4[q];
      m[4 * q] = f.x, m[4 * q + 1] = f.y, m[4 * q + 2] = f.z, m[4 * q + 3] = f.w;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float q = e2m1_decode(smem[(r0 + i) * kTile + cl]);
      v[i] = block128 ? mul_rn(q, m[i]) : mul_rn(mul_rn(q, m[i]), s_dec);
    }
  }
}

using dual::DualArgs;

// Phase 1: thread = one 16-element block of 4 tile rows (rows s * 32 + warp * 4 + lane / 8); the 8 lanes
// of a row hold its 128 columns.
template <QuantIoType T, TileKind K, bool kAmaxOnly>
__device__ __forceinline__ void dual_rows(const DualArgs& a, uint8_t* smem, int64_t r0, int64_t c0, int nr,
                                          int nc) {
  float* tile = reinterpret_cast<float*>(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane & 7, cl = 16 * j;
  const bool quantize = !kAmaxOnly || a.aligned;  // an amax pre-pass of an original source only copies
  qk::Nvfp4Params p = a.pr;
  if (quantize && !p.block128) qk::load_tensor_scale(p, a.amax_r);

  // Loads are issued two blocks at a time.
  constexpr int kBatch = 2;  // 32 (FP32) or 16 (BF16) registers of raw data: room for three blocks per SM
  unsigned nonfinite = 0;
#pragma unroll
  for (int s0 = 0; s0 < kRowItems; s0 += kBatch) {
    Raw16<T> raw[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int rl = (s0 + b) * 32 + warp * 4 + (lane >> 3);
      if (rl < nr && cl < nc)
        qk::load_raw16<T>(a.x, (r0 + rl) * a.cols + c0 + cl, raw[b]);
      else
        qk::zero_raw16<T>(raw[b]);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int rl = (s0 + b) * 32 + warp * 4 + (lane >> 3);
      const bool active = rl < nr && cl < nc;
      float v[16];
      qk::convert16<T>(raw[b], v);
      if (!a.aligned) {
        if constexpr (K == TileKind::kBF16) {
          static_assert(K != TileKind::kBF16 || T == QuantIoType::kBF16, "a BF16 tile holds BF16 input");
          uint4* dst = reinterpret_cast<uint4*>(smem + 2 * (rl * kTile + cl));
          dst[0] = raw[b].w[0];
          dst[1] = raw[b].w[1];
        } else {
          store_tile16(tile, rl, cl, v);
        }
      }
      if (!quantize) continue;
      if (a.rht_r > 0) qk::rht_block16(v, a.signs_r, a.rht_r, c0 + cl);
      bool bad = false;
      const float amax16 = amax_finite16(v, bad);
      if (bad) nonfinite += qk::count_nonfinite16(v);
      const int64_t i0 = (r0 + rl) * a.cols + c0 + cl;
      uint8_t scale;
      float outer;
      const uint2 codes = qk::quantize_block16(p, v, amax16, bad, static_cast<uint64_t>(i0), scale, outer);
      if (!kAmaxOnly && active) {
        *reinterpret_cast<uint2*>(a.out_r.codes + i0 / 2) = codes;
        a.out_r.scales[i0 / 16] = scale;
        if (p.block128 && j == 0) a.out_r.outer[i0 / 128] = outer;
        if (a.dq != nullptr) {
          float d[16];
          qk::decode16(codes, scale, outer, p.block128, a.dq_apply, d);
          if (a.dq_bf16)
            qk::store16<QuantIoType::kBF16>(a.dq, i0, d);
          else
            qk::store16<QuantIoType::kF32>(a.dq, i0, d);
        }
      }
      if (a.aligned) {
        if constexpr (K == TileKind::kCodes) {
          *reinterpret_cast<uint4*>(smem + rl * kTile + cl) =
              active ? nibbles_to_bytes(codes) : make_uint4(0, 0, 0, 0);
          const float s_b = e4m3_decode(scale);
          codes_mult(smem)[j * kTile + rl] = active ? (p.block128 ? s_b * outer : s_b) : 0.0f;
        } else {
          float d[16];
          qk::decode16(codes, scale, outer, p.block128, true, d);
          if (!active) {
#pragma unroll
            for (int i = 0; i < 16; ++i) d[i] = 0.0f;
          }
          store_tile16(tile, rl, cl, d);
        }
      }
    }
  }
  if constexpr (!kAmaxOnly) {
    if (a.nonfinite_r != nullptr) qk::warp_count_add(nonfinite, a.nonfinite_r);
    if (!p.block128 && blockIdx.x == 0 && threadIdx.x == 0) a.out_r.outer[0] = p.ts.s_dec;
  }
}

// RHT butterflies between two blocks of one thread: lo holds x[j], hi holds x[j + h].
__device__ __forceinline__ void butterfly_blocks(float (&lo)[16], float (&hi)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float a = lo[i], b = hi[i];
    lo[i] = add_rn(a, b);
    hi[i] = add_rn(a, -b);
  }
}

// FP32 tile only: block k (16 consecutive tile rows from hh * 64 + 16 k) of tile column cl.
__device__ __forceinline__ void load_f32_col16(const float* tile, int hh, int k, int cl, float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = tile[tile_index(hh * 64 + 16 * k + i, cl)];
}

__device__ __forceinline__ void store_f32_col16(float* tile, int hh, int k, int cl, const float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) tile[tile_index(hh * 64 + 16 * k + i, cl)] = v[i];
}

// RHT of T's rows (the tile's columns) in place in an FP32 tile, for segments of n = 32, 64 or 128 rows:
// butterflies inside each 16-block, then between this thread's blocks, then (n = 128) between the two
// halves of the column, which other warps hold. Each column is touched only by its two threads.
__device__ __forceinline__ void rht_cols_wide(float* tile, const RhtSigns& signs, int n, int64_t r0, int hh,
                                              int cl) {
  float w[4][16];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    load_f32_col16(tile, hh, k, cl, w[k]);
    qk::rht_local16(w[k], qk::rht_sign_bits16(signs, static_cast<int>((r0 + hh * 64 + 16 * k) & (n - 1))));
  }
  butterfly_blocks(w[0], w[1]);
  butterfly_blocks(w[2], w[3]);
  if (n >= 64) {
    butterfly_blocks(w[0], w[2]);
    butterfly_blocks(w[1], w[3]);
  }
  if (n >= 128) {
#pragma unroll
    for (int k = 0; k < 4; ++k) store_f32_col16(tile, hh, k, cl, w[k]);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float other = tile[tile_index((1 - hh) * 64 + 16 * k + i, cl)];
        w[k][i] = hh == 0 ? add_rn(w[k][i], other) : add_rn(other, -w[k][i]);
      }
    __syncthreads();  // both halves have read their partner before anything is written back
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    qk::rht_scale16(w[k], n);
    store_f32_col16(tile, hh, k, cl, w[k]);
  }
}

// Column block k of this thread, transformed: read from the tile and, for n == 16, the RHT16 (wider
// segments were transformed in place before). Called twice per block (measure, then encode): recomputing
// the few additions is cheaper than holding 64 values or writing them back.
template <TileKind K>
__device__ __forceinline__ void column_block(const uint8_t* smem, const DualArgs& a, float s_dec_rows, int hh,
                                             int k, int cl, float (&v)[16]) {
  load_col16<K>(smem, hh * 64 + 16 * k, cl, a.pr.block128, s_dec_rows, v);
  if (a.rht_c == 16) {
    qk::rht_local16(v, qk::rht_sign_bits16(a.signs_c, 0));
    qk::rht_scale16(v, 16);
  }
}

// Phase 2: thread = tile column cl (a row of T), tile rows hh * 64 .. hh * 64 + 63 as 4 blocks of 16.
template <TileKind K, bool kAmaxOnly>
__device__ __forceinline__ void dual_cols(const DualArgs& a, uint8_t* smem, int64_t r0, int64_t c0, int nr,
                                          int nc) {
  __shared__ float half_amax[2][kTile];
  __shared__ uint32_t warp_max[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hh = warp >> 2, cl = (warp & 3) * 32 + lane;
  const int n = a.rht_c;
  if constexpr (K == TileKind::kF32) {
    if (n > 16) rht_cols_wide(reinterpret_cast<float*>(smem), a.signs_c, n, r0, hh, cl);
  }
  // The codes tile of a tensor-scaled row operand is decoded with its S_dec.
  float s_dec_rows = 1.0f;
  if (K == TileKind::kCodes && !a.pr.block128)
    s_dec_rows = nvfp4_tensor_scale(*a.amax_r, a.pr.four_over_six, a.pr.target).s_dec;

  float amax16[4];
  bool bad[4];
  float m = 0.0f;
  unsigned nonfinite = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float v[16];
    column_block<K>(smem, a, s_dec_rows, hh, k, cl, v);
    bad[k] = false;
    amax16[k] = amax_finite16(v, bad[k]);  // blocks outside the tensor hold zeros
    m = max_f(m, amax16[k]);
    if (bad[k]) nonfinite += qk::count_nonfinite16(v);
  }

  if constexpr (kAmaxOnly) {
    qk::block_max_to<kThreads>(float_bits(m), warp_max, a.amax_c_out);
  } else {
    qk::Nvfp4Params p = a.pc;
    if (!p.block128) qk::load_tensor_scale(p, a.amax_c);
    float outer = p.ts.s_dec;
    if (p.block128) {  // T's 128-block = both halves of this column
      half_amax[hh][cl] = m;
      __syncthreads();
      outer = nvfp4_block128_outer(max_f(half_amax[0][cl], half_amax[1][cl]), p.four_over_six, p.target);
    }
    const int64_t trow = c0 + cl;
    const bool col_active = cl < nc;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float v[16];
      column_block<K>(smem, a, s_dec_rows, hh, k, cl, v);
      const uint8_t scale = p.block128 ? qk::scale_block128_16(p, v, amax16[k], outer, bad[k])
                                       : qk::scale_tensor16(p, v, amax16[k], bad[k]);
      const int64_t i0 = trow * a.rows + r0 + hh * 64 + 16 * k;
      const uint2 codes = qk::encode16(p, v, scale, outer, static_cast<uint64_t>(i0));
      if (col_active && hh * 64 + 16 * k < nr) {
        *reinterpret_cast<uint2*>(a.out_c.codes + i0 / 2) = codes;
        a.out_c.scales[i0 / 16] = scale;
      }
    }
    if (p.block128 && hh == 0 && col_active) a.out_c.outer[(trow * a.rows + r0) / 128] = outer;
    if (a.nonfinite_c != nullptr) qk::warp_count_add(nonfinite, a.nonfinite_c);
    if (!p.block128 && blockIdx.x == 0 && threadIdx.x == 0) a.out_c.outer[0] = p.ts.s_dec;
  }
}

// Blocks per SM the register budget is set for: the FP32 tile (64 KB) allows two, the others three.
constexpr int min_blocks(TileKind k) {
  return k == TileKind::kF32 ? 2 : 3;
}

// Tiles are ordered down the rows first, so neighbouring blocks fill neighbouring bytes of T's rows.
template <QuantIoType T, TileKind K, bool kAmaxOnly>
__global__ void __launch_bounds__(kThreads, min_blocks(K)) quantize_dual_kernel(DualArgs a) {
  extern __shared__ float4 dual_smem[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(dual_smem);
  const int64_t row_tiles = qk::ceil_div(a.rows, kTile);
  const int64_t r0 = (blockIdx.x % row_tiles) * kTile, c0 = (blockIdx.x / row_tiles) * kTile;
  const int nr = static_cast<int>(a.rows - r0 < kTile ? a.rows - r0 : kTile);
  const int nc = static_cast<int>(a.cols - c0 < kTile ? a.cols - c0 : kTile);
  dual_rows<T, K, kAmaxOnly>(a, smem, r0, c0, nr, nc);
  __syncthreads();
  dual_cols<K, kAmaxOnly>(a, smem, r0, c0, nr, nc);
}

template <QuantIoType T, TileKind K, bool kAmaxOnly>
void launch_dual(const DualArgs& a, unsigned grid, cudaStream_t stream) {
  auto kernel = quantize_dual_kernel<T, K, kAmaxOnly>;
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tile_bytes(K)));
  kernel<<<grid, kThreads, tile_bytes(K), stream>>>(a);
  FP4_CUDA_CHECK_LAUNCH("quantize_dual_kernel");
}

// The tile kind: codes for an aligned source, the input itself for an original one (BF16 when the input
// is BF16), FP32 whenever the column RHT is wider than 16 (it transforms in place).
template <bool kAmaxOnly>
void launch_general(const DeviceInput& x, const DualArgs& a, cudaStream_t stream) {
  const unsigned grid = dual::tile_grid(x.rows, x.cols, kTile);
  const bool wide = a.rht_c > 16;
  if (x.dtype == QuantIoType::kF32) {
    if (a.aligned && !wide)
      launch_dual<QuantIoType::kF32, TileKind::kCodes, kAmaxOnly>(a, grid, stream);
    else
      launch_dual<QuantIoType::kF32, TileKind::kF32, kAmaxOnly>(a, grid, stream);
  } else {
    if (wide)
      launch_dual<QuantIoType::kBF16, TileKind::kF32, kAmaxOnly>(a, grid, stream);
    else if (a.aligned)
      launch_dual<QuantIoType::kBF16, TileKind::kCodes, kAmaxOnly>(a, grid, stream);
    else
      launch_dual<QuantIoType::kBF16, TileKind::kBF16, kAmaxOnly>(a, grid, stream);
  }
}

}  // namespace fp4::dual_general
