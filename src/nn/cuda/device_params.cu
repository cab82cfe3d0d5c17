#include "core/error.h"
#include "nn/cuda/device_params.h"
#include "ops/cuda/elementwise_cuda.h"

namespace fp4::cuda {

void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  FP4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  FP4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));  // `src` may be freed once we return
}

DeviceParams::DeviceParams(const ParameterSet& host, cudaStream_t stream)
    : numel_(host.numel()),
      stream_(stream),
      values_(static_cast<size_t>(host.numel())),
      grads_(static_cast<size_t>(host.numel())),
      values_bf16_(static_cast<size_t>(host.numel())) {
  for (int i = 0; i < host.size(); ++i) params_.push_back(host.at(i));
  write_all_values(host.values());
  zero_grads();
}

int DeviceParams::find(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].info.name == name) return static_cast<int>(i);
  return -1;
}

int DeviceParams::require(const std::string& name) const {
  const int i = find(name);
  FP4_CHECK(i >= 0, "unknown parameter '", name, "'");
  return i;
}

void DeviceParams::read_value(int i, std::span<float> out) const {
  const auto& p = at(i);
  FP4_CHECK(static_cast<int64_t>(out.size()) == p.info.numel(), "read_parameter ", p.info.name,
            ": buffer of ", out.size(), " floats, need ", p.info.numel());
  copy_to_host(out.data(), value(i), out.size_bytes(), stream_);
}

void DeviceParams::read_grad(int i, std::span<float> out) const {
  const auto& p = at(i);
  FP4_CHECK(static_cast<int64_t>(out.size()) == p.info.numel(), "read_gradient ", p.info.name, ": buffer of ",
            out.size(), " floats, need ", p.info.numel());
  copy_to_host(out.data(), grad(i), out.size_bytes(), stream_);
}

void DeviceParams::write_value(int i, std::span<const float> in) {
  const auto& p = at(i);
  FP4_CHECK(static_cast<int64_t>(in.size()) == p.info.numel(), "write_parameter ", p.info.name, ": ",
            in.size(), " floats given, need ", p.info.numel());
  copy_to_device(value(i), in.data(), in.size_bytes(), stream_);
  refresh_bf16(p.offset, p.info.numel());
}

void DeviceParams::write_all_values(std::span<const float> in) {
  FP4_CHECK(static_cast<int64_t>(in.size()) == numel_, "DeviceParams: ", in.size(), " values for ", numel_,
            " parameters");
  copy_to_device(values_.data(), in.data(), in.size_bytes(), stream_);
  refresh_bf16(0, numel_);
}

void DeviceParams::zero_grads() {
  if (numel_ > 0) FP4_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_));
}

void DeviceParams::refresh_bf16(int64_t offset, int64_t count) {
  f32_to_bf16(values_.data() + offset, values_bf16_.data() + offset, count, stream_);
}

}  // namespace fp4::cuda
