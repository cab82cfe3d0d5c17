// Tensor-level quantizers (RECIPES.md sections 2-4): packed containers and the CPU reference
// implementation. Each CUDA kernel in src/ops/cuda/ produces bit-identical packed output.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "numerics/hadamard.h"
#include "numerics/philox.h"
#include "numerics/quant_spec.h"

namespace fp4 {

// The random inputs of one quantizer call: SR bits and RHT signs (both from the counter-based RNG).
struct QuantRandomness {
  RngStream sr;    // element (r, c) of the (transformed) operand draws word r * cols + c
  RhtSigns signs;  // used when spec.rht_n > 0; signs.n must equal spec.rht_n
};

// An NVFP4 operand: rows x cols, quantized along cols (the GEMM reduction dimension).
struct Nvfp4Tensor {
  int64_t rows = 0, cols = 0;
  BlockShape block = BlockShape::k1x16;
  OuterScale outer = OuterScale::kTensor;
  std::vector<uint8_t> codes;       // rows * cols / 2; low nibble = even (first) element
  std::vector<uint8_t> scales;      // rows * cols / 16 E4M3 (16x16: each tile's scale on its 16 rows)
  std::vector<float> outer_scales;  // tensor: {S_dec}; block128: rows * cols / 128 s_out values
  float amax = 0.0f;                // tensor mode: the amax the scales came from
  uint64_t nonfinite = 0;           // NaN/Inf inputs seen; their blocks carry the E4M3 NaN scale

  uint8_t code(int64_t r, int64_t c) const {
    const uint8_t b = codes[(r * cols + c) >> 1];
    return (c & 1) ? (b >> 4) : (b & 0xF);
  }
  uint8_t scale(int64_t r, int64_t c) const { return scales[r * (cols / 16) + c / 16]; }
  float outer_scale(int64_t r, int64_t c) const {
    return outer == OuterScale::kTensor ? outer_scales[0] : outer_scales[r * (cols / 128) + c / 128];
  }
  // The value this operand stands for (FP32): (q * s) * S_dec or q * (s * s_out).
  float value(int64_t r, int64_t c) const;
  int64_t packed_bytes() const;  // codes + scales + outer scales
};

// Quantizes x [rows x cols] (row-major) along cols. RHT (spec.rht_n) is applied first to each rht_n
// segment of a row. Tensor mode uses `amax` when given (e.g. all-reduced across ranks), otherwise the
// amax of the (transformed) finite values. Throws fp4::Error on shapes the spec cannot take.
Nvfp4Tensor quantize_nvfp4(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec,
                           const QuantRandomness& rnd, std::optional<float> amax = std::nullopt);

// Dequantized FP32 / BF16 values. apply_tensor_scale = false gives q * s_b without S_dec (exact in BF16),
// the form a GEMM consumes with S_dec folded into alpha; it only matters for tensor outer scales.
void dequantize(const Nvfp4Tensor& q, float* out, bool apply_tensor_scale = true);
void dequantize_bf16(const Nvfp4Tensor& q, uint16_t* out, bool apply_tensor_scale = true);

// Amax (finite values) of x, optionally after the RHT of each segment: what tensor mode uses.
float amax_nvfp4_input(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec,
                       const QuantRandomness& rnd);

// Both GEMM operands of a tensor in one call (the fused backward-operand op of TetraJet-v2):
// `rows` = quantize(x) along cols with spec_rows; `cols` = quantize(T) along rows, where T is x^T
// (spec_cols.source == original) or dequant(rows)^T in FP32 (spec_cols.source == aligned).
struct DualQuant {
  Nvfp4Tensor rows;  // [rows x cols]
  Nvfp4Tensor cols;  // [cols x rows]
};
DualQuant quantize_dual(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec_rows,
                        const QuantRandomness& rnd_rows, const QuantSpec& spec_cols,
                        const QuantRandomness& rnd_cols);

// MXFP8: rows x cols along cols, one UE8M0 scale per 32 elements.
struct Mxfp8Tensor {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;   // E4M3, rows * cols
  std::vector<uint8_t> scales;  // UE8M0, rows * cols / 32
  uint64_t nonfinite = 0;
  float value(int64_t r, int64_t c) const;
};
Mxfp8Tensor quantize_mxfp8(const float* x, int64_t rows, int64_t cols);
void dequantize(const Mxfp8Tensor& q, float* out);

// Scale factors in cuBLASLt's block-scale layout for VEC16_UE4M3 / VEC32_UE8M0 operands: 128x4 tiles
// (128 rows x 4 scale columns), tiles row-major, inside a tile offset (r % 32) * 16 + (r / 32) * 4 + c.
// Input is [rows x scale_cols] row-major; output is padded to multiples of 128 rows and 4 columns (zeros).
std::vector<uint8_t> to_cublaslt_scale_layout(const uint8_t* scales, int64_t rows, int64_t scale_cols);
int64_t cublaslt_scale_offset(int64_t r, int64_t c, int64_t scale_cols);

// Throws fp4::Error naming `what` unless (rows, cols) can be quantized with spec.
void check_nvfp4_shape(int64_t rows, int64_t cols, const QuantSpec& spec, const char* what);

}  // namespace fp4
