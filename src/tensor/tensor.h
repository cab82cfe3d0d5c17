// Tensor: an owning FP32 host buffer with a row-major shape. Views into it are plain pointers:
// the CPU ops (src/ops/ops.h) take pointers and sizes, as in llm.c.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/shape_string.h"

namespace fp4 {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape) { resize(std::move(shape)); }

  // Sets the shape; the storage keeps its capacity when the tensor shrinks, so a buffer resized
  // between batch shapes is not reallocated each time. New elements are zero.
  void resize(std::vector<int64_t> shape);
  void zero();

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return data_; }
  std::span<const float> span() const { return data_; }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const;
  std::string shape_string() const;  // "[2, 3]"

 private:
  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

}  // namespace fp4
