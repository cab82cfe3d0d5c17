#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "ops/cuda/elementwise_cuda.h"
#include "optim/cuda/newton_schulz_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kSumBlocks = 240;           // fixed, so every sum of squares adds in the same order
constexpr int kTile = 32, kTileRows = 8;  // write_iterate_kernel: 32 x 32 tiles, kThreads threads
static_assert(kTile * kTileRows == kThreads);

// The padded length of a wide-orientation dimension: NVFP4 pads to its 16-element blocks, BF16 to 8
// elements so that every BF16 row starts 16-byte aligned, as the tensor-core GEMMs want. Zero rows and
// columns stay zero through the iteration, so padding does not change the result.
int64_t padded(int64_t n, NsPrecision p) {
  if (p == NsPrecision::kNvfp4) return (n + 15) / 16 * 16;
  if (p == NsPrecision::kBf16) return (n + 7) / 8 * 8;
  return n;
}
unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// Per-block double sums of x[i]^2 (each square is exact in double), grid-stride in a fixed order.
__global__ void sumsq_partials_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partials) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{kThreads} * gridDim.x) {
    const double v = x[i];
    s = __dadd_rn(s, __dmul_rn(v, v));
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

// *dst = the sum of the partials; when inv is set, *inv = float(1 / (sqrt(sum) + norm_eps)) in double as
// the CPU forms it.
__global__ void sum_partials_kernel(const double* __restrict__ partials, int n, double* dst, float* inv,
                                    float norm_eps) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s = __dadd_rn(s, partials[i]);
  *dst = s;
  if (inv != nullptr)
    *inv = static_cast<float>(__ddiv_rn(1.0, __dadd_rn(__dsqrt_rn(s), static_cast<double>(norm_eps))));
}

// The bits of |v| when v is finite, else 0: the finite amax that tensor-scaled NVFP4 operands take
// (quantize.h's amax_nvfp4_input), as a max over non-negative float bits (order-free, so exact).
__device__ __forceinline__ uint32_t finite_abs_bits(float v) {
  const float a = fabsf(v);
  return a < INFINITY ? __float_as_uint(a) : 0u;
}

// atomicMax of the block's largest bits into *amax (zeroed at the start of run()). tid is the thread's
// linear index in a block of kThreads; every thread of the block must call it (it has a barrier).
__device__ __forceinline__ void block_amax_to(uint32_t bits, int tid, uint32_t* amax) {
  __shared__ uint32_t warp_max[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) bits = max(bits, __shfl_xor_sync(0xFFFFFFFFu, bits, off));
  if ((tid & 31) == 0) warp_max[tid >> 5] = bits;
  __syncthreads();
  if (tid == 0) {
    uint32_t m = 0;
    for (int w = 0; w < kThreads / 32; ++w) m = max(m, warp_max[w]);
    if (m != 0) atomicMax(amax, m);
  }
}

// The iterate's values at (i, j) of the wide [r x c] X.
// Step 0: b [rows x cols] * inv, transposed when tall, zero in the padding.
struct LoadedIterate {
  const float* b;
  int64_t rows, cols;
  bool tall;
  const float* inv;
  __device__ float operator()(int64_t i, int64_t j) const {
    const int64_t r0 = tall ? cols : rows, c0 = tall ? rows : cols;
    if (i >= r0 || j >= c0) return 0.0f;
    return __fmul_rn(tall ? b[j * cols + i] : b[i * cols + j], *inv);
  }
};
// Step s > 0 of Q-Root: a X + (sa sb) acc, the last product (acc = P^ X^ without its tensor scales) and
// the a X term, rounded as the CPU's unfused float expression.
struct NextIterate {
  const float* x;
  const float* acc;
  int64_t c;
  float a;
  const float* sa;
  const float* sb;
  __device__ float operator()(int64_t i, int64_t j) const {
    const float s = __fmul_rn(*sa, *sb);
    return __fadd_rn(__fmul_rn(a, x[i * c + j]), __fmul_rn(s, acc[i * c + j]));
  }
};

