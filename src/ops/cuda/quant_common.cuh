// Device building blocks of the quantization kernels: 16-element vector loads and stores, the RHT of
// 16-element blocks held by neighbouring lanes, warp reductions, SR words, and the per-block NVFP4 steps.
// The arithmetic itself is the __host__ __device__ code of src/numerics/, called exactly as the CPU
// reference (quantize_cpu.cpp) calls it, so results are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/hd.h"
#include "numerics/nvfp4_block.h"
#include "numerics/philox.h"
#include "ops/cuda/quantize_cuda.h"

namespace fp4::qk {

inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

// ------------------------------------------------------------------ loads and stores of 16 elements
// Raw 16-byte words of 16 elements (64 bytes of FP32 or 32 of BF16): loads are issued into these first
// and converted later, so several blocks' loads are in flight at once.
template <QuantIoType T>
struct Raw16 {
  uint4 w[T == QuantIoType::kF32 ? 4 : 2];
};

// Element i0 (a multiple of 16) onwards; the base pointer is 16-byte aligned, so these are 16-byte accesses.
template <QuantIoType T>
__device__ __forceinline__ void load_raw16(const void* base, int64_t i0, Raw16<T>& r) {
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(base) +
                                                  i0 * (T == QuantIoType::kF32 ? 4 : 2));
#pragma unroll
  for (int q = 0; q < (T == QuantIoType::kF32 ? 4 : 2); ++q) r.w[q] = p[q];
}

template <QuantIoType T>
__device__ __forceinline__ void zero_raw16(Raw16<T>& r) {
#pragma unroll
  for (int q = 0; q < (T == QuantIoType::kF32 ? 4 : 2); ++q) r.w[q] = make_uint4(0, 0, 0, 0);
}

template <QuantIoType T>
__device__ __forceinline__ void convert16(const Raw16<T>& r, float (&v)[16]) {
#pragma unroll
  for (int q = 0; q < (T == QuantIoType::kF32 ? 4 : 2); ++q) {
    const uint32_t w[4] = {r.w[q].x, r.w[q].y, r.w[q].z, r.w[q].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (T == QuantIoType::kF32) {
        v[4 * q + k] = bits_float(w[k]);
      } else {  // little endian: the low half is the earlier element
        v[8 * q + 2 * k] = bits_float(w[k] << 16);
        v[8 * q + 2 * k + 1] = bits_float(w[k] & 0xFFFF0000u);
      }
    }
  }
}

template <QuantIoType T>
__device__ __forceinline__ void load16(const void* base, int64_t i0, float (&v)[16]) {
  Raw16<T> r;
  load_raw16<T>(base, i0, r);
  convert16<T>(r, v);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(bf16_bits_rne(lo)) | (static_cast<uint32_t>(bf16_bits_rne(hi)) << 16);
}

// 16 values at element i0 (a multiple of 16) as FP32 or BF16 (round to nearest even), in 16-byte stores.
template <QuantIoType T>
__device__ __forceinline__ void store16(void* base, int64_t i0, const float (&v)[16]) {
  if constexpr (T == QuantIoType::kF32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + i0);
#pragma unroll
    for (int q = 0; q < 4; ++q) p[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  } else {
    uint4* p = reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + i0);
#pragma unroll
    for (int q = 0; q < 2; ++q)
      p[q] = make_uint4(pack_bf16x2(v[8 * q], v[8 * q + 1]), pack_bf16x2(v[8 * q + 2], v[8 * q + 3]),
                        pack_bf16x2(v[8 * q + 4], v[8 * q + 5]), pack_bf16x2(v[8 * q + 6], v[8 * q + 7]));
  }
}

// ------------------------------------------------------------------ RHT on 16-element blocks
// The RHT of an n-element segment (hadamard.h's rht_segment<n>) when its n/16 blocks sit in n/16 lanes
// whose lane index differs in the low bits (lane ^ 1, ^ 2, ^ 4): signs, butterflies h = 1..8 inside a
// lane, butterflies h = 16, 32, 64 across lanes, then the 1/sqrt(n) scaling. Each stage pairs the same
// elements with the same operations as the CPU loop, so the bits agree.

// Sign bits of the 16 elements at position p0 (a multiple of 16) of the segment.
// (The mask word is picked by selects: a run-time index into the kernel parameter would copy it to local
// memory.)
__device__ __forceinline__ uint32_t rht_sign_bits16(const RhtSigns& s, int p0) {
  const int w = p0 >> 5;
  const uint32_t word = w == 0 ? s.mask[0] : w == 1 ? s.mask[1] : w == 2 ? s.mask[2] : s.mask[3];
  return (word >> (p0 & 31)) & 0xFFFFu;
}

