// attention_backward: argument checks, the workspace size, the compiled tile configurations and the
// default per head size.
#include <cstdlib>
#include <cstring>

#include "ops/cuda/attention/attention_args.cuh"
#include "ops/cuda/attention/attention_bwd.cuh"
#include "ops/cuda/attention/attention_bwd_wgmma_pipe.cuh"
#include "ops/cuda/attention/attention_cuda.h"
#include "ops/cuda/attention/attention_variants.cuh"

namespace fp4::cuda {
namespace attn {

bool device_has_wgmma() {
  int dev = 0, major = 0, minor = 0;
  FP4_CUDA_CHECK(cudaGetDevice(&dev));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;
}

// The pipelined wgmma kernels (attention_bwd_wgmma_pipe.cuh) come first, the defaults on Hopper: two
// warpgroups, 128 keys per CTA, 64-query steps. The mma.sync kernels follow, the defaults elsewhere.
// <kD, kWarps, kBlockM, kMinBlocks>: kWarps warps of 16 keys each, query steps of kBlockM rows, registers
// capped for kMinBlocks CTAs per SM. D = 64 defaults to 8 warps (128 keys per CTA): every Q/dO tile loaded
// and every dq atomic serves twice the keys of a 64-key CTA. D = 128 defaults to 4 warps with 32-query
// steps: dK and dV take 128 FP32 registers per thread, so S and dP must stay small (64-query steps spill).
constexpr BwdVariant kBwdVariants[] = {
    {"bwd d64 wgmma pipelined keys128 q64", 64, &launch_attention_backward_wgmma_pipe<64>, true},
    {"bwd d128 wgmma pipelined keys128 q64", 128, &launch_attention_backward_wgmma_pipe<128>, true},
    {"bwd d64 keys128 q64 (8 warps)", 64, &launch_attention_backward<64, 8, 64, 1>},
    {"bwd d64 keys64 q64 (4 warps, 2/SM)", 64, &launch_attention_backward<64, 4, 64, 2>},
    {"bwd d64 keys128 q32 (8 warps, 2/SM)", 64, &launch_attention_backward<64, 8, 32, 2>},
    {"bwd d128 keys64 q32 (4 warps, 2/SM)", 128, &launch_attention_backward<128, 4, 32, 2>},
    {"bwd d128 keys128 q32 (8 warps)", 128, &launch_attention_backward<128, 8, 32, 1>},
    {"bwd d128 keys64 q64 (4 warps)", 128, &launch_attention_backward<128, 4, 64, 1>},
};

std::span<const BwdVariant> backward_variants() {
  return kBwdVariants;
}

const BwdVariant& default_backward_variant(int D) {
  const char* choice = std::getenv("FP4_ATTENTION_BWD");
  const bool chosen = choice != nullptr && choice[0] != '\0';
  FP4_CHECK(!chosen || std::strcmp(choice, "mma") == 0, "attention_backward: FP4_ATTENTION_BWD=", choice,
            " is not mma (or unset)");
  const bool wgmma_ok = !chosen && device_has_wgmma();
  for (const BwdVariant& v : kBwdVariants)
    if (v.head_dim == D && (wgmma_ok || !v.wgmma)) return v;
  FP4_THROW("attention_backward: head size D=", D, " is not supported (64 or 128)");
}

}  // namespace attn

size_t attention_backward_workspace_bytes(int B, int T, int H, int D) {
  attn::check_shape("attention_backward_workspace_bytes", B, T, H, D, 1.f);
  return attn::bwd_workspace_bytes(B, T, H, D);
}

void attention_backward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int ld_qkv,
                        const __nv_bfloat16* out, const __nv_bfloat16* dout, int ld_out, const float* lse,
                        __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, int ld_dqkv, int B, int T,
                        int H, int D, float scale, void* workspace, cudaStream_t stream) {
  constexpr const char* kWhat = "attention_backward";
  attn::check_shape(kWhat, B, T, H, D, scale);
  attn::check_matrix(kWhat, "q", q, ld_qkv, H, D);
  attn::check_matrix(kWhat, "k", k, ld_qkv, H, D);
  attn::check_matrix(kWhat, "v", v, ld_qkv, H, D);
  attn::check_matrix(kWhat, "out", out, ld_out, H, D);
  attn::check_matrix(kWhat, "dout", dout, ld_out, H, D);
  attn::check_matrix(kWhat, "dq", dq, ld_dqkv, H, D);
  attn::check_matrix(kWhat, "dk", dk, ld_dqkv, H, D);
  attn::check_matrix(kWhat, "dv", dv, ld_dqkv, H, D);
  attn::check_pointer(kWhat, "lse", lse);
  attn::check_pointer(kWhat, "workspace", workspace);
  const attn::BwdArgs a = attn::make_bwd_args(q, k, v, ld_qkv, out, dout, ld_out, lse, dq, dk, dv, ld_dqkv, B,
                                              T, H, D, scale, workspace);
  attn::default_backward_variant(D).launch(a, stream);
}

}  // namespace fp4::cuda
