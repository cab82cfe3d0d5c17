// OutControl (RECIPES.md section 7): channel counts and selection, calibration and its checkpoint state
// (the split NVFP4/MXFP8 layer itself: quant_linear_split_test.cpp).
#include "nn/out_control.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "nn/quant_linear.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using fp4::testing::calib_config;
using fp4::testing::gaussian;

// Reference selection: sort all (score, index) pairs, highest score first, lower index on ties.
std::vector<int32_t> brute_top(const std::vector<double>& s, int k) {
  std::vector<std::pair<double, int32_t>> p;
  for (size_t i = 0; i < s.size(); ++i) p.emplace_back(-s[i], static_cast<int32_t>(i));
  std::sort(p.begin(), p.end());
  std::vector<int32_t> out;
  for (int j = 0; j < k; ++j) out.push_back(p[static_cast<size_t>(j)].second);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(OutControlSelection, PicksExactlyTheTopChannelsWithTiesToTheLowerIndex) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const int in = 16 * (1 + static_cast<int>(rng() % 40));
    std::vector<double> s(static_cast<size_t>(in));
    // Few distinct values in half the trials: many ties straddle the cut.
    std::uniform_int_distribution<int> level(0, trial % 2 ? 3 : 1 << 20);
    for (auto& v : s) v = level(rng);
    const int k = static_cast<int>(rng() % static_cast<unsigned>(in + 1));
    const std::vector<int32_t> got = select_top_channels(s, k);
    ASSERT_EQ(got, brute_top(s, k)) << "in " << in << " k " << k;
    const std::vector<int32_t> rest = complement_channels(got, in);
    ASSERT_EQ(rest.size() + got.size(), static_cast<size_t>(in));
    for (int32_t c : rest) ASSERT_FALSE(std::binary_search(got.begin(), got.end(), c));
  }
  EXPECT_THROW(select_top_channels(std::vector<double>(4, 1.0), 5), Error);
}

TEST(OutControlSelection, CountRoundsUpToRoundToAndStaysBelowI) {
  EXPECT_EQ(outlier_channel_count(640, 0.1, 16), 64);  // exactly 64: no spurious round-up
  EXPECT_EQ(outlier_channel_count(640, 0.1, 128), 128);
  EXPECT_EQ(outlier_channel_count(200, 0.1, 16), 32);    // ceil(20) -> 32
  EXPECT_EQ(outlier_channel_count(384, 0.1, 16), 48);    // ceil(38.4) = 39 -> 48
  EXPECT_EQ(outlier_channel_count(256, 0.6, 128), 128);  // 154 -> 256 reaches I: capped at 128
  EXPECT_EQ(outlier_channel_count(129, 0.5, 128), 128);
  EXPECT_EQ(outlier_channel_count(1024, 0.001, 16), 16);      // at least one block
  EXPECT_THROW(outlier_channel_count(128, 0.1, 128), Error);  // no multiple of 128 below 128
  EXPECT_THROW(outlier_channel_count(16, 0.5, 16), Error);
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int round_to = 16 * (1 + static_cast<int>(rng() % 8));
    const int in = round_to + 1 + static_cast<int>(rng() % 2000);
    const double ratio = std::uniform_real_distribution<double>(0.001, 0.999)(rng);
    const int c = outlier_channel_count(in, ratio, round_to);
    ASSERT_EQ(c % round_to, 0);
    ASSERT_GT(c, 0);
    ASSERT_LT(c, in);
    // Either the rounded-up ratio, or the cap when that reaches I.
    const int want = static_cast<int>(std::ceil(ratio * in - 1e-9));
    if (c < (in - 1) / round_to * round_to) {
      ASSERT_GE(c, want);
      ASSERT_LT(c - round_to, want);
    }
  }
}

// Runs steps 1..last of `oc`, feeding layer `name` the batches xs[step - 1] [n][in] while it calibrates.
void run_steps(OutControl& oc, OutChannels* ch, const std::vector<std::vector<float>>& xs, int n, int first,
               int last) {
  for (int step = first; step <= last; ++step) {
    oc.begin_step(step);
    if (ch->calibrating()) ch->accumulate(xs[static_cast<size_t>(step - 1)].data(), n);
    oc.end_step(step);
  }
}

