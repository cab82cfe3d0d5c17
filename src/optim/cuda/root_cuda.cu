#include <algorithm>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>

#include "core/error.h"
#include "optim/cuda/root_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// M' and U as root_step forms them (after the clipping factor), and |U|'s bits as sort keys: for
// non-negative floats the bit patterns order as the values.
__global__ void momentum_kernel(const float* __restrict__ g, const float* __restrict__ m, int64_t n, float mu,
                                bool nesterov, const StepControl* __restrict__ control,
                                float* __restrict__ m_new, float* __restrict__ u,
                                uint32_t* __restrict__ keys) {
  const float clip = control->clip_coef;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{kThreads} * gridDim.x) {
    const float gi = clip == 1.0f ? g[i] : __fmul_rn(g[i], clip);
    const float mi = __fadd_rn(__fmul_rn(mu, m[i]), gi);
    const float ui = nesterov ? __fadd_rn(gi, __fmul_rn(mu, mi)) : mi;
    m_new[i] = mi;
    u[i] = ui;
    keys[i] = __float_as_uint(ui) & 0x7FFFFFFFu;
  }
}

// abs_quantile's interpolation between the order statistics lo and lo + 1, in double.
__device__ __forceinline__ float clip_threshold(const uint32_t* __restrict__ sorted, int64_t lo,
                                                bool interpolate, double frac) {
  const float v_lo = __uint_as_float(sorted[lo]);
  if (!interpolate) return v_lo;
  const double a = v_lo, b = __uint_as_float(sorted[lo + 1]);
  return static_cast<float>(__dadd_rn(a, __dmul_rn(frac, __dsub_rn(b, a))));
}

// B = clamp(U, -eps, eps) as std::clamp with eps = clip_threshold (every block forms it from the sorted
// |U|; block 0 records it), counting the clipped elements.
__global__ void clamp_kernel(float* __restrict__ u, int64_t n, const uint32_t* __restrict__ sorted,
                             int64_t lo, bool interpolate, double frac, RootDeviceStats* stats) {
  __shared__ unsigned long long sh[kThreads];
  const float eps = clip_threshold(sorted, lo, interpolate, frac);
  if (blockIdx.x == 0 && threadIdx.x == 0) stats->clip_eps = eps;
  unsigned long long clipped = 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{kThreads} * gridDim.x) {
    const float v = u[i];
    clipped += fabsf(v) > eps ? 1 : 0;
    u[i] = v < -eps ? -eps : (eps < v ? eps : v);
  }
  sh[threadIdx.x] = clipped;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0 && sh[0] > 0) atomicAdd(&stats->clipped, sh[0]);
}

// root_step's checks on the NS input and output: a failure is recorded (the first of the step) and stops
// the rest of the step.
__global__ void check_kernel(const RootDeviceStats* stats, double fro2_bound, int index, StepControl* control,
                             RootFault* fault) {
  if (control->skip) return;
  const double sq = stats->ns.input_sumsq, fro2 = stats->ns.output_fro2;
  int32_t kind = kRootNoFault;
  double value = 0;
  if (!isfinite(sq)) {
    kind = kRootNonFiniteNsInput;
    value = sq;
  } else if (!(fro2 <= fro2_bound)) {
    kind = kRootNsDiverged;
    value = fro2;
  }
  if (kind == kRootNoFault) return;
  control->skip = 1;
  if (fault->kind == kRootNoFault) {
    fault->matrix = index;
    fault->kind = kind;
    fault->value = value;
  }
}

// M <- M', W <- W - lr (scale X + wd W), unfused as the CPU; nothing when the step is skipped.
__global__ void commit_kernel(float* __restrict__ w, bf16* __restrict__ w_bf16, float* __restrict__ m,
                              const float* __restrict__ m_new, const float* __restrict__ x, int64_t n,
                              float lr, float wd, float scale, const StepControl* __restrict__ control) {
  if (control->skip) return;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{kThreads} * gridDim.x) {
    m[i] = m_new[i];
    const float wi = w[i];
    const float nw = __fsub_rn(wi, __fmul_rn(lr, __fadd_rn(__fmul_rn(scale, x[i]), __fmul_rn(wd, wi))));
    w[i] = nw;
    if (w_bf16 != nullptr) w_bf16[i] = __float2bfloat16_rn(nw);
  }
}

}  // namespace

