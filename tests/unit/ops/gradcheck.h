// Finite-difference gradient checks for FP32 code: central differences with the actually
// representable step, losses accumulated in double, errors judged norm-wise over the checked
// coordinates (plus a per-coordinate bound), so float rounding does not masquerade as a bug.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace fp4::test {

// A seed printed by every test that uses it, so a failure can be replayed.
inline uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

inline std::vector<float> normal_vector(std::mt19937& rng, size_t n, float std = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> uniform_vector(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// sum_i r_i * y_i in double: a scalar loss whose gradient with respect to y is r.
inline double project(std::span<const float> y, std::span<const float> r) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

struct GradCheckOptions {
  int max_coords = 48;      // coordinates checked (all when the tensor is smaller)
  double step = 1e-2;       // finite-difference step (relative to max(1, |x|))
  double norm_tol = 5e-3;   // ||fd - analytic|| / ||analytic|| over the checked coordinates
  double coord_tol = 3e-2;  // per coordinate: |fd - a| <= coord_tol * (|a| + max|a| * 0.1)
};

// Compares `analytic` (the gradient of loss() with respect to x, computed beforehand) with central
// differences of loss() perturbing x in place (x is restored).
inline void expect_gradient(std::span<float> x, std::span<const float> analytic_in,
                            const std::function<double()>& loss, std::mt19937& rng, const std::string& what,
                            GradCheckOptions opt = {}) {
  ASSERT_EQ(x.size(), analytic_in.size()) << what;
  const std::vector<float> analytic(analytic_in.begin(), analytic_in.end());
  std::vector<size_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  if (static_cast<int>(idx.size()) > opt.max_coords) {
    // Three quarters of the checks go to coordinates with a non-zero gradient (sparse gradients such
    // as an embedding's), the rest are drawn from all coordinates (zeros included).
    std::shuffle(idx.begin(), idx.end(), rng);
    const auto mid =
        std::stable_partition(idx.begin(), idx.end(), [&](size_t i) { return analytic[i] != 0.0f; });
    const size_t nonzero = static_cast<size_t>(mid - idx.begin());
    const size_t take = std::min(nonzero, static_cast<size_t>(opt.max_coords) * 3 / 4);
    std::shuffle(idx.begin() + static_cast<std::ptrdiff_t>(take), idx.end(), rng);
    idx.resize(static_cast<size_t>(opt.max_coords));
  }
  double amax = 0;
  for (size_t i : idx) amax = std::max(amax, std::fabs(static_cast<double>(analytic[i])));
  double num = 0, den = 0;
  for (size_t i : idx) {
    const float x0 = x[i];
    const double h = opt.step * std::max(1.0, std::fabs(static_cast<double>(x0)));
    const float xp = static_cast<float>(x0 + h), xm = static_cast<float>(x0 - h);
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
    const double a = analytic[i];
    num += (fd - a) * (fd - a);
    den += a * a;
    EXPECT_LE(std::fabs(fd - a), opt.coord_tol * (std::fabs(a) + 0.1 * amax) + 1e-7)
        << what << " coordinate " << i << ": finite difference " << fd << " vs analytic " << a;
  }
  ASSERT_GT(den, 0.0) << what << ": the analytic gradient is zero on every checked coordinate";
  EXPECT_LE(std::sqrt(num / den), opt.norm_tol)
      << what << ": norm-wise relative error over " << idx.size() << " coordinates";
}

}  // namespace fp4::test
