// Stochastic rounding (RECIPES.md section 1): unbiased for |v| <= 6, only ever the two grid neighbours,
// and at tensor level the mean over seeds converges to the input at the 1/sqrt(N) rate; RTN does not.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "numerics/formats.h"
#include "numerics/nvfp4_block.h"
#include "numerics/quantize.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

using test::kE2m1Grid;

// The grid neighbours of a in [0, 6]: lo <= a <= hi (lo == hi on a grid point).
void neighbours(double a, double& lo, double& hi) {
  const int i = test::ref_e2m1_floor_index(a);
  lo = kE2m1Grid[i];
  hi = (lo == a || i == 7) ? lo : kE2m1Grid[i + 1];
}

TEST(StochasticRounding, UnbiasedOnValuesAndBiasedWithRtn) {
  FP4_SEEDED_RNG(g);
  std::vector<float> values = {0.0f,  0.5f,  1.0f, 1.5f, 2.0f, 3.0f,   4.0f,   6.0f,   0.25f, 0.75f,
                               1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 1e-3f,  0.01f,  0.1f,   5.9f,  5.99f,
                               0.3f,  1.1f,  2.7f, 3.3f, 4.4f, 1.999f, 2.001f, 3.999f, 4.001f};
  std::uniform_real_distribution<float> u(0.0f, 6.0f);
  for (int i = 0; i < 20; ++i) values.push_back(u(g));
  const RngStream stream{g(), g()};
  const int64_t n = 100000;
  uint64_t index = 0;
  for (float mag : values)
    for (float v : {mag, -mag}) {
      double lo, hi;
      neighbours(mag, lo, hi);
      const double sigma = std::sqrt((mag - lo) * (hi - mag));  // sd of one SR draw if it is unbiased
      double sum = 0.0;
      int64_t ups = 0;
      for (int64_t k = 0; k < n; ++k) {
        const float q = e2m1_decode(e2m1_encode_sr(v, philox_sr_word(stream, index++)));
        ASSERT_TRUE(std::fabs(q) == lo || std::fabs(q) == hi) << v << " -> " << q;
        ASSERT_EQ(std::signbit(q), std::signbit(v)) << v;
        sum += q;
        ups += std::fabs(q) == hi && hi != lo;
      }
      const double mean = sum / n;
      if (sigma == 0.0) {
        EXPECT_EQ(mean, v) << "grid value " << v;
        continue;
      }
      EXPECT_NEAR(mean, v, 6.0 * sigma / std::sqrt(double(n))) << "SR of " << v << " is biased";
      const double p_up = (mag - lo) / (hi - lo);
      EXPECT_NEAR(double(ups) / n, p_up, 6.0 * std::sqrt(p_up * (1 - p_up) / n)) << v;
      // RTN is deterministic: its bias is measurable wherever v is not (almost) a grid point.
      const double rtn_bias = std::fabs(e2m1_decode(e2m1_encode_rtn(v)) - double(v));
      if (std::min(mag - lo, hi - mag) > 0.02 * (hi - lo)) {
        EXPECT_GT(rtn_bias, 10.0 * sigma / std::sqrt(double(n))) << "RTN of " << v;
      }
    }
}

// With 16 random bits a decision, the rounding probability is exact to 2^-16: over all 65536 values of the
// half word, the mean of SR(v) is within gap * 2^-16 of v (RECIPES.md section 1's bound), on random values of
// every binade, the grid points and the ties, both signs.
TEST(StochasticRounding, SixteenBitDecisionsAreUnbiasedTo2PowMinus16) {
  FP4_SEEDED_RNG(g);
  std::vector<float> values = {0.0f, 0.25f, 0.5f, 0.75f, 1.25f, 2.5f, 3.5f, 5.0f, 6.0f, 1e-3f, 5.999f};
  std::uniform_real_distribution<float> u(0.0f, 6.0f);
  for (int i = 0; i < 40; ++i) values.push_back(u(g));
  for (float mag : values)
    for (float v : {mag, -mag}) {
      double lo, hi;
      neighbours(mag, lo, hi);
      double sum = 0.0;
      for (uint32_t h = 0; h < 65536u; ++h) sum += e2m1_decode(e2m1_encode_sr(v, h << 16));
      const double mean = sum / 65536.0;
      EXPECT_LE(std::fabs(mean - v), (hi - lo) * std::ldexp(1.0, -16) + 1e-12) << "v = " << v;
    }
}