RootStepCuda::RootStepCuda(int64_t max_numel, NsPrecision precision) : max_numel_(max_numel), ns_(precision) {
  FP4_CHECK(max_numel > 0 && max_numel < (int64_t{1} << 31), "ROOT (CUDA): matrices of ", max_numel,
            " elements are outside the supported (0, 2^31)");
  const auto n = static_cast<size_t>(max_numel);
  m_new_ = DeviceBuffer<float>(n);
  u_ = DeviceBuffer<float>(n);
  keys_ = DeviceBuffer<uint32_t>(n);
  sorted_ = DeviceBuffer<uint32_t>(n);
  size_t temp = 0;
  FP4_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp, keys_.data(), sorted_.data(),
                                                static_cast<int>(n), 0, 31));
  sort_temp_ = DeviceBuffer<uint8_t>(std::max<size_t>(temp, 1));
}

void RootStepCuda::check_fits(int64_t rows, int64_t cols, const std::string& name) const {
  FP4_CHECK(rows > 0 && cols > 0 && rows * cols <= max_numel_, name, ": ROOT (CUDA) matrix [", rows, " x ",
            cols, "] does not fit the workspace of ", max_numel_, " elements");
}

void RootStepCuda::queue_update(const float* g, const float* m, int64_t rows, int64_t cols,
                                const RootOptions& opt, const std::string& name, RngStream sr,
                                const StepControl* control, RootDeviceStats* stats, cudaStream_t stream,
                                NsTrace* trace) {
  check_root_options(opt, name);
  check_fits(rows, cols, name);
  const int64_t n = rows * cols;

  momentum_kernel<<<grid_for(n), kThreads, 0, stream>>>(g, m, n, opt.momentum, opt.nesterov, control,
                                                        m_new_.data(), u_.data(), keys_.data());
  FP4_CUDA_CHECK_LAUNCH("momentum_kernel");
  size_t temp = sort_temp_.bytes();
  FP4_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(sort_temp_.data(), temp, keys_.data(), sorted_.data(),
                                                static_cast<int>(n), 0, 31, stream));
  // The position of abs_quantile, formed on the host exactly as the CPU forms it.
  const double pos = opt.clip_quantile * static_cast<double>(n - 1);
  const auto lo = static_cast<int64_t>(std::floor(pos));
  const bool interpolate = !(lo + 1 >= n || pos == static_cast<double>(lo));
  clamp_kernel<<<grid_for(n), kThreads, 0, stream>>>(u_.data(), n, sorted_.data(), lo, interpolate,
                                                     pos - static_cast<double>(lo), stats);
  FP4_CUDA_CHECK_LAUNCH("clamp_kernel");

  ns_.run(u_.data(), rows, cols, root_ns_options(opt, rows, cols, sr), u_.data(), &stats->ns, stream, trace);
}

void RootStepCuda::queue_commit(float* w, bf16* w_bf16, float* m, int64_t rows, int64_t cols, float lr,
                                float weight_decay, const RootOptions& opt, const std::string& name,
                                int index, StepControl* control, RootDeviceStats* stats, RootFault* fault,
                                cudaStream_t stream) {
  check_fits(rows, cols, name);
  const int64_t n = rows * cols;
  FP4_CHECK(std::isfinite(lr) && lr >= 0.0f, name, ": ROOT learning rate must be finite and >= 0, got ", lr);
  FP4_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0f, name,
            ": ROOT weight decay must be finite and >= 0, got ", weight_decay);
  check_kernel<<<1, 1, 0, stream>>>(stats, 4.0 * static_cast<double>(std::min(rows, cols)), index, control,
                                    fault);
  FP4_CUDA_CHECK_LAUNCH("check_kernel");

  const float scale = opt.update_scale * std::sqrt(static_cast<float>(std::max(rows, cols)));
  commit_kernel<<<grid_for(n), kThreads, 0, stream>>>(w, w_bf16, m, m_new_.data(), u_.data(), n, lr,
                                                      weight_decay, scale, control);
  FP4_CUDA_CHECK_LAUNCH("commit_kernel");
}

}  // namespace fp4::cuda
