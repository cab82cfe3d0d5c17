#include "nn/lora_svd.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

constexpr double kEpsF32 = std::numeric_limits<float>::epsilon();

// Upper-triangular R with G = R^T R, in place in g [r x r] (lower part zeroed). False when a pivot is not
// above min_ratio times its diagonal entry (or not finite): the breakdown of Cholesky-QR.
bool cholesky_upper(std::vector<float>& g, int r, double min_ratio) {
  for (int j = 0; j < r; ++j) {
    const float orig = g[static_cast<size_t>(j) * r + j];
    float d = orig;
    for (int k = 0; k < j; ++k) d -= g[static_cast<size_t>(k) * r + j] * g[static_cast<size_t>(k) * r + j];
    if (!std::isfinite(d) || !(d > min_ratio * orig)) return false;
    const float rjj = std::sqrt(d);
    g[static_cast<size_t>(j) * r + j] = rjj;
    for (int c = j + 1; c < r; ++c) {
      float v = g[static_cast<size_t>(j) * r + c];
      for (int k = 0; k < j; ++k) v -= g[static_cast<size_t>(k) * r + j] * g[static_cast<size_t>(k) * r + c];
      g[static_cast<size_t>(j) * r + c] = v / rjj;
    }
    for (int c = 0; c < j; ++c) g[static_cast<size_t>(j) * r + c] = 0.0f;
  }
  return true;
}

// One Cholesky-QR pass on u [rows x r]: u <- u R^-1 with R = chol(u^T u + shift I). Leaves u unchanged and
// returns false on breakdown.
bool cholesky_qr_pass(std::vector<float>& u, int rows, int r, float shift, double min_ratio) {
  std::vector<float> g(static_cast<size_t>(r) * r);
  cpu::gemm(true, false, r, r, rows, 1.0f, u.data(), r, u.data(), r, 0.0f, g.data(), r);
  for (int j = 0; j < r; ++j) g[static_cast<size_t>(j) * r + j] += shift;
  if (!cholesky_upper(g, r, min_ratio)) return false;
  // Each row x of u solves y R = x by forward substitution.
  for (int i = 0; i < rows; ++i) {
    float* y = u.data() + static_cast<size_t>(i) * r;
    for (int j = 0; j < r; ++j) {
      float v = y[j];
      for (int k = 0; k < j; ++k) v -= y[k] * g[static_cast<size_t>(k) * r + j];
      y[j] = v / g[static_cast<size_t>(j) * r + j];
    }
  }
  return true;
}

// Gram-Schmidt twice in double on the columns of x [m x k]: orthonormal columns, a zero column where a
// column has nothing left (relative to its own norm, below rel_tol) after removing the earlier ones.
void orthonormalize_columns(std::vector<double>& x, int m, int k, double rel_tol) {
  std::vector<double> col(static_cast<size_t>(m));
  for (int j = 0; j < k; ++j) {
    double norm0 = 0;
    for (int i = 0; i < m; ++i) {
      col[static_cast<size_t>(i)] = x[static_cast<size_t>(i) * k + j];
      norm0 += col[static_cast<size_t>(i)] * col[static_cast<size_t>(i)];
    }
    norm0 = std::sqrt(norm0);
    for (int pass = 0; pass < 2; ++pass)
      for (int p = 0; p < j; ++p) {
        double dot = 0;
        for (int i = 0; i < m; ++i) dot += x[static_cast<size_t>(i) * k + p] * col[static_cast<size_t>(i)];
        for (int i = 0; i < m; ++i) col[static_cast<size_t>(i)] -= dot * x[static_cast<size_t>(i) * k + p];
      }
    double norm = 0;
    for (int i = 0; i < m; ++i) norm += col[static_cast<size_t>(i)] * col[static_cast<size_t>(i)];
    norm = std::sqrt(norm);
    const double inv = (norm > 0 && norm > rel_tol * norm0) ? 1.0 / norm : 0.0;
    for (int i = 0; i < m; ++i) x[static_cast<size_t>(i) * k + j] = col[static_cast<size_t>(i)] * inv;
  }
}

// out [rows x k] = a [rows x cols] x [cols x k].
std::vector<double> a_times(const float* a, int rows, int cols, const std::vector<double>& x, int k) {
  std::vector<double> out(static_cast<size_t>(rows) * k, 0.0);
  for (int i = 0; i < rows; ++i) {
    double* o = out.data() + static_cast<size_t>(i) * k;
    for (int c = 0; c < cols; ++c) {
      const double aic = a[static_cast<size_t>(i) * cols + c];
      const double* xr = x.data() + static_cast<size_t>(c) * k;
      for (int j = 0; j < k; ++j) o[j] += aic * xr[j];
    }
  }
  return out;
}

