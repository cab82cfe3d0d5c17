// Warp-level building blocks of the attention kernels, as inline PTX (sm_80+ instructions, compiled for
// sm_90a): BF16 tensor-core mma.sync m16n8k16 with FP32 accumulation, ldmatrix shared->register fragment
// loads, cp.async global->shared copies, the ex2 approximation and BF16 packing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp4::cuda::attn {

// Fragments of one m16n8k16 product, in the register layout the PTX ISA defines. With lane = 4*g + t
// (g = lane / 4, t = lane % 4):
//   A (16x16, row-major):  x[0] = A[g][2t..2t+1],   x[1] = A[g+8][2t..2t+1],
//                          x[2] = A[g][2t+8..2t+9], x[3] = A[g+8][2t+8..2t+9]
//   B (16x8, k x n):       x[0] = B[2t..2t+1][g],   x[1] = B[2t+8..2t+9][g]
//   C (16x8, FP32):        x[0..1] = C[g][2t..2t+1], x[2..3] = C[g+8][2t..2t+1]
// Each 32-bit register holds two BF16, the lower column (or k) index in the low half.
struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
struct FragC {
  float x[4];
};

__device__ __forceinline__ void zero(FragC& c) {
  c.x[0] = c.x[1] = c.x[2] = c.x[3] = 0.f;
}

// c += a * b.
__device__ __forceinline__ void mma_bf16(FragC& c, const FragA& a, const FragB& b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 BF16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it
// (lane 4g+t gets row g, columns 2t, 2t+1). Volatile with a memory clobber: the shared memory it reads
// changes between loop iterations, so identical addresses must never be merged or hoisted.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// As ldmatrix_x4 but each 8x8 matrix transposed: lane 4g+t gets rows 2t, 2t+1 of column g.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// 16-byte asynchronous copy global -> shared; when !valid nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// 4-byte asynchronous copy global -> shared (through L1); when !valid nothing is read and a zero is written.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 2^x (MUFU approximation, about 2 ulp; ex2(-inf) = +0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to BF16 (nearest even) in one register, lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, sizeof(r));
  return r;
}

}  // namespace fp4::cuda::attn
