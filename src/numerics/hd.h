// Helpers for code compiled by both g++ and nvcc: one numerics source of truth (DESIGN.md principle 1).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP4_HD __host__ __device__ __forceinline__
#else
#define FP4_HD inline
#endif

// Loop unrolling hint for nvcc; g++ decides by itself.
#if defined(__CUDACC__)
#define FP4_UNROLL _Pragma("unroll")
#else
#define FP4_UNROLL
#endif

namespace fp4 {

// Bit casts that work in device code too (std::bit_cast is not usable in nvcc device code everywhere).
FP4_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

FP4_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Multiplication and addition that the compiler may never fuse into an FMA: nvcc contracts a*b+c by
// default, which would change bits against the CPU reference.
FP4_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FP4_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// a * b + c with one rounding (no intermediate rounding of the product).
FP4_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

FP4_HD float abs_f(float x) {
  return bits_float(float_bits(x) & 0x7FFFFFFFu);
}
// |x| where the result is only multiplied (a NaN's payload does not matter): on the GPU fabsf, which the
// multiplication takes as an operand modifier, where abs_f's mask is an instruction of its own.
FP4_HD float abs_for_mul(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return abs_f(x);
#endif
}
FP4_HD bool is_finite_f(float x) {
  return (float_bits(x) & 0x7F800000u) != 0x7F800000u;
}
FP4_HD bool is_nan_f(float x) {
  return (float_bits(x) & 0x7FFFFFFFu) > 0x7F800000u;
}
// max that ignores NaN in b (a is the running maximum, never NaN)
FP4_HD float max_f(float a, float b) {
  return b > a ? b : a;
}
FP4_HD float min_f(float a, float b) {
  return b < a ? b : a;
}
// max of two non-NaN values: one FMNMX instruction on the GPU; equal to max_f whenever neither is NaN.
FP4_HD float max_nonnan(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return max_f(a, b);
#endif
}

inline constexpr float kFloatMax = 3.40282346638528859812e+38f;

}  // namespace fp4
