// attention_forward: argument checks, the compiled tile configurations and the default per head size.
#include "ops/cuda/attention_args.cuh"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_fwd.cuh"
#include "ops/cuda/attention_variants.cuh"

namespace fp4::cuda {
namespace attn {

// <kD, kSlices, kMinBlocks>: four warps of 16*kSlices query rows. D = 64 defaults to two slices (32 rows
// per warp): each K/V fragment loaded from shared memory feeds twice as many mma. The one-slice form needs
// about 135 registers, so three CTAs (12 warps) share an SM. For D = 128 one slice keeps the Q fragments,
// S and the O accumulator within the register budget (two slices spill).
constexpr FwdVariant kFwdVariants[] = {
    {"fwd d64 rows128 (4 warps x 2 slices)", 64, &launch_attention_forward<64, 2, 1>},
    {"fwd d64 rows64 (4 warps x 1 slice, 3/SM)", 64, &launch_attention_forward<64, 1, 3>},
    {"fwd d128 rows64 (4 warps x 1 slice)", 128, &launch_attention_forward<128, 1, 1>},
};

std::span<const FwdVariant> forward_variants() { return kFwdVariants; }

const FwdVariant& default_forward_variant(int D) {
  for (const FwdVariant& v : kFwdVariants)
    if (v.head_dim == D) return v;
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

}  // namespace fp4::cuda