// nvfp4_sr_value_tensor (the value without its code, as Q-Attn's backward forms it) is bit for bit the
// decoded code of nvfp4_encode_tensor: random values of every magnitude and multiplier, the grid points and
// the midpoints scaled, each with a random SR word and with the words at the round-up boundary (the
// fraction's own bits, one below, one above), and zeros of both signs, subnormals, values above 6, inf,
// NaN and non-finite or zero multipliers.
TEST(StochasticRounding, ValueWithoutTheCodeIsTheDecodedCode) {
  FP4_SEEDED_RNG(g);
  const float inf = INFINITY, nan = NAN;
  std::vector<float> xs = {0.0f, -0.0f,  1e-45f,  -1e-45f, 1e-38f, 6.0f, -6.0f, 6.5f,
                           7.0f, 448.0f, 3.4e38f, -inf,    inf,    nan,  -nan};
  for (float q : test::kE2m1Grid)
    for (float d : {0.0f, 0.25f, 0.5f, 1.0f}) xs.push_back(q + d), xs.push_back(-(q + d));
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-140, 20);
  for (int i = 0; i < 4000; ++i) xs.push_back(std::ldexp(mant(g), binade(g)));
  std::vector<float> mults = {1.0f, 0.5f, 3.0f, 1e-30f, 1e30f, 3.4e38f, 0.0f, inf, nan};
  std::uniform_real_distribution<float> logm(-20.0f, 20.0f);
  for (int i = 0; i < 12; ++i) mults.push_back(std::exp2(logm(g)));
  std::uniform_int_distribution<uint32_t> word;
  for (float x : xs)
    for (float e : mults) {
      // The fraction SR compares against (e2m1_sr_index's s & 0x3FFFFF): the boundary words around it.
      const uint32_t frac = float_bits(mul_rn(abs_f(mul_rn(x, e)), kTwoPowMinus126)) & 0x3FFFFFu;
      for (uint32_t r : {word(g), frac << 10, (frac << 10) - 1024u, (frac << 10) + 1024u, 0u, 0xFFFFFFFFu,
                         word(g) & 0xFFFF0000u}) {
        const float want = e2m1_decode(nvfp4_encode_tensor(x, e, true, r));
        const float got = nvfp4_sr_value_tensor(x, e, r);
        ASSERT_EQ(float_bits(got), float_bits(want)) << "x " << x << " e_b " << e << " word " << r;
      }
    }
}

// Mean over N seeds of the SR-dequantized tensor versus the input (in the transformed domain with RHT).
struct Convergence {
  double chi_small = 0, chi_large = 0;  // mean of (mean_N - x)^2 / (var / N) at N = small, large
  double chi_rtn = 0;
  int64_t saturated = 0, used = 0;
};

