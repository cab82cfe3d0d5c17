// CUDA quantizers on device pointers: NVFP4 (1x16 / 16x16, tensor / block128 outer scales, RTN / SR,
// Four Over Six, RHT), the fused row + transposed-column quantizer of TetraJet-v2's backward operands,
// MXFP8, dequantization and the cuBLASLt scale layout. Every result is bit-identical to the CPU reference
// of src/numerics/quantize.h (both call the per-block functions of src/numerics/).
//
// Nothing here synchronizes the host: all work is queued on `stream`. Tensor-mode amax values stay on the
// device (amax_nvfp4_cuda writes them, the quantizers read them). Device pointers must be 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/quantize.h"
#include "ops/cuda/cuda_check.h"

namespace fp4 {

enum class QuantIoType : uint8_t { kF32, kBF16 };  // BF16 is stored as uint16_t bits

// A row-major [rows x cols] matrix in device memory.
struct DeviceInput {
  const void* data = nullptr;
  QuantIoType dtype = QuantIoType::kBF16;
  int64_t rows = 0, cols = 0;
};

// Device storage of an Nvfp4Tensor (quantize.h): same layout, byte for byte.
struct Nvfp4DeviceView {
  uint8_t* codes = nullptr;   // rows * cols / 2
  uint8_t* scales = nullptr;  // rows * cols / 16 E4M3
  float* outer = nullptr;     // tensor: 1 float (S_dec); block128: rows * cols / 128 (s_out)
  int64_t rows = 0, cols = 0;
  BlockShape block = BlockShape::k1x16;
  OuterScale outer_mode = OuterScale::kTensor;
};

// Optional dequantized output [rows x cols]; data == nullptr means none. apply_tensor_scale = false
// gives q * s_b without S_dec (as quantize.h's dequantize); it only matters for tensor outer scales.
struct DequantOutput {
  void* data = nullptr;
  QuantIoType dtype = QuantIoType::kBF16;
  bool apply_tensor_scale = true;
};

// Element counts of each part of an NVFP4 operand.
int64_t nvfp4_outer_count(int64_t rows, int64_t cols, OuterScale outer);

// Owning device storage of one NVFP4 operand, for callers that do not manage their own arenas.
class Nvfp4DeviceTensor {
 public:
  Nvfp4DeviceTensor(int64_t rows, int64_t cols, BlockShape block, OuterScale outer);
  Nvfp4DeviceView view();
  // Copy to the host form (for tests and checkpoints) with cudaMemcpy, which waits for the legacy default
  // stream only: synchronize a non-blocking producer stream first. `amax` is not stored here: it stays 0.
  Nvfp4Tensor download() const;

 private:
  int64_t rows_, cols_;
  BlockShape block_;
  OuterScale outer_;
  DeviceBuffer<uint8_t> codes_, scales_;
  DeviceBuffer<float> outer_scales_;
};

// amax (finite values) of x after spec's RHT (rnd.signs), written to *amax_device: quantize.h's
// amax_nvfp4_input. Tensor-mode quantizers read it from there.
void amax_nvfp4_cuda(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& rnd,
                     float* amax_device, cudaStream_t stream);

// quantize_nvfp4 (quantize.h) of x along cols into `out`. Tensor outer scales read the amax from
// amax_device (required then, ignored for block128). The count of non-finite transformed inputs is
// added to *nonfinite_device when it is not null (zero it first). Throws fp4::Error on shapes or
// specs the CPU reference rejects.
void quantize_nvfp4_cuda(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& rnd,
                         const Nvfp4DeviceView& out, const float* amax_device,
                         unsigned long long* nonfinite_device, const DequantOutput& dequant,
                         cudaStream_t stream);

// One operand of the fused dual quantizer.
struct DualOperand {
  QuantSpec spec;
  QuantRandomness rnd;
  Nvfp4DeviceView out;
  const float* amax = nullptr;              // device amax, required for tensor outer scales
  unsigned long long* nonfinite = nullptr;  // optional device counter (added to)
};

// quantize_dual (quantize.h) in one pass over x [rows x cols]: `rows` quantizes x along cols into a
// [rows x cols] operand; `cols` quantizes T = x^T (cols.spec.source original) or dequant(rows)^T
// (aligned) along rows into a [cols x rows] operand. Both use 1x16 blocks. dequant_rows optionally
// receives dequant(rows) [rows x cols].
void quantize_dual_cuda(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                        const DequantOutput& dequant_rows, cudaStream_t stream);
// The same, and dequant(cols) [cols x rows] into dequant_cols (when its data is set): for the recipes'
// operand pairs from the quantizer's registers in the same pass (no read-back of the codes), otherwise by
// a dequantize after it. The values are those of dequantize_nvfp4_cuda(cols.out) either way (a NaN may be
// another NaN).
void quantize_dual_cuda(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                        const DequantOutput& dequant_rows, const DequantOutput& dequant_cols,
                        cudaStream_t stream);

// The amax values the dual quantizer needs in tensor mode: *amax_rows_device (when rows.spec.outer is
// tensor) and *amax_cols_device (when cols.spec.outer is tensor: the amax of the transformed T, which for
// aligned sources depends on the row quantization, so this runs the dual pipeline without its stores).
// Pointers for block128 operands may be null. rows.amax / cols.amax are not read.
void amax_dual_cuda(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                    float* amax_rows_device, float* amax_cols_device, cudaStream_t stream);

// dequantize (quantize.h): q -> out [rows x cols] as FP32 or BF16.
void dequantize_nvfp4_cuda(const Nvfp4DeviceView& q, const DequantOutput& out, cudaStream_t stream);

// MXFP8 (quantize.h's Mxfp8Tensor layout).
struct Mxfp8DeviceView {
  uint8_t* codes = nullptr;   // rows * cols E4M3
  uint8_t* scales = nullptr;  // rows * cols / 32 UE8M0
  int64_t rows = 0, cols = 0;
};
void quantize_mxfp8_cuda(const DeviceInput& x, const Mxfp8DeviceView& out,
                         unsigned long long* nonfinite_device, cudaStream_t stream);
void dequantize_mxfp8_cuda(const Mxfp8DeviceView& q, void* out, QuantIoType dtype, cudaStream_t stream);
// MXFP8 of x^T along x's rows (quantize_mxfp8 of the transpose): `out` is [out.rows x out.cols] with
// out.rows <= x.cols (the first out.rows columns of x) and out.cols = x.rows rounded up to 32 (rows past
// x.rows are zeros). out.codes and out.scales may both be null when only the dequantized values are wanted;
// dequant (optional, [out.rows x out.cols]) receives them. One pass: no transposed copy is written.
void quantize_mxfp8_transposed_cuda(const DeviceInput& x, const Mxfp8DeviceView& out,
                                    const DequantOutput& dequant, unsigned long long* nonfinite_device,
                                    cudaStream_t stream);

// to_cublaslt_scale_layout (quantize.h) on the device: out holds cublaslt_scale_layout_bytes(rows,
// scale_cols) bytes, padding included (written as zeros).
int64_t cublaslt_scale_layout_bytes(int64_t rows, int64_t scale_cols);
void to_cublaslt_scale_layout_cuda(const uint8_t* scales, int64_t rows, int64_t scale_cols, uint8_t* out,
                                   cudaStream_t stream);

}  // namespace fp4
