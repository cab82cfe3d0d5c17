// amax of a quantizer input after its optional RHT (quantize.h's amax_nvfp4_input): the tensor-mode
// pre-pass. Max is exact and order-free, so any reduction order gives the CPU's bits.
#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;       // blocks per thread and iteration, loaded together
constexpr int kBlocksPerSm = 4;  // the grid is what fits at once (a grid-stride loop), 64 registers each

// Finite amax of one 16-element block (after its RHT): max.NaN trees, the reference loop for a block that
// holds a NaN or inf. BF16 without RHT compares the raw words two values at a time.
template <QuantIoType T, int kRht>
__device__ __forceinline__ float block_amax(const qk::Raw16<T>& raw, int rht_n, const RhtSigns& signs,
                                            int64_t b) {
  float v[16];
  qk::convert16<T>(raw, v);
  bool bad = false;
  if constexpr (T == QuantIoType::kBF16 && kRht == 0) {
    return qk::amax16_bf16(raw.w, v, bad);
  } else {
    // rows start at multiples of n (cols % n == 0), so the flat position gives the segment position
    if constexpr (kRht != 0) qk::rht_block16(v, signs, kRht > 0 ? kRht : rht_n, 16 * b);
    return qk::amax16_of(v, bad);
  }
}

// Each warp takes chunks of 32 * kUnroll consecutive blocks (whole RHT segments, since a segment is at most
// 8 blocks in 8 aligned lanes), grid-stride; every lane runs every iteration (the RHT shuffles need them).
template <QuantIoType T, int kRht>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    amax_kernel(const void* x, int64_t nblocks, int rht_n, RhtSigns signs, float* amax) {
  __shared__ uint32_t warp_max[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  uint32_t m = 0;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
       chunk * (32 * kUnroll) < nblocks; chunk += warps) {
    qk::Raw16<T> raw[kUnroll];
#pragma unroll
    for (int s = 0; s < kUnroll; ++s) {
      const int64_t b = chunk * (32 * kUnroll) + 32 * s + lane;
      if (b < nblocks)
        qk::load_raw16<T>(x, 16 * b, raw[s]);
      else
        qk::zero_raw16<T>(raw[s]);
    }
#pragma unroll
    for (int s = 0; s < kUnroll; ++s)
      m = max(m, __float_as_uint(
                     block_amax<T, kRht>(raw[s], rht_n, signs, chunk * (32 * kUnroll) + 32 * s + lane)));
  }
  qk::block_max_to<kThreads>(m, warp_max, amax);
}

template <QuantIoType T>
void launch_amax(const DeviceInput& x, int rht_n, const RhtSigns& signs, float* amax, cudaStream_t stream) {
  const int64_t nblocks = x.rows * x.cols / 16;
  const unsigned grid = qk::grid_for(qk::ceil_div(nblocks, kUnroll), kThreads, kBlocksPerSm);
  if (rht_n == 0)
    amax_kernel<T, 0><<<grid, kThreads, 0, stream>>>(x.data, nblocks, rht_n, signs, amax);
  else if (rht_n == 16)
    amax_kernel<T, 16><<<grid, kThreads, 0, stream>>>(x.data, nblocks, rht_n, signs, amax);
  else
    amax_kernel<T, -1><<<grid, kThreads, 0, stream>>>(x.data, nblocks, rht_n, signs, amax);
}

}  // namespace

void amax_nvfp4_cuda(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& rnd,
                     float* amax_device, cudaStream_t stream) {
  constexpr const char* kWhat = "amax_nvfp4_cuda";
  qk::check_input(x, kWhat);
  qk::check_aligned(amax_device, 4, kWhat, "amax output");
  FP4_CHECK(x.rows > 0 && x.cols > 0 && x.cols % 16 == 0, kWhat,
            ": the reduction dimension must be a positive multiple of 16, got [", x.rows, " x ", x.cols, "]");
  FP4_CHECK(spec.rht_n == 0 || spec.rht_n == 16 || spec.rht_n == 32 || spec.rht_n == 64 || spec.rht_n == 128,
            kWhat, ": rht_n must be 0, 16, 32, 64 or 128, got ", spec.rht_n);
  FP4_CHECK(spec.rht_n == 0 || x.cols % spec.rht_n == 0, kWhat, ": RHT", spec.rht_n,
            " needs the reduction dimension to be a multiple of it, got [", x.rows, " x ", x.cols, "]");
  FP4_CHECK(spec.rht_n == 0 || rnd.signs.n == spec.rht_n, kWhat, ": RHT signs have n=", rnd.signs.n,
            " but spec.rht_n=", spec.rht_n);
  FP4_CUDA_CHECK(cudaMemsetAsync(amax_device, 0, sizeof(float), stream));
  if (x.dtype == QuantIoType::kF32)
    launch_amax<QuantIoType::kF32>(x, spec.rht_n, rnd.signs, amax_device, stream);
  else
    launch_amax<QuantIoType::kBF16>(x, spec.rht_n, rnd.signs, amax_device, stream);
  FP4_CUDA_CHECK_LAUNCH("amax_kernel");
}

}  // namespace fp4
