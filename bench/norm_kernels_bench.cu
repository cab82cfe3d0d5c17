// Bandwidth of the norm-family kernels (RMSNorm, QK-norm + RoPE, SwiGLU; each backward including its
// weight-gradient reduction) in the shapes of an OLMo-2 training step, against a device-to-device copy
// that moves the same bytes (reads + writes). Each call runs 3 warm-up times, then `runs` timed times
// (CUDA events around each call, the median reported). Bytes = the minimum the call must read and write.
// Nothing is asserted.
//
// usage: norm_kernels_bench [--n 32768] [--widths 512,1024] [--t 2048] [--head-dim 64] [--runs 20]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/swiglu_cuda.h"

namespace fp4::cuda {
namespace {

struct Options {
  int n = 32768, t = 2048, head_dim = 64, runs = 20;
  std::vector<int> widths = {512, 1024};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    FP4_CHECK(i + 1 < argc, "norm_kernels_bench: ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--n") {
      o.n = std::stoi(v);
    } else if (a == "--t") {
      o.t = std::stoi(v);
    } else if (a == "--head-dim") {
      o.head_dim = std::stoi(v);
    } else if (a == "--runs") {
      o.runs = std::stoi(v);
    } else if (a == "--widths") {
      o.widths.clear();
      size_t start = 0;
      while (start < v.size()) {
        const size_t end = std::min(v.find(',', start), v.size());
        o.widths.push_back(std::stoi(v.substr(start, end - start)));
        start = end + 1;
      }
    } else {
      FP4_THROW("norm_kernels_bench: unknown option ", a);
    }
  }
  FP4_CHECK(o.n > 0 && o.t > 0 && o.n % o.t == 0 && o.runs > 0, "norm_kernels_bench: bad --n/--t/--runs");
  return o;
}

// Deterministic pseudo-random values in about [-scale, scale) + bias (a hash of the index).
__device__ float hashed(size_t i, float scale, float bias) {
  unsigned h = static_cast<unsigned>(i) * 2654435761u ^ static_cast<unsigned>(i >> 32);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return bias + scale * (static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f);
}
__global__ void fill_kernel(float* p, size_t count, float scale, float bias) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = hashed(i, scale, bias);
}
__global__ void fill_kernel(bf16* p, size_t count, float scale, float bias) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hashed(i, scale, bias));
}

template <typename T>
DeviceBuffer<T> filled(size_t count, float scale = 1.0f, float bias = 0.0f) {
  DeviceBuffer<T> b(count);
  fill_kernel<<<1024, 256>>>(b.data(), count, scale, bias);
  FP4_CUDA_CHECK_LAUNCH("fill_kernel");
  return b;
}

// Median microseconds of `runs` timed calls after 3 warm-ups.
double median_us(const std::function<void()>& call, int runs) {
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    FP4_CUDA_CHECK(cudaEventRecord(start));
    call();
    FP4_CUDA_CHECK(cudaEventRecord(stop));
    FP4_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000.0 * ms);
  }
  FP4_CUDA_CHECK(cudaEventDestroy(start));
  FP4_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// A device-to-device copy moving `bytes` in all (half read, half written).
double copy_us(size_t bytes, int runs) {
  DeviceBuffer<unsigned char> src(bytes / 2), dst(bytes / 2);
  return median_us(
      [&] { FP4_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes / 2, cudaMemcpyDeviceToDevice)); },
      runs);
}

void report(const char* name, int n, int width, size_t bytes, double us, int runs) {
  const double copy = copy_us(bytes, runs);
  const double gbs = bytes / us * 1e-3, copy_gbs = bytes / copy * 1e-3;
  std::printf(
      "%-24s n=%-6d width=%-5d %8.1f MB %9.1f us %8.1f GB/s | copy %8.1f us %8.1f GB/s | %.2fx copy\n", name,
      n, width, bytes * 1e-6, us, gbs, copy, copy_gbs, copy / us);
}

