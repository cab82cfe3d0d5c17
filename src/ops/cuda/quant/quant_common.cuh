// Device building blocks of the quantization kernels: 16-element vector loads and stores, the RHT of
// 16-element blocks held by neighbouring lanes, warp reductions, SR words, and the per-block NVFP4 steps.
// The arithmetic itself is the __host__ __device__ code of src/numerics/, called exactly as the CPU
// reference (quantize_cpu.cpp) calls it, so results are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/const_div.h"
#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/hd.h"
#include "numerics/nvfp4_block.h"
#include "numerics/philox.h"
#include "ops/cuda/quant/quantize_cuda.h"

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
  const uint4* p =
      reinterpret_cast<const uint4*>(static_cast<const char*>(base) + i0 * (T == QuantIoType::kF32 ? 4 : 2));
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

// The butterflies h = 1..8 of one block, after its signs.
__device__ __forceinline__ void rht_butterflies16(float (&v)[16]) {
  butterfly16<1>(v);
  butterfly16<2>(v);
  butterfly16<4>(v);
  butterfly16<8>(v);
}

__device__ __forceinline__ void rht_local16(float (&v)[16], uint32_t neg) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    v[i] = bits_float(float_bits(v[i]) ^ (((neg >> i) & 1u) << 31));  // -x: sign flip
  rht_butterflies16(v);
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

// The RHT16 of a block whose signs are already applied: the butterflies, then the 1/4 scaling.
__device__ __forceinline__ void rht16_presigned(float (&v)[16]) {
  rht_butterflies16(v);
  rht_scale16(v, 16);
}

// The 16 values of raw words with the RHT16 signs applied as xor words (hadamard.h's rht16_sign_words: every
// block of an RHT16 operand starts its segment, so one set serves all blocks; one xor per input word from
// the kernel parameters instead of a shift and an xor per element), then the butterflies and the 1/4
// scaling: rht_block16(v, signs, 16, c0) of the converted words, bit for bit.
template <QuantIoType T>
__device__ __forceinline__ void convert16_rht16(const Raw16<T>& raw, const Rht16SignWords& sw,
                                                float (&v)[16]) {
  Raw16<T> x;
#pragma unroll
  for (int q = 0; q < (T == QuantIoType::kF32 ? 4 : 2); ++q)
    x.w[q] = make_uint4(raw.w[q].x ^ sw.w[4 * q], raw.w[q].y ^ sw.w[4 * q + 1], raw.w[q].z ^ sw.w[4 * q + 2],
                        raw.w[q].w ^ sw.w[4 * q + 3]);
  convert16<T>(x, v);
  rht16_presigned(v);
}

// Whole RHT of the block at column c0 (a multiple of 16) of its row (or any index congruent to it modulo
// n), for segment length n in {16, 32, 64, 128}; the blocks of one segment are in lanes lane ^ (1, 2, 4) with
// block index (c0 / 16) sharing those low bits. Every lane of the warp must call it (shuffles).
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
// Max over the 8 lanes lane ^ (1, 2, 4) (one 128-element row segment) of non-NaN values (finite amaxes).
__device__ __forceinline__ float max8_lanes(float v) {
#pragma unroll
  for (int d = 1; d < 8; d <<= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, d));
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
  if (counter != nullptr && total != 0 && (threadIdx.x & 31) == 0)
    atomicAdd(counter, static_cast<unsigned long long>(total));
}

// Max of non-negative finite floats as their bit patterns (same order), across the warp.
__device__ __forceinline__ uint32_t warp_max_bits(uint32_t bits) {
  return __reduce_max_sync(kFullMask, bits);
}

// The block's maximum of non-negative float bits (every thread passes its own) into *out by one atomicMax
// (non-negative floats order as their bits; *out is zeroed by the caller). scratch holds a word per warp.
// Contains a barrier: every thread of the block must call it.
template <int kBlockThreads>
__device__ __forceinline__ void block_max_to(uint32_t bits, uint32_t* scratch, float* out) {
  const uint32_t wm = warp_max_bits(bits);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = wm;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < kBlockThreads / 32; ++i) m = max(m, scratch[i]);
    atomicMax(reinterpret_cast<unsigned int*>(out), m);
  }
}

