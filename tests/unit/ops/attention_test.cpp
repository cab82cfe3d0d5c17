#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

struct Shape {
  int b, t, heads, hd;
};

// q, k, v are column slices of one [n][3*width + 2] buffer (as in the fused qkv output, plus padding).
struct Inputs {
  Shape s;
  int width, ld;
  std::vector<float> qkv;
  const float* q() const { return qkv.data(); }
  const float* k() const { return qkv.data() + width; }
  const float* v() const { return qkv.data() + 2 * width; }
};

Inputs make_inputs(const Shape& s, std::mt19937& rng) {
  Inputs in{s, s.heads * s.hd, 3 * s.heads * s.hd + 2, {}};
  in.qkv = test::normal_vector(rng, static_cast<size_t>(s.b) * s.t * in.ld);
  return in;
}

std::vector<float> forward(const Inputs& in, std::vector<float>* probs_out = nullptr) {
  const Shape& s = in.s;
  std::vector<float> out(static_cast<size_t>(s.b) * s.t * in.width);
  std::vector<float> probs(static_cast<size_t>(s.b) * s.heads * s.t * s.t);
  cpu::attention_forward(out.data(), in.width, probs.data(), in.q(), in.ld, in.k(), in.ld, in.v(), in.ld, s.b,
                         s.t, s.heads, s.hd);
  if (probs_out) *probs_out = probs;
  return out;
}

class AttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionTest, ForwardMatchesNaiveCausalSoftmax) {
  const Shape s = GetParam();
  std::mt19937 rng(test::fresh_seed());
  const Inputs in = make_inputs(s, rng);
  std::vector<float> probs;
  const auto out = forward(in, &probs);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int i = 0; i < s.t; ++i) {
        std::vector<double> w(static_cast<size_t>(i) + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int e = 0; e < s.hd; ++e)
            d += static_cast<double>(in.q()[(b * s.t + i) * in.ld + h * s.hd + e]) *
                 in.k()[(b * s.t + j) * in.ld + h * s.hd + e];
          w[j] = d * scale;
          mx = std::max(mx, w[j]);
        }
        for (auto& x : w) sum += (x = std::exp(x - mx));
        const float* p = probs.data() + ((static_cast<size_t>(b) * s.heads + h) * s.t + i) * s.t;
        for (int j = 0; j < s.t; ++j) EXPECT_NEAR(p[j], j <= i ? w[j] / sum : 0.0, 1e-6);
        for (int e = 0; e < s.hd; ++e) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += w[j] / sum * in.v()[(b * s.t + j) * in.ld + h * s.hd + e];
          EXPECT_NEAR(out[(b * s.t + i) * in.width + h * s.hd + e], o, 1e-5);
        }
      }
}

TEST_P(AttentionTest, LaterPositionsDoNotChangeEarlierOutputs) {
  const Shape s = GetParam();
  std::mt19937 rng(test::fresh_seed());
  Inputs in = make_inputs(s, rng);
  const auto out0 = forward(in);
  // Change q, k and v of the last position of every sequence.
  for (int b = 0; b < s.b; ++b)
    for (int j = 0; j < in.ld; ++j) in.qkv[(b * s.t + s.t - 1) * in.ld + j] += 1.0f;
  const auto out1 = forward(in);
  for (int b = 0; b < s.b; ++b)
    for (int i = 0; i < s.t - 1; ++i)
      for (int j = 0; j < in.width; ++j)
        EXPECT_EQ(out0[(b * s.t + i) * in.width + j], out1[(b * s.t + i) * in.width + j]);
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const Shape s = GetParam();
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Inputs in = make_inputs(s, rng);
  std::vector<float> probs;
  const auto out = forward(in, &probs);
  const auto r = test::uniform_vector(rng, out.size());
  // Gradients into one [n][ld] buffer laid out like qkv; the padding columns must stay untouched.
  std::vector<float> grad(in.qkv.size(), 7.0f), scratch(static_cast<size_t>(s.t) * s.t);
  cpu::attention_backward(grad.data(), in.ld, grad.data() + in.width, in.ld, grad.data() + 2 * in.width,
                          in.ld, scratch.data(), r.data(), in.width, probs.data(), in.q(), in.ld, in.k(),
                          in.ld, in.v(), in.ld, s.b, s.t, s.heads, s.hd);
  for (int row = 0; row < s.b * s.t; ++row) {
    EXPECT_EQ(grad[row * in.ld + 3 * in.width], 7.0f);
    EXPECT_EQ(grad[row * in.ld + 3 * in.width + 1], 7.0f);
    grad[row * in.ld + 3 * in.width] = grad[row * in.ld + 3 * in.width + 1] = 0.0f;
  }
  auto loss = [&] { return test::project(forward(in), r); };
  test::expect_gradient(in.qkv, grad, loss, rng, "attention d(q|k|v)", {.max_coords = 120});
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Shape{1, 1, 1, 4},  // one position: out = v
                                           Shape{2, 5, 2, 4}, Shape{1, 9, 3, 8}, Shape{3, 4, 1, 16}));

}  // namespace
}  // namespace fp4