// out [cols x k] = a^T y with a [rows x cols], y [rows x k].
std::vector<double> at_times(const float* a, int rows, int cols, const std::vector<double>& y, int k) {
  std::vector<double> out(static_cast<size_t>(cols) * k, 0.0);
  for (int i = 0; i < rows; ++i) {
    const double* yr = y.data() + static_cast<size_t>(i) * k;
    for (int c = 0; c < cols; ++c) {
      const double aic = a[static_cast<size_t>(i) * cols + c];
      double* o = out.data() + static_cast<size_t>(c) * k;
      for (int j = 0; j < k; ++j) o[j] += aic * yr[j];
    }
  }
  return out;
}

// One-sided Jacobi (Hestenes) on m [n x k]: rotates its columns until they are mutually orthogonal,
// accumulating the rotations in v [k x k] (starts as I), so that m_in v = m_out.
void one_sided_jacobi(std::vector<double>& m, int n, int k, std::vector<double>& v) {
  v.assign(static_cast<size_t>(k) * k, 0.0);
  for (int j = 0; j < k; ++j) v[static_cast<size_t>(j) * k + j] = 1.0;
  auto rotate = [](std::vector<double>& x, int rows, int stride, int p, int q, double c, double s) {
    for (int i = 0; i < rows; ++i) {
      double& xp = x[static_cast<size_t>(i) * stride + p];
      double& xq = x[static_cast<size_t>(i) * stride + q];
      const double a = xp, b = xq;
      xp = c * a - s * b;
      xq = s * a + c * b;
    }
  };
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int p = 0; p < k; ++p)
      for (int q = p + 1; q < k; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (int i = 0; i < n; ++i) {
          const double a = m[static_cast<size_t>(i) * k + p], b = m[static_cast<size_t>(i) * k + q];
          alpha += a * a;
          beta += b * b;
          gamma += a * b;
        }
        if (gamma == 0 || std::fabs(gamma) <= 1e-15 * std::sqrt(alpha * beta)) continue;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = std::copysign(1.0, zeta) / (std::fabs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        rotate(m, n, k, p, q, c, s);
        rotate(v, k, k, p, q, c, s);
        rotated = true;
      }
    if (!rotated) break;
  }
}

}  // namespace

std::vector<float> cholesky_qr2(const float* a, int rows, int r) {
  FP4_CHECK(r >= 1 && rows >= r, "cholesky_qr2: a [", rows, " x ", r, "] needs 1 <= r <= rows");
  std::vector<float> u(a, a + static_cast<size_t>(rows) * r);
  double norm2 = 0;
  for (float v : u) norm2 += static_cast<double>(v) * v;
  if (norm2 == 0) return u;  // col(a) = {0}: the projection onto it is zero
  // The first pass needs cond(a) well below FP32's 1/sqrt(eps) for the second to finish the job: pivots
  // under 8 r eps of their diagonal (cond above ~180 at r = 32) take the shifted pass instead.
  bool ok = true;
  int passes_left = 1;
  if (!cholesky_qr_pass(u, rows, r, 0.0f, 8.0 * r * kEpsF32)) {
    // Shifted Cholesky-QR (Fukaya et al.): G + s I is positive definite in FP32 for any a != 0.
    const double shift =
        11.0 * (static_cast<double>(rows) * r + static_cast<double>(r) * (r + 1)) * kEpsF32 * norm2;
    ok = cholesky_qr_pass(u, rows, r, static_cast<float>(shift), 0.0);
    passes_left = 2;
  }
  for (; ok && passes_left > 0; --passes_left) ok = cholesky_qr_pass(u, rows, r, 0.0f, 0.0);
  if (ok) {  // accept only a basis orthonormal to FP32 working accuracy
    std::vector<float> g(static_cast<size_t>(r) * r);
    cpu::gemm(true, false, r, r, rows, 1.0f, u.data(), r, u.data(), r, 0.0f, g.data(), r);
    for (int i = 0; i < r && ok; ++i)
      for (int j = 0; j < r && ok; ++j)
        ok = std::fabs(g[static_cast<size_t>(i) * r + j] - (i == j ? 1.0f : 0.0f)) < 1e-4f;
  }
  if (ok) return u;
  // Rank-deficient a: Gram-Schmidt twice in double drops the directions it lacks.
  std::vector<double> x(a, a + static_cast<size_t>(rows) * r);
  orthonormalize_columns(x, rows, r, 16 * kEpsF32);
  return std::vector<float>(x.begin(), x.end());
}

void project_onto_columns(const float* u, int out, int r, const float* g, int in, float* p) {
  std::vector<float> c(static_cast<size_t>(r) * in);
  cpu::gemm(true, false, r, in, out, 1.0f, u, r, g, in, 0.0f, c.data(), in);
  cpu::gemm(false, false, out, in, r, 1.0f, u, r, c.data(), in, 0.0f, p, in);
}

