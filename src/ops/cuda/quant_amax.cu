// amax of a quantizer input after its optional RHT (quantize.h's amax_nvfp4_input): the tensor-mode
// pre-pass. Max is exact and order-free, so any reduction order gives the CPU's bits.
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_launch.cuh"

namespace fp4 {
namespace {

constexpr int kThreads = 256;

// Thread per 16-element block of the flattened tensor, grid-stride by whole warps (the RHT shuffles need
// every lane). RHT segments never cross rows because cols is a multiple of n.
template <QuantIoType T>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* x, int64_t nblocks, int rht_n,
                                                         RhtSigns signs, float* amax) {
  __shared__ uint32_t warp_max[kThreads / 32];
  const int lane = threadIdx.x & 31;
  uint32_t m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads + (threadIdx.x & ~31); base < nblocks;
       base += stride) {
    const int64_t b = base + lane;
    float v[16];
    if (b < nblocks) {
      qk::load16<T>(x, 16 * b, v);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = 0.0f;
    }
    if (rht_n > 0) qk::rht_block16(v, signs, rht_n, 16 * b);  // rows start at multiples of n: cols % n == 0
    bool bad = false;
    m = max(m, float_bits(amax_finite16(v, bad)));
  }
  m = qk::warp_max_bits(m);
  if (lane == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t block_max = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) block_max = max(block_max, warp_max[w]);
    atomicMax(reinterpret_cast<unsigned int*>(amax), block_max);  // non-negative floats order as their bits
  }
}

}  // namespace

void amax_nvfp4_cuda(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& rnd, float* amax_device,
                     cudaStream_t stream) {
  constexpr const char* kWhat = "amax_nvfp4_cuda";
  qk::check_input(x, kWhat);
  qk::check_aligned(amax_device, 4, kWhat, "amax output");
  FP4_CHECK(x.rows > 0 && x.cols > 0 && x.cols % 16 == 0, kWhat,
            ": the reduction dimension must be a positive multiple of 16, got [", x.rows, " x ", x.cols, "]");
  FP4_CHECK(spec.rht_n == 0 || spec.rht_n == 16 || spec.rht_n == 32 || spec.rht_n == 64 || spec.rht_n == 128, kWhat,
            ": rht_n must be 0, 16, 32, 64 or 128, got ", spec.rht_n);
  FP4_CHECK(spec.rht_n == 0 || x.cols % spec.rht_n == 0, kWhat, ": RHT", spec.rht_n,
            " needs the reduction dimension to be a multiple of it, got [", x.rows, " x ", x.cols, "]");
  FP4_CHECK(spec.rht_n == 0 || rnd.signs.n == spec.rht_n, kWhat, ": RHT signs have n=", rnd.signs.n,
            " but spec.rht_n=", spec.rht_n);
  FP4_CUDA_CHECK(cudaMemsetAsync(amax_device, 0, sizeof(float), stream));
  const int64_t nblocks = x.rows * x.cols / 16;
  const unsigned grid = qk::grid_for(nblocks, kThreads, 8);
  if (x.dtype == QuantIoType::kF32)
    amax_kernel<QuantIoType::kF32><<<grid, kThreads, 0, stream>>>(x.data, nblocks, spec.rht_n, rnd.signs,
                                                                   amax_device);
  else
    amax_kernel<QuantIoType::kBF16><<<grid, kThreads, 0, stream>>>(x.data, nblocks, spec.rht_n, rnd.signs,
                                                                    amax_device);
  FP4_CUDA_CHECK_LAUNCH("amax_kernel");
}

}  // namespace fp4
