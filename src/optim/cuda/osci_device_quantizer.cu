#include <algorithm>

#include "core/error.h"
#include "ops/cuda/quant/quantize_cuda.h"
#include "optim/cuda/osci_device_quantizer.h"

namespace fp4::cuda {

void OsciDeviceQuantizer::reserve(const std::vector<OsciTarget>& targets) {
  int64_t numel = 0, outer = 1;
  for (const OsciTarget& t : targets) {
    check_nvfp4_shape(t.rows, t.cols, t.q2, ("osci_reset: weight " + t.name).c_str());
    numel = std::max(numel, t.rows * t.cols);
    outer = std::max(outer, nvfp4_outer_count(t.rows, t.cols, t.q2.outer));
  }
  if (numel > max_numel_) {
    codes_ = DeviceBuffer<uint8_t>(static_cast<size_t>(numel / 2));
    scales_ = DeviceBuffer<uint8_t>(static_cast<size_t>(numel / 16));
    staged_ = DeviceBuffer<float>();
    max_numel_ = numel;
  }
  if (static_cast<int64_t>(outer_.size()) < outer) outer_ = DeviceBuffer<float>(static_cast<size_t>(outer));
  if (amax_.size() == 0) amax_ = DeviceBuffer<float>(1);
}

void OsciDeviceQuantizer::run(const OsciTarget& t, const float* w, float* q, cudaStream_t stream) {
  const int64_t n = t.rows * t.cols;
  FP4_CHECK(
      n <= max_numel_ && nvfp4_outer_count(t.rows, t.cols, t.q2.outer) <= static_cast<int64_t>(outer_.size()),
      "osci_reset: no quantizer scratch reserved for weight ", t.name, " [", t.rows, " x ", t.cols, "]");
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    if (staged_.size() == 0) staged_ = DeviceBuffer<float>(static_cast<size_t>(max_numel_));
    FP4_CUDA_CHECK(cudaMemcpyAsync(staged_.data(), w, static_cast<size_t>(n) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));
    w = staged_.data();
  }
  const DeviceInput x{w, QuantIoType::kF32, t.rows, t.cols};
  Nvfp4DeviceView view;
  view.codes = codes_.data();
  view.scales = scales_.data();
  view.outer = outer_.data();
  view.rows = t.rows;
  view.cols = t.cols;
  view.block = t.q2.block;
  view.outer_mode = t.q2.outer;
  const QuantRandomness rtn{};  // Q2 is RTN without an RHT (osci_targets checks it)
  const bool tensor = t.q2.outer == OuterScale::kTensor;
  if (tensor) amax_nvfp4_cuda(x, t.q2, rtn, amax_.data(), stream);
  quantize_nvfp4_cuda(x, t.q2, rtn, view, tensor ? amax_.data() : nullptr, nullptr, DequantOutput{}, stream);
  dequantize_nvfp4_cuda(view, DequantOutput{q, QuantIoType::kF32, true}, stream);
}

void OsciDeviceQuantizer::release() {
  max_numel_ = 0;
  codes_ = DeviceBuffer<uint8_t>();
  scales_ = DeviceBuffer<uint8_t>();
  outer_ = DeviceBuffer<float>();
  amax_ = DeviceBuffer<float>();
  staged_ = DeviceBuffer<float>();
}

}  // namespace fp4::cuda
