// NVFP4 -> FP32 / BF16 (quantize.h's dequantize / dequantize_bf16): thread per 16-element block.
#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

constexpr int kThreads = 256;

template <QuantIoType T>
__global__ void __launch_bounds__(kThreads)
    dequantize_nvfp4_kernel(Nvfp4DeviceView q, int64_t nblocks, void* out, bool apply_tensor_scale) {
  const bool block128 = q.outer_mode == OuterScale::kBlock128;
  const float s_dec = block128 ? 0.0f : q.outer[0];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; b < nblocks; b += stride) {
    const uint2 codes = *reinterpret_cast<const uint2*>(q.codes + 8 * b);
    float v[16];
    qk::decode16(codes, q.scales[b], block128 ? q.outer[b / 8] : s_dec, block128, apply_tensor_scale, v);
    qk::store16<T>(out, 16 * b, v);
  }
}

}  // namespace

void dequantize_nvfp4_cuda(const Nvfp4DeviceView& q, const DequantOutput& out, cudaStream_t stream) {
  constexpr const char* kWhat = "dequantize_nvfp4_cuda";
  FP4_CHECK(q.rows > 0 && q.cols > 0 && q.cols % 16 == 0, kWhat, ": operand [", q.rows, " x ", q.cols,
            "] is not a valid NVFP4 shape (cols must be a positive multiple of 16)");
  FP4_CHECK(q.outer_mode != OuterScale::kBlock128 || q.cols % 128 == 0, kWhat, ": block128 operand [", q.rows,
            " x ", q.cols, "] needs cols to be a multiple of 128");
  qk::check_aligned(q.codes, 8, kWhat, "codes");
  qk::check_aligned(q.scales, 1, kWhat, "scales");
  qk::check_aligned(q.outer, 4, kWhat, "outer scales");
  FP4_CHECK(out.data != nullptr, kWhat, ": no output buffer");
  qk::check_dequant(out, kWhat);
  const int64_t nblocks = q.rows * q.cols / 16;
  const unsigned grid = qk::grid_for(nblocks, kThreads, 8);
  if (out.dtype == QuantIoType::kF32)
    dequantize_nvfp4_kernel<QuantIoType::kF32>
        <<<grid, kThreads, 0, stream>>>(q, nblocks, out.data, out.apply_tensor_scale);
  else
    dequantize_nvfp4_kernel<QuantIoType::kBF16>
        <<<grid, kThreads, 0, stream>>>(q, nblocks, out.data, out.apply_tensor_scale);
  FP4_CUDA_CHECK_LAUNCH("dequantize_nvfp4_kernel");
}

}  // namespace fp4
