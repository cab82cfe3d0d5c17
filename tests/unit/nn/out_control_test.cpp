// OutControl (RECIPES.md section 7): channel counts and selection, calibration and its checkpoint state,
// and the split NVFP4/MXFP8 layer: forward error on outlier channels, unbiased FP4 gradients.
#include "nn/out_control.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "nn/quant_linear.h"
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

OutControlConfig calib_config(int start, int steps, int round_to, double ratio) {
  OutControlConfig c;
  c.enabled = true;
  c.calib_start = start;
  c.calib_steps = steps;
  c.round_to = round_to;
  c.ratio = ratio;
  return c;
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

// X with `outliers` channels scaled up (what OutControl is for), W normal.
struct OutlierCase {
  int n = 128, in = 256, out = 128;
  std::vector<float> x, w, dy;
  std::vector<int32_t> outlier;
};

OutlierCase outlier_case(std::mt19937& rng, int outliers) {
  OutlierCase c;
  c.x = gaussian(size_t(c.n * c.in), rng, 1.0f);
  c.w = gaussian(size_t(c.out * c.in), rng, 0.05f);
  c.dy = gaussian(size_t(c.n * c.out), rng, 0.01f);
  std::vector<int32_t> all(c.in);
  for (int i = 0; i < c.in; ++i) all[size_t(i)] = i;
  std::shuffle(all.begin(), all.end(), rng);
  c.outlier.assign(all.begin(), all.begin() + outliers);
  for (int r = 0; r < c.n; ++r)
    for (int32_t i : c.outlier) c.x[size_t(r * c.in + i)] *= 40.0f;
  return c;
}

// Calibrates `ch` on x once and freezes it.
void calibrate_once(OutControl& oc, OutChannels* ch, const std::vector<float>& x, int n) {
  oc.begin_step(1);
  ch->accumulate(x.data(), n);
  ASSERT_TRUE(oc.end_step(1).has_value());
}

double forward_error(QuantLinearCpu& layer, const OutlierCase& c, const std::vector<float>& exact) {
  std::vector<float> y(size_t(c.n * c.out));
  layer.forward(c.x.data(), c.w.data(), y.data(), c.n, QuantContext{1, 0});
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    num += double(y[i] - exact[i]) * (y[i] - exact[i]);
    den += double(exact[i]) * exact[i];
  }
  return std::sqrt(num / den);
}

TEST(OutControlLayer, OutlierChannelsInMxfp8CutTheForwardErrorAndAreTheOnesSelected) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const OutlierCase c = outlier_case(rng, 12);
  std::vector<float> exact(size_t(c.n * c.out));
  cpu::gemm(false, true, c.n, c.out, c.in, 1.0f, c.x.data(), c.in, c.w.data(), c.in, 0.0f, exact.data(),
            c.out);
  const Recipe r = load_recipe("tetrajet-v2-base");
  QuantLinearCpu plain(r.linear, c.in, c.out, 3, "plain");
  QuantLinearCpu split(r.linear, c.in, c.out, 3, "split");
  OutControl oc(calib_config(1, 1, 16, 0.05));
  OutChannels* ch = oc.add("split", c.in);
  split.set_out_channels(ch);
  calibrate_once(oc, ch, c.x, c.n);
  ASSERT_EQ(ch->c8().size(), 16u);  // ceil(12.8) -> 16
  for (int32_t o : c.outlier) EXPECT_TRUE(std::binary_search(ch->c8().begin(), ch->c8().end(), o)) << o;
  const double e_plain = forward_error(plain, c, exact), e_split = forward_error(split, c, exact);
  std::cout << "forward rel error vs FP32: plain " << e_plain << ", out_control " << e_split << "\n";
  // The outliers crush their blocks' other elements to zero in NVFP4; kept apart they do not.
  EXPECT_LT(e_split, 0.6 * e_plain);
  // Split channel sets with no outliers behave like the plain layer (same order of error).
  const OutlierCase flat = outlier_case(rng, 0);
  std::vector<float> exact_flat(size_t(flat.n * flat.out));
  cpu::gemm(false, true, flat.n, flat.out, flat.in, 1.0f, flat.x.data(), flat.in, flat.w.data(), flat.in,
            0.0f, exact_flat.data(), flat.out);
  EXPECT_LT(forward_error(split, flat, exact_flat), 2.0 * forward_error(plain, flat, exact_flat));
  EXPECT_GT(split.saved_bytes(), 0);
}

