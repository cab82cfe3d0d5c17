// attention_forward: argument checks, the compiled tile configurations (wgmma on sm_90, mma.sync elsewhere
// or with FP4_ATTENTION_FWD=mma) and the default per head size.
#include <cstdlib>
#include <cstring>

#include "ops/cuda/attention/attention_args.cuh"
#include "ops/cuda/attention/attention_cuda.h"
#include "ops/cuda/attention/attention_fwd.cuh"
#include "ops/cuda/attention/attention_fwd_wgmma.cuh"
#include "ops/cuda/attention/attention_variants.cuh"

namespace fp4::cuda {
namespace attn {

// The wgmma kernels come first (the defaults on Hopper), kWgmmaVariants of them:
// <kD, kWarpgroups, kBlockN, kQInRegs, kMinBlocks>, 64 query rows per warpgroup, kBlockN keys per tile.
// D = 64 defaults to two warpgroups, 64-key tiles, Q in registers and two CTAs per SM (128 registers): on
// the H200 (B16 H8 T2048) 0.224 ms against 0.260 ms for three warpgroups with 128-key tiles and Q read from
// shared memory (168 registers, the most 384 threads get; with Q in registers too that form spills and
// serializes the wgmma, so it is not compiled) and 0.293 ms for three with 64-key tiles. D = 128 defaults to
// two warpgroups and 128-key tiles (O takes 64 registers: 234 with Q in shared memory, 252 with Q in
// registers).
// Then the mma.sync kernels, <kD, kSlices, kMinBlocks>: four warps of 16*kSlices query rows. D = 64 defaults
// to two slices (32 rows per warp): each K/V fragment loaded from shared memory feeds twice as many mma. The
// one-slice form needs about 135 registers, so three CTAs (12 warps) share an SM. For D = 128 one slice
// keeps the Q fragments, S and the O accumulator within the register budget (two slices spill).
constexpr int kWgmmaVariants = 5;
constexpr FwdVariant kFwdVariants[] = {
    {"fwd d64 wgmma rows128 keys64 (2 wg, Q regs, 2/SM)", 64,
     &launch_attention_forward_wgmma<64, 2, 64, true, 2>},
    {"fwd d128 wgmma rows128 keys128 (2 wg, Q smem)", 128,
     &launch_attention_forward_wgmma<128, 2, 128, false, 1>},
    {"fwd d64 wgmma rows192 keys128 (3 wg, Q smem)", 64,
     &launch_attention_forward_wgmma<64, 3, 128, false, 1>},
    {"fwd d128 wgmma rows128 keys128 (2 wg, Q regs)", 128,
     &launch_attention_forward_wgmma<128, 2, 128, true, 1>},
    {"fwd d64 wgmma rows192 keys64 (3 wg, Q regs)", 64, &launch_attention_forward_wgmma<64, 3, 64, true, 1>},
    {"fwd d64 rows128 (4 warps x 2 slices)", 64, &launch_attention_forward<64, 2, 1>},
    {"fwd d64 rows64 (4 warps x 1 slice, 3/SM)", 64, &launch_attention_forward<64, 1, 3>},
    {"fwd d128 rows64 (4 warps x 1 slice)", 128, &launch_attention_forward<128, 1, 1>},
};

std::span<const FwdVariant> forward_variants() {
  return kFwdVariants;
}

bool forward_variant_uses_wgmma(const FwdVariant& v) {
  for (int i = 0; i < kWgmmaVariants; ++i)
    if (v.launch == kFwdVariants[i].launch) return true;
  return false;
}

// The first configuration for D that the device runs: wgmma ones only on sm_90 and unless the environment
// variable FP4_ATTENTION_FWD is "mma" (the mma.sync kernel, kept as the fallback); other values are errors.
const FwdVariant& default_forward_variant(int D) {
  const char* choice = std::getenv("FP4_ATTENTION_FWD");
  const bool chosen = choice != nullptr && choice[0] != '\0';
  const bool mma_only = chosen && std::strcmp(choice, "mma") == 0;
  FP4_CHECK(!chosen || mma_only, "attention_forward: FP4_ATTENTION_FWD=", choice, " is not mma (or unset)");
  const bool wgmma_ok = !mma_only && device_has_wgmma();
  for (const FwdVariant& v : kFwdVariants)
    if (v.head_dim == D && (wgmma_ok || !forward_variant_uses_wgmma(v))) return v;
  FP4_THROW("attention_forward: head size D=", D, " is not supported (64 or 128)");
}

}  // namespace attn

void attention_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int ld_qkv,
                       __nv_bfloat16* out, int ld_out, float* lse, int B, int T, int H, int D, float scale,
                       cudaStream_t stream) {
  constexpr const char* kWhat = "attention_forward";
  attn::check_shape(kWhat, B, T, H, D, scale);
  attn::check_matrix(kWhat, "q", q, ld_qkv, H, D);
  attn::check_matrix(kWhat, "k", k, ld_qkv, H, D);
  attn::check_matrix(kWhat, "v", v, ld_qkv, H, D);
  attn::check_matrix(kWhat, "out", out, ld_out, H, D);
  attn::check_pointer(kWhat, "lse", lse);
  const attn::FwdParams p{q, k, v, ld_qkv, out, ld_out, lse, B, T, H, scale * attn::kLog2e};
  attn::default_forward_variant(D).launch(p, stream);
}

void attention_forward_device_scale(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                    int ld_qkv, __nv_bfloat16* out, int ld_out, float* lse, int B, int T,
                                    int H, int D, const float* scale_log2_device, cudaStream_t stream) {
  constexpr const char* kWhat = "attention_forward_device_scale";
  attn::check_shape(kWhat, B, T, H, D, 1.f);
  attn::check_matrix(kWhat, "q", q, ld_qkv, H, D);
  attn::check_matrix(kWhat, "k", k, ld_qkv, H, D);
  attn::check_matrix(kWhat, "v", v, ld_qkv, H, D);
  attn::check_matrix(kWhat, "out", out, ld_out, H, D);
  attn::check_pointer(kWhat, "lse", lse);
  FP4_CHECK(scale_log2_device != nullptr, kWhat, ": scale_log2_device is a null pointer");
  attn::FwdParams p{q, k, v, ld_qkv, out, ld_out, lse, B, T, H, 0.f};
  p.scale_log2_device = scale_log2_device;
  attn::default_forward_variant(D).launch(p, stream);
}

}  // namespace fp4::cuda
