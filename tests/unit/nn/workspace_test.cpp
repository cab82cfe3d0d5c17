// The backward's shared buffers and the rotary tables: every buffer has the shape its users index it by on
// random model and batch shapes, and the tables hold cos/sin of pos * theta^(-2i / head_dim), recomputed
// only when the length changes.
#include "nn/workspace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace fp4 {
namespace {

using Shape = std::vector<int64_t>;

TEST(Workspace, BuffersHaveTheShapesOfTheirUsers) {
  std::mt19937 rng(std::random_device{}());
  Workspace ws;
  for (int trial = 0; trial < 50; ++trial) {
    ModelConfig cfg;
    cfg.n_heads = 1 + static_cast<int>(rng() % 4);
    cfg.d_model = cfg.n_heads * 2 * (1 + static_cast<int>(rng() % 8));
    cfg.d_ff = 1 + static_cast<int>(rng() % 64);
    const int b = 1 + static_cast<int>(rng() % 4), t = 1 + static_cast<int>(rng() % 33);
    const int64_t n = int64_t{b} * t, d = cfg.d_model, ff = cfg.d_ff;
    ws.resize(cfg, b, t);  // reused across shapes, as the engines do
    EXPECT_EQ(ws.dqkv.shape(), (Shape{n, 3 * d}));
    for (const Tensor* x : {&ws.dq, &ws.dk, &ws.datt, &ws.dy, &ws.dh}) EXPECT_EQ(x->shape(), (Shape{n, d}));
    EXPECT_EQ(ws.dprobs.shape(), (Shape{t, t}));
    EXPECT_EQ(ws.dgu.shape(), (Shape{n, 2 * ff}));
    EXPECT_EQ(ws.dact.shape(), (Shape{n, ff}));
  }
}

TEST(RopeTables, HoldTheRotaryAnglesAndFollowTheLength) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    ModelConfig cfg;
    cfg.n_heads = 1 + static_cast<int>(rng() % 4);
    cfg.d_model = cfg.n_heads * 2 * (1 + static_cast<int>(rng() % 16));
    cfg.rope_theta = trial % 2 ? 10000.0f : 500000.0f;
    const int hd = cfg.head_dim(), half = hd / 2, t = 1 + static_cast<int>(rng() % 300);
    RopeTables rope;
    rope.resize(cfg, t);
    ASSERT_EQ(rope.t, t);
    ASSERT_EQ(rope.cos.shape(), (Shape{t, half}));
    ASSERT_EQ(rope.sin.shape(), (Shape{t, half}));
    for (int pos = 0; pos < t; ++pos)
      for (int i = 0; i < half; ++i) {
        const double angle = pos * std::pow(double(cfg.rope_theta), -2.0 * i / hd);
        ASSERT_NEAR(rope.cos.data()[pos * half + i], std::cos(angle), 1e-6) << pos << "," << i;
        ASSERT_NEAR(rope.sin.data()[pos * half + i], std::sin(angle), 1e-6) << pos << "," << i;
      }
    // The same length keeps the tables; another one rebuilds them for it.
    rope.cos.data()[0] = 7.0f;
    rope.resize(cfg, t);
    EXPECT_EQ(rope.cos.data()[0], 7.0f);
    rope.resize(cfg, t + 1);
    EXPECT_EQ(rope.cos.data()[0], 1.0f);  // position 0: angle 0
    EXPECT_EQ(rope.cos.shape(), (Shape{t + 1, half}));
  }
}

}  // namespace
}  // namespace fp4