double rel_err(const std::vector<double>& sum, double count, const std::vector<float>& exact,
               const std::vector<size_t>& at) {
  double num = 0, den = 0;
  for (size_t i : at) {
    const double d = sum[i] / count - exact[i];
    num += d * d;
    den += double(exact[i]) * exact[i];
  }
  return std::sqrt(num / den);
}

TEST(OutControlLayer, SplitGradientsAreUnbiasedForTheFp4PartAndCloseForTheFp8Part) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const OutlierCase c = outlier_case(rng, 10);
  const Recipe r = load_recipe("tetrajet-v2-base");
  QuantLinearCpu layer(r.linear, c.in, c.out, 5, "split");
  OutControl oc(calib_config(1, 1, 16, 0.05));
  OutChannels* ch = oc.add("split", c.in);
  layer.set_out_channels(ch);
  calibrate_once(oc, ch, c.x, c.n);
  layer.keep_forward_values(true);
  std::vector<size_t> all_dx, w4, w8;
  for (size_t i = 0; i < size_t(c.n * c.in); ++i) all_dx.push_back(i);
  for (int o = 0; o < c.out; ++o) {
    for (int32_t i : ch->c4()) w4.push_back(size_t(o * c.in + i));
    for (int32_t i : ch->c8()) w8.push_back(size_t(o * c.in + i));
  }
  std::vector<float> y(size_t(c.n * c.out)), dx(size_t(c.n * c.in)), dw(size_t(c.out * c.in));
  std::vector<double> sum_dx(dx.size(), 0.0), sum_dw(dw.size(), 0.0);
  std::vector<float> exact_dx(dx.size()), exact_dw(dw.size());
  const std::vector<int> cps = {16, 64, 256};
  std::vector<double> ex, ew4;
  int done = 0;
  for (int target : cps) {
    for (; done < target; ++done) {
      layer.forward(c.x.data(), c.w.data(), y.data(), c.n, QuantContext{seed, uint64_t(done)});
      std::fill(dw.begin(), dw.end(), 0.0f);
      layer.backward(c.dy.data(), dx.data(), dw.data(), c.n, false);
      for (size_t i = 0; i < dx.size(); ++i) sum_dx[i] += dx[i];
      for (size_t i = 0; i < dw.size(); ++i) sum_dw[i] += dw[i];
      if (done == 0) {  // the exact gradients of the split quantized forward (X^, W^ are deterministic)
        cpu::gemm(false, false, c.n, c.in, c.out, 1.0f, c.dy.data(), c.out, layer.last_w_hat().data(), c.in,
                  0.0f, exact_dx.data(), c.in);
        cpu::gemm(true, false, c.out, c.in, c.n, 1.0f, c.dy.data(), c.out, layer.last_x_hat().data(), c.in,
                  0.0f, exact_dw.data(), c.in);
      }
    }
    ex.push_back(rel_err(sum_dx, done, exact_dx, all_dx));
    ew4.push_back(rel_err(sum_dw, done, exact_dw, w4));
    std::cout << "out_control calls " << done << ": rel err dX " << ex.back() << ", dW[:, C4] " << ew4.back()
              << "\n";
  }
  // 16x more samples: an unbiased mean's error shrinks 4x; allow for noise.
  EXPECT_LT(ex.back(), ex.front() / 2.5);
  EXPECT_LT(ew4.back(), ew4.front() / 2.5);
  // dW[:, C8] is deterministic (MXFP8 with RTN): close to exact, not converging.
  const double e8 = rel_err(sum_dw, done, exact_dw, w8);
  std::cout << "dW[:, C8] rel err " << e8 << "\n";
  EXPECT_LT(e8, 0.1);
  // The layer's W^ really holds the FP8 values in C8 (finer than FP4): check one outlier row of X^.
  const std::vector<float>& xh = layer.last_x_hat();
  double num = 0, den = 0;
  for (int rr = 0; rr < c.n; ++rr)
    for (int32_t i : ch->c8()) {
      const double d = xh[size_t(rr * c.in + i)] - c.x[size_t(rr * c.in + i)];
      num += d * d;
      den += double(c.x[size_t(rr * c.in + i)]) * c.x[size_t(rr * c.in + i)];
    }
  EXPECT_LT(std::sqrt(num / den), 0.05);  // E4M3 relative error, far under NVFP4's
}

}  // namespace
}  // namespace fp4