Convergence measure(const std::vector<float>& x, int64_t rows, int64_t cols, QuantSpec spec,
                    std::mt19937_64& g, int n_small, int n_large) {
  const int64_t n = rows * cols;
  const RhtSigns signs = rht_signs_from_seed({g(), g()}, 16);
  std::vector<float> target = x;  // what the quantized tensor stands for
  if (spec.rht_n)
    for (int64_t i = 0; i < n; i += 16) rht_segment_n(&target[i], signs);
  spec.rounding = Rounding::kRtn;
  const Nvfp4Tensor rtn = quantize_nvfp4(x.data(), rows, cols, spec, {{g(), g()}, signs});
  spec.rounding = Rounding::kSr;
  // Scales do not depend on the random bits, so the two neighbours of every element are fixed: the values
  // of its RTN code's grid neighbours under the same scales.
  std::vector<double> lo(n), hi(n);
  Convergence out;
  std::vector<char> in_range(n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const float t = target[i];
      float a;  // |element| in units of the E2M1 grid
      if (spec.outer == OuterScale::kTensor) {
        a = std::fabs(t * nvfp4_encode_multiplier(rtn.scale(r, c), rtn.outer_scales[0]));
      } else {
        a = std::fabs(t) / (e4m3_decode(rtn.scale(r, c)) * rtn.outer_scale(r, c));
      }
      in_range[i] = a <= 6.0f;
      out.saturated += !in_range[i];
      double glo, ghi;
      neighbours(std::min(a, 6.0f), glo, ghi);
      auto value = [&](double grid) {
        const int idx = test::ref_e2m1_index(grid);
        const uint8_t code = static_cast<uint8_t>((std::signbit(t) ? 8 : 0) | idx);
        return spec.outer == OuterScale::kTensor
                   ? double(nvfp4_decode_tensor(code, rtn.scale(r, c), rtn.outer_scales[0]))
                   : double(nvfp4_decode_block128(code, rtn.scale(r, c), rtn.outer_scale(r, c)));
      };
      lo[i] = value(glo);
      hi[i] = value(ghi);
    }
  std::vector<double> sum(n, 0.0);
  std::vector<float> d(n);
  auto chi = [&](int count, const std::vector<double>& s, bool is_sum) {
    double acc = 0.0;
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double var = std::fabs((target[i] - lo[i]) * (hi[i] - target[i]));
      if (!in_range[i] || var < 1e-12 * target[i] * target[i]) continue;
      const double mean = is_sum ? s[i] / count : s[i];
      acc += (mean - target[i]) * (mean - target[i]) / (var / count);
      ++m;
    }
    out.used = m;
    return acc / m;
  };
  for (int k = 1; k <= n_large; ++k) {
    const Nvfp4Tensor q = quantize_nvfp4(x.data(), rows, cols, spec, {{g(), g()}, signs});
    dequantize(q, d.data());
    for (int64_t i = 0; i < n; ++i) {
      const double lo_i = std::min(lo[i], hi[i]), hi_i = std::max(lo[i], hi[i]);
      EXPECT_TRUE(d[i] >= lo_i && d[i] <= hi_i) << "element " << i << " left its two neighbours";
      sum[i] += d[i];
    }
    if (k == n_small) out.chi_small = chi(k, sum, true);
  }
  out.chi_large = chi(n_large, sum, true);
  std::vector<double> rtn_values(n);
  dequantize(rtn, d.data());
  for (int64_t i = 0; i < n; ++i) rtn_values[i] = d[i];
  out.chi_rtn = chi(n_large, rtn_values, false);
  return out;
}

TEST(StochasticRounding, TensorMeanConvergesToTheInput) {
  FP4_SEEDED_RNG(g);
  const int64_t rows = 32, cols = 256;
  const std::vector<float> x = test::gaussian(g, rows * cols);
  for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
    for (int rht : {0, 16})
      for (bool headroom : {false, true}) {
        QuantSpec spec;
        spec.format = QuantFormat::kNvfp4;
        spec.outer = outer;
        spec.rht_n = rht;
        spec.sr_headroom = headroom;
        spec.rounding = Rounding::kSr;
        SCOPED_TRACE(describe(spec));
        const Convergence c = measure(x, rows, cols, spec, g, 25, 400);
        // If unbiased, each term has expectation exactly 1 (the variance of a mean of N draws), at both N:
        // the error shrinks as 1/sqrt(N).
        EXPECT_NEAR(c.chi_small, 1.0, 0.2) << c.used << " elements";
        EXPECT_NEAR(c.chi_large, 1.0, 0.2) << c.used << " elements";
        EXPECT_GT(c.chi_rtn, 50.0) << "RTN converged like SR";
        EXPECT_GT(c.used, rows * cols / 2);
        // With the Quartet II headroom no block maximum can saturate, so every element is in range.
        if (headroom) {
          EXPECT_EQ(c.saturated, 0);
        }
        std::cout << describe(spec) << ": chi(N=25) " << c.chi_small << " chi(N=400) " << c.chi_large
                  << " chi(RTN) " << c.chi_rtn << " saturated " << c.saturated << "\n";
      }
}

}  // namespace
}  // namespace fp4
