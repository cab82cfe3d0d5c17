// NewtonSchulzCuda (optim/cuda/newton_schulz_cuda.h) against the CPU newton_schulz at the same precision,
// for kFp32 and kBf16 (kNvfp4 is CudaQRootTrace's, in root_cuda_test.cu), on odd shapes in both
// orientations, a zero and a rank-1 matrix.
// Tolerances, from scripts/experiments/ns_summation_order.py: the iteration with FP32 sgemm products
// against the same with FP64 products rounded to FP32 ("another summation order"), both rounding operands
// to BF16 (nearest even) or neither; 150-200 clipped standard-normal matrices per shape, these shapes:
//  - five steps, |X_gpu - X_cpu|_F / |X_cpu|_F: FP32 at most 2.3e-6 (tol 1e-4); BF16 at most 0.024,
//    because an FP32 difference next to a BF16 rounding boundary flips an operand's rounding and NS
//    amplifies the flip (tol 0.1). BF16 against FP32 operands differs by 0.016-0.11 there, so this check
//    alone cannot tell them apart;
//  - one step, the median over elements of |X_gpu - X_cpu|: 0 in the model (the orders' FP32 results
//    agree in most elements and a flip moves few of them), while the CPU's BF16 and FP32 results differ
//    by a median of at least 6e-5 of their RMS; tol 0.1 of that median leaves room for an FP32 ulp or two
//    in every element and tells BF16 operands from FP32 ones.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "optim/cuda/newton_schulz_cuda.h"
#include "optim/newton_schulz.h"
#include "optimizer_test_util.h"

namespace fp4 {
namespace {

using testing::fresh_seed;

struct NsCase {
  const char* name;
  NsPrecision precision;
  double tol;        // five steps: |X_gpu - X_cpu|_F <= tol |X_cpu|_F
  double rank1_tol;  // the same on a rank-1 input
};

std::vector<float> gaussian(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

struct GpuResult {
  std::vector<float> x;
  cuda::NsDeviceResult sums;
};

GpuResult run_gpu(cuda::NewtonSchulzCuda& ns, const std::vector<float>& b, int64_t rows, int64_t cols,
                  const NsOptions& opt) {
  DeviceBuffer<float> in(b.size()), out(b.size());
  DeviceBuffer<cuda::NsDeviceResult> sums(1);
  in.upload(b.data(), b.size());
  ns.run(in.data(), rows, cols, opt, out.data(), sums.data(), nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  GpuResult r;
  r.x.resize(b.size());
  out.download(r.x.data(), b.size());
  sums.download(&r.sums, 1);
  return r;
}

double fro(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

double fro_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i)
    s += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  return std::sqrt(s);
}

double median_abs_diff(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) d[i] = std::abs(static_cast<double>(x[i]) - y[i]);
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

NsOptions options(NsPrecision p, int steps) {
  NsOptions o;
  o.precision = p;
  o.steps = steps;
  return o;
}

class CudaNewtonSchulz : public ::testing::TestWithParam<NsCase> {};

TEST_P(CudaNewtonSchulz, FollowsTheCpuAtItsPrecision) {
  const NsCase c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  cuda::NewtonSchulzCuda ns(c.precision);
  EXPECT_EQ(ns.precision(), c.precision);
  for (auto [r, k] :
       {std::pair<int64_t, int64_t>{37, 53}, {53, 37}, {96, 40}, {24, 200}, {64, 64}, {1, 17}, {23, 5}}) {
    const std::string shape = std::to_string(r) + "x" + std::to_string(k);
    for (int trial = 0; trial < 3; ++trial) {
      const std::vector<float> b = gaussian(rng, r * k);
      const NsOptions opt = options(c.precision, kNsDefaultSteps);
      const std::vector<float> want = newton_schulz(b, r, k, opt);
      const GpuResult got = run_gpu(ns, b, r, k, opt);
      EXPECT_LE(fro_diff(got.x, want), c.tol * fro(want)) << shape;
      double sq = 0;
      for (float v : b) sq += static_cast<double>(v) * v;
      EXPECT_NEAR(got.sums.input_sumsq, sq, 1e-12 * sq) << shape;
      EXPECT_NEAR(got.sums.output_fro2, fro(got.x) * fro(got.x), 1e-9 * got.sums.output_fro2) << shape;
      if (c.precision != NsPrecision::kBf16) continue;
      // One step: the device's BF16 result is the CPU's BF16 result, not its FP32 one.
      const NsOptions one = options(NsPrecision::kBf16, 1);
      const std::vector<float> cpu_bf16 = newton_schulz(b, r, k, one);
      const std::vector<float> cpu_fp32 = newton_schulz(b, r, k, options(NsPrecision::kFp32, 1));
      const double apart = median_abs_diff(cpu_bf16, cpu_fp32);
      ASSERT_GT(apart, 0.0) << shape;
      const std::vector<float> gpu_bf16 = run_gpu(ns, b, r, k, one).x;
      EXPECT_LE(median_abs_diff(gpu_bf16, cpu_bf16), 0.1 * apart) << shape;
    }
  }
  // A zero matrix stays zero; a rank-1 matrix gives the CPU's result (NS lifts the rounding noise in its
  // null space toward 1, so the model's worst is 5.7e-5 in FP32 and 0.012 in BF16: tol 5e-4 and 0.1).
  const std::vector<float> z(32 * 48, 0.0f);
  for (float v : run_gpu(ns, z, 32, 48, options(c.precision, kNsDefaultSteps)).x) ASSERT_EQ(v, 0.0f);
  const std::vector<float> u = gaussian(rng, 27), w = gaussian(rng, 45);
  std::vector<float> rank1(27 * 45);
  for (int64_t i = 0; i < 27; ++i)
    for (int64_t j = 0; j < 45; ++j) rank1[i * 45 + j] = u[i] * w[j];
  const NsOptions opt = options(c.precision, kNsDefaultSteps);
  const std::vector<float> want = newton_schulz(rank1, 27, 45, opt);
  EXPECT_LE(fro_diff(run_gpu(ns, rank1, 27, 45, opt).x, want), c.rank1_tol * fro(want)) << "rank 1";
}

TEST(CudaNewtonSchulzRefusals, OtherPrecisionIsRefused) {
  cuda::NewtonSchulzCuda ns(NsPrecision::kBf16);
  const std::vector<float> b(4 * 6, 1.0f);
  try {
    run_gpu(ns, b, 4, 6, options(NsPrecision::kFp32, 1));
    ADD_FAILURE() << "a BF16 Newton-Schulz ran FP32 options";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built for BF16 operands, asked for FP32"), std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaNewtonSchulz,
                         ::testing::Values(NsCase{"fp32", NsPrecision::kFp32, 1e-4, 5e-4},
                                           NsCase{"bf16", NsPrecision::kBf16, 0.1, 0.1}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fp4
