#include "report/paired_stats.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace fp4 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of the regularized incomplete beta function I_x(a, b), evaluated with the modified
// Lentz recurrence; converges fast for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::fabs(d) < kTiny ? kTiny : d);
  double f = d;
  for (int m = 1; m <= 10000; ++m) {
    for (int half = 0; half < 2; ++half) {
      // Even terms m(b - m)x / ((a + 2m - 1)(a + 2m)), odd terms -(a + m)(a + b + m)x / ((a + 2m)(a + 2m +
      // 1)).
      const double coef = half == 0 ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
                                    : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1 + coef * d;
      d = 1 / (std::fabs(d) < kTiny ? kTiny : d);
      c = 1 + coef / c;
      if (std::fabs(c) < kTiny) c = kTiny;
      const double step = c * d;
      f *= step;
      if (half == 1 && std::fabs(step - 1) < 1e-16) return f;
    }
  }
  return f;
}

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * beta_fraction(a, b, x) / a;
  return 1 - std::exp(log_front) * beta_fraction(b, a, 1 - x) / b;
}

double student_t_cdf(double t, double df) {
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

}  // namespace

double student_t_quantile(double p, double df) {
  FP4_CHECK(p > 0 && p < 1 && df > 0, "student_t_quantile: need p in (0, 1) and df > 0, got p = ", p,
            ", df = ", df);
  if (p == 0.5) return 0;
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

PairedInterval paired_mean_interval(const std::vector<double>& d) {
  PairedInterval r;
  r.n = static_cast<int>(d.size());
  r.mean = r.sd = r.lo = r.hi = kNaN;
  if (d.empty()) return r;
  double s = 0;
  for (double v : d) s += v;
  r.mean = s / r.n;
  if (r.n < 2) return r;
  double ss = 0;
  for (double v : d) ss += (v - r.mean) * (v - r.mean);
  r.sd = std::sqrt(ss / (r.n - 1));
  const double half = student_t_quantile(0.975, r.n - 1) * r.sd / std::sqrt(static_cast<double>(r.n));
  r.lo = r.mean - half;
  r.hi = r.mean + half;
  return r;
}

ShareInterval share_closed_interval(const std::vector<double>& x, const std::vector<double>& y) {
  FP4_CHECK(x.size() == y.size(), "share_closed_interval: ", x.size(), " gaps against ", y.size(),
            " reference gaps");
  ShareInterval r;
  r.n = static_cast<int>(x.size());
  r.share = r.lo = r.hi = kNaN;
  if (x.empty()) return r;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= r.n, my /= r.n;
  r.share = 1 - mx / my;
  if (r.n < 2) return r;
  double sxx = 0, syy = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  sxx /= r.n - 1, syy /= r.n - 1, sxy /= r.n - 1;
  // (mx - theta my)^2 <= c (sxx - 2 theta sxy + theta^2 syy), c = t^2 / n: a theta^2 + b theta + e <= 0.
  const double t = student_t_quantile(0.975, r.n - 1), c = t * t / r.n;
  const double a = my * my - c * syy, b = -2 * (mx * my - c * sxy), e = mx * mx - c * sxx;
  const double disc = b * b - 4 * a * e;
  if (!(a > 0) || disc < 0) return r;  // unbounded: the reference gap is not distinguishable from 0
  const double root = std::sqrt(disc);
  const double theta_lo = (-b - root) / (2 * a), theta_hi = (-b + root) / (2 * a);
  r.bounded = true;
  r.lo = 1 - theta_hi;
  r.hi = 1 - theta_lo;
  return r;
}

}  // namespace fp4