// X [r x c] = value(i, j) over 32 x 32 tiles (blockDim 32 x 8); with xt, also X^T [c x r] through shared
// memory (both writes coalesced: Q-Root quantizes X^T along r); with amax, X's finite amax, which is also
// X^T's. One kernel where the iteration's end, a transpose and two amax passes were four. x may be what
// value reads at (i, j) (NextIterate's acc): each element is read and written by one thread.
template <class Value>
__global__ void write_iterate_kernel(Value value, int64_t r, int64_t c, float* x, float* __restrict__ xt,
                                     uint32_t* __restrict__ amax) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile, j0 = static_cast<int64_t>(blockIdx.x) * kTile;
  uint32_t m = 0;
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t i = i0 + k, j = j0 + threadIdx.x;
    if (i < r && j < c) {
      const float v = value(i, j);
      x[i * c + j] = v;
      tile[k][threadIdx.x] = v;
      m = max(m, finite_abs_bits(v));
    }
  }
  if (xt != nullptr) {
    __syncthreads();
    for (int k = threadIdx.y; k < kTile; k += kTileRows) {
      const int64_t j = j0 + k, i = i0 + threadIdx.x;
      if (i < r && j < c) xt[j * r + i] = tile[threadIdx.x][k];
    }
  }
  if (amax != nullptr) block_amax_to(m, threadIdx.y * kTile + threadIdx.x, amax);
}

template <class Value>
void write_iterate(const Value& value, int64_t r, int64_t c, float* x, float* xt, uint32_t* amax,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((c + kTile - 1) / kTile),
                  static_cast<unsigned>((r + kTile - 1) / kTile));
  write_iterate_kernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(value, r, c, x, xt, amax);
  FP4_CUDA_CHECK_LAUNCH("write_iterate_kernel");
}

// out [rows x cols] from the wide X [rp x cp].
__global__ void store_kernel(const float* __restrict__ x, int64_t rows, int64_t cols, bool tall, int64_t cp,
                             float* __restrict__ out) {
  for (int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x; idx < rows * cols;
       idx += int64_t{kThreads} * gridDim.x) {
    const int64_t i = idx / cols, j = idx % cols;
    out[idx] = tall ? x[j * cp + i] : x[i * cp + j];
  }
}

// A [r x r] from the product X X^T: its upper triangle mirrored into the lower one, as the CPU makes A
// exactly symmetric, times (*s)^2 when s is set (Q-Root: X^'s tensor scale, applied before the mirror as
// the CPU applies it); with amax, A's finite amax.
__global__ void gram_kernel(const float* __restrict__ product, int64_t r, const float* __restrict__ s,
                            float* __restrict__ a, uint32_t* __restrict__ amax) {
  const float scale = s != nullptr ? __fmul_rn(*s, *s) : 1.0f;
  uint32_t m = 0;
  for (int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x; idx < r * r;
       idx += int64_t{kThreads} * gridDim.x) {
    const int64_t i = idx / r, j = idx % r;
    float v = product[j < i ? j * r + i : idx];
    if (s != nullptr) v = __fmul_rn(v, scale);
    a[idx] = v;
    m = max(m, finite_abs_bits(v));
  }
  if (amax != nullptr) block_amax_to(m, threadIdx.x, amax);
}

// P = b A + c A^2, rounded as the CPU's unfused float expression; A^2 is the product A A, times (*s)^2 when
// s is set (Q-Root: A^'s tensor scale); with amax, P's finite amax.
__global__ void poly_kernel(const float* __restrict__ a, const float* __restrict__ product, float cb,
                            float cc, int64_t n, const float* __restrict__ s, float* __restrict__ poly,
                            uint32_t* __restrict__ amax) {
  const float scale = s != nullptr ? __fmul_rn(*s, *s) : 1.0f;
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{kThreads} * gridDim.x) {
    const float a2 = s != nullptr ? __fmul_rn(product[i], scale) : product[i];
    const float v = __fadd_rn(__fmul_rn(cb, a[i]), __fmul_rn(cc, a2));
    poly[i] = v;
    m = max(m, finite_abs_bits(v));
  }
  if (amax != nullptr) block_amax_to(m, threadIdx.x, amax);
}