// ------------------------------------------------------------------ fast block codec
// The bits of nvfp4_block.h's scale and element functions in fewer instructions (the quantizers were
// bound by instruction issue, not by memory). Each function states why it equals the reference; the
// parity tests (tests/cuda/quant_nvfp4_test.cpp) check them against the CPU reference.

// E4M3 code of x >= 0 (inf allowed, not NaN), as e4m3_encode: magic = 1.5 * 2^20 * max(binade, 2^-6) has
// the E4M3 step of x's binade (2^-9 below 2^-6) as its ulp and an even multiple of it, so (x + magic) -
// magic is x rounded to nearest even on the E4M3 grid; a sum that overflows is NaN, and fminf turns it,
// like everything at or above 448, into 448. Grid values times 2^-120 hold the code in bits 20 and up.
__device__ __forceinline__ uint32_t e4m3_code_nonneg(float x) {
  const float binade = fmaxf(__uint_as_float(__float_as_uint(x) & 0x7F800000u), 0.015625f);
  const float magic = __fmul_rn(binade, 1572864.0f);
  const float r = fminf(__fadd_rn(__fadd_rn(x, magic), -magic), kE4m3Max);
  return __float_as_uint(__fmul_rn(r, 7.5231638452626401e-37f)) >> 20;  // * 2^-120
}

// e4m3_decode for every code but the NaN 0x7F: the bits code << 20 are the value times 2^-120.
__device__ __forceinline__ float e4m3_value(uint32_t code) {
  return __fmul_rn(__uint_as_float(code << 20), 1.329227995784916e+36f);  // * 2^120
}

// e2m1_rtn_index(a) << 22 for a >= 0 or NaN: clamping to 6 first (NaN and everything above 6 have index
// 7 anyway) leaves nothing to saturate, and the rounded grid value times 2^-126 is index << 22 exactly.
__device__ __forceinline__ uint32_t e2m1_rtn_bits(float a) {
  const float c = fminf(a, kE2m1Max);
  const float magic = __fmul_rn(fmaxf(__uint_as_float(__float_as_uint(c) & 0x7F800000u), 1.0f), 6291456.0f);
  return __float_as_uint(__fmul_rn(__fadd_rn(__fadd_rn(c, magic), -magic), kTwoPowMinus126));
}

// e2m1_sr_index(a, random) in bits 22..24 (junk below) for a >= 0 or NaN: with c = min(a, 6) the bits of
// c * 2^-126 are index << 22 | frac (index 7 only at 6, frac 0), and adding 2^22 - 1 - u, u = random >> 10,
// carries into bit 22 exactly when u < frac (~random >> 10 is 2^22 - 1 - u).
__device__ __forceinline__ uint32_t e2m1_sr_bits(float a, uint32_t random) {
  const uint32_t s = __float_as_uint(__fmul_rn(fminf(a, kE2m1Max), kTwoPowMinus126));
  return s + (~random >> 10);
}

// prmt.b32: byte k of the result is byte sel[4k..4k+2] of {a, b}; with bit 4k+3 set, that byte's sign.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Nibbles 0x8 where the value is negative: two words a and b whose bytes are 0x00 or 0xFF for the even
// (a) and odd (b) elements of 8 become the sign bits of the packed codes.
__device__ __forceinline__ uint32_t sign_nibbles(uint32_t even, uint32_t odd) {
  return (even & 0x08080808u) | (odd & 0x80808080u);
}

// The sign nibbles of 8 FP32 values.
__device__ __forceinline__ uint32_t sign_nibbles8(const float* v) {
  uint32_t u[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) u[i] = __float_as_uint(v[i]);
  const uint32_t even = prmt(prmt(u[0], u[2], 0xFBu), prmt(u[4], u[6], 0xFBu), 0x5410u);
  const uint32_t odd = prmt(prmt(u[1], u[3], 0xFBu), prmt(u[5], u[7], 0xFBu), 0x5410u);
  return sign_nibbles(even, odd);
}

