// DeviceParams: the model's parameters on the GPU, in flat buffers with exactly the layout of the CPU
// ParameterSet they are built from (same names, order and offsets): FP32 master values, FP32 gradients
// and a BF16 copy of the values that the GEMMs read.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <span>
#include <string>
#include <vector>

#include "nn/parameters.h"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// Synchronous copies on `stream` (the engine's stream: ordered after the work queued on it).
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);

class DeviceParams {
 public:
  // Copies the layout and the values of `host`; the BF16 copy is made from them.
  DeviceParams(const ParameterSet& host, cudaStream_t stream);

  int size() const { return static_cast<int>(params_.size()); }
  const Parameter& at(int i) const { return params_[static_cast<size_t>(i)]; }
  int find(const std::string& name) const;     // -1 when absent
  int require(const std::string& name) const;  // throws fp4::Error naming the unknown parameter
  int64_t numel() const { return numel_; }

  float* value(int i) { return values_.data() + at(i).offset; }
  const float* value(int i) const { return values_.data() + at(i).offset; }
  const bf16* value_bf16(int i) const { return values_bf16_.data() + at(i).offset; }
  float* grad(int i) { return grads_.data() + at(i).offset; }
  const float* grad(int i) const { return grads_.data() + at(i).offset; }

  float* values() { return values_.data(); }
  bf16* values_bf16() { return values_bf16_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }

  // Host copies of one parameter (out/in hold its numel floats). write_value refreshes the BF16 copy.
  void read_value(int i, std::span<float> out) const;
  void read_grad(int i, std::span<float> out) const;
  void write_value(int i, std::span<const float> in);
  void write_all_values(std::span<const float> in);  // the whole flat buffer

  void zero_grads();  // queued on the stream

 private:
  void refresh_bf16(int64_t offset, int64_t count);

  std::vector<Parameter> params_;
  int64_t numel_ = 0;
  cudaStream_t stream_;
  DeviceBuffer<float> values_, grads_;
  DeviceBuffer<bf16> values_bf16_;
};

}  // namespace fp4::cuda