void sum_squares(const float* x, int64_t n, double* partials, double* dst, float* inv, float norm_eps,
                 cudaStream_t stream) {
  sumsq_partials_kernel<<<kSumBlocks, kThreads, 0, stream>>>(x, n, partials);
  FP4_CUDA_CHECK_LAUNCH("sumsq_partials_kernel");
  sum_partials_kernel<<<1, 1, 0, stream>>>(partials, kSumBlocks, dst, inv, norm_eps);
  FP4_CUDA_CHECK_LAUNCH("sum_partials_kernel");
}

}  // namespace

// cuBLASLt's workspace for the runner this precision uses; the other runner gets none (it is never called,
// and DeviceRoot holds one NewtonSchulzCuda per lane).
constexpr size_t kGemmWorkspace = size_t{32} << 20;

NewtonSchulzCuda::NewtonSchulzCuda(NsPrecision precision)
    : precision_(precision),
      gemm_(precision == NsPrecision::kFp32 ? kGemmWorkspace : 0),
      bf16_gemm_(precision == NsPrecision::kFp32 ? 0 : kGemmWorkspace),
      amax_(kAmaxSlots),
      inv_(1),
      partials_(kSumBlocks) {
  if (precision_ == NsPrecision::kNvfp4) outer_ = DeviceBuffer<float>(4);  // one per operand slot
}

void NewtonSchulzCuda::reserve(int64_t wide, int64_t gram) {
  const bool q = precision_ == NsPrecision::kNvfp4, h = precision_ == NsPrecision::kBf16;
  if (wide > wide_cap_) {
    wide_cap_ = wide;
    x_ = DeviceBuffer<float>(static_cast<size_t>(wide));
    next_ = DeviceBuffer<float>(static_cast<size_t>(wide));
    if (h) xq_ = DeviceBuffer<bf16>(static_cast<size_t>(wide));
    if (q) {
      xt_ = DeviceBuffer<float>(static_cast<size_t>(wide));
      xq_ = DeviceBuffer<bf16>(static_cast<size_t>(wide));
      xtq_ = DeviceBuffer<bf16>(static_cast<size_t>(wide));
      codes_ = DeviceBuffer<uint8_t>(static_cast<size_t>(wide / 2));  // the largest operand is [rp x cp]
      scales_ = DeviceBuffer<uint8_t>(static_cast<size_t>(wide / 16));
    }
  }
  if (gram > gram_cap_) {
    gram_cap_ = gram;
    a_ = DeviceBuffer<float>(static_cast<size_t>(gram));
    a2_ = DeviceBuffer<float>(static_cast<size_t>(gram));
    poly_ = DeviceBuffer<float>(static_cast<size_t>(gram));
    if (q || h) {
      aq_ = DeviceBuffer<bf16>(static_cast<size_t>(gram));
      pq_ = DeviceBuffer<bf16>(static_cast<size_t>(gram));
    }
  }
}

