// QuantLinearCpu: the unbiasedness that motivates TetraJet-v2's `aligned` backward operands, the NVIDIA
// recipe's 16x16 weight re-use, and the layer's bookkeeping.
#include "nn/quant_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

std::vector<float> gaussian(size_t n, std::mt19937& rng, float std) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double rel_err(const std::vector<double>& mean_sum, double count, const std::vector<float>& exact) {
  double num = 0, den = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double d = mean_sum[i] / count - exact[i];
    num += d * d;
    den += static_cast<double>(exact[i]) * exact[i];
  }
  return std::sqrt(num / den);
}

struct Convergence {
  std::vector<double> dx_err, dw_err;  // relative error of the running mean at each checkpoint
};

// Averages dX and dW over `calls` fresh seeds and compares them with the exact gradients of the
// quantized forward, dY W^ and dY^T X^.
Convergence average_backward(const LinearPolicy& policy, const std::vector<int>& checkpoints, uint64_t seed) {
  const int n = 128, in = 128, out = 128;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const auto x = gaussian(n * in, rng, 1.0f);
  const auto w = gaussian(out * in, rng, 0.05f);
  const auto dy = gaussian(n * out, rng, 0.01f);
  QuantLinearCpu layer(policy, in, out, 7, "test");
  layer.keep_forward_values(true);
  std::vector<float> y(n * out), dx(n * in), dw(out * in);
  std::vector<double> sum_dx(n * in, 0.0), sum_dw(out * in, 0.0);
  std::vector<float> exact_dx(n * in), exact_dw(out * in);
  Convergence conv;
  int done = 0;
  for (int target : checkpoints) {
    for (; done < target; ++done) {
      layer.forward(x.data(), w.data(), y.data(), n, QuantContext{seed, static_cast<uint64_t>(done)});
      std::fill(dw.begin(), dw.end(), 0.0f);
      layer.backward(dy.data(), dx.data(), dw.data(), n, false);
      for (size_t i = 0; i < dx.size(); ++i) sum_dx[i] += dx[i];
      for (size_t i = 0; i < dw.size(); ++i) sum_dw[i] += dw[i];
      if (done == 0) {
        cpu::gemm(false, false, n, in, out, 1.0f, dy.data(), out, layer.last_w_hat().data(), in, 0.0f,
                  exact_dx.data(), in);
        cpu::gemm(true, false, out, in, n, 1.0f, dy.data(), out, layer.last_x_hat().data(), in, 0.0f,
                  exact_dw.data(), in);
      }
    }
    conv.dx_err.push_back(rel_err(sum_dx, done, exact_dx));
    conv.dw_err.push_back(rel_err(sum_dw, done, exact_dw));
  }
  return conv;
}

TEST(QuantLinear, TetraJetBackwardIsUnbiasedAtTheSqrtRate) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Recipe r = load_recipe("tetrajet-v2-base");
  const std::vector<int> cps = {16, 64, 256, 1024};
  const Convergence c = average_backward(r.linear, cps, seed);
  for (size_t i = 0; i < cps.size(); ++i)
    std::cout << "tetrajet-v2-base calls " << cps[i] << ": rel err dX " << c.dx_err[i] << ", dW "
              << c.dw_err[i] << "\n";
  // 64x more samples: an unbiased mean's error shrinks 8x; allow for noise in the estimate.
  EXPECT_LT(c.dx_err.back(), c.dx_err.front() / 5.0);
  EXPECT_LT(c.dw_err.back(), c.dw_err.front() / 5.0);
  // Each 4x step roughly halves it.
  for (size_t i = 1; i < cps.size(); ++i) {
    EXPECT_LT(c.dx_err[i], c.dx_err[i - 1] * 0.75);
    EXPECT_LT(c.dw_err[i], c.dw_err[i - 1] * 0.75);
  }
}

TEST(QuantLinear, RequantizingTheOriginalXLeavesABias) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Recipe r = load_recipe("tetrajet-v2-base", {"linear.q6.source=original"});
  const std::vector<int> cps = {16, 64, 256, 1024};
  const Convergence c = average_backward(r.linear, cps, seed);
  for (size_t i = 0; i < cps.size(); ++i)
    std::cout << "q6 = original, calls " << cps[i] << ": rel err dW " << c.dw_err[i] << "\n";
  // The mean converges to dY^T X, not dY^T X^: the error stops shrinking.
  EXPECT_GT(c.dw_err.back(), c.dw_err.front() / 2.5);
  EXPECT_GT(c.dw_err.back(), 0.02);
}

