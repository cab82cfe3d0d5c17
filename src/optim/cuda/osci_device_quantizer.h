// Q(w) of a tracked weight on the device: the CUDA NVFP4 quantizer with the weight's Q2 (its tensor amax
// first when the outer scale is per tensor), then the dequantizer, into an FP32 buffer. Bit for bit the
// host form's quantize_nvfp4 + dequantize (the CUDA quantizers match the CPU reference byte for byte).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "optim/osci_reset_backend.h"

namespace fp4::cuda {

class OsciDeviceQuantizer {
 public:
  // Scratch (packed codes, scales, outer scales) for the largest of `targets`; throws fp4::Error naming a
  // weight whose shape its Q2 cannot quantize.
  void reserve(const std::vector<OsciTarget>& targets);
  // q = Q(w) for weight t: w and q are [rows x cols] FP32 in device memory, q 16-byte aligned. Queued on
  // `stream`; the scratch is reused by the next call, in stream order.
  void run(const OsciTarget& t, const float* w, float* q, cudaStream_t stream);
  void release();

 private:
  int64_t max_numel_ = 0;
  DeviceBuffer<uint8_t> codes_, scales_;
  DeviceBuffer<float> outer_, amax_;
  DeviceBuffer<float> staged_;  // a copy of w when the master is not 16-byte aligned (the quantizer's need)
};

}  // namespace fp4::cuda