TruncatedSvd randomized_svd(const float* a, int rows, int cols, int rank, RngStream sketch,
                            const RandomizedSvdOptions& opt) {
  FP4_CHECK(rank >= 1 && rank <= std::min(rows, cols), "randomized_svd: rank ", rank, " for a [", rows, " x ",
            cols, "] matrix");
  FP4_CHECK(opt.oversample >= 0 && opt.power_iters >= 0,
            "randomized_svd: negative oversampling or iterations");
  const int k = std::min(rank + opt.oversample, std::min(rows, cols));
  std::vector<double> omega(static_cast<size_t>(cols) * k);
  for (size_t i = 0; i < omega.size(); ++i) {
    const double u1 = 1.0 - (philox_word(sketch, 2 * i) + 0.5) / 4294967296.0;  // (0, 1)
    const double u2 = philox_word(sketch, 2 * i + 1) / 4294967296.0;
    omega[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  constexpr double kDropTol = 1e-13;  // a sketch column with nothing new: the matrix has lower rank
  std::vector<double> q = a_times(a, rows, cols, omega, k);
  orthonormalize_columns(q, rows, k, kDropTol);
  for (int it = 0; it < opt.power_iters; ++it) {
    std::vector<double> z = at_times(a, rows, cols, q, k);
    orthonormalize_columns(z, cols, k, kDropTol);
    q = a_times(a, rows, cols, z, k);
    orthonormalize_columns(q, rows, k, kDropTol);
  }
  // A ~ Q B with B = Q^T A; m = B^T = A^T Q [cols x k]. Jacobi: m v = (right vectors of A) diag(sigma).
  std::vector<double> m = at_times(a, rows, cols, q, k), v;
  one_sided_jacobi(m, cols, k, v);
  std::vector<double> sigma(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    double s = 0;
    for (int c = 0; c < cols; ++c) s += m[static_cast<size_t>(c) * k + j] * m[static_cast<size_t>(c) * k + j];
    sigma[static_cast<size_t>(j)] = std::sqrt(s);
  }
  std::vector<int> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return sigma[static_cast<size_t>(x)] > sigma[static_cast<size_t>(y)];
  });

  TruncatedSvd out{rows, cols, rank, {}, {}, {}};
  out.u.assign(static_cast<size_t>(rows) * rank, 0.0);
  out.s.assign(static_cast<size_t>(rank), 0.0);
  out.v.assign(static_cast<size_t>(cols) * rank, 0.0);
  for (int t = 0; t < rank; ++t) {
    const int j = order[static_cast<size_t>(t)];
    const double s = sigma[static_cast<size_t>(j)];
    out.s[static_cast<size_t>(t)] = s;
    for (int i = 0; i < rows; ++i) {  // left vectors: Q v
      double acc = 0;
      for (int p = 0; p < k; ++p)
        acc += q[static_cast<size_t>(i) * k + p] * v[static_cast<size_t>(p) * k + j];
      out.u[static_cast<size_t>(i) * rank + t] = acc;
    }
    if (s > 0)
      for (int c = 0; c < cols; ++c)
        out.v[static_cast<size_t>(c) * rank + t] = m[static_cast<size_t>(c) * k + j] / s;
  }
  return out;
}

void realign_low_rank(float* w_res, float* l1, float* l2, int out, int in, int r, double beta,
                      RngStream sketch) {
  FP4_CHECK(std::isfinite(beta) && beta != 0, "realign_low_rank: beta ", beta, " is not finite and nonzero");
  const auto n = static_cast<size_t>(out) * in;
  // W_eff, each element rounded once from double.
  std::vector<float> w_eff(n);
  std::vector<double> row(static_cast<size_t>(in));
  auto low_rank_row = [&](const float* f2, const float* f1, int i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int j = 0; j < r; ++j) {
      const double x = f2[static_cast<size_t>(i) * r + j];
      if (x == 0) continue;
      for (int c = 0; c < in; ++c) row[static_cast<size_t>(c)] += x * f1[static_cast<size_t>(j) * in + c];
    }
  };
  for (int i = 0; i < out; ++i) {
    low_rank_row(l2, l1, i);
    for (int c = 0; c < in; ++c) {
      const size_t e = static_cast<size_t>(i) * in + c;
      w_eff[e] = static_cast<float>(static_cast<double>(w_res[e]) + beta * row[static_cast<size_t>(c)]);
    }
  }
  const TruncatedSvd svd = randomized_svd(w_eff.data(), out, in, r, sketch);
  const double sign = beta > 0 ? 1.0 : -1.0;
  for (int j = 0; j < r; ++j) {
    const double scale = std::sqrt(svd.s[static_cast<size_t>(j)] / std::fabs(beta));
    for (int i = 0; i < out; ++i)
      l2[static_cast<size_t>(i) * r + j] = static_cast<float>(svd.u[static_cast<size_t>(i) * r + j] * scale);
    for (int c = 0; c < in; ++c)
      l1[static_cast<size_t>(j) * in + c] =
          static_cast<float>(sign * scale * svd.v[static_cast<size_t>(c) * r + j]);
  }
  for (int i = 0; i < out; ++i) {
    low_rank_row(l2, l1, i);
    for (int c = 0; c < in; ++c) {
      const size_t e = static_cast<size_t>(i) * in + c;
      w_res[e] = static_cast<float>(static_cast<double>(w_eff[e]) - beta * row[static_cast<size_t>(c)]);
    }
  }
}

}  // namespace fp4