void NewtonSchulzCuda::quantize(const float* x, int64_t rows, int64_t cols, BlockShape block,
                                const NsOptions& opt, int step, int slot, const float* amax, bf16* bar,
                                cudaStream_t stream, NsTrace* trace) {
  const uint64_t operand = static_cast<uint64_t>(step) * 4 + static_cast<uint64_t>(slot);
  const QuantSpec spec = ns_operand_spec(block, opt);
  const QuantRandomness rnd = ns_operand_randomness(opt, operand);
  const DeviceInput in{x, QuantIoType::kF32, rows, cols};
  Nvfp4DeviceView view;
  view.codes = codes_.data();
  view.scales = scales_.data();
  view.outer = outer_.data() + slot;
  view.rows = rows;
  view.cols = cols;
  view.block = block;
  view.outer_mode = OuterScale::kTensor;
  quantize_nvfp4_cuda(in, spec, rnd, view, amax, nullptr, DequantOutput{bar, QuantIoType::kBF16, false},
                      stream);
  if (trace == nullptr) return;
  // Tests only: the operand as the host sees it.
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto s = static_cast<size_t>(slot), k = static_cast<size_t>(step);
  const auto n = static_cast<size_t>(rows * cols);
  std::vector<float>& host_x = trace->inputs[k][s];
  host_x.resize(n);
  FP4_CUDA_CHECK(cudaMemcpy(host_x.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  Nvfp4Tensor& t = trace->operands[k][s];
  t = Nvfp4Tensor{};
  t.rows = rows;
  t.cols = cols;
  t.block = block;
  t.outer = OuterScale::kTensor;
  t.codes.resize(n / 2);
  t.scales.resize(n / 16);
  t.outer_scales.resize(1);
  FP4_CUDA_CHECK(cudaMemcpy(t.codes.data(), codes_.data(), n / 2, cudaMemcpyDeviceToHost));
  FP4_CUDA_CHECK(cudaMemcpy(t.scales.data(), scales_.data(), n / 16, cudaMemcpyDeviceToHost));
  FP4_CUDA_CHECK(
      cudaMemcpy(t.outer_scales.data(), outer_.data() + slot, sizeof(float), cudaMemcpyDeviceToHost));
  FP4_CUDA_CHECK(cudaMemcpy(&t.amax, amax, sizeof(float), cudaMemcpyDeviceToHost));
}

void NewtonSchulzCuda::run(const float* b, int64_t rows, int64_t cols, const NsOptions& opt, float* out,
                           NsDeviceResult* result, cudaStream_t stream, NsTrace* trace) {
  FP4_CHECK(rows > 0 && cols > 0, "newton_schulz (CUDA): empty matrix [", rows, " x ", cols, "]");
  FP4_CHECK(opt.steps >= 0 && opt.steps <= 16, "newton_schulz (CUDA): steps must be in [0, 16], got ",
            opt.steps);
  FP4_CHECK(opt.precision == precision_, "newton_schulz (CUDA): built for ", ns_precision_name(precision_),
            " operands, asked for ", ns_precision_name(opt.precision));
  FP4_CHECK(rows < (int64_t{1} << 30) / std::max<int64_t>(cols, 1), "newton_schulz (CUDA): matrix [", rows,
            " x ", cols, "] is too large for 32-bit GEMM sizes");
  const bool q = precision_ == NsPrecision::kNvfp4, h = precision_ == NsPrecision::kBf16;
  FP4_CHECK(trace == nullptr || q, "newton_schulz (CUDA): a trace of the operands needs NVFP4 operands");
  const bool tall = rows > cols;
  const int64_t r0 = tall ? cols : rows, c0 = tall ? rows : cols;
  const int64_t r = padded(r0, precision_), c = padded(c0, precision_);
  reserve(r * c, r * r);
  const int ri = static_cast<int>(r), ci = static_cast<int>(c);
  const NsCoefficients& k = opt.coef;

  // Q-Root's operand amaxes come from the kernels that write the operands: X_s's (also X_s^T's) at slot
  // 3 s, A_s's at 3 s + 1, P_s's at 3 s + 2, all zeroed here at once.
  float* amax = amax_.data();
  auto amax_bits = [&](int slot) { return q ? reinterpret_cast<uint32_t*>(amax + slot) : nullptr; };
  if (q) FP4_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float) * kAmaxSlots, stream));

  sum_squares(b, rows * cols, partials_.data(), &result->input_sumsq, inv_.data(), opt.norm_eps, stream);
  write_iterate(LoadedIterate{b, rows, cols, tall, inv_.data()}, r, c, x_.data(), q ? xt_.data() : nullptr,
                amax_bits(0), stream);
  if (trace) {
    *trace = NsTrace{};
    trace->r = r;
    trace->c = c;
    trace->inputs.resize(static_cast<size_t>(opt.steps));
    trace->operands.resize(static_cast<size_t>(opt.steps));
  }
  for (int s = 0; s < opt.steps; ++s) {
    const float* x_amax = amax + 3 * s;
    // A = X X^T (one quantized X along c serves both operands), into a2_ until gram_kernel mirrors it.
    if (q) {
      quantize(x_.data(), r, c, BlockShape::k1x16, opt, s, 0, x_amax, xq_.data(), stream, trace);
      bf16_gemm_.gemm(false, true, ri, ri, ci, 1.0f, xq_.data(), ci, xq_.data(), ci, 0.0f, a2_.data(), ri,
                      stream);
    } else if (h) {
      // xq_ keeps bf16(X) for the last product too: X does not change within a step.
      f32_to_bf16(x_.data(), xq_.data(), r * c, stream);
      bf16_gemm_.gemm(false, true, ri, ri, ci, 1.0f, xq_.data(), ci, xq_.data(), ci, 0.0f, a2_.data(), ri,
                      stream);
    } else {
      gemm_.gemm(false, true, ri, ri, ci, 1.0f, x_.data(), ci, x_.data(), ci, 0.0f, a2_.data(), ri, stream);
    }
    gram_kernel<<<grid_for(r * r), kThreads, 0, stream>>>(a2_.data(), r, q ? outer_.data() : nullptr,
                                                          a_.data(), amax_bits(3 * s + 1));
    FP4_CUDA_CHECK_LAUNCH("gram_kernel");
    // A^2 = A A (A in 16x16 tiles: A^ and A^^T are the same values), into a2_; P = b A + c A^2.
    if (q) {
      quantize(a_.data(), r, r, BlockShape::k16x16, opt, s, 1, amax + 3 * s + 1, aq_.data(), stream, trace);
      bf16_gemm_.gemm(false, false, ri, ri, ri, 1.0f, aq_.data(), ri, aq_.data(), ri, 0.0f, a2_.data(), ri,
                      stream);
    } else if (h) {
      f32_to_bf16(a_.data(), aq_.data(), r * r, stream);
      bf16_gemm_.gemm(false, false, ri, ri, ri, 1.0f, aq_.data(), ri, aq_.data(), ri, 0.0f, a2_.data(), ri,
                      stream);
    } else {
      gemm_.gemm(false, false, ri, ri, ri, 1.0f, a_.data(), ri, a_.data(), ri, 0.0f, a2_.data(), ri, stream);
    }
    poly_kernel<<<grid_for(r * r), kThreads, 0, stream>>>(a_.data(), a2_.data(), k.b, k.c, r * r,
                                                          q ? outer_.data() + 1 : nullptr, poly_.data(),
                                                          amax_bits(3 * s + 2));
    FP4_CUDA_CHECK_LAUNCH("poly_kernel");
    // next = a X + P X.
    if (q) {
      quantize(poly_.data(), r, r, BlockShape::k1x16, opt, s, 2, amax + 3 * s + 2, pq_.data(), stream, trace);
      quantize(xt_.data(), c, r, BlockShape::k1x16, opt, s, 3, x_amax, xtq_.data(), stream, trace);
      // P^ X^ into next_, then in place next = a X + (tensor scales) next_, with next^T (into xt_, free
      // once X^T is quantized) and next's amax.
      bf16_gemm_.gemm(false, true, ri, ci, ri, 1.0f, pq_.data(), ri, xtq_.data(), ri, 0.0f, next_.data(), ci,
                      stream);
      write_iterate(NextIterate{x_.data(), next_.data(), c, k.a, outer_.data() + 2, outer_.data() + 3}, r, c,
                    next_.data(), xt_.data(), amax_bits(3 * (s + 1)), stream);
    } else if (h) {
      // next = a X (FP32) + bf16(P) bf16(X), the beta term read from x_ as in kFp32.
      f32_to_bf16(poly_.data(), pq_.data(), r * r, stream);
      bf16_gemm_.gemm(false, false, ri, ci, ri, 1.0f, pq_.data(), ri, xq_.data(), ci, k.a, next_.data(), ci,
                      stream, x_.data());
    } else {
      gemm_.gemm(false, false, ri, ci, ri, 1.0f, poly_.data(), ri, x_.data(), ci, k.a, next_.data(), ci,
                 stream, x_.data());
    }
    std::swap(x_, next_);
  }
  if (trace) {
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
    trace->result.resize(static_cast<size_t>(r * c));
    FP4_CUDA_CHECK(cudaMemcpy(trace->result.data(), x_.data(), trace->result.size() * sizeof(float),
                              cudaMemcpyDeviceToHost));
  }
  store_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(x_.data(), rows, cols, tall, c, out);
  FP4_CUDA_CHECK_LAUNCH("store_kernel");
  sum_squares(out, rows * cols, partials_.data(), &result->output_fro2, nullptr, 0.0f, stream);
}

}  // namespace fp4::cuda
