// Hopper warpgroup tensor-core products (wgmma.mma_async, sm_90a) for the attention kernels: the shared-
// memory matrix descriptor of 128-byte-swizzled BF16 tiles (attention_swizzle.cuh), the fences and group
// waits, and the m64nNk16 BF16 x BF16 -> FP32 products with A from shared memory (SS) or registers (RS).
//
// Register layouts (PTX ISA, "wgmma register fragments"): warp w of the warpgroup owns rows 16w .. 16w+15
// of the 64-row result, and within a warp the accumulator of columns 8j .. 8j+7 is exactly the FragC of
// mma.m16n8k16, the A fragment of a k16 step exactly its FragA (attention_ptx.cuh). So the per-warp code
// of the mma.sync kernels (softmax, masks, accum_to_a) applies unchanged to wgmma results.
#pragma once

#include <cstdint>

#include "ops/cuda/attention/attention_ptx.cuh"

namespace fp4::cuda::attn {

// Descriptor of a 128B-swizzled operand (PTX ISA "matrix descriptor"): start address >> 4 in bits 0-13,
// leading byte offset >> 4 in bits 16-29, stride byte offset >> 4 in bits 32-45, base offset 0 (every tile
// is 1024-byte aligned, the swizzle is a function of the address bits), swizzle mode 1 = 128B in bits 62-63.
//  K-major operand (rows = M or N, the 16 k of a step contiguous): lbo unused, sbo = 1024 (8 rows of 128 B).
//  MN-major operand (rows = k, M or N contiguous): lbo = bytes between 64-column blocks, sbo = 1024.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

// Orders this thread's register writes before the wgmma that reads them as accumulator or A.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending of this warpgroup's committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the async proxy
// that wgmma reads shared memory through; a barrier must follow before another thread's wgmma.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The compiler sees a wgmma's accumulators as written when the asm issues; this empty volatile asm,
// placed after wgmma_wait, makes every later read of them depend on the wait.
template <int kN>
__device__ __forceinline__ void fence_accumulators(FragC (&c)[kN]) {
#pragma unroll
  for (int j = 0; j < kN; ++j)
    asm volatile("" : "+f"(c[j].x[0]), "+f"(c[j].x[1]), "+f"(c[j].x[2]), "+f"(c[j].x[3])::"memory");
}

#define FP4_WG_C(j) "+f"(d[j].x[0]), "+f"(d[j].x[1]), "+f"(d[j].x[2]), "+f"(d[j].x[3])
#define FP4_WG_C4(j) FP4_WG_C(j), FP4_WG_C(j + 1), FP4_WG_C(j + 2), FP4_WG_C(j + 3)

// d (64 x N) = A B (+ d when accumulate): A 64 x 16 and B 16 x N from descriptors; kTransA / kTransB = 1
// for MN-major operands. d[j] holds columns 8j .. 8j+7 of this warp's 16 rows.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n32(FragC (&d)[4], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
      : FP4_WG_C4(0)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB));
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n64(FragC (&d)[8], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : FP4_WG_C4(0), FP4_WG_C4(4)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB));
}

// A from registers (this warp's 16 rows of the k16 step, FragA layout); B from a descriptor.
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_n64(FragC (&d)[8], const FragA& a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, "
      "%38;\n}\n"
      : FP4_WG_C4(0), FP4_WG_C4(4)
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "l"(b), "r"(static_cast<int>(accumulate)),
        "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_n128(FragC (&d)[16], const FragA& a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, "
      "%70;\n}\n"
      : FP4_WG_C4(0), FP4_WG_C4(4), FP4_WG_C4(8), FP4_WG_C4(12)
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "l"(b), "r"(static_cast<int>(accumulate)),
        "n"(kTransB));
}

// SS with N = 128 (the forward's S = Q K^T over 128-key tiles with Q read from shared memory).
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n128(FragC (&d)[16], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : FP4_WG_C4(0), FP4_WG_C4(4), FP4_WG_C4(8), FP4_WG_C4(12)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB));
}

#undef FP4_WG_C4
#undef FP4_WG_C

// Dispatch on the accumulator width kN = 8 * (number of FragC): the products the kernels use.
template <int kTransA, int kTransB, int kFrags>
__device__ __forceinline__ void wgmma_ss(FragC (&d)[kFrags], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(kFrags == 4 || kFrags == 8, "compiled SS widths: n32, n64");
  if constexpr (kFrags == 4) {
    wgmma_ss_n32<kTransA, kTransB>(d, a, b, accumulate);
  } else {
    wgmma_ss_n64<kTransA, kTransB>(d, a, b, accumulate);
  }
}

template <int kTransB, int kFrags>
__device__ __forceinline__ void wgmma_rs(FragC (&d)[kFrags], const FragA& a, uint64_t b, bool accumulate) {
  static_assert(kFrags == 8 || kFrags == 16, "compiled RS widths: n64, n128");
  if constexpr (kFrags == 8) {
    wgmma_rs_n64<kTransB>(d, a, b, accumulate);
  } else {
    wgmma_rs_n128<kTransB>(d, a, b, accumulate);
  }
}

}  // namespace fp4::cuda::attn
