// The fused backward-operand quantizer (quantize.h's quantize_dual) and its amax pre-pass: argument checks,
// and the choice between the specialized kernel of the recipes' operand pairs (quant_dual_fast.cuh) and the
// general kernel of every other mode (quant_dual_general.cuh).
#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_dual_amax.cuh"
#include "ops/cuda/quant/quant_dual_args.cuh"
#include "ops/cuda/quant/quant_dual_fast.cuh"
#include "ops/cuda/quant/quant_dual_general.h"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

using dual::DualArgs;

constexpr uint32_t kNoFastMode = ~0u;

// The mode bits of quant_dual_fast.cuh for this call, or kNoFastMode when the specialized kernel cannot take
// it (Four Over Six, RHT wider than 16, an FP32 original source, or an operand too large for 32-bit SR
// counters).
uint32_t fast_mode(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols) {
  const QuantSpec& r = rows.spec;
  const QuantSpec& c = cols.spec;
  const bool aligned = c.source == QuantSource::kAligned;
  if (r.four_over_six != FourOverSix::kOff || c.four_over_six != FourOverSix::kOff) return kNoFastMode;
  if (r.rht_n > 16 || c.rht_n > 16) return kNoFastMode;
  if (!aligned && x.dtype != QuantIoType::kBF16) return kNoFastMode;
  if (x.rows * x.cols >= (int64_t{1} << 34)) return kNoFastMode;
  uint32_t m = 0;
  if (x.dtype == QuantIoType::kF32) m |= dual::kF32In;
  if (aligned) m |= dual::kAlignedSrc;
  if (r.outer == OuterScale::kBlock128) m |= dual::kRowB128;
  if (r.rounding == Rounding::kSr) m |= dual::kRowSr;
  if (r.rht_n == 16) m |= dual::kRowRht;
  if (c.outer == OuterScale::kBlock128) m |= dual::kColB128;
  if (c.rounding == Rounding::kSr) m |= dual::kColSr;
  if (c.rht_n == 16) m |= dual::kColRht;
  return m;
}

template <uint32_t M>
void launch_fast(const DualArgs& a, unsigned grid, cudaStream_t stream) {
  auto kernel = dual::quantize_dual_fast_kernel<M>;
  FP4_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dual::fast_smem_bytes<M>()));
  kernel<<<grid, dual::kFastThreads, dual::fast_smem_bytes<M>(), stream>>>(a);
  FP4_CUDA_CHECK_LAUNCH("quantize_dual_fast_kernel");
}

// The operand pairs of the recipes get the specialized kernel: TetraJet-v2's X/X^T and W/W^T (block128
// RTN rows, aligned block128 SR RHT16 columns; BF16 and FP32 input) and dY/dY^T (block128 SR RHT16 both),
// NVIDIA's X/X^T (tensor RTN rows, tensor RTN RHT16 columns) and dY/dY^T (tensor SR, tensor SR RHT16).
constexpr uint32_t kTetraXt =
    dual::kAlignedSrc | dual::kRowB128 | dual::kColB128 | dual::kColSr | dual::kColRht;
constexpr uint32_t kTetraDy =
    dual::kRowB128 | dual::kRowSr | dual::kRowRht | dual::kColB128 | dual::kColSr | dual::kColRht;
constexpr uint32_t kNvidiaXt = dual::kColRht;
constexpr uint32_t kNvidiaDy = dual::kRowSr | dual::kColSr | dual::kColRht;

constexpr uint32_t kFastModes[] = {kTetraXt, kTetraXt | dual::kF32In, kTetraDy, kNvidiaXt, kNvidiaDy};

bool has_fast_kernel(uint32_t mode) {
  for (uint32_t m : kFastModes)
    if (m == mode) return true;
  return false;
}

