#include "nn/quant_operand.h"

#include "core/error.h"

namespace fp4 {

std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = x[r * cols + c];
  return t;
}

QuantOperand::QuantOperand(const float* src, int64_t rows, int64_t cols, const QuantSpec& spec,
                           const QuantRandomness& rnd, const char* what)
    : rows_(rows), cols_(cols) {
  if (spec.quantized()) {
    check_nvfp4_shape(rows, cols, spec, what);
    packed_ = quantize_nvfp4(src, rows, cols, spec, rnd);
    return;
  }
  dense_.assign(src, src + rows * cols);
  if (spec.rht_n > 0) {
    FP4_CHECK(cols % spec.rht_n == 0, what, ": RHT", spec.rht_n, " needs the reduction dimension (", cols,
              ") to be a multiple of ", spec.rht_n);
    for (int64_t i = 0; i < rows * cols; i += spec.rht_n)
      rht_segment_n(&dense_[static_cast<size_t>(i)], rnd.signs);
  }
}

std::vector<float> QuantOperand::values() const {
  if (!packed_) return dense_;
  std::vector<float> v(static_cast<size_t>(rows_ * cols_));
  dequantize(*packed_, v.data());
  return v;
}

int64_t QuantOperand::stored_bytes() const {
  return packed_ ? packed_->packed_bytes() : static_cast<int64_t>(dense_.size() * sizeof(float));
}

}  // namespace fp4
