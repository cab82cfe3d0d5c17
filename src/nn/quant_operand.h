// One GEMM operand of a quantized linear layer on the CPU: quantized per its QuantSpec (kept packed) or
// kept dense in FP32, with the RHT applied either way when the spec asks for it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "numerics/quantize.h"

namespace fp4 {

class QuantOperand {
 public:
  QuantOperand() = default;
  // src [rows x cols], quantized/transformed along cols.
  QuantOperand(const float* src, int64_t rows, int64_t cols, const QuantSpec& spec,
               const QuantRandomness& rnd, const char* what);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool quantized() const { return packed_.has_value(); }
  const Nvfp4Tensor& packed() const { return *packed_; }
  uint64_t nonfinite() const { return packed_ ? packed_->nonfinite : 0; }

  // The values the GEMM multiplies (dequantized, or dense), FP32 [rows x cols].
  std::vector<float> values() const;
  // Bytes kept: packed codes+scales, or 4 bytes per element when dense.
  int64_t stored_bytes() const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  std::optional<Nvfp4Tensor> packed_;
  std::vector<float> dense_;
};

// x^T of x [rows x cols].
std::vector<float> transposed(const float* x, int64_t rows, int64_t cols);

}  // namespace fp4
