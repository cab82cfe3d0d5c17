// MXFP8 quantize / dequantize (quantize.h's quantize_mxfp8 / dequantize): thread per 32-element block.
#include "numerics/mxfp8.h"
#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

constexpr int kThreads = 256;

template <QuantIoType T>
__global__ void __launch_bounds__(kThreads)
    quantize_mxfp8_kernel(const void* x, int64_t nblocks, Mxfp8DeviceView q, unsigned long long* nonfinite) {
  unsigned bad_count = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  // Whole warps iterate together so the counter reduction below sees every lane.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads + (threadIdx.x & ~31); base < nblocks;
       base += stride) {
    const int64_t b = base + (threadIdx.x & 31);
    if (b >= nblocks) continue;
    float v[2][16];
    qk::load16<T>(x, 32 * b, v[0]);
    qk::load16<T>(x, 32 * b + 16, v[1]);
    float amax = 0.0f;
    bool bad = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      amax = max_f(amax, amax_finite16(v[h], bad));
      if (bad) bad_count += qk::count_nonfinite16(v[h]);
    }
    const uint8_t s = bad ? uint8_t{0xFF} : mxfp8_scale_code(amax);
    q.scales[b] = s;
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        word |= static_cast<uint32_t>(mxfp8_encode(v[k >> 2][(4 * k + e) & 15], s)) << (8 * e);
      w[k] = word;
    }
    uint4* dst = reinterpret_cast<uint4*>(q.codes + 32 * b);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
  if (nonfinite != nullptr) qk::warp_count_add(bad_count, nonfinite);
}

template <QuantIoType T>
__global__ void __launch_bounds__(kThreads)
    dequantize_mxfp8_kernel(Mxfp8DeviceView q, int64_t nblocks, void* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; b < nblocks; b += stride) {
    const uint4* src = reinterpret_cast<const uint4*>(q.codes + 32 * b);
    const uint4 lo = src[0], hi = src[1];
    const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const uint8_t s = q.scales[b];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * h + i;
        v[i] = mxfp8_decode(static_cast<uint8_t>(w[e >> 2] >> (8 * (e & 3))), s);
      }
      qk::store16<T>(out, 32 * b + 16 * h, v);
    }
  }
}

void check_mxfp8_view(const Mxfp8DeviceView& q, const char* what) {
  FP4_CHECK(q.rows > 0 && q.cols > 0 && q.cols % kMxfp8Block == 0, what,
            ": the reduction dimension must be a positive multiple of 32, got [", q.rows, " x ", q.cols, "]");
  qk::check_aligned(q.codes, 16, what, "codes");
  qk::check_aligned(q.scales, 1, what, "scales");
}

}  // namespace

void quantize_mxfp8_cuda(const DeviceInput& x, const Mxfp8DeviceView& out,
                         unsigned long long* nonfinite_device, cudaStream_t stream) {
  constexpr const char* kWhat = "quantize_mxfp8_cuda";
  FP4_CHECK(x.rows > 0 && x.cols > 0 && x.cols % kMxfp8Block == 0, kWhat,
            ": the reduction dimension must be a positive multiple of 32, got [", x.rows, " x ", x.cols, "]");
  qk::check_input(x, kWhat);
  check_mxfp8_view(out, kWhat);
  FP4_CHECK(out.rows == x.rows && out.cols == x.cols, kWhat, ": output view is [", out.rows, " x ", out.cols,
            "] but the input is [", x.rows, " x ", x.cols, "]");
  if (nonfinite_device != nullptr) qk::check_aligned(nonfinite_device, 8, kWhat, "non-finite counter");
  const int64_t nblocks = x.rows * x.cols / kMxfp8Block;
  const unsigned grid = qk::grid_for(nblocks, kThreads, 8);
  if (x.dtype == QuantIoType::kF32)
    quantize_mxfp8_kernel<QuantIoType::kF32>
        <<<grid, kThreads, 0, stream>>>(x.data, nblocks, out, nonfinite_device);
  else
    quantize_mxfp8_kernel<QuantIoType::kBF16>
        <<<grid, kThreads, 0, stream>>>(x.data, nblocks, out, nonfinite_device);
  FP4_CUDA_CHECK_LAUNCH("quantize_mxfp8_kernel");
}

void dequantize_mxfp8_cuda(const Mxfp8DeviceView& q, void* out, QuantIoType dtype, cudaStream_t stream) {
  constexpr const char* kWhat = "dequantize_mxfp8_cuda";
  check_mxfp8_view(q, kWhat);
  qk::check_aligned(out, 16, kWhat, "output");
  const int64_t nblocks = q.rows * q.cols / kMxfp8Block;
  const unsigned grid = qk::grid_for(nblocks, kThreads, 8);
  if (dtype == QuantIoType::kF32)
    dequantize_mxfp8_kernel<QuantIoType::kF32><<<grid, kThreads, 0, stream>>>(q, nblocks, out);
  else
    dequantize_mxfp8_kernel<QuantIoType::kBF16><<<grid, kThreads, 0, stream>>>(q, nblocks, out);
  FP4_CUDA_CHECK_LAUNCH("dequantize_mxfp8_kernel");
}

}  // namespace fp4
