// The device split of a LoRA-SVD layer's weight gradient (nn/cuda/lora_svd_split_cuda.h) against the CPU
// layer's computation (cholesky_qr2, project_onto_columns and the same GEMMs) on fresh random matrices, odd
// shapes and rank 1 included: U bit for bit, the three gradient increments within FP32 summation noise, the
// W_res increment orthogonal to col(L2); and the rank check.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/cuda/lora_svd_split_cuda.h"
#include "nn/lora_svd.h"
#include "ops/ops.h"
#include "optimizer_test_util.h"

namespace fp4 {
namespace {

std::vector<float> gaussian(std::mt19937& rng, size_t n, float std) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

DeviceBuffer<float> on_device(const std::vector<float>& v) {
  DeviceBuffer<float> b(v.size());
  b.upload(v.data(), v.size());
  return b;
}

std::vector<float> on_host(const DeviceBuffer<float>& b) {
  std::vector<float> v(b.size());
  b.download(v.data(), v.size());
  return v;
}

// ||(got - base) - (want - base)|| / ||want - base||: the error of an increment added to `base`.
double increment_error(const std::vector<float>& base, const std::vector<float>& want,
                       const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double w = static_cast<double>(want[i]) - base[i], g = static_cast<double>(got[i]) - base[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / den);
}

class LoraSvdSplitCuda : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(LoraSvdSplitCuda, MatchesTheCpuLayer) {
  const auto [out, in, r] = GetParam();
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", [" + std::to_string(out) + " x " + std::to_string(in) +
               "] rank " + std::to_string(r));
  std::mt19937 rng(seed);
  const float beta = 0.75f;
  const std::vector<float> dw = gaussian(rng, size_t(out) * in, 1.0f),
                           l1 = gaussian(rng, size_t(r) * in, 0.1f),
                           l2 = gaussian(rng, size_t(out) * r, 0.1f);
  const std::vector<float> gw0 = gaussian(rng, dw.size(), 1.0f), gl10 = gaussian(rng, l1.size(), 1.0f),
                           gl20 = gaussian(rng, l2.size(), 1.0f);

  // The CPU layer's backward after its wgrad (lora_svd_linear.cpp).
  std::vector<float> gw = gw0, gl1 = gl10, gl2 = gl20, p(dw.size());
  const std::vector<float> u = cholesky_qr2(l2.data(), out, r);
  project_onto_columns(u.data(), out, r, dw.data(), in, p.data());
  cpu::gemm(false, true, out, r, in, beta, p.data(), in, l1.data(), in, 1.0f, gl2.data(), r);
  cpu::gemm(true, false, r, in, out, beta, l2.data(), r, p.data(), in, 1.0f, gl1.data(), in);
  for (size_t i = 0; i < dw.size(); ++i) gw[i] += dw[i] - p[i];