TEST(QuantLinear, NvidiaRecipeReusesThe16x16WeightExactly) {
  std::mt19937 rng(std::random_device{}());
  const int n = 128, in = 128, out = 64;
  const auto x = gaussian(n * in, rng, 1.0f);
  const auto w = gaussian(out * in, rng, 0.05f);
  const Recipe r = load_recipe("nvidia-nvfp4");
  QuantLinearCpu layer(r.linear, in, out, 1, "nv");
  layer.keep_forward_values(true);
  std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.0f);
  layer.forward(x.data(), w.data(), y.data(), n, QuantContext{1, 0});
  // With Q3 switched off, dX must be exactly dY W^ (the forward's weight values, no re-quantization).
  Recipe exact_dy = r;
  exact_dy.linear[Operand::kQ3dY] = QuantSpec{};
  QuantLinearCpu layer2(exact_dy.linear, in, out, 1, "nv2");
  layer2.keep_forward_values(true);
  layer2.forward(x.data(), w.data(), y.data(), n, QuantContext{1, 0});
  const auto dy = gaussian(n * out, rng, 0.01f);
  layer2.backward(dy.data(), dx.data(), dw.data(), n, false);
  std::vector<float> expect(n * in);
  cpu::gemm(false, false, n, in, out, 1.0f, dy.data(), out, layer2.last_w_hat().data(), in, 0.0f,
            expect.data(), in);
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_FLOAT_EQ(dx[i], expect[i]) << "element " << i;
  // The forward keeps packed operands only: well under the 4 bytes/element of FP32 copies.
  EXPECT_LT(layer.saved_bytes(), (int64_t)(n * in + out * in) * 4 / 5);
}

TEST(QuantLinear, BackwardWithoutForwardIsAnError) {
  const Recipe r = load_recipe("tetrajet-v2-base");
  QuantLinearCpu layer(r.linear, 128, 128, 0, "lonely");
  std::vector<float> dy(128 * 128), dx(128 * 128), dw(128 * 128);
  EXPECT_THROW(layer.backward(dy.data(), dx.data(), dw.data(), 128, false), Error);
}

TEST(QuantLinear, ShapesThatCannotBeQuantizedAreNamed) {
  const Recipe r = load_recipe("tetrajet-v2-base");
  QuantLinearCpu layer(r.linear, 96, 128, 0, "blocks.0.mlp.down");  // 96 is not a multiple of 128
  std::vector<float> x(128 * 96), w(128 * 96), y(128 * 128);
  try {
    layer.forward(x.data(), w.data(), y.data(), 128, QuantContext{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.mlp.down"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4

namespace fp4 {
namespace {

// Without headroom, a block whose E4M3 scale rounded down can push its maximum past 6, where SR saturates:
// a small bias that shows once the noise has averaged away. sr_headroom (scale target 6*16/17) removes it.
TEST(QuantLinear, SrHeadroomRemovesTheSaturationFloor) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<int> cps = {32, 2048};
  const Recipe base = load_recipe("tetrajet-v2-base");
  std::vector<std::string> headroom;
  for (const char* q : {"q3", "q4", "q5", "q6"})
    headroom.push_back(std::string("linear.") + q + ".sr_headroom=true");
  const Recipe hr = load_recipe("tetrajet-v2-base", headroom);
  const Convergence cb = average_backward(base.linear, cps, seed);
  const Convergence ch = average_backward(hr.linear, cps, seed);
  std::cout << "calls 32 -> 2048 (ideal ratio 8): base dX " << cb.dx_err[0] << " -> " << cb.dx_err[1]
            << ", dW " << cb.dw_err[0] << " -> " << cb.dw_err[1] << "; headroom dX " << ch.dx_err[0] << " -> "
            << ch.dx_err[1] << ", dW " << ch.dw_err[0] << " -> " << ch.dw_err[1] << "\n";
  // With headroom the error shrinks as 1/sqrt(calls): 64x the calls, 8x less error.
  EXPECT_GT(ch.dx_err[0] / ch.dx_err[1], 6.0);
  EXPECT_GT(ch.dw_err[0] / ch.dw_err[1], 6.0);
  // Without it a floor remains: less reduction, and a larger final error.
  EXPECT_LT(cb.dx_err[0] / cb.dx_err[1], ch.dx_err[0] / ch.dx_err[1]);
  EXPECT_GT(cb.dx_err[1], 1.3 * ch.dx_err[1]);
  EXPECT_GT(cb.dw_err[1], 1.3 * ch.dw_err[1]);
}

}  // namespace
}  // namespace fp4
