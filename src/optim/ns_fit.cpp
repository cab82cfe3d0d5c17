#include "optim/ns_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "numerics/host_arrays.h"
#include "numerics/philox.h"

namespace fp4 {
namespace {

// Standard normals and uniforms from one Philox stream, consumed in order.
class NormalSource {
 public:
  explicit NormalSource(RngStream s) : s_(s) {}
  double uniform() {  // in (0, 1): 53 bits from two words, never exactly 0
    const uint64_t hi = philox_word(s_, next_++) >> 5, lo = philox_word(s_, next_++) >> 6;
    return (static_cast<double>(hi * 67108864ull + lo) + 0.5) * (1.0 / 9007199254740992.0);
  }
  double normal() {  // Box-Muller, one value per pair of uniforms
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  double gamma(double shape) {  // Marsaglia-Tsang; shape < 1 boosted by U^(1/shape)
    if (shape < 1.0) return gamma(shape + 1.0) * std::pow(uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      const double x = normal(), v0 = 1.0 + c * x;
      if (v0 <= 0.0) continue;
      const double v = v0 * v0 * v0;
      if (std::log(uniform()) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
  }
  double chi(double k) { return std::sqrt(2.0 * gamma(0.5 * k)); }

 private:
  RngStream s_;
  uint64_t next_ = 0;
};

// Eigen-decomposition of a symmetric n x n matrix (row-major, destroyed) by cyclic Jacobi rotations.
// Returns eigenvalues; v[i * n + k] is component i of eigenvector k.
std::vector<double> jacobi_eigen(std::vector<double>& a, int64_t n, std::vector<double>& v) {
  v.assign(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      diag += a[i * n + i] * a[i * n + i];
      for (int64_t j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    }
    if (off <= 1e-30 * diag) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<double> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = a[i * n + i];
  return w;
}

// x [rows x cols] in the wide orientation (r <= c) as FP64.
std::vector<double> wide_copy(const float* x, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t c = tall ? rows : cols;
  std::vector<double> w(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) w[tall ? j * c + i : i * c + j] = x[i * cols + j];
  return w;
}

std::vector<double> gram(const std::vector<double>& w, int64_t r, int64_t c) {
  std::vector<double> g(r * r, 0.0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = i; j < r; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < c; ++k) s += w[i * c + k] * w[j * c + k];
      g[i * r + j] = g[j * r + i] = s;
    }
  return g;
}

// Eigenvalues below lambda of the symmetric tridiagonal (diag, off) by the Sturm sequence.
int64_t count_below(const std::vector<double>& diag, const std::vector<double>& off2, double lambda) {
  int64_t count = 0;
  double q = 1.0;
  for (size_t i = 0; i < diag.size(); ++i) {
    q = diag[i] - lambda - (i > 0 ? off2[i - 1] / q : 0.0);
    if (q == 0.0) q = -1e-300;
    if (q < 0.0) ++count;
  }
  return count;
}

}  // namespace

std::vector<double> singular_values(const float* x, int64_t rows, int64_t cols) {
  FP4_CHECK(rows > 0 && cols > 0, "singular_values: empty matrix [", rows, " x ", cols, "]");
  const int64_t r = std::min(rows, cols), c = std::max(rows, cols);
  std::vector<double> g = gram(wide_copy(x, rows, cols), r, c), v;
  std::vector<double> w = jacobi_eigen(g, r, v);
  for (double& e : w) e = std::sqrt(std::max(e, 0.0));
  std::sort(w.begin(), w.end(), std::greater<>());
  return w;
}

std::vector<double> polar_factor(const float* x, int64_t rows, int64_t cols) {
  FP4_CHECK(rows > 0 && cols > 0, "polar_factor: empty matrix [", rows, " x ", cols, "]");
  const bool tall = rows > cols;
  const int64_t r = std::min(rows, cols), c = std::max(rows, cols);
  const std::vector<double> w = wide_copy(x, rows, cols);
  std::vector<double> g = gram(w, r, c), v;
  const std::vector<double> lambda = jacobi_eigen(g, r, v);
  const double lmax = *std::max_element(lambda.begin(), lambda.end());
  for (double l : lambda)
    FP4_CHECK(l > 1e-20 * lmax && lmax > 0.0, "polar_factor: matrix [", rows, " x ", cols,
              "] is rank deficient (Gram eigenvalue ", l, " of max ", lmax, ")");
  // polar = V diag(lambda^-1/2) V^T W.
  std::vector<double> t(r * c, 0.0), p(r * c, 0.0);
  for (int64_t k = 0; k < r; ++k) {
    const double f = 1.0 / std::sqrt(lambda[k]);
    for (int64_t i = 0; i < r; ++i) {
      const double vik = v[i * r + k] * f;
      for (int64_t j = 0; j < c; ++j) t[k * c + j] += vik * w[i * c + j];
    }
  }
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < r; ++k) {
      const double vik = v[i * r + k];
      for (int64_t j = 0; j < c; ++j) p[i * c + j] += vik * t[k * c + j];
    }
  if (!tall) return p;
  std::vector<double> out(rows * cols);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[j * cols + i] = p[i * c + j];
  return out;
}

NsSampleSet make_ns_samples(int64_t rows, int64_t cols, int count, uint64_t seed) {
  FP4_CHECK(rows > 0 && cols > 0 && count > 0, "make_ns_samples: need a shape and a sample count, got [",
            rows, " x ", cols, "] x ", count);
  NsSampleSet set;
  set.rows = rows;
  set.cols = cols;
  for (int s = 0; s < count; ++s) {
    NormalSource rng(RngStream{seed, static_cast<uint64_t>(s)});
    std::vector<float> x(rows * cols);
    for (float& e : x) e = static_cast<float>(rng.normal());
    set.polars.push_back(polar_factor(x.data(), rows, cols));
    set.inputs.push_back(std::move(x));
  }
  return set;
}

double ns_polar_error(const NsSampleSet& samples, const NsOptions& opt) {
  FP4_CHECK(!samples.inputs.empty(), "ns_polar_error: no samples");
  double sum = 0.0;
  for (size_t i = 0; i < samples.inputs.size(); ++i)
    sum += relative_frobenius_error(newton_schulz(samples.inputs[i], samples.rows, samples.cols, opt),
                                    samples.polars[i]);
  return sum / static_cast<double>(samples.inputs.size());
}

std::vector<double> ns_scalar_map(const NsCoefficients& coef, int steps, const std::vector<double>& sigma) {
  FP4_CHECK(!sigma.empty(), "ns_scalar_map: no singular values");
  double fro = 0.0;
  for (double s : sigma) fro += s * s;
  fro = std::sqrt(fro);
  FP4_CHECK(fro > 0.0 && std::isfinite(fro), "ns_scalar_map: singular values must be finite and not all 0");
  std::vector<double> out;
  out.reserve(sigma.size());
  for (double s0 : sigma) {
    double s = s0 / fro;
    for (int k = 0; k < steps; ++k) {
      const double s2 = s * s;
      s = s * (coef.a + s2 * (coef.b + coef.c * s2));
    }
    out.push_back(s);
  }
  return out;
}

double ns_scalar_error(const NsCoefficients& coef, int steps, const std::vector<double>& sigma) {
  double err = 0.0;
  for (double s : ns_scalar_map(coef, steps, sigma)) err += (s - 1.0) * (s - 1.0);
  return std::sqrt(err / static_cast<double>(sigma.size()));
}

std::vector<double> gaussian_singular_values(int64_t rows, int64_t cols, uint64_t seed) {
  FP4_CHECK(rows > 0 && cols > 0, "gaussian_singular_values: empty shape [", rows, " x ", cols, "]");
  const int64_t n = std::min(rows, cols), m = std::max(rows, cols);
  // Lower bidiagonal B: d_i ~ chi(m - i), e_i ~ chi(n - 1 - i) below the diagonal (0-based i).
  NormalSource rng(RngStream{seed, 0});
  std::vector<double> d(n), e(n, 0.0);
  for (int64_t i = 0; i < n; ++i) d[i] = rng.chi(static_cast<double>(m - i));
  for (int64_t i = 0; i + 1 < n; ++i) e[i] = rng.chi(static_cast<double>(n - 1 - i));
  // T = B^T B: diag d_i^2 + e_i^2, off-diagonal e_i d_{i+1}.
  std::vector<double> diag(n), off2(n > 1 ? n - 1 : 0);
  double hi = 0.0;
  for (int64_t i = 0; i < n; ++i) diag[i] = d[i] * d[i] + e[i] * e[i];
  for (int64_t i = 0; i + 1 < n; ++i) off2[i] = e[i] * d[i + 1] * e[i] * d[i + 1];
  for (int64_t i = 0; i < n; ++i)  // Gershgorin bound
    hi = std::max(hi,
                  diag[i] + (i > 0 ? std::sqrt(off2[i - 1]) : 0.0) + (i + 1 < n ? std::sqrt(off2[i]) : 0.0));
  std::vector<double> sigma(n);
  for (int64_t k = 0; k < n; ++k) {  // k-th smallest eigenvalue
    double lo = 0.0, up = hi;
    for (int it = 0; it < 100 && up - lo > 1e-14 * hi; ++it) {
      const double mid = 0.5 * (lo + up);
      (count_below(diag, off2, mid) > k ? up : lo) = mid;
    }
    sigma[n - 1 - k] = std::sqrt(0.5 * (lo + up));
  }
  return sigma;
}

NsFitResult fit_ns_coefficients(int64_t rows, int64_t cols, int samples, uint64_t seed, bool quantized,
                                const NsFitSettings& settings) {
  FP4_CHECK(settings.max_evals >= 4, "fit_ns_coefficients: max_evals must be >= 4, got ", settings.max_evals);
  FP4_CHECK(rows > 0 && cols > 0 && samples > 0,
            "fit_ns_coefficients: need a positive shape and samples, got [", rows, " x ", cols, "] x ",
            samples);
  FP4_CHECK(settings.steps >= 1 && settings.steps <= 16,
            "fit_ns_coefficients: steps must be in [1, 16], got ", settings.steps);
  const NsSampleSet set = make_ns_samples(rows, cols, samples, seed);
  NsOptions opt;
  opt.steps = settings.steps;
  opt.precision = quantized ? NsPrecision::kNvfp4 : NsPrecision::kFp32;
  opt.rounding = settings.rounding;
  opt.sr = RngStream{seed, 1u << 20};
  using Point = std::array<double, 3>;
  int evals = 0;
  // Quantized (Q-Root, RECIPES.md 8.3 corrected): minimize e_q = ||NS_fp4(X) - NS_fp32(X)||_F /
  // ||NS_fp32(X)||_F (mean over the samples, same coefficients in both maps, RTN operands unless settings say
  // SR, whose stream is fixed by `seed` so the objective is deterministic). Constraint by rejection: a point
  // whose FP32 polar error exceeds the start point's scores +inf, so the FP32 map stays as orthogonalizing.
  NsOptions fp32 = opt;
  fp32.precision = NsPrecision::kFp32;
  std::vector<std::vector<float>> ref(set.inputs.size());
  double polar_limit = std::numeric_limits<double>::infinity();
  auto objective = [&](const Point& p) {
    ++evals;
    opt.coef = NsCoefficients{static_cast<float>(p[0]), static_cast<float>(p[1]), static_cast<float>(p[2])};
    if (!quantized) {
      const double e = ns_polar_error(set, opt);
      return std::isfinite(e) ? e : std::numeric_limits<double>::max();
    }
    fp32.coef = opt.coef;
    double polar = 0.0, eq = 0.0;
    for (size_t i = 0; i < set.inputs.size(); ++i) {
      ref[i] = newton_schulz(set.inputs[i], rows, cols, fp32);
      polar += relative_frobenius_error(ref[i], set.polars[i]);
      eq += relative_frobenius_error(newton_schulz(set.inputs[i], rows, cols, opt), ref[i]);
    }
    polar /= static_cast<double>(set.inputs.size());
    eq /= static_cast<double>(set.inputs.size());
    if (!std::isfinite(polar_limit)) polar_limit = polar;  // the first call is the start point
    if (!std::isfinite(eq) || !(polar <= polar_limit)) return std::numeric_limits<double>::max();
    return eq;
  };
  // Nelder-Mead (reflection 1, expansion 2, contraction 1/2, shrink 1/2).
  const NsCoefficients s0 = settings.start.value_or(quantized ? kQRootNsCoefficients : kMuonNsCoefficients);
  const Point start{s0.a, s0.b, s0.c};
  std::array<Point, 4> x{start, start, start, start};
  for (int k = 0; k < 3; ++k) x[k + 1][k] *= 1.0 + settings.initial_step;
  std::array<double, 4> f{};
  for (int k = 0; k < 4; ++k) f[k] = objective(x[k]);
  const double start_error = f[0];
  auto along = [](const Point& from, const Point& to, double t) {
    Point p;
    for (int k = 0; k < 3; ++k) p[k] = from[k] + t * (to[k] - from[k]);
    return p;
  };
  while (evals + 2 <= settings.max_evals) {
    std::array<int, 4> idx{0, 1, 2, 3};
    std::sort(idx.begin(), idx.end(), [&](int i, int j) { return f[i] < f[j]; });
    const int best = idx[0], second_worst = idx[2], worst = idx[3];
    Point centroid{0, 0, 0};
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 3; ++k) centroid[k] += x[idx[i]][k] / 3.0;
    const Point refl = along(centroid, x[worst], -1.0);
    const double fr = objective(refl);
    if (fr < f[best]) {
      const Point expd = along(centroid, x[worst], -2.0);
      const double fe = objective(expd);
      x[worst] = fe < fr ? expd : refl;
      f[worst] = std::min(fe, fr);
    } else if (fr < f[second_worst]) {
      x[worst] = refl;
      f[worst] = fr;
    } else {
      const Point con = fr < f[worst] ? along(centroid, refl, 0.5) : along(centroid, x[worst], 0.5);
      const double fc = objective(con);
      if (fc < std::min(fr, f[worst])) {
        x[worst] = con;
        f[worst] = fc;
      } else {
        if (evals + 3 > settings.max_evals) break;
        for (int i = 1; i < 4; ++i) {
          x[idx[i]] = along(x[best], x[idx[i]], 0.5);
          f[idx[i]] = objective(x[idx[i]]);
        }
      }
    }
  }
  const int best = static_cast<int>(std::min_element(f.begin(), f.end()) - f.begin());
  NsFitResult result;
  result.coef = NsCoefficients{static_cast<float>(x[best][0]), static_cast<float>(x[best][1]),
                               static_cast<float>(x[best][2])};
  result.start_error = start_error;
  result.error = f[best];
  result.evals = evals;
  return result;
}

}  // namespace fp4
