// The LoRA-SVD layer (nn/lora_svd_linear.h) with quantization off (every operand FP32, as a bf16 recipe
// runs on the CPU): its backward against central differences of its own forward. The forward is linear
// in each of X, W_res, L1, L2, so the differences are exact up to FP32 rounding. dX and dL1 are the true
// gradients; dL2 and dW_res are the projected ones: U U^T (FD of L2) and (I - U U^T) (FD of W_res).
#include "nn/lora_svd_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/lora_svd.h"

namespace fp4 {
namespace {

struct Fixture {
  int n = 6, in = 40, out = 48, rank = 5;
  double beta = 0.75;
  ParameterSet params;
  QuantContext ctx;
  LoraSvd registry;
  std::unique_ptr<Linear> layer;
  std::vector<float> x, r;  // input [n x in] and the loss weights R [n x out]: loss = sum(Y * R)

  explicit Fixture(uint32_t seed) : registry(config()) {
    LinearSpec spec{"blocks.0.mlp.w_down", in, out, LinearPolicy{}, "bf16-test", 3, &ctx};
    layer = make_lora_svd_linear(params, spec, registry);
    params.allocate();
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (float& v : params.values()) v = 0.3f * nd(rng);
    x.resize(size_t(n) * in);
    r.resize(size_t(n) * out);
    for (float& v : x) v = nd(rng);
    for (float& v : r) v = nd(rng);
  }
  LoraSvdConfig config() const {
    LoraSvdConfig c;
    c.enabled = true;
    c.rank = rank;
    c.beta = beta;
    return c;
  }
  double loss() {
    std::vector<float> y(size_t(n) * out);
    layer->forward(x.data(), y.data(), n);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * r[i];
    return s;
  }
  // Central difference of the loss in every element of v.
  std::vector<double> fd(std::span<float> v) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float keep = v[i];
      const float h = 0.0625f;  // a power of two: x +- h is exact for |x| < 2^20 h ulp
      v[i] = keep + h;
      const double up = loss();
      v[i] = keep - h;
      const double down = loss();
      v[i] = keep;
      g[i] = (up - down) / (2.0 * h);
    }
    return g;
  }
};

// p = U U^T g for g [out x in] in double.
std::vector<double> project(const std::vector<float>& u, int out, int r, const std::vector<double>& g,
                            int in) {
  std::vector<double> c(size_t(r) * in, 0.0), p(g.size(), 0.0);
  for (int i = 0; i < out; ++i)
    for (int j = 0; j < r; ++j)
      for (int k = 0; k < in; ++k) c[size_t(j * in + k)] += u[size_t(i * r + j)] * g[size_t(i * in + k)];
  for (int i = 0; i < out; ++i)
    for (int j = 0; j < r; ++j)
      for (int k = 0; k < in; ++k) p[size_t(i * in + k)] += u[size_t(i * r + j)] * c[size_t(j * in + k)];
  return p;
}

void expect_close(std::span<const float> got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-3 * (1 + scale)) << what << " element " << i;
}