// The sign nibbles of the 8 BF16 values in words w0..w3 (sign bits 15 and 31 of each word).
__device__ __forceinline__ uint32_t sign_nibbles_bf16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  const uint32_t lo = prmt(w0, w1, 0x7531u), hi = prmt(w2, w3, 0x7531u);  // sign bytes of elements 0-3, 4-7
  return sign_nibbles(prmt(lo, hi, 0xECA8u), prmt(lo, hi, 0xFDB9u));
}

// max(a, |b|) where a NaN or inf anywhere makes the result NaN or inf (max.NaN propagates NaN).
__device__ __forceinline__ float max_abs_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(fabsf(b)));
  return d;
}

// amax_finite16 for 16 FP32 values: a tree of NaN-propagating maxima, and the reference loop only when
// the result says the block holds a NaN or inf.
__device__ __forceinline__ float amax16_of(const float (&v)[16], bool& bad) {
  float m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) m[i] = max_abs_nan(fabsf(v[2 * i]), v[2 * i + 1]);
#pragma unroll
  for (int h = 4; h >= 1; h >>= 1)
#pragma unroll
    for (int i = 0; i < h; ++i) m[i] = max_abs_nan(m[i], m[i + h]);
  if (m[0] < INFINITY) return m[0];
  return amax_finite16(v, bad);
}

// The same for 16 BF16 values in their raw words (v: their FP32 values, for the rare non-finite block):
// max.NaN.xorsign.abs compares magnitudes two at a time and keeps a NaN; the result's signs are dropped.
__device__ __forceinline__ float amax16_bf16(const uint4 (&w)[2], const float (&v)[16], bool& bad) {
  uint32_t m[8] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
#pragma unroll
  for (int h = 4; h >= 1; h >>= 1)
#pragma unroll
    for (int i = 0; i < h; ++i)
      asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(m[i]) : "r"(m[i]), "r"(m[i + h]));
  const uint32_t mag = m[0] & 0x7FFF7FFFu;
  const uint32_t bits = max(mag << 16, mag & 0xFFFF0000u);
  if (bits < 0x7F800000u) return __uint_as_float(bits);
  return amax_finite16(v, bad);
}

// Adds element i's E2M1 index to its nibble of w (the sign nibbles are already there). bits: the index in
// bits 22..24, zeros below for RTN, left-over fraction bits below for SR (shifted out first).
template <bool kSr>
__device__ __forceinline__ void add_index(uint32_t (&w)[2], int i, uint32_t bits) {
  const int n = i & 7;
  if constexpr (kSr)
    w[i >> 3] += (bits >> 22) << (4 * n);
  else
    w[i >> 3] += n <= 5 ? bits >> (22 - 4 * n) : bits << (4 * n - 22);
}

// Packed codes (low nibble = even element) of 16 values: E2M1 of RN(|v| * mult), mult = e_b (tensor) or
// the block128 encode multiplier e, RTN or SR (philox_sr_word of element idx0 + i), with `signs` (sign
// nibbles) or'ed in. A nibble's index is added where its bits land (shift-and-add).
template <bool kSr>
__device__ __forceinline__ uint2 encode16_fast(const float (&v)[16], float mult, uint2 signs,
                                               const RngStream& rng, uint64_t idx0) {
  uint32_t w[2] = {signs.x, signs.y};
  Philox4 r[2] = {{{0, 0, 0, 0}}, {{0, 0, 0, 0}}};
  if constexpr (kSr) r[0] = philox_block(rng, idx0 >> 3), r[1] = philox_block(rng, (idx0 >> 3) + 1);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float a = __fmul_rn(fabsf(v[i]), mult);
    add_index<kSr>(w, i, kSr ? e2m1_sr_bits(a, sr16_word(r[i >> 3], i)) : e2m1_rtn_bits(a));
  }
  return make_uint2(w[0], w[1]);
}