TEST(OutControlCalibration, FreezesTheTopNormChannelsOfTheWindowAndReportsTheirShare) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int in = 256, n = 32, steps = 6;
  std::vector<std::vector<float>> xs;
  for (int s = 0; s < steps; ++s) xs.push_back(gaussian(static_cast<size_t>(n * in), rng, 1.0f));
  // Step 1 (before the window) makes channels 0..31 huge: they must not count.
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 32; ++i) xs[0][static_cast<size_t>(r * in + i)] *= 100.0f;
  OutControl oc(calib_config(2, 3, 16, 0.1));
  OutChannels* ch = oc.add("layer", in);
  for (int step = 1; step <= 5; ++step) {
    oc.begin_step(step);
    EXPECT_EQ(ch->calibrating(), step >= 2 && step <= 4) << "step " << step;
    if (ch->calibrating()) ch->accumulate(xs[static_cast<size_t>(step - 1)].data(), n);
    const auto report = oc.end_step(step);
    EXPECT_EQ(report.has_value(), step == 4);
    if (report) {
      ASSERT_EQ(report->layers.size(), 1u);
      EXPECT_EQ(report->layers[0].channels, 32);  // ceil(25.6) -> 32
    }
  }
  std::vector<double> norm(in, 0.0), sq(in, 0.0);
  for (int s = 1; s <= 3; ++s)
    for (int i = 0; i < in; ++i) {
      double q = 0;
      for (int r = 0; r < n; ++r) q += double(xs[s][size_t(r * in + i)]) * xs[s][size_t(r * in + i)];
      norm[size_t(i)] += std::sqrt(q);
      sq[size_t(i)] += q;
    }
  ASSERT_TRUE(ch->frozen());
  EXPECT_EQ(ch->c8(), brute_top(norm, 32));
  double kept = 0, all = 0;
  for (int i = 0; i < in; ++i) all += sq[size_t(i)];
  for (int32_t c : ch->c8()) kept += sq[size_t(c)];
  EXPECT_NEAR(ch->share(), kept / all, 1e-12);
  EXPECT_GT(ch->share(), 32.0 / in);  // the largest norms hold more than their head count
}

TEST(OutControlCalibration, StateRoundTripsBeforeDuringAndAfterTheWindow) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int in = 384, n = 16;
  std::vector<std::vector<float>> xs;
  for (int s = 0; s < 8; ++s) xs.push_back(gaussian(static_cast<size_t>(n * in), rng, 1.0f));
  const OutControlConfig cfg = calib_config(3, 4, 16, 0.1);
  OutControl whole(cfg);
  OutChannels* wch = whole.add("blocks.0.mlp.w_down", in);
  run_steps(whole, wch, xs, n, 1, 8);
  ASSERT_TRUE(wch->frozen());
  for (int cut : {1, 2, 4, 6, 7}) {  // before, at the start, inside, at the end of the window, after
    OutControl a(cfg);
    OutChannels* ach = a.add("blocks.0.mlp.w_down", in);
    run_steps(a, ach, xs, n, 1, cut);
    const std::vector<StateTensor> state = a.save_state();
    OutControl b(cfg);
    OutChannels* bch = b.add("blocks.0.mlp.w_down", in);
    b.load_state(state);
    run_steps(b, bch, xs, n, cut + 1, 8);
    ASSERT_TRUE(bch->frozen()) << "cut " << cut;
    EXPECT_EQ(bch->c8(), wch->c8()) << "cut " << cut;
    EXPECT_EQ(bch->c4(), wch->c4()) << "cut " << cut;
    EXPECT_EQ(bch->share(), wch->share()) << "cut " << cut;  // bit-exact
  }
  // A state without OutControl tensors leaves the layer unmeasured; a bad one is named.
  OutControl c(cfg);
  OutChannels* cch = c.add("blocks.0.mlp.w_down", in);
  c.load_state({});
  EXPECT_FALSE(cch->frozen());
  std::vector<StateTensor> bad = whole.save_state();
  for (auto& t : bad)
    if (t.name.find(".c8") != std::string::npos) t.dtype = "F32";
  try {
    c.load_state(bad);
    FAIL() << "a corrupt channel set was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out_control.blocks.0.mlp.w_down.c8"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(cch->frozen());
}

}  // namespace
}  // namespace fp4
