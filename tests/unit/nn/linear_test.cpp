#include "nn/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../ops/gradcheck.h"
#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

TEST(Linear, ForwardIsXTimesWTransposed) {
  std::mt19937 rng(test::fresh_seed());
  ParameterSet ps;
  auto lin = make_linear(ps, {"l", 5, 3, LinearPolicy{}, "bf16"});
  ps.allocate();
  ASSERT_EQ(ps.size(), 1);
  EXPECT_EQ(ps.at(0).info.name, "l");
  EXPECT_EQ(ps.at(0).info.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(ps.at(0).info.weight_decay);
  const auto w = test::normal_vector(rng, 15);
  std::copy(w.begin(), w.end(), ps.value(0).begin());
  const auto x = test::normal_vector(rng, 4 * 5);
  std::vector<float> y(4 * 3);
  lin->forward(x.data(), y.data(), 4);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 3; ++o) {
      double s = 0;
      for (int k = 0; k < 5; ++k) s += static_cast<double>(x[i * 5 + k]) * w[o * 5 + k];
      EXPECT_NEAR(y[i * 3 + o], s, 1e-5);
    }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n = 6, in = 9, out = 7;
  ParameterSet ps;
  auto lin = make_linear(ps, {"lin", in, out, LinearPolicy{}, "bf16"});
  ps.allocate();
  auto w = ps.value(0);
  const auto w0 = test::normal_vector(rng, w.size());
  std::copy(w0.begin(), w0.end(), w.begin());
  auto x = test::normal_vector(rng, static_cast<size_t>(n) * in);
  const auto r = test::uniform_vector(rng, static_cast<size_t>(n) * out);
  std::vector<float> y(static_cast<size_t>(n) * out), dx(x.size(), 3.0f);
  auto loss = [&] {
    lin->forward(x.data(), y.data(), n);
    return test::project(y, r);
  };
  loss();
  lin->backward(r.data(), dx.data(), n, false);
  test::expect_gradient(x, dx, loss, rng, "linear dx");
  const std::vector<float> dw(ps.grad(0).begin(), ps.grad(0).end());
  test::expect_gradient(ps.value(0), dw, loss, rng, "linear dW");

  // A second backward adds to dW and, with accumulate_dx, to dx.
  loss();
  std::vector<float> dx2(x.size(), 1.0f);
  lin->backward(r.data(), dx2.data(), n, true);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], dx[i] + 1.0f);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(ps.grad(0)[i], 2 * dw[i], 1e-5 * (1 + std::fabs(dw[i])));
}

TEST(Linear, BackwardWithoutMatchingForwardThrows) {
  ParameterSet ps;
  auto lin = make_linear(ps, {"blocks.3.mlp.w_down", 4, 2, LinearPolicy{}, "bf16"});
  ps.allocate();
  std::vector<float> dy(2 * 2), dx(2 * 4);
  EXPECT_THROW(lin->backward(dy.data(), dx.data(), 2, false), Error);
}

TEST(Linear, QuantizedPolicyNeedsAQuantContext) {
  ParameterSet ps;
  LinearPolicy policy;
  policy[Operand::kQ1X].format = QuantFormat::kNvfp4;
  policy[Operand::kQ3dY].format = QuantFormat::kNvfp4;
  try {
    make_linear(ps, {"blocks.0.attn.wqkv", 128, 384, policy, "tetrajet-v2"});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("linear blocks.0.attn.wqkv: recipe tetrajet-v2 quantizes it"), std::string::npos)
        << msg;
  }
  // With a context the NVFP4 layer is built, and its forward differs from the dense product only by the
  // quantization of X (Q1) here.
  QuantContext ctx{3, 0};
  ParameterSet ps2;
  auto layer = make_linear(ps2, {"blocks.0.attn.wqkv", 128, 384, policy, "tetrajet-v2", 0, &ctx});
  ps2.allocate();
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& w : ps2.values()) w = 0.05f * nd(rng);
  std::vector<float> x(16 * 128), y(16 * 384), y_ref(16 * 384);
  for (auto& v : x) v = nd(rng);
  layer->forward(x.data(), y.data(), 16);
  cpu::gemm(false, true, 16, 384, 128, 1.0f, x.data(), 128, ps2.value(0).data(), 128, 0.0f, y_ref.data(),
            384);
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i)
    num += (y[i] - y_ref[i]) * (y[i] - y_ref[i]), den += y_ref[i] * y_ref[i];
  EXPECT_GT(std::sqrt(num / den), 1e-3);  // quantized
  EXPECT_LT(std::sqrt(num / den), 0.2);   // but close
}

}  // namespace
}  // namespace fp4