bool try_launch_fast(uint32_t mode, const DualArgs& a, unsigned grid, cudaStream_t stream) {
  switch (mode) {
    case kTetraXt:
      launch_fast<kTetraXt>(a, grid, stream);
      return true;
    case kTetraXt | dual::kF32In:
      launch_fast<kTetraXt | dual::kF32In>(a, grid, stream);
      return true;
    case kTetraDy:
      launch_fast<kTetraDy>(a, grid, stream);
      return true;
    case kNvidiaXt:
      launch_fast<kNvidiaXt>(a, grid, stream);
      return true;
    case kNvidiaDy:
      launch_fast<kNvidiaDy>(a, grid, stream);
      return true;
    default:
      return false;
  }
}

// The specialized kernel when it takes the mode, the general one otherwise.
template <bool kAmaxOnly>
void launch_dual(const DeviceInput& x, const DualArgs& a, cudaStream_t stream, uint32_t fast = kNoFastMode) {
  if constexpr (kAmaxOnly) {
    dual::launch_general_amax(x, a, stream);
  } else {
    if (try_launch_fast(fast, a, dual::tile_grid(x.rows, x.cols, dual::kFastTile), stream)) return;
    dual::launch_general_quantize(x, a, stream);
  }
}

// Checks shared by the quantizer and its amax pre-pass.
void check_dual_specs(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                      const char* what) {
  qk::check_input(x, what);
  qk::check_nvfp4_spec(x.rows, x.cols, rows.spec, rows.rnd, what);
  qk::check_nvfp4_spec(x.cols, x.rows, cols.spec, cols.rnd, what);
  FP4_CHECK(rows.spec.block == BlockShape::k1x16 && cols.spec.block == BlockShape::k1x16, what,
            ": the fused dual quantizer takes 1x16 blocks only (a 16x16 operand quantizes W and W^T to the "
            "same values: quantize it once with quantize_nvfp4_cuda)");
}

DualArgs make_dual_args(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols) {
  DualArgs a{};
  a.x = x.data;
  a.rows = x.rows;
  a.cols = x.cols;
  a.pr = qk::make_params(rows.spec, rows.rnd);
  a.pc = qk::make_params(cols.spec, cols.rnd);
  a.rht_r = rows.spec.rht_n;
  a.rht_c = cols.spec.rht_n;
  a.signs_r = rows.rnd.signs;
  a.signs_c = cols.rnd.signs;
  a.aligned = cols.spec.source == QuantSource::kAligned;
  return a;
}

}  // namespace

void quantize_dual_cuda(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                        const DequantOutput& dequant_rows, cudaStream_t stream) {
  quantize_dual_cuda(x, rows, cols, dequant_rows, DequantOutput{}, stream);
}

void quantize_dual_cuda(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                        const DequantOutput& dequant_rows, const DequantOutput& dequant_cols,
                        cudaStream_t stream) {
  constexpr const char* kWhat = "quantize_dual_cuda";
  check_dual_specs(x, rows, cols, kWhat);
  qk::check_view(rows.out, x.rows, x.cols, rows.spec, "quantize_dual_cuda (row operand)");
  qk::check_view(cols.out, x.cols, x.rows, cols.spec, "quantize_dual_cuda (column operand)");
  qk::check_dequant(dequant_rows, kWhat);
  qk::check_dequant(dequant_cols, kWhat);
  if (rows.spec.outer == OuterScale::kTensor) qk::check_aligned(rows.amax, 4, kWhat, "row operand amax");
  if (cols.spec.outer == OuterScale::kTensor) qk::check_aligned(cols.amax, 4, kWhat, "column operand amax");
  if (rows.nonfinite != nullptr) qk::check_aligned(rows.nonfinite, 8, kWhat, "row non-finite counter");
  if (cols.nonfinite != nullptr) qk::check_aligned(cols.nonfinite, 8, kWhat, "column non-finite counter");

  DualArgs a = make_dual_args(x, rows, cols);
  a.amax_r = rows.amax;
  a.amax_c = cols.amax;
  a.out_r = rows.out;
  a.out_c = cols.out;
  a.nonfinite_r = rows.nonfinite;
  a.nonfinite_c = cols.nonfinite;
  a.dq = dequant_rows.data;
  a.dq_bf16 = dequant_rows.dtype == QuantIoType::kBF16;
  a.dq_apply = dequant_rows.apply_tensor_scale;
  const uint32_t fast = fast_mode(x, rows, cols);
  // The specialized kernel writes dequant(cols) from its registers; otherwise it is read back from the codes.
  const bool fused_cols = dequant_cols.data != nullptr && has_fast_kernel(fast);
  if (fused_cols) {
    a.dq_c = dequant_cols.data;
    a.dq_c_bf16 = dequant_cols.dtype == QuantIoType::kBF16;
    a.dq_c_apply = dequant_cols.apply_tensor_scale;
  }
  launch_dual<false>(x, a, stream, fast);
  if (dequant_cols.data != nullptr && !fused_cols) dequantize_nvfp4_cuda(cols.out, dequant_cols, stream);
}

