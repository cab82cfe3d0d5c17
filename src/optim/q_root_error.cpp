#include "optim/q_root_error.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "core/error.h"
#include "numerics/host_arrays.h"
#include "optim/ns_fit.h"
#include "optim/root.h"

namespace fp4 {
namespace {

std::string cell(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", v);
  return b;
}

}  // namespace

std::vector<float> ns_sample_matrix(int64_t rows, int64_t cols, const std::string& kind, uint64_t seed,
                                    int i) {
  FP4_CHECK(kind == "normal" || kind == "t3", "ns_sample_matrix: kind must be normal or t3, got '", kind,
            "'");
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(i));
  std::normal_distribution<double> normal;
  std::student_t_distribution<double> t3(3.0);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& e : x) e = static_cast<float>(kind == "normal" ? normal(rng) : t3(rng));
  return x;
}

NsStepErrors ns_step_errors(int64_t rows, int64_t cols, const NsCoefficients& coef, int steps,
                            double clip_quantile, const std::string& kind, int samples, uint64_t seed) {
  FP4_CHECK(steps >= 1 && samples >= 1 && clip_quantile > 0 && clip_quantile <= 1,
            "ns_step_errors: need steps >= 1, samples >= 1 and clip_quantile in (0, 1], got ", steps, ", ",
            samples, ", ", clip_quantile);
  NsStepErrors r;
  r.e_q.assign(static_cast<size_t>(steps), 0.0);
  for (int s = 0; s < samples; ++s) {
    std::vector<float> x = ns_sample_matrix(rows, cols, kind, seed, s);
    if (clip_quantile < 1) clip_to_abs_quantile(x, clip_quantile);
    for (int k = 1; k <= steps; ++k) {
      NsOptions o;
      o.coef = coef;
      o.steps = k;
      const std::vector<float> fp32 = newton_schulz(x, rows, cols, o);
      o.precision = NsPrecision::kNvfp4;
      const std::vector<float> fp4 = newton_schulz(x, rows, cols, o);
      r.e_q[static_cast<size_t>(k - 1)] += relative_frobenius_error(fp4, fp32) / samples;
      if (k == steps) {
        r.fp32_polar_error += relative_frobenius_error(fp32, polar_factor(x.data(), rows, cols)) / samples;
        o.precision = NsPrecision::kBf16;
        r.e_bf16 += relative_frobenius_error(newton_schulz(x, rows, cols, o), fp32) / samples;
      }
    }
  }
  return r;
}

std::string q_root_error_table(const QRootTableOptions& opt) {
  std::ostringstream t;
  t << "| shape | input | coefficients (a, b, c) | clipping | e_q step 1 | 2 | 3 | 4 | 5 | BF16 NS vs FP32 "
       "(5 steps) | FP32 polar error (5 steps) |\n"
    << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& [rows, cols] : opt.shapes) {
    NsFitSettings fs;
    fs.max_evals = opt.fit_evals;
    const NsFitResult fit = fit_ns_coefficients(rows, cols, opt.fit_samples, opt.seed + 7, true, fs);
    const std::vector<std::pair<std::string, NsCoefficients>> sets = {
        {"Muon", kMuonNsCoefficients},
        {"Q-Root default", kQRootNsCoefficients},
        {"fitted (NVFP4)", fit.coef}};
    for (const char* kind : {"normal", "t3"})
      for (const auto& [name, coef] : sets)
        for (double q : {1.0, 0.99}) {
          const NsStepErrors e =
              ns_step_errors(rows, cols, coef, kNsDefaultSteps, q, kind, opt.samples, opt.seed);
          char c[96];
          std::snprintf(c, sizeof c, "%s (%.4f, %.4f, %.4f)", name.c_str(), coef.a, coef.b, coef.c);
          t << "| " << rows << " x " << cols << " | " << kind << " | " << c << " | "
            << (q < 1 ? "p99" : "none");
          for (double v : e.e_q) t << " | " << cell(v);
          t << " | " << cell(e.e_bf16) << " | " << cell(e.fp32_polar_error) << " |\n";
        }
  }
  return t.str();
}

}  // namespace fp4