// Butterflies at distance H inside the block: (x[j], x[j + H]) -> (x[j] + x[j + H], x[j] - x[j + H]).
template <int H>
__device__ __forceinline__ void butterfly16(float (&v)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    if ((j & H) == 0) {
      const float a = v[j], b = v[j + H];
      v[j] = add_rn(a, b);
      v[j + H] = add_rn(a, -b);
    }
  }
}

__device__ __forceinline__ void rht_local16(float (&v)[16], uint32_t neg) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = bits_float(float_bits(v[i]) ^ (((neg >> i) & 1u) << 31));  // -x: sign flip
  butterfly16<1>(v);
  butterfly16<2>(v);
  butterfly16<4>(v);
  butterfly16<8>(v);
}

// One butterfly stage with the block in lane ^ lane_xor. `upper`: this block holds the x[j + h] side.
__device__ __forceinline__ void rht_cross_lanes(float (&v)[16], int lane_xor, bool upper) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float other = __shfl_xor_sync(kFullMask, v[i], lane_xor);
    v[i] = upper ? add_rn(other, -v[i]) : add_rn(v[i], other);
  }
}

__device__ __forceinline__ void rht_scale16(float (&v)[16], int n) {
  const float norm = rht_norm(n);
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = mul_rn(v[i], norm);
}

// Whole RHT of the block at column c0 (a multiple of 16) of its row (or any index congruent to it modulo
// n), for segment length n in {16, 32, 64, 128}; the blocks of one segment are in lanes lane ^ (1, 2, 4) with block index
// (c0 / 16) sharing those low bits. Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void rht_block16(float (&v)[16], const RhtSigns& signs, int n, int64_t c0) {
  const int p0 = static_cast<int>(c0 & (n - 1));  // n is a power of two
  rht_local16(v, rht_sign_bits16(signs, p0));
  const int blk = p0 >> 4;  // block position inside the segment
#pragma unroll
  for (int d = 1; d < 8; d <<= 1)
    if (16 * d < n) rht_cross_lanes(v, d, (blk & d) != 0);
  rht_scale16(v, n);
}

// ------------------------------------------------------------------ reductions
// Max over the 8 lanes lane ^ (1, 2, 4) (one 128-element row segment).
__device__ __forceinline__ float max8_lanes(float v) {
#pragma unroll
  for (int d = 1; d < 8; d <<= 1) v = max_f(v, __shfl_xor_sync(kFullMask, v, d));
  return v;
}

__device__ __forceinline__ int count_nonfinite16(const float (&v)[16]) {
  int n = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) n += is_finite_f(v[i]) ? 0 : 1;
  return n;
}

// Adds the warp's total to *counter (if any lane saw something). All lanes must call it.
__device__ __forceinline__ void warp_count_add(unsigned count, unsigned long long* counter) {
  const unsigned total = __reduce_add_sync(kFullMask, count);
  if (counter != nullptr && total != 0 && (threadIdx.x & 31) == 0) atomicAdd(counter, static_cast<unsigned long long>(total));
}

// Max of non-negative finite floats as their bit patterns (same order), across the warp.
__device__ __forceinline__ uint32_t warp_max_bits(uint32_t bits) { return __reduce_max_sync(kFullMask, bits); }

// ------------------------------------------------------------------ NVFP4 block steps
// The uniform parameters of one quantizer launch.
struct Nvfp4Params {
  bool block128 = false;
  bool four_over_six = false;
  bool sr = false;
  float target = kNvfp4Target;
  TensorScale ts;     // tensor outer scale
  float amax = 0.0f;  // tensor amax (Four Over Six error measure)
  RngStream rng;
};

inline Nvfp4Params make_params(const QuantSpec& spec, const QuantRandomness& rnd) {
  Nvfp4Params p;
  p.block128 = spec.outer == OuterScale::kBlock128;
  p.four_over_six = spec.four_over_six == FourOverSix::kMse;
  p.sr = spec.rounding == Rounding::kSr;
  p.target = spec.sr_headroom ? kNvfp4HeadroomTarget : kNvfp4Target;
  p.rng = rnd.sr;
  return p;
}

// Tensor outer scale from the device amax (as quantize_tensor_outer does on the CPU).
__device__ __forceinline__ void load_tensor_scale(Nvfp4Params& p, const float* amax_device) {
  p.amax = *amax_device;
  p.ts = nvfp4_tensor_scale(p.amax, p.four_over_six, p.target);
}