void amax_dual_cuda(const DeviceInput& x, const DualOperand& rows, const DualOperand& cols,
                    float* amax_rows_device, float* amax_cols_device, cudaStream_t stream) {
  constexpr const char* kWhat = "amax_dual_cuda";
  check_dual_specs(x, rows, cols, kWhat);
  const bool rows_tensor = rows.spec.outer == OuterScale::kTensor;
  const bool cols_tensor = cols.spec.outer == OuterScale::kTensor;
  // NVIDIA's pairs (an original BF16 source, tensor-scaled columns with RHT16 or none, rows without RHT):
  // both maxima in one pass of the specialized kernel.
  const bool fast = x.dtype == QuantIoType::kBF16 && cols_tensor &&
                    cols.spec.source == QuantSource::kOriginal &&
                    (cols.spec.rht_n == 0 || cols.spec.rht_n == 16) && (!rows_tensor || rows.spec.rht_n == 0);
  if (fast) {
    qk::check_aligned(amax_cols_device, 4, kWhat, "column operand amax output");
    if (rows_tensor) qk::check_aligned(amax_rows_device, 4, kWhat, "row operand amax output");
    const unsigned grid = dual::tile_grid(x.rows, x.cols, dual::kFastTile);
    DualArgs a = make_dual_args(x, rows, cols);
    a.amax_c_out = amax_cols_device;
    float* amax_rows = rows_tensor ? amax_rows_device : nullptr;
    FP4_CUDA_CHECK(cudaMemsetAsync(amax_cols_device, 0, sizeof(float), stream));
    if (amax_rows != nullptr) FP4_CUDA_CHECK(cudaMemsetAsync(amax_rows, 0, sizeof(float), stream));
    if (cols.spec.rht_n == 16) {
      FP4_CUDA_CHECK(cudaFuncSetAttribute(dual::amax_dual_fast_kernel<true>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, dual::kAmaxTileBytes));
      dual::amax_dual_fast_kernel<true>
          <<<grid, dual::kFastThreads, dual::kAmaxTileBytes, stream>>>(a, amax_rows);
    } else {
      FP4_CUDA_CHECK(cudaFuncSetAttribute(dual::amax_dual_fast_kernel<false>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, dual::kAmaxTileBytes));
      dual::amax_dual_fast_kernel<false>
          <<<grid, dual::kFastThreads, dual::kAmaxTileBytes, stream>>>(a, amax_rows);
    }
    FP4_CUDA_CHECK_LAUNCH("amax_dual_fast_kernel");
    return;
  }
  if (rows_tensor) amax_nvfp4_cuda(x, rows.spec, rows.rnd, amax_rows_device, stream);
  if (!cols_tensor) return;
  qk::check_aligned(amax_cols_device, 4, kWhat, "column operand amax output");
  DualArgs a = make_dual_args(x, rows, cols);
  a.amax_r = amax_rows_device;  // read only when the aligned source needs the row quantization
  a.amax_c_out = amax_cols_device;
  FP4_CUDA_CHECK(cudaMemsetAsync(amax_cols_device, 0, sizeof(float), stream));
  launch_dual<true>(x, a, stream);
}

}  // namespace fp4
