#include "tensor/tensor.h"

#include <algorithm>

#include "core/error.h"

namespace fp4 {

void Tensor::resize(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    FP4_CHECK(d >= 0, "tensor shape ", fp4::shape_string(shape), " has a negative dimension");
    n *= d;
  }
  shape_ = std::move(shape);
  data_.resize(static_cast<size_t>(n));
}

void Tensor::zero() {
  std::fill(data_.begin(), data_.end(), 0.0f);
}

int64_t Tensor::dim(int i) const {
  FP4_CHECK(i >= 0 && i < static_cast<int>(shape_.size()), "tensor of shape ", shape_string(), " has no dim ",
            i);
  return shape_[static_cast<size_t>(i)];
}

std::string Tensor::shape_string() const {
  return fp4::shape_string(shape_);
}

}  // namespace fp4
