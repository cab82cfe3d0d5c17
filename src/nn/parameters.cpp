#include "nn/parameters.h"

#include <algorithm>

#include "core/error.h"

namespace fp4 {

int ParameterSet::add(std::string name, std::vector<int64_t> shape, bool weight_decay, ParamInit init) {
  FP4_CHECK(!allocated_, "parameter ", name, " added after the parameter buffers were allocated");
  FP4_CHECK(find(name) < 0, "parameter ", name, " registered twice");
  Parameter p;
  p.info.name = std::move(name);
  p.info.shape = std::move(shape);
  p.info.weight_decay = weight_decay;
  p.init = init;
  p.offset = params_.empty() ? 0 : params_.back().offset + params_.back().info.numel();
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void ParameterSet::allocate() {
  const int64_t n = params_.empty() ? 0 : params_.back().offset + params_.back().info.numel();
  values_.assign(static_cast<size_t>(n), 0.0f);
  grads_.assign(static_cast<size_t>(n), 0.0f);
  allocated_ = true;
}

int ParameterSet::find(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].info.name == name) return static_cast<int>(i);
  return -1;
}

int ParameterSet::require(const std::string& name) const {
  const int i = find(name);
  FP4_CHECK(i >= 0, "unknown parameter '", name, "'");
  return i;
}

std::span<float> ParameterSet::value(int i) {
  const auto& p = at(i);
  return std::span<float>(values_).subspan(static_cast<size_t>(p.offset),
                                           static_cast<size_t>(p.info.numel()));
}

std::span<const float> ParameterSet::value(int i) const {
  const auto& p = at(i);
  return std::span<const float>(values_).subspan(static_cast<size_t>(p.offset),
                                                 static_cast<size_t>(p.info.numel()));
}

std::span<float> ParameterSet::grad(int i) {
  const auto& p = at(i);
  return std::span<float>(grads_).subspan(static_cast<size_t>(p.offset), static_cast<size_t>(p.info.numel()));
}

std::span<const float> ParameterSet::grad(int i) const {
  const auto& p = at(i);
  return std::span<const float>(grads_).subspan(static_cast<size_t>(p.offset),
                                                static_cast<size_t>(p.info.numel()));
}

void ParameterSet::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

}  // namespace fp4