TEST(LoraSvdLinear, BackwardMatchesFiniteDifferencesWithTheProjection) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f(seed);
  const int w = f.params.require("blocks.0.mlp.w_down");
  const int l1 = f.params.require("blocks.0.mlp.w_down.lora_l1");
  const int l2 = f.params.require("blocks.0.mlp.w_down.lora_l2");
  EXPECT_EQ(f.params.at(l1).info.shape, (std::vector<int64_t>{f.rank, f.in}));
  EXPECT_EQ(f.params.at(l2).info.shape, (std::vector<int64_t>{f.out, f.rank}));

  const std::vector<double> fd_x = f.fd(f.x);
  const std::vector<double> fd_w = f.fd(f.params.value(w));
  const std::vector<double> fd_l1 = f.fd(f.params.value(l1));
  const std::vector<double> fd_l2 = f.fd(f.params.value(l2));

  f.params.zero_grads();
  f.loss();
  std::vector<float> dx(f.x.size());
  f.layer->backward(f.r.data(), dx.data(), f.n, false);
  expect_close(dx, fd_x, "dX");
  expect_close(f.params.grad(l1), fd_l1, "dL1");  // L2^T U U^T = L2^T: the true gradient

  const auto l2v = f.params.value(l2);
  const std::vector<float> u = cholesky_qr2(l2v.data(), f.out, f.rank);
  const std::vector<double> p_l2 = project(u, f.out, f.rank, fd_l2, f.rank);
  expect_close(f.params.grad(l2), p_l2, "dL2 = U U^T dL2_true");
  const std::vector<double> p_w = project(u, f.out, f.rank, fd_w, f.in);
  std::vector<double> rest(fd_w.size());
  for (size_t i = 0; i < rest.size(); ++i) rest[i] = fd_w[i] - p_w[i];
  expect_close(f.params.grad(w), rest, "dW_res = dW - U U^T dW");

  // The gradients accumulate over micro-batches, and dX adds when asked to.
  std::vector<float> g1(f.params.grads().begin(), f.params.grads().end());
  f.loss();
  std::vector<float> dx2 = dx;
  f.layer->backward(f.r.data(), dx2.data(), f.n, true);
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx2[i], 2 * dx[i], 1e-5 * (1 + std::fabs(dx[i])));
  for (size_t i = 0; i < g1.size(); ++i)
    ASSERT_NEAR(f.params.grads()[i], 2 * g1[i], 1e-5 * (1 + std::fabs(g1[i]))) << "gradient element " << i;
}

// LoraSvd::realign runs the layers on all host threads: the result must be that of one layer after the
// other (realign_layer in registry order), bit for bit, for layers of several shapes (odd sizes, tall, wide)
// and realignment numbers, and it must have changed the factors.
TEST(LoraSvd, RealignOnAllThreadsIsTheSerialLoopBitForBit) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  LoraSvdConfig c;
  c.enabled = true;
  c.rank = 5;
  c.beta = 0.5;
  const int shapes[][2] = {{40, 48}, {37, 53}, {96, 33}, {64, 64}, {130, 20}, {29, 31}};  // {in, out}
  auto build = [&](LoraSvd& registry, ParameterSet& params, QuantContext& ctx) {
    std::vector<std::unique_ptr<Linear>> layers;
    for (int k = 0; k < 6; ++k)
      layers.push_back(make_lora_svd_linear(params,
                                            {"blocks." + std::to_string(k) + ".mlp.w_up", shapes[k][0],
                                             shapes[k][1], LinearPolicy{}, "t", k, &ctx},
                                            registry));
    params.allocate();
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (float& v : params.values()) v = 0.2f * nd(rng);
    return layers;
  };
  for (int64_t index : {0, 3}) {
    LoraSvd threaded(c), serial(c);
    ParameterSet pt, ps;
    QuantContext ctx;
    const auto lt = build(threaded, pt, ctx);
    const auto ls = build(serial, ps, ctx);
    const std::vector<float> before(pt.values().begin(), pt.values().end());
    threaded.realign(pt, seed, index);
    for (const LoraSvd::Layer& l : serial.layers())
      serial.realign_layer(l, ps.value(l.w_res).data(), ps.value(l.l1).data(), ps.value(l.l2).data(), seed,
                           index);
    ASSERT_EQ(pt.values().size(), ps.values().size());
    EXPECT_EQ(std::memcmp(pt.values().data(), ps.values().data(), pt.values().size() * sizeof(float)), 0)
        << "realignment " << index;
    EXPECT_FALSE(std::equal(before.begin(), before.end(), pt.values().begin())) << "realignment " << index;
  }
}

TEST(LoraSvdLinear, RankMustFitTheLayer) {
  for (int rank : {40, 41, 100}) {  // min(in, out) = 40
    LoraSvdConfig c;
    c.enabled = true;
    c.rank = rank;
    LoraSvd registry(c);
    ParameterSet params;
    QuantContext ctx;
    try {
      make_lora_svd_linear(params, {"blocks.1.attn.wo", 40, 48, LinearPolicy{}, "t", 0, &ctx}, registry);
      FAIL() << "rank " << rank << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("blocks.1.attn.wo"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("min(in, out) = 40"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4
