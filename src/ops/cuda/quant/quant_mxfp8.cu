// MXFP8 quantize / dequantize (quantize.h's quantize_mxfp8 / dequantize): thread per 32-element block.
#include "numerics/mxfp8.h"
#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

constexpr int kThreads = 256;

// One 32-element block: its UE8M0 scale and its E4M3 codes as 8 little-endian words; counts the
// block's non-finite inputs into bad_count.
__device__ __forceinline__ uint8_t mxfp8_block32(const float (&v)[2][16], uint32_t (&w)[8],
                                                 unsigned& bad_count) {
  float amax = 0.0f;
  bool bad = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    amax = max_f(amax, amax_finite16(v[h], bad));
    if (bad) bad_count += qk::count_nonfinite16(v[h]);
  }
  const uint8_t s = bad ? uint8_t{0xFF} : mxfp8_scale_code(amax);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      word |= static_cast<uint32_t>(mxfp8_encode(v[k >> 2][(4 * k + e) & 15], s)) << (8 * e);
    w[k] = word;
  }
  return s;
}

// The block's dequantized values from its codes, as 16 + 16 floats.
__device__ __forceinline__ void mxfp8_decode32(const uint32_t (&w)[8], uint8_t s, float (&v)[2][16]) {
#pragma unroll
  for (int e = 0; e < 32; ++e)
    v[e >> 4][e & 15] = mxfp8_decode(static_cast<uint8_t>(w[e >> 2] >> (8 * (e & 3))), s);
}

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
    uint32_t w[8];
    q.scales[b] = mxfp8_block32(v, w, bad_count);
    uint4* dst = reinterpret_cast<uint4*>(q.codes + 32 * b);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
  if (nonfinite != nullptr) qk::warp_count_add(bad_count, nonfinite);
}

// MXFP8 of x^T along x's rows: thread per (column c < q.rows, 32-row block). Lanes of a warp take
// neighbouring columns, so each of the 32 row loads is one coalesced access; rows past x_rows are zeros.
template <QuantIoType T, QuantIoType D>
__global__ void __launch_bounds__(kThreads)
    quantize_mxfp8_transposed_kernel(const void* x, int64_t x_rows, int64_t x_cols, Mxfp8DeviceView q,
                                     void* dequant, unsigned long long* nonfinite) {
  unsigned bad_count = 0;
  const int64_t items = q.rows * (q.cols / kMxfp8Block);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads + (threadIdx.x & ~31); base < items;
       base += stride) {
    const int64_t item = base + (threadIdx.x & 31);
    if (item >= items) continue;
    const int64_t c = item % q.rows, r0 = (item / q.rows) * kMxfp8Block;
    float v[2][16];
#pragma unroll
    for (int i = 0; i < kMxfp8Block; ++i) {
      const int64_t r = r0 + i;
      float e = 0.0f;
      if (r < x_rows) {
        if constexpr (T == QuantIoType::kF32)
          e = static_cast<const float*>(x)[r * x_cols + c];
        else
          e = bits_float(static_cast<uint32_t>(static_cast<const uint16_t*>(x)[r * x_cols + c]) << 16);
      }
      v[i >> 4][i & 15] = e;
    }
    uint32_t w[8];
    const uint8_t s = mxfp8_block32(v, w, bad_count);
    const int64_t b = item / q.rows + c * (q.cols / kMxfp8Block);  // block index in q's row-major layout
    if (q.codes != nullptr) {
      q.scales[b] = s;
      uint4* dst = reinterpret_cast<uint4*>(q.codes + 32 * b);
      dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
      dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
    if (dequant != nullptr) {
      float d[2][16];
      mxfp8_decode32(w, s, d);
      qk::store16<D>(dequant, 32 * b, d[0]);
      qk::store16<D>(dequant, 32 * b + 16, d[1]);
    }
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
    float v[2][16];
    mxfp8_decode32(w, q.scales[b], v);
    qk::store16<T>(out, 32 * b, v[0]);
    qk::store16<T>(out, 32 * b + 16, v[1]);
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

void quantize_mxfp8_transposed_cuda(const DeviceInput& x, const Mxfp8DeviceView& out,
                                    const DequantOutput& dequant, unsigned long long* nonfinite_device,
                                    cudaStream_t stream) {
  constexpr const char* kWhat = "quantize_mxfp8_transposed_cuda";
  qk::check_input(x, kWhat);
  FP4_CHECK(x.rows > 0 && x.cols > 0, kWhat, ": empty input [", x.rows, " x ", x.cols, "]");
  FP4_CHECK(out.rows > 0 && out.rows <= x.cols, kWhat, ": ", out.rows, " output rows from an input of ",
            x.cols, " columns");
  const int64_t padded_rows = qk::ceil_div(x.rows, kMxfp8Block) * kMxfp8Block;
  FP4_CHECK(out.cols == padded_rows, kWhat, ": output view has ", out.cols, " columns, the ", x.rows,
            " input rows padded to 32 are ", padded_rows);
  FP4_CHECK((out.codes == nullptr) == (out.scales == nullptr), kWhat,
            ": codes and scales are stored together or not at all");
  FP4_CHECK(out.codes != nullptr || dequant.data != nullptr, kWhat, ": nothing to store");
  if (out.codes != nullptr) check_mxfp8_view(out, kWhat);
  qk::check_dequant(dequant, kWhat);
  if (nonfinite_device != nullptr) qk::check_aligned(nonfinite_device, 8, kWhat, "non-finite counter");
  const int64_t items = out.rows * (out.cols / kMxfp8Block);
  const unsigned grid = qk::grid_for(items, kThreads, 8);
  using K = void (*)(const void*, int64_t, int64_t, Mxfp8DeviceView, void*, unsigned long long*);
  const bool f32_in = x.dtype == QuantIoType::kF32, f32_out = dequant.dtype == QuantIoType::kF32;
  const K kernel = f32_in
                       ? (f32_out ? quantize_mxfp8_transposed_kernel<QuantIoType::kF32, QuantIoType::kF32>
                                  : quantize_mxfp8_transposed_kernel<QuantIoType::kF32, QuantIoType::kBF16>)
                       : (f32_out ? quantize_mxfp8_transposed_kernel<QuantIoType::kBF16, QuantIoType::kF32>
                                  : quantize_mxfp8_transposed_kernel<QuantIoType::kBF16, QuantIoType::kBF16>);
  kernel<<<grid, kThreads, 0, stream>>>(x.data, x.rows, x.cols, out, dequant.data, nonfinite_device);
  FP4_CUDA_CHECK_LAUNCH("quantize_mxfp8_transposed_kernel");
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
