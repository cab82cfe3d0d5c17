// Benchmark of the fused causal attention (ops/cuda/attention/attention_cuda.h) in the engine's layout (fused
// QKV [B*T][3*H*D], out/dO [B*T][H*D], fused dQKV): forward, backward and forward+backward times (CUDA
// events, warm-up, median of 20) and TFLOP/s with the causal count (forward 2*2*B*H*T*T*D/2, backward 2.5x
// that), for the entry points (also with FP4_ATTENTION_FWD=mma: the mma.sync forward instead of the wgmma one
// on Hopper) and for every compiled tile configuration; then Q-Attn (nn/cuda/q_attention_cuda.h, the engine's
// attention.q_attn path) on the same buffers. Compare with bench/attention_sdpa.py.
// Usage: attention_bench [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/cuda/q_attention_cuda.h"
#include "ops/cuda/attention/attention_cuda.h"
#include "ops/cuda/attention/attention_variants.cuh"
#include "ops/cuda/cuda_check.h"

namespace {

using bf16 = __nv_bfloat16;
using fp4::DeviceBuffer;

struct Shape {
  int B, H, T, D;
};

// Median over reps of the time of fn, after warm-up runs.
double median_ms(const std::function<void()>& fn, int reps) {
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    FP4_CUDA_CHECK(cudaEventRecord(start));
    fn();
    FP4_CUDA_CHECK(cudaEventRecord(stop));
    FP4_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    FP4_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  FP4_CUDA_CHECK(cudaEventDestroy(start));
  FP4_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Values in [-2, 2) from a fixed LCG, rounded to BF16.
std::vector<bf16> random_bf16(size_t n, uint64_t seed) {
  std::vector<bf16> v(n);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = __float2bfloat16(static_cast<float>(x >> 40) / static_cast<float>(1ull << 24) * 4.f - 2.f);
  }
  return v;
}

struct Buffers {
  explicit Buffers(const Shape& s)
      : rows(static_cast<size_t>(s.B) * s.T),
        hd(s.H * s.D),
        qkv(rows * 3 * hd),
        out(rows * hd),
        dout(rows * hd),
        dqkv(rows * 3 * hd),
        lse(static_cast<size_t>(s.B) * s.H * s.T),
        ws(fp4::cuda::attention_backward_workspace_bytes(s.B, s.T, s.H, s.D)) {
    const std::vector<bf16> a = random_bf16(qkv.size(), 1), b = random_bf16(dout.size(), 2);
    qkv.upload(a.data(), a.size());
    dout.upload(b.data(), b.size());
  }
  size_t rows;
  int hd;
  DeviceBuffer<bf16> qkv, out, dout, dqkv;
  DeviceBuffer<float> lse;
  DeviceBuffer<unsigned char> ws;
};

struct Timing {
  double fwd, bwd, total;
};

void report(const char* who, const Shape& s, const Timing& t) {
  const double fwd_flop = 2.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.D;
  const double bwd_flop = 2.5 * fwd_flop;
  std::printf(
      "%-36s B%-3d H%-3d T%-5d D%-4d fwd %7.3f ms %6.1f TF/s | bwd %7.3f ms %6.1f TF/s | total %7.3f ms "
      "%6.1f TF/s\n",
      who, s.B, s.H, s.T, s.D, t.fwd, fwd_flop / t.fwd * 1e-9, t.bwd, bwd_flop / t.bwd * 1e-9, t.total,
      (fwd_flop + bwd_flop) / t.total * 1e-9);
}

Timing time_pair(const std::function<void()>& fwd, const std::function<void()>& bwd, int reps) {
  Timing t{};
  t.fwd = median_ms(fwd, reps);
  fwd();  // the backward reads the forward's out and lse
  t.bwd = median_ms(bwd, reps);
  t.total = median_ms(
      [&] {
        fwd();
        bwd();
      },
      reps);
  return t;
}

void bench_shape(const Shape& s, int reps) {
  namespace attn = fp4::cuda::attn;
  Buffers buf(s);
  const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
  const bf16* q = buf.qkv.data();
  const bf16 *k = q + buf.hd, *v = q + 2 * buf.hd;
  const int ld = 3 * buf.hd;
  bf16* dq = buf.dqkv.data();
  auto fwd_public = [&] {
    fp4::cuda::attention_forward(q, k, v, ld, buf.out.data(), buf.hd, buf.lse.data(), s.B, s.T, s.H, s.D,
                                 scale, nullptr);
  };
  auto bwd_public = [&] {
    fp4::cuda::attention_backward(q, k, v, ld, buf.out.data(), buf.dout.data(), buf.hd, buf.lse.data(), dq,
                                  dq + buf.hd, dq + 2 * buf.hd, ld, s.B, s.T, s.H, s.D, scale, buf.ws.data(),
                                  nullptr);
  };
  report("fp4train attention (entry points)", s, time_pair(fwd_public, bwd_public, reps));
  // Q-Attn: NVFP4 Q^, K^ (forward) and dS, K^^T, dS^T, Q^^T (backward), in both forms: fused (the default:
  // no T x T matrix, dS quantized in the kernel) and sliced (per (batch, head) slice, scores stored).
  for (const auto& [kernel, label] :
       {std::pair{fp4::cuda::QAttnKernel::kFused, "Q-Attn fused (attention.q_attn)"},
        std::pair{fp4::cuda::QAttnKernel::kSliced, "Q-Attn sliced (first form)"}}) {
    fp4::cuda::GemmRunner gemm;
    fp4::cuda::QAttnWorkspace qws;
    fp4::cuda::QAttentionCuda qa(0, kernel);
    const fp4::AttnShape as{s.B, s.T, s.H, s.D};
    fp4::QuantContext ctx;
    ctx.seed = 1;
    auto fwd_q = [&] {
      qa.forward(q, k, v, ld, buf.out.data(), buf.hd, buf.lse.data(), as, ctx, qws, gemm, nullptr);
    };
    auto bwd_q = [&] {
      qa.backward(v, ld, buf.out.data(), buf.lse.data(), buf.dout.data(), buf.hd, dq, dq + buf.hd,
                  dq + 2 * buf.hd, ld, as, qws, gemm, nullptr);
    };
    report(label, s, time_pair(fwd_q, bwd_q, reps));
  }
  // The forward before the wgmma kernel: the same entry points with the mma.sync forward selected.
  setenv("FP4_ATTENTION_FWD", "mma", 1);
  report("  with FP4_ATTENTION_FWD=mma", s, time_pair(fwd_public, bwd_public, reps));
  unsetenv("FP4_ATTENTION_FWD");

  const attn::FwdParams fp{
      q, k, v, ld, buf.out.data(), buf.hd, buf.lse.data(), s.B, s.T, s.H, scale * attn::kLog2e};
  const attn::BwdArgs ba =
      attn::make_bwd_args(q, k, v, ld, buf.out.data(), buf.dout.data(), buf.hd, buf.lse.data(), dq,
                          dq + buf.hd, dq + 2 * buf.hd, ld, s.B, s.T, s.H, s.D, scale, buf.ws.data());
  const bool wgmma_ok = attn::device_has_wgmma();
  for (const attn::FwdVariant& fv : attn::forward_variants()) {
    if (fv.head_dim != s.D || (attn::forward_variant_uses_wgmma(fv) && !wgmma_ok)) continue;
    const double ms = median_ms([&] { fv.launch(fp, nullptr); }, reps);
    std::printf("  %-40s %7.3f ms %6.1f TF/s\n", fv.name, ms,
                2.0 * s.B * s.H * double(s.T) * s.T * s.D / ms * 1e-9);
  }
  fwd_public();
  for (const attn::BwdVariant& bv : attn::backward_variants()) {
    if (bv.head_dim != s.D || (bv.wgmma && !wgmma_ok)) continue;
    const double ms = median_ms([&] { bv.launch(ba, nullptr); }, reps);
    std::printf("  %-40s %7.3f ms %6.1f TF/s\n", bv.name, ms,
                2.5 * 2.0 * s.B * s.H * double(s.T) * s.T * s.D / ms * 1e-9);
  }
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--reps N]\n", argv[0]);
      return 2;
    }
  }
  try {
    cudaDeviceProp prop{};
    FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; median of %d runs after 3 warm-ups\n", prop.name,
                prop.multiProcessorCount, reps);
    for (const Shape& s : {Shape{16, 8, 2048, 64}, Shape{16, 8, 2048, 128}, Shape{8, 16, 2048, 64}})
      bench_shape(s, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
