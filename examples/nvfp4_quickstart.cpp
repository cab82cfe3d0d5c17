// Using fp4train's numerics library on its own (docs/LIBRARY.md): quantize a matrix to NVFP4 the way the
// NVIDIA recipe and TetraJet-v2 quantize activations, look at the packed result, measure the error, and see
// stochastic rounding average out. Build target `example_nvfp4_quickstart`; ctest runs it and it exits
// non-zero when a property it prints does not hold.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "numerics/hadamard.h"
#include "numerics/philox.h"
#include "numerics/quant_spec.h"
#include "numerics/quantize.h"

namespace {

using fp4::QuantSpec;

QuantSpec nvfp4(fp4::OuterScale outer, fp4::Rounding rounding, int rht_n) {
  QuantSpec s;
  s.format = fp4::QuantFormat::kNvfp4;
  s.block = fp4::BlockShape::k1x16;
  s.outer = outer;
  s.rounding = rounding;
  s.rht_n = rht_n;
  return s;
}

// Randomness of one quantization: SR words and RHT signs from seeded Philox streams.
fp4::QuantRandomness randomness(uint64_t seed, int rht_n) {
  fp4::QuantRandomness r;
  r.sr = fp4::RngStream{seed, fp4::make_stream(/*tensor*/ 1, /*step*/ 0, /*purpose*/ 1)};
  if (rht_n > 0) r.signs = fp4::rht_signs_from_seed(fp4::RngStream{seed, fp4::make_stream(1, 0, 2)}, rht_n);
  return r;
}

// The RHT is orthogonal and H_n is symmetric: x = ((x' H_n) / sqrt(n)) * s undoes x' = ((x * s) H_n) /
// sqrt(n) on every n-element segment of a row.
void undo_rht(std::vector<float>& y, int64_t rows, int64_t cols, const fp4::RhtSigns& signs) {
  fp4::RhtSigns plain = signs;
  for (uint32_t& w : plain.mask) w = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += signs.n) {
      float* seg = y.data() + r * cols + c0;
      fp4::rht_segment_n(seg, plain);
      for (int i = 0; i < signs.n; ++i)
        if (signs.negative(i)) seg[i] = -seg[i];
    }
}

double relative_mse(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i)
    num += (x[i] - y[i]) * double(x[i] - y[i]), den += double(x[i]) * x[i];
  return num / den;
}

}  // namespace

int main() {
  // Activations of a linear layer: 256 tokens x 512 channels, Gaussian, with two outlier channels.
  const int64_t rows = 256, cols = 512;
  std::mt19937_64 g(2026);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[size_t(r * cols + c)] = normal(g) * (c == 7 || c == 300 ? 20.f : 1.f);

  struct Mode {
    const char* name;
    QuantSpec spec;
  };
  const Mode modes[] = {
      {"NVIDIA activations: 1x16, tensor scale, RTN",
       nvfp4(fp4::OuterScale::kTensor, fp4::Rounding::kRtn, 0)},
      {"TetraJet-v2 activations: 1x16, block128, RTN",
       nvfp4(fp4::OuterScale::kBlock128, fp4::Rounding::kRtn, 0)},
      {"gradients: 1x16, block128, SR, RHT16", nvfp4(fp4::OuterScale::kBlock128, fp4::Rounding::kSr, 16)},
  };
  bool ok = true;
  std::vector<float> y(x.size());
  for (const Mode& m : modes) {
    const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(x.data(), rows, cols, m.spec, randomness(1, m.spec.rht_n));
    fp4::dequantize(q, y.data());
    // With an RHT the codes hold the transformed values: undo it to compare with x.
    if (m.spec.rht_n > 0) undo_rht(y, rows, cols, randomness(1, m.spec.rht_n).signs);
    const double err = relative_mse(x, y);
    std::printf("%-48s %lld codes bytes, %lld scale bytes, %zu outer scales, relative MSE %.4f\n", m.name,
                static_cast<long long>(q.codes.size()), static_cast<long long>(q.scales.size()),
                q.outer_scales.size(), err);
    // NVFP4 on this data: about 1e-2 with RTN; SR adds the variance of its random rounding (about 2x).
    ok = ok && err > 0 && err < (m.spec.rounding == fp4::Rounding::kSr ? 0.05 : 0.02);
  }

  // Stochastic rounding is unbiased: the mean of K independently rounded copies approaches x like 1/sqrt(K).
  const QuantSpec sr = nvfp4(fp4::OuterScale::kBlock128, fp4::Rounding::kSr, 0);
  std::vector<double> mean(x.size(), 0.0);
  double err_at[2] = {0, 0};
  for (int k = 1; k <= 256; ++k) {
    const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(x.data(), rows, cols, sr, randomness(100 + k, 0));
    fp4::dequantize(q, y.data());
    for (size_t i = 0; i < x.size(); ++i) mean[i] += (y[i] - mean[i]) / k;
    if (k == 16 || k == 256) {
      std::vector<float> m(mean.begin(), mean.end());
      err_at[k == 256] = relative_mse(x, m);
      std::printf("SR mean of %3d copies: relative MSE %.6f\n", k, err_at[k == 256]);
    }
  }
  // 16x more copies: 16x less variance, down to the small bias of blocks whose scale rounded down (values
  // clamped at 6; `sr_headroom` removes it).
  ok = ok && err_at[1] < err_at[0] / 8;
  std::printf(ok ? "ok\n" : "FAILED\n");
  return ok ? 0 : 1;
}
