#include "nn/q_attention_error.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "nn/q_attention.h"
#include "numerics/host_arrays.h"

namespace fp4 {
namespace {

// Rows of [n x d] scaled to unit RMS (OLMo-2's QK-norm with unit gain), then times `scale`.
void rms_normalize_rows(std::vector<float>& x, int n, int d, double scale) {
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += static_cast<double>(x[size_t(i) * d + j]) * x[size_t(i) * d + j];
    const double f = scale / std::sqrt(ss / d + 1e-12);
    for (int j = 0; j < d; ++j) x[size_t(i) * d + j] = static_cast<float>(x[size_t(i) * d + j] * f);
  }
}

// Causal scores in double, from the operands as given (already rounded or quantized).
std::vector<double> causal_scores(const std::vector<float>& q, const std::vector<float>& k, int n, int d) {
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(size_t(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      double acc = 0;
      for (int c = 0; c < d; ++c) acc += static_cast<double>(q[size_t(i) * d + c]) * k[size_t(j) * d + c];
      out[size_t(i) * n + j] = s * acc;
    }
  return out;
}

// Row softmax over the causal entries, in place.
void causal_softmax(std::vector<double>& s, int n) {
  for (int i = 0; i < n; ++i) {
    double m = -INFINITY, z = 0;
    for (int j = 0; j <= i; ++j) m = std::max(m, s[size_t(i) * n + j]);
    for (int j = 0; j <= i; ++j) z += (s[size_t(i) * n + j] = std::exp(s[size_t(i) * n + j] - m));
    for (int j = 0; j <= i; ++j) s[size_t(i) * n + j] /= z;
  }
}

std::vector<double> attend(const std::vector<double>& p, const std::vector<float>& v, int n, int d) {
  std::vector<double> o(size_t(n) * d, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j)
      for (int c = 0; c < d; ++c) o[size_t(i) * d + c] += p[size_t(i) * n + j] * v[size_t(j) * d + c];
  return o;
}

double mean_row_tv(const std::vector<double>& p, const std::vector<double>& ref, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    double tv = 0;
    for (int j = 0; j <= i; ++j) tv += std::fabs(p[size_t(i) * n + j] - ref[size_t(i) * n + j]);
    sum += 0.5 * tv;
  }
  return sum / n;
}

}  // namespace

QAttnErrors q_attn_errors(const QAttnErrorOptions& o) {
  FP4_CHECK(o.t >= 1 && o.heads >= 1 && o.samples >= 1,
            "q_attn_errors: t, heads and samples must be >= 1 (got ", o.t, ", ", o.heads, ", ", o.samples,
            ")");
  FP4_CHECK(o.head_dim >= 16 && o.head_dim % 16 == 0,
            "q_attn_errors: head_dim must be a multiple of 16, got ", o.head_dim);
  FP4_CHECK(o.kind == "normal" || o.kind == "outliers",
            "q_attn_errors: kind must be normal or outliers, got '", o.kind, "'");
  FP4_CHECK(o.logit_scale > 0 && std::isfinite(o.logit_scale), "q_attn_errors: logit_scale must be positive");
  const int n = o.t, d = o.head_dim;
  QAttnErrors e;
  for (int s = 0; s < o.samples; ++s) {
    std::mt19937_64 rng(o.seed * 7919u + static_cast<uint64_t>(s));
    std::normal_distribution<float> normal;
    for (int h = 0; h < o.heads; ++h) {
      std::vector<float> q(size_t(n) * d), k(q.size()), v(q.size());
      for (auto* x : {&q, &k, &v})
        for (float& f : *x) f = normal(rng);
      if (o.kind == "outliers")  // a few channels with 10x the others' magnitude before the norm
        for (int i = 0; i < n; ++i)
          for (int c = 0; c < 4; ++c) {
            q[size_t(i) * d + c * (d / 4)] *= 10.0f;
            k[size_t(i) * d + c * (d / 4)] *= 10.0f;
          }
      rms_normalize_rows(q, n, d, o.logit_scale);
      rms_normalize_rows(k, n, d, 1.0);
      // Q-Attn's own quantized views, through the layer that trains with them (one head per call).
      QAttentionCpu layer(0);
      std::vector<float> out(q.size()), probs(size_t(n) * n);
      QuantContext ctx;
      ctx.seed = o.seed + static_cast<uint64_t>(s);
      layer.forward(out.data(), d, probs.data(), q.data(), k.data(), v.data(), d, AttnShape{1, n, 1, d}, ctx);
      std::vector<double> ref = causal_scores(q, k, n, d),
                          fp4 = causal_scores(layer.q_hat(), layer.k_hat(), n, d),
                          bf16 = causal_scores(bf16_rounded(q), bf16_rounded(k), n, d);
      e.scores_fp4.push_back(relative_frobenius_error(fp4, ref));
      e.scores_bf16.push_back(relative_frobenius_error(bf16, ref));
      e.scores_fp4_vs_bf16.push_back(relative_frobenius_error(fp4, bf16));
      causal_softmax(ref, n);
      causal_softmax(fp4, n);
      causal_softmax(bf16, n);
      e.probs_tv_fp4.push_back(mean_row_tv(fp4, ref, n));
      e.probs_tv_bf16.push_back(mean_row_tv(bf16, ref, n));
      const std::vector<double> o_ref = attend(ref, v, n, d);
      e.out_fp4.push_back(relative_frobenius_error(attend(fp4, v, n, d), o_ref));
      e.out_bf16.push_back(relative_frobenius_error(attend(bf16, bf16_rounded(v), n, d), o_ref));
    }
  }
  return e;
}

}  // namespace fp4