// encode16_fast's block128 codes for a block that block128_direct admits (a normal scale code: every
// |v| * e stays below 6.4, so RTN needs no saturation), SR words from philox_block32: the caller has checked
// that SR operands have fewer than 2^34 elements; ctr0 = idx0 / 4, the 16 elements' SR words are those of
// Philox blocks ctr0 / 2 and ctr0 / 2 + 1 (16-bit decisions, numerics/philox.h).
template <bool kSr>
__device__ __forceinline__ uint2 encode16_direct(const float (&v)[16], float e, uint2 signs,
                                                 const PhiloxStream32& rng, uint32_t ctr0) {
  uint32_t w[2] = {signs.x, signs.y};
  Philox4 r[2] = {{{0, 0, 0, 0}}, {{0, 0, 0, 0}}};
  if constexpr (kSr) r[0] = philox_block32(rng, ctr0 >> 1), r[1] = philox_block32(rng, (ctr0 >> 1) + 1);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float a = __fmul_rn(fabsf(v[i]), e);
    add_index<kSr>(w, i, kSr ? e2m1_sr_bits(a, sr16_word(r[i >> 3], i)) : e2m1_rtn_bits_below7(a));
  }
  return make_uint2(w[0], w[1]);
}

// ------------------------------------------------------------------ NVFP4 block steps
// The uniform parameters of one quantizer launch.
struct Nvfp4Params {
  bool block128 = false;
  bool four_over_six = false;
  bool sr = false;
  float target = kNvfp4Target;
  float inv_target = 1.0f / kNvfp4Target;  // 1 / target, as nvfp4_scale_tensor forms it
  TensorScale ts;                          // tensor outer scale
  float amax = 0.0f;                       // tensor amax (Four Over Six error measure)
  RngStream rng;
  PhiloxStream32 philox;  // rng's per-stream Philox work, for kernels whose SR blocks stay below 2^32
  Block128Divisors div;   // the block128 scale steps' constant divisors (block128_outer_fast, _scale_fast)
};

inline Nvfp4Params make_params(const QuantSpec& spec, const QuantRandomness& rnd) {
  Nvfp4Params p;
  p.block128 = spec.outer == OuterScale::kBlock128;
  p.four_over_six = spec.four_over_six == FourOverSix::kMse;
  p.sr = spec.rounding == Rounding::kSr;
  p.target = spec.sr_headroom ? kNvfp4HeadroomTarget : kNvfp4Target;
  p.inv_target = 1.0f / p.target;
  p.rng = rnd.sr;
  p.philox = philox_stream32(rnd.sr);
  p.div = make_block128_divisors(p.four_over_six, p.target);
  return p;
}

// ------------------------------------------------------------------ block128 steps without divisions
// The scales and codes of block128 blocks, bit for bit those of nvfp4_block.h, with constant divisions
// (const_div.h) for the scales and the reciprocal quotient on p itself for the elements. Each falls back to
// the reference form where its exactness argument does not reach (tiny amaxes, divisors outside 2^+-64).

// nvfp4_block128_outer(amax128, four_over_six, target) for a finite amax128.
__device__ __forceinline__ float block128_outer_fast(float amax128, const Nvfp4Params& p) {
  return nvfp4_block128_outer_cd(amax128, p.div, p.four_over_six, p.target);
}

// nvfp4_scale_block128(amax16, outer, target) for a finite block (e4m3_code_nonneg: the fast encoder).
__device__ __forceinline__ uint8_t block128_scale_fast(float amax16, float outer, const Nvfp4Params& p) {
  const float t = nvfp4_block128_inner_quotient_cd(amax16, outer, p.div);
  return t == 0.0f ? uint8_t{0x01} : static_cast<uint8_t>(e4m3_code_nonneg(t));
}

// Whether a block with scale code `scale` and p = s_in * s_out takes encode16_direct: a normal E4M3 scale
// (s_in >= t * 15/16, so every quotient is below 6.4 and RTN needs no saturation) and p in [2^-64, 2^64]
// (the range the direct path was measured on). A NaN p (non-finite block) fails the range test.
__device__ __forceinline__ bool block128_direct(uint8_t scale, float prod) {
  return scale >= 0x08 && block128_direct_ok(prod);
}

