// Confidence intervals over paired seeds for `fp4train report`: the mean of paired differences (Student's
// t interval) and the share of a reference gap closed, a ratio of two paired means (Fieller's interval).
#pragma once

#include <vector>

namespace fp4 {

// The p-quantile of Student's t distribution with df > 0 degrees of freedom (p in (0, 1)), from its CDF
// (a regularized incomplete beta function) by bisection to double precision.
double student_t_quantile(double p, double df);

// Mean of n paired differences with its two-sided 95% t interval (n - 1 degrees of freedom). With n < 2
// the bounds are NaN; with n = 0 the mean is NaN too.
struct PairedInterval {
  int n = 0;
  double mean = 0, sd = 0;  // sd: the sample standard deviation (n - 1 in the denominator)
  double lo = 0, hi = 0;
};
PairedInterval paired_mean_interval(const std::vector<double>& d);

// share = 1 - mean(x) / mean(y) for paired x_i (a recipe's gap to the baseline in seed i) and y_i (the
// reference's gap in the same seed), with the 95% Fieller interval: every theta for which the paired t
// test of x_i - theta y_i = 0 does not reject at 5%, mapped to 1 - theta. `bounded` is false when mean(y) is
// not distinguishable from 0 at that level (the set is then unbounded; lo and hi are NaN). n < 2: no
// interval.
struct ShareInterval {
  int n = 0;
  double share = 0, lo = 0, hi = 0;
  bool bounded = false;
};
ShareInterval share_closed_interval(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace fp4
