// OutControl's split NVFP4/MXFP8 linear layer (RECIPES.md section 7): outlier channels kept in MXFP8 cut
// the forward error and are the ones selected; the FP4 part's gradients are unbiased, the FP8 part's close.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "nn/out_control.h"
#include "nn/quant_linear.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using fp4::testing::calib_config;
using fp4::testing::gaussian;

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
