// The compiled tile configurations of the attention kernels, for the entry points (which use the first
// configuration listed for each head size), the tests (which check every one) and the benchmark (which
// times every one, so one device run can compare them).
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "ops/cuda/attention/attention_bwd.cuh"
#include "ops/cuda/attention/attention_fwd.cuh"

namespace fp4::cuda::attn {

struct FwdVariant {
  const char* name;
  int head_dim;
  void (*launch)(const FwdParams&, cudaStream_t);
};

struct BwdVariant {
  const char* name;
  int head_dim;
  void (*launch)(const BwdArgs&, cudaStream_t);
  bool wgmma = false;  // needs an sm_90 device (Hopper warpgroup MMA)
};

// Whether the current device runs the wgmma kernels (compute capability 9.0: sm_90a code).
bool device_has_wgmma();  // defined in attention_bwd.cu

std::span<const FwdVariant> forward_variants();   // defined in attention_fwd.cu
std::span<const BwdVariant> backward_variants();  // defined in attention_bwd.cu

// The default configuration for head size D: the first one listed. Throws for an unsupported D. The
// backward skips wgmma configurations on a device without them, and when the environment variable
// FP4_ATTENTION_BWD is "mma" (the mma.sync kernel, kept as the fallback). Any other non-empty value of
// FP4_ATTENTION_BWD throws.
const FwdVariant& default_forward_variant(int D);
const BwdVariant& default_backward_variant(int D);

}  // namespace fp4::cuda::attn
