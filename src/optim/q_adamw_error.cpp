#include "optim/q_adamw_error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "core/error.h"
#include "numerics/quantize.h"
#include "optim/quantized_moments.h"

namespace fp4 {
namespace {

struct Errors {
  double rel_l2, step, flushed;
};

Errors compare(std::span<const float> v, const std::vector<float>& got, float eps) {
  double num = 0, den = 0;
  std::vector<double> step(v.size());
  int64_t positive = 0, flushed = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    num += (static_cast<double>(got[i]) - v[i]) * (static_cast<double>(got[i]) - v[i]);
    den += static_cast<double>(v[i]) * v[i];
    step[i] = std::fabs(
        (std::sqrt(static_cast<double>(v[i])) + eps) / (std::sqrt(std::max(0.0, double{got[i]})) + eps) - 1);
    if (v[i] > 0) ++positive, flushed += got[i] == 0;
  }
  std::nth_element(step.begin(), step.begin() + static_cast<std::ptrdiff_t>(step.size() / 2), step.end());
  return {std::sqrt(num / den), step[step.size() / 2],
          positive ? static_cast<double>(flushed) / positive : 0.0};
}

}  // namespace

SecondMomentErrors second_moment_errors(std::span<const float> v, float eps, uint64_t seed) {
  FP4_CHECK(!v.empty(), "second_moment_errors: empty tensor");
  SecondMomentErrors r;
  r.size = static_cast<int64_t>(v.size());
  std::vector<float> codec(v.size());
  decode_second_moment(encode_second_moment(v, RngStream{seed, 0}), codec);
  // Plain NVFP4: one row, padded with zeros to a multiple of 16.
  const int64_t padded = (r.size + 15) / 16 * 16;
  std::vector<float> x(static_cast<size_t>(padded), 0.0f), back(static_cast<size_t>(padded));
  std::copy(v.begin(), v.end(), x.begin());
  QuantSpec spec;
  spec.format = QuantFormat::kNvfp4;
  spec.block = BlockShape::k1x16;
  spec.outer = OuterScale::kTensor;
  spec.rounding = Rounding::kRtn;
  dequantize(quantize_nvfp4(x.data(), 1, padded, spec, QuantRandomness{}), back.data());
  back.resize(v.size());
  const Errors c = compare(v, codec, eps), p = compare(v, back, eps);
  r.codec_rel_l2 = c.rel_l2, r.plain_rel_l2 = p.rel_l2;
  r.codec_step_err = c.step, r.plain_step_err = p.step;
  r.codec_flushed = c.flushed, r.plain_flushed = p.flushed;
  return r;
}

std::vector<float> synthetic_second_moment(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::student_t_distribution<double> t3(3.0);
  std::vector<double> rs(static_cast<size_t>(rows)), cs(static_cast<size_t>(cols));
  for (double& s : rs) s = std::exp(normal(rng));
  for (double& s : cs) s = std::exp(normal(rng));
  std::vector<double> v(static_cast<size_t>(rows * cols), 0.0);
  for (int step = 0; step < 200; ++step)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double g = 1e-3 * rs[i] * cs[j] * t3(rng);
        double& e = v[static_cast<size_t>(i * cols + j)];
        e = 0.95 * e + 0.05 * g * g;
      }
  return {v.begin(), v.end()};
}

int64_t q_adamw_state_bytes(int64_t n) {
  FP4_CHECK(n > 0, "q_adamw_state_bytes: need a positive size, got ", n);
  // Per moment, padded to whole 128-element tiles: a 4-bit code per element, an E4M3 scale per 16 and the
  // FP32 tensor scale; v adds a BF16 mean per tile (QuantizedMoment::packed_bytes, checked in the tests).
  const int64_t padded = (n + 127) / 128 * 128;
  const int64_t moment = padded / 2 + padded / 16 + 4;
  return 2 * moment + 2 * (padded / 128);
}

std::string optimizer_memory_table(const std::vector<ModelConfig>& models) {
  std::ostringstream t;
  t << "| model | parameters | FP32 AdamW state | BF16 AdamW state | Q-AdamW state (B/param) | Q-AdamW vs "
       "BF16 "
       "state | + FP32 weights and grads: Q-AdamW vs BF16-state |\n|---|---|---|---|---|---|---|\n";
  for (const ModelConfig& m : models) {
    const int64_t d = m.d_model, ff = m.d_ff, v = m.vocab_size;
    // The tensors the engine keeps (model/config.cpp's count): per block fused qkv, two head norms, wo,
    // the attention norm, fused gate+up, down, the MLP norm; embedding, final norm, head.
    std::vector<int64_t> sizes = {v * d, d, v * d};
    for (int l = 0; l < m.n_layers; ++l)
      for (int64_t n : {3 * d * d, d, d, d * d, d, 2 * ff * d, d * ff, d}) sizes.push_back(n);
    int64_t params = 0, q = 0;
    for (int64_t n : sizes) params += n, q += q_adamw_state_bytes(n);
    FP4_CHECK(params == m.parameter_count(), "optimizer_memory_table: ", m.name, " tensors sum to ", params,
              ", the model counts ", m.parameter_count());
    const double p = static_cast<double>(params);
    char row[512];
    std::snprintf(row, sizeof row,
                  "| %s | %.2fM | %.1f MiB | %.1f MiB | %.1f MiB (%.3f) | %+.1f%% | %+.1f%% |\n",
                  m.name.c_str(), p / 1e6, 8 * p / 1048576, 4 * p / 1048576, q / 1048576.0, q / p,
                  100 * (q / (4 * p) - 1), 100 * ((8 * p + q) / (12 * p) - 1));
    t << row;
  }
  return t.str();
}

}  // namespace fp4