// Inner scale of a 1x16 block with tensor outer scale (NaN code when the block has a non-finite value).
__device__ __forceinline__ uint8_t scale_tensor16(const Nvfp4Params& p, const float (&v)[16], float amax16, bool bad) {
  const uint8_t s = p.four_over_six ? nvfp4_scale_tensor_4o6(v, amax16, p.amax, p.ts)
                                    : nvfp4_scale_tensor(amax16, p.ts, p.target);
  return bad ? kE4m3Nan : s;
}

__device__ __forceinline__ uint8_t scale_block128_16(const Nvfp4Params& p, const float (&v)[16], float amax16,
                                                     float s_out, bool bad) {
  const uint8_t s = p.four_over_six ? nvfp4_scale_block128_4o6(v, amax16, s_out)
                                    : nvfp4_scale_block128(amax16, s_out, p.target);
  return bad ? kE4m3Nan : s;
}

// Packed codes (8 bytes, low nibble = even element) of a block, one rounding and outer-scale mode fixed at
// compile time so the element loop has no per-element selects. `mult` is e_b (tensor) or p (block128).
template <bool kBlock128, bool kSr>
__device__ __forceinline__ uint2 encode16_mode(const float (&v)[16], float mult, const RngStream& rng, uint64_t idx0) {
  const Block128Divisor divisor = kBlock128 ? block128_divisor(mult) : Block128Divisor{};  // once per block
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    Philox4 r{{0, 0, 0, 0}};
    if constexpr (kSr) r = philox_block(rng, (idx0 >> 2) + q);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = 4 * q + k;
      const uint8_t code = kBlock128 ? nvfp4_encode_block128(v[i], mult, divisor, kSr, r.v[k])
                                     : nvfp4_encode_tensor(v[i], mult, kSr, r.v[k]);
      w[i >> 3] |= static_cast<uint32_t>(code) << (4 * (i & 7));
    }
  }
  return make_uint2(w[0], w[1]);
}

// Codes of a block whose first element has operand index idx0 (a multiple of 4: SR words idx0 + i).
// Tensor outer scale: e_b from the rounded scale; block128: p = s_in * s_out.
__device__ __forceinline__ uint2 encode16(const Nvfp4Params& p, const float (&v)[16], uint8_t scale, float s_out,
                                         uint64_t idx0) {
  if (p.block128) {
    const float prod = e4m3_decode(scale) * s_out;
    return p.sr ? encode16_mode<true, true>(v, prod, p.rng, idx0) : encode16_mode<true, false>(v, prod, p.rng, idx0);
  }
  const float e_b = nvfp4_encode_multiplier(scale, p.ts.s_dec);
  return p.sr ? encode16_mode<false, true>(v, e_b, p.rng, idx0) : encode16_mode<false, false>(v, e_b, p.rng, idx0);
}

__device__ __forceinline__ uint8_t code_at(uint2 packed, int i) {
  return static_cast<uint8_t>(((i < 8 ? packed.x : packed.y) >> (4 * (i & 7))) & 0xFu);
}

// Scale, outer scale and packed codes of a 1x16 block (already transformed) whose 128-wide row segment
// sits in the 8 lanes lane ^ (1, 2, 4): as quantize_cpu.cpp's tensor / block128 loops. All lanes must call it.
__device__ __forceinline__ uint2 quantize_block16(const Nvfp4Params& p, const float (&v)[16], float amax16, bool bad,
                                                  uint64_t idx0, uint8_t& scale, float& outer) {
  if (p.block128) {
    outer = nvfp4_block128_outer(max8_lanes(amax16), p.four_over_six, p.target);
    scale = scale_block128_16(p, v, amax16, outer, bad);
  } else {
    outer = p.ts.s_dec;
    scale = scale_tensor16(p, v, amax16, bad);
  }
  return encode16(p, v, scale, outer, idx0);
}

// Dequantized values of a block, as Nvfp4Tensor::value / dequantize(..., apply_tensor_scale).
__device__ __forceinline__ void decode16(uint2 packed, uint8_t scale, float outer, bool block128,
                                         bool apply_tensor_scale, float (&out)[16]) {
  if (block128) {
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = nvfp4_decode_block128(code_at(packed, i), scale, outer);
  } else if (apply_tensor_scale) {
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = nvfp4_decode_tensor(code_at(packed, i), scale, outer);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = e2m1_decode(code_at(packed, i)) * e4m3_decode(scale);
  }
}

}  // namespace fp4::qk
