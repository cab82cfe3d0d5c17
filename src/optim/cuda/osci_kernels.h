// The elementwise kernels of OsciReset's device form (optim/cuda/osci_device_backend.h): one pass per step
// of a window, one at its end. FP32 through explicit round-to-nearest intrinsics (nvcc cannot contract
// them), so every value is the host form's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4::cuda {

// One weight's window state on the device: n tracked elements; tracked element j is w[index[j]], or
// w[j] when index is null (every element tracked).
struct OsciDeviceTrack {
  const uint32_t* index = nullptr;
  int64_t n = 0;
  float* prev_w = nullptr;
  float* prev_q = nullptr;
  float* dist_m = nullptr;
  float* dist_q = nullptr;
  unsigned long long* flips = nullptr;  // one counter: the window's flips so far
};

// Per tracked element, with w the weight and q = Q(w) (both full, row-major): dist_m += |w - prev_w|,
// dist_q += |q - prev_q|, *flips += 1 where q != prev_q, then prev_w = w, prev_q = q. The flips are summed
// per block and added with one integer atomic per block: exact in any order, so the host form's count.
void osci_accumulate_cuda(const OsciDeviceTrack& t, const float* w, const float* q, cudaStream_t stream);

// The chunks of kOsciRiskChunk tracked elements the reset reduces over (optim/osci_reset_backend.h).
int64_t osci_chunk_count(int64_t n);

// The window's end: R = dist_q / dist_m (0 unless dist_m > 0); w = prev_q where R >= threshold. Per chunk c:
// chunk_sums[c] = the sum of R over its elements in order (double), chunk_resets[c] = how many were reset.
void osci_reset_cuda(const OsciDeviceTrack& t, float* w, double threshold, double* chunk_sums,
                     uint32_t* chunk_resets, cudaStream_t stream);

}  // namespace fp4::cuda