// The block128 scale steps of an ordinary block, without any of the general steps' fallbacks, and whether
// the block is ordinary: finite values, amax128 >= 2^-80 (block128_outer_fast's constant divisions without
// its fallback; s_out > 0, so never the 0 -> 1 rule), amax16 / s_out >= 2^-90 (the constant division by the
// target without its IEEE fallback; t > 0, so never code 0x01), and what block128_direct asks. Then scale,
// outer and prod equal those of block128_outer_fast, block128_scale_fast and the product the kernels form,
// bit for bit; for any other block they are meaningless. No Four Over Six (its scale search is not here).
struct Block128Ordinary {
  float outer, prod;
  uint8_t scale;
  bool ok;
};

__device__ __forceinline__ Block128Ordinary block128_ordinary(float amax16, float amax128, bool bad,
                                                              const Nvfp4Params& p) {
  Block128Ordinary o;
  o.outer = const_div_rn(const_div_rn(amax128, p.div.bound), p.div.outer_target);
  const float x = amax16 / o.outer;
  o.scale = static_cast<uint8_t>(e4m3_code_nonneg(const_div_rn(x, p.div.target)));
  o.prod = __fmul_rn(e4m3_value(o.scale), o.outer);
  o.ok = !bad && amax128 >= kOuterConstDivMin && x >= kConstDivMinExact && block128_direct(o.scale, o.prod);
  return o;
}

// Tensor outer scale from the device amax (as quantize_tensor_outer does on the CPU).
__device__ __forceinline__ void load_tensor_scale(Nvfp4Params& p, const float* amax_device) {
  p.amax = *amax_device;
  p.ts = nvfp4_tensor_scale(p.amax, p.four_over_six, p.target);
}

// Inner scale of a 1x16 block with tensor outer scale (NaN code when the block has a non-finite value).
__device__ __forceinline__ uint8_t scale_tensor16(const Nvfp4Params& p, const float (&v)[16], float amax16,
                                                  bool bad) {
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
__device__ __forceinline__ uint2 encode16_mode(const float (&v)[16], float mult, const RngStream& rng,
                                               uint64_t idx0) {
  const float e = kBlock128 ? block128_encode_multiplier(mult) : mult;  // once per block
  uint32_t w[2] = {0, 0};
  Philox4 r[2] = {{{0, 0, 0, 0}}, {{0, 0, 0, 0}}};
  if constexpr (kSr) r[0] = philox_block(rng, idx0 >> 3), r[1] = philox_block(rng, (idx0 >> 3) + 1);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t random = sr16_word(r[i >> 3], i);
    const uint8_t code =
        kBlock128 ? nvfp4_encode_block128(v[i], e, kSr, random) : nvfp4_encode_tensor(v[i], e, kSr, random);
    w[i >> 3] |= static_cast<uint32_t>(code) << (4 * (i & 7));
  }
  return make_uint2(w[0], w[1]);
}

// Codes of a block whose first element has operand index idx0 (a multiple of 4: SR words idx0 + i).
// Tensor outer scale: e_b from the rounded scale; block128: p = s_in * s_out.
__device__ __forceinline__ uint2 encode16(const Nvfp4Params& p, const float (&v)[16], uint8_t scale,
                                          float s_out, uint64_t idx0) {
  if (p.block128) {
    const float prod = e4m3_decode(scale) * s_out;
    return p.sr ? encode16_mode<true, true>(v, prod, p.rng, idx0)
                : encode16_mode<true, false>(v, prod, p.rng, idx0);
  }
  const float e_b = nvfp4_encode_multiplier(scale, p.ts.s_dec);
  return p.sr ? encode16_mode<false, true>(v, e_b, p.rng, idx0)
              : encode16_mode<false, false>(v, e_b, p.rng, idx0);
}

__device__ __forceinline__ uint8_t code_at(uint2 packed, int i) {
  return static_cast<uint8_t>(((i < 8 ? packed.x : packed.y) >> (4 * (i & 7))) & 0xFu);
}

// Scale, outer scale and packed codes of a 1x16 block (already transformed) whose 128-wide row segment
// sits in the 8 lanes lane ^ (1, 2, 4): as quantize_cpu.cpp's tensor / block128 loops. All lanes must call
// it.
__device__ __forceinline__ uint2 quantize_block16(const Nvfp4Params& p, const float (&v)[16], float amax16,
                                                  bool bad, uint64_t idx0, uint8_t& scale, float& outer) {
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
