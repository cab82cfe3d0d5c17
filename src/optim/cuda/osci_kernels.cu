#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "optim/cuda/osci_kernels.h"
#include "optim/osci_reset_backend.h"

namespace fp4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond this

unsigned blocks_for(int64_t items) {
  const int64_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

__global__ void osci_accumulate_kernel(OsciDeviceTrack t, const float* __restrict__ w,
                                       const float* __restrict__ q) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned flips = 0;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < t.n; j += stride) {
    const int64_t e = t.index != nullptr ? static_cast<int64_t>(t.index[j]) : j;
    const float wn = w[e], qn = q[e], pq = t.prev_q[j];
    t.dist_m[j] = __fadd_rn(t.dist_m[j], fabsf(__fsub_rn(wn, t.prev_w[j])));
    t.dist_q[j] = __fadd_rn(t.dist_q[j], fabsf(__fsub_rn(qn, pq)));
    flips += qn != pq ? 1u : 0u;
    t.prev_w[j] = wn;
    t.prev_q[j] = qn;
  }
  // The block's flips: a warp sum by shuffles, the warps' sums in shared memory, one atomic per block.
  for (int offset = 16; offset > 0; offset /= 2) flips += __shfl_down_sync(0xffffffffu, flips, offset);
  __shared__ unsigned warp_flips[kThreads / 32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_flips[warp] = flips;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (unsigned k = 0; k < blockDim.x / 32; ++k) total += warp_flips[k];
    if (total > 0) atomicAdd(t.flips, total);
  }
}

// One thread per chunk: the chunk's risks are summed in element order, as the host form does.
__global__ void osci_reset_kernel(OsciDeviceTrack t, float* __restrict__ w, double threshold, int64_t chunks,
                                  double* __restrict__ chunk_sums, uint32_t* __restrict__ chunk_resets) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= chunks) return;
  const int64_t begin = c * kOsciRiskChunk;
  const int64_t end = begin + kOsciRiskChunk < t.n ? begin + kOsciRiskChunk : t.n;
  double sum = 0.0;
  uint32_t resets = 0;
  for (int64_t j = begin; j < end; ++j) {
    const float dm = t.dist_m[j], dq = t.dist_q[j];
    const float risk = dm > 0.0f ? __fdiv_rn(dq, dm) : 0.0f;
    sum = __dadd_rn(sum, static_cast<double>(risk));
    if (static_cast<double>(risk) >= threshold) {
      w[t.index != nullptr ? static_cast<int64_t>(t.index[j]) : j] = t.prev_q[j];
      ++resets;
    }
  }
  chunk_sums[c] = sum;
  chunk_resets[c] = resets;
}

}  // namespace

int64_t osci_chunk_count(int64_t n) {
  return (n + kOsciRiskChunk - 1) / kOsciRiskChunk;
}

void osci_accumulate_cuda(const OsciDeviceTrack& t, const float* w, const float* q, cudaStream_t stream) {
  if (t.n == 0) return;
  FP4_CHECK(t.flips != nullptr, "osci_accumulate_cuda: no flip counter");
  osci_accumulate_kernel<<<blocks_for(t.n), kThreads, 0, stream>>>(t, w, q);
  FP4_CUDA_CHECK_LAUNCH("osci_accumulate_kernel");
}

void osci_reset_cuda(const OsciDeviceTrack& t, float* w, double threshold, double* chunk_sums,
                     uint32_t* chunk_resets, cudaStream_t stream) {
  const int64_t chunks = osci_chunk_count(t.n);
  if (chunks == 0) return;
  const auto blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  osci_reset_kernel<<<blocks, kThreads, 0, stream>>>(t, w, threshold, chunks, chunk_sums, chunk_resets);
  FP4_CUDA_CHECK_LAUNCH("osci_reset_kernel");
}

}  // namespace fp4::cuda