void bench_width(const Options& o, int d) {
  const int n = o.n, f = 2 * d;
  const size_t nd = static_cast<size_t>(n) * d;
  const float eps = 1e-6f;
  auto w = filled<float>(static_cast<size_t>(d), 0.2f, 1.0f),
       w2 = filled<float>(static_cast<size_t>(d), 0.2f, 1.0f);
  auto dw = filled<float>(static_cast<size_t>(d)), dw2 = filled<float>(static_cast<size_t>(d));
  auto rstd = filled<float>(static_cast<size_t>(n), 0.1f, 1.0f),
       rstd2 = filled<float>(static_cast<size_t>(n), 0.1f, 1.0f);
  DeviceBuffer<float> scratch(norm_backward_scratch_floats(n, 2 * d));

  {  // RMSNorm forward as in a block: BF16 rows + FP32 residual -> FP32 and BF16 outputs.
    auto x = filled<bf16>(nd, 2.0f);
    auto res = filled<float>(nd);
    DeviceBuffer<float> out(nd);
    DeviceBuffer<bf16> out16(nd);
    const double us = median_us(
        [&] {
          rmsnorm_forward(x.data(), w.data(), res.data(), out.data(), out16.data(), rstd.data(), n, d, eps,
                          nullptr);
        },
        o.runs);
    report("rmsnorm_forward", n, d, nd * (2 + 4 + 4 + 2), us, o.runs);
  }
  {  // RMSNorm backward, BF16 rows: FP32 dout + BF16 x -> BF16 dx (+ dw).
    auto g = filled<float>(nd);
    auto x = filled<bf16>(nd, 2.0f);
    DeviceBuffer<bf16> dx(nd);
    const double us = median_us(
        [&] {
          rmsnorm_backward(g.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), scratch.data(), n,
                           d, nullptr);
        },
        o.runs);
    report("rmsnorm_backward", n, d, nd * (4 + 2 + 2), us, o.runs);
  }
  {  // QK-norm + RoPE: [n][3d] BF16 in and out; the backward rewrites the q, k parts in place.
    const int half = o.head_dim / 2;
    DeviceBuffer<float> cos_t(static_cast<size_t>(o.t) * half), sin_t(static_cast<size_t>(o.t) * half);
    std::vector<float> hc(cos_t.size()), hs(sin_t.size());
    for (int pos = 0; pos < o.t; ++pos)
      for (int i = 0; i < half; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * i / o.head_dim);
        hc[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::cos(angle));
        hs[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::sin(angle));
      }
    cos_t.upload(hc.data(), hc.size());
    sin_t.upload(hs.data(), hs.size());
    auto qkv = filled<bf16>(3 * nd, 2.0f);
    auto dqkv = filled<bf16>(3 * nd);
    DeviceBuffer<bf16> out(3 * nd);
    const double fwd = median_us(
        [&] {
          qk_norm_rope_forward(qkv.data(), out.data(), w.data(), w2.data(), cos_t.data(), sin_t.data(),
                               rstd.data(), rstd2.data(), n, o.t, d, o.head_dim, eps, nullptr);
        },
        o.runs);
    report("qk_norm_rope_forward", n, d, 3 * nd * (2 + 2), fwd, o.runs);
    // In place: every timed call sees the previous call's output as its gradient (same bytes moved).
    const double bwd = median_us(
        [&] {
          qk_norm_rope_backward(dqkv.data(), qkv.data(), w.data(), w2.data(), cos_t.data(), sin_t.data(),
                                rstd.data(), rstd2.data(), dw.data(), dw2.data(), scratch.data(), n, o.t, d,
                                o.head_dim, nullptr);
        },
        o.runs);
    report("qk_norm_rope_backward", n, d, 2 * nd * (2 + 2 + 2), bwd, o.runs);
  }
  {  // SwiGLU with f = 2 d: gu [n][2f] -> out [n][f]; backward dout [n][f] + gu -> dgu [n][2f].
    const size_t nf = static_cast<size_t>(n) * f;
    auto gu = filled<bf16>(2 * nf, 3.0f);
    auto dout = filled<bf16>(nf);
    DeviceBuffer<bf16> out(nf), dgu(2 * nf);
    const double fwd = median_us([&] { swiglu_forward(gu.data(), out.data(), n, f, nullptr); }, o.runs);
    report("swiglu_forward", n, f, nf * (4 + 2), fwd, o.runs);
    const double bwd =
        median_us([&] { swiglu_backward(dout.data(), gu.data(), dgu.data(), n, f, nullptr); }, o.runs);
    report("swiglu_backward", n, f, nf * (2 + 4 + 4), bwd, o.runs);
  }
}

}  // namespace
}  // namespace fp4::cuda

int main(int argc, char** argv) {
  try {
    const auto o = fp4::cuda::parse(argc, argv);
    for (const int d : o.widths) fp4::cuda::bench_width(o, d);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norm_kernels_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
