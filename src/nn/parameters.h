// ParameterSet: every trainable tensor of a model in one flat FP32 buffer, with a gradient buffer of
// the same layout. Layers hold pointers into it; the optimizer walks it tensor by tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/parameter_info.h"

namespace fp4 {

enum class ParamInit : uint8_t { kNormal, kOnes };  // kNormal: truncated normal of the model's init_std

struct Parameter {
  ParameterInfo info;
  ParamInit init = ParamInit::kNormal;
  int64_t offset = 0;  // in elements, into the flat buffers
};

class ParameterSet {
 public:
  // Registers a tensor; returns its index (its id for the init RNG). Only before allocate().
  int add(std::string name, std::vector<int64_t> shape, bool weight_decay, ParamInit init);
  // Sizes the value and gradient buffers (zeroed). Pointers from value()/grad() stay valid afterwards.
  void allocate();

  int size() const { return static_cast<int>(params_.size()); }
  const Parameter& at(int i) const { return params_[static_cast<size_t>(i)]; }
  int find(const std::string& name) const;     // -1 when absent
  int require(const std::string& name) const;  // throws fp4::Error naming the unknown parameter

  std::span<float> value(int i);
  std::span<const float> value(int i) const;
  std::span<float> grad(int i);
  std::span<const float> grad(int i) const;

  std::span<float> values() { return values_; }
  std::span<const float> values() const { return values_; }
  std::span<float> grads() { return grads_; }
  int64_t numel() const { return static_cast<int64_t>(values_.size()); }
  void zero_grads();

 private:
  std::vector<Parameter> params_;
  std::vector<float> values_;
  std::vector<float> grads_;
  bool allocated_ = false;
};

}  // namespace fp4