  DeviceBuffer<float> ddw = on_device(dw), dl1 = on_device(l1), dl2 = on_device(l2), dgw = on_device(gw0),
                      dgl1 = on_device(gl10), dgl2 = on_device(gl20);
  cuda::GemmF32Runner gemm;
  cuda::LoraSvdSplitWorkspace ws;
  cuda::lora_svd_split_gradient(ddw.data(), dl1.data(), dl2.data(), out, in, r, beta, dgw.data(), dgl1.data(),
                                dgl2.data(), ws, gemm, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  testing::expect_same_floats(u, on_host(ws.u), "U");
  const std::vector<float> ggw = on_host(dgw), ggl1 = on_host(dgl1), ggl2 = on_host(dgl2);
  EXPECT_LT(increment_error(gw0, gw, ggw), 1e-5);
  EXPECT_LT(increment_error(gl10, gl1, ggl1), 1e-5);
  EXPECT_LT(increment_error(gl20, gl2, ggl2), 1e-5);

  // The W_res increment dW - P has no component in col(U): ||U^T (dW - P)|| is rounding-level.
  double inside = 0, norm = 0;
  for (int k = 0; k < r; ++k)
    for (int j = 0; j < in; ++j) {
      double acc = 0;
      for (int i = 0; i < out; ++i)
        acc += static_cast<double>(u[size_t(i) * r + k]) *
               (static_cast<double>(ggw[size_t(i) * in + j]) - gw0[size_t(i) * in + j]);
      inside += acc * acc;
    }
  for (float x : dw) norm += static_cast<double>(x) * x;
  EXPECT_LT(std::sqrt(inside / norm), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LoraSvdSplitCuda,
                         ::testing::Values(std::tuple{96, 80, 8}, std::tuple{33, 17, 1},
                                           std::tuple{256, 512, 32}, std::tuple{1536, 512, 16}));

TEST(LoraSvdSplitCudaErrors, RankOutsideTheLayerIsRefused) {
  cuda::GemmF32Runner gemm;
  cuda::LoraSvdSplitWorkspace ws;
  DeviceBuffer<float> buf(64);
  for (int r : {0, 4}) {
    const std::string msg = testing::error_of([&] {
      cuda::lora_svd_split_gradient(buf.data(), buf.data(), buf.data(), 8, 4, r, 1.0f, buf.data(), buf.data(),
                                    buf.data(), ws, gemm, nullptr);
    });
    EXPECT_NE(msg.find("lora_svd_split_gradient: rank " + std::to_string(r) + " for a [8 x 4] layer"),
              std::string::npos)
        << msg;
  }
}

// LoraSvdBases: the U of several layers of different shapes from one wait, each bit for bit the CPU's
// cholesky_qr2 of that layer's L2; after L2 changes (as an optimizer step does) the next download and basis
// give the new U; a slot whose L2 was never downloaded is refused.
TEST(LoraSvdBasesCuda, EveryLayersBasisIsTheCpusAndFollowsL2) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<std::pair<int, int>> shapes = {{96, 8}, {33, 1}, {512, 32}, {1536, 16}};
  cuda::LoraSvdBases bases;
  std::vector<int> slots;
  std::vector<DeviceBuffer<float>> l2_dev;
  std::vector<std::vector<float>> l2_host;
  for (const auto& [out, r] : shapes) {
    slots.push_back(bases.add_layer(out, r));
    l2_host.push_back(gaussian(rng, size_t(out) * r, 0.1f));
    l2_dev.push_back(on_device(l2_host.back()));
  }
  const std::string never = testing::error_of([&] { bases.basis(slots[0], nullptr); });
  EXPECT_NE(never.find("has no basis"), std::string::npos) << never;
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < shapes.size(); ++k) bases.queue_download(slots[k], l2_dev[k].data(), nullptr);
    for (size_t k = shapes.size(); k-- > 0;) {  // backward order: the last layer first
      const auto [out, r] = shapes[k];
      DeviceBuffer<float> got(size_t(out) * r);
      FP4_CUDA_CHECK(
          cudaMemcpy(got.data(), bases.basis(slots[k], nullptr), got.bytes(), cudaMemcpyDeviceToDevice));
      testing::expect_same_floats(cholesky_qr2(l2_host[k].data(), out, r), on_host(got),
                                  "U of layer " + std::to_string(k) + ", round " + std::to_string(round));
    }
    // An optimizer step changes every L2.
    for (size_t k = 0; k < shapes.size(); ++k) {
      for (float& x : l2_host[k]) x += 0.01f * std::normal_distribution<float>(0.0f, 1.0f)(rng);
      l2_dev[k].upload(l2_host[k].data(), l2_host[k].size());
    }
  }
  const std::string bad = testing::error_of([&] { bases.basis(7, nullptr); });
  EXPECT_NE(bad.find("no slot 7"), std::string::npos) << bad;
}

// The two split forms agree: with U from LoraSvdBases the gradients are the same bits as the form that
// computes U itself.
TEST(LoraSvdBasesCuda, SplitWithTheBasisEqualsTheSelfContainedSplit) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int out = 200, in = 136, r = 12;
  const std::vector<float> dw = gaussian(rng, size_t(out) * in, 1.0f),
                           l1 = gaussian(rng, size_t(r) * in, 0.1f),
                           l2 = gaussian(rng, size_t(out) * r, 0.1f), g0 = gaussian(rng, dw.size(), 1.0f),
                           g1 = gaussian(rng, l1.size(), 1.0f), g2 = gaussian(rng, l2.size(), 1.0f);
  DeviceBuffer<float> ddw = on_device(dw), dl1 = on_device(l1), dl2 = on_device(l2);
  DeviceBuffer<float> a0 = on_device(g0), a1 = on_device(g1), a2 = on_device(g2);
  DeviceBuffer<float> b0 = on_device(g0), b1 = on_device(g1), b2 = on_device(g2);
  cuda::GemmF32Runner gemm;
  cuda::LoraSvdSplitWorkspace ws;
  cuda::lora_svd_split_gradient(ddw.data(), dl1.data(), dl2.data(), out, in, r, 0.5f, a0.data(), a1.data(),
                                a2.data(), ws, gemm, nullptr);
  cuda::LoraSvdBases bases;
  const int slot = bases.add_layer(out, r);
  bases.queue_download(slot, dl2.data(), nullptr);
  cuda::lora_svd_split_gradient_with_basis(ddw.data(), bases.basis(slot, nullptr), dl1.data(), dl2.data(),
                                           out, in, r, 0.5f, b0.data(), b1.data(), b2.data(), ws, gemm,
                                           nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  testing::expect_same_floats(on_host(a0), on_host(b0), "grad W_res");
  testing::expect_same_floats(on_host(a1), on_host(b1), "grad L1");
  testing::expect_same_floats(on_host(a2), on_host(b2), "grad L2");
}

}  // namespace
}  // namespace fp4
