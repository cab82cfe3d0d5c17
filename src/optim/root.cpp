#include "optim/root.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fp4 {

void check_root_options(const RootOptions& opt, const std::string& what) {
  FP4_CHECK(opt.momentum >= 0.0f && opt.momentum < 1.0f, what, ": ROOT momentum must be in [0, 1), got ",
            opt.momentum);
  FP4_CHECK(opt.clip_quantile > 0.0 && opt.clip_quantile <= 1.0, what,
            ": ROOT clip_quantile must be in (0, 1], got ", opt.clip_quantile);
  FP4_CHECK(std::isfinite(opt.update_scale) && opt.update_scale > 0.0f, what,
            ": ROOT update_scale must be finite and > 0, got ", opt.update_scale);
  FP4_CHECK(opt.ns_steps >= 1 && opt.ns_steps <= 16, what, ": ROOT ns_steps must be in [1, 16], got ",
            opt.ns_steps);
}

float abs_quantile(std::span<const float> x, double q) {
  FP4_CHECK(!x.empty(), "abs_quantile: empty input");
  FP4_CHECK(q >= 0.0 && q <= 1.0, "abs_quantile: quantile must be in [0, 1], got ", q);
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::abs(x[i]);
  const double pos = q * static_cast<double>(a.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  std::nth_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(lo), a.end());
  const float v_lo = a[lo];
  if (lo + 1 >= a.size() || pos == static_cast<double>(lo)) return v_lo;
  // The next order statistic is the minimum of the part above lo.
  const float v_hi = *std::min_element(a.begin() + static_cast<std::ptrdiff_t>(lo) + 1, a.end());
  return static_cast<float>(v_lo + (pos - static_cast<double>(lo)) * (static_cast<double>(v_hi) - v_lo));
}

float clip_to_abs_quantile(std::span<float> x, double q) {
  const float eps = abs_quantile(x, q);
  for (float& v : x) v = std::clamp(v, -eps, eps);
  return eps;
}

namespace {
constexpr const char* kQAdamRestSuffix = "+q-adamw";

std::string root_base_name(NsPrecision p) {
  switch (p) {
    case NsPrecision::kFp32:
      return "root";
    case NsPrecision::kBf16:
      return "root-bf16";
    case NsPrecision::kNvfp4:
      return "q-root";
  }
  FP4_THROW("root_optimizer_name: unknown Newton-Schulz precision ", static_cast<int>(p));
}
}  // namespace

std::string root_optimizer_name(NsPrecision p, RootRest rest) {
  return root_base_name(p) + (rest == RootRest::kQAdamW ? kQAdamRestSuffix : "");
}

std::optional<RootChoice> parse_root_optimizer_name(const std::string& name) {
  for (NsPrecision p : {NsPrecision::kFp32, NsPrecision::kBf16, NsPrecision::kNvfp4})
    for (RootRest r : {RootRest::kAdamW, RootRest::kQAdamW})
      if (name == root_optimizer_name(p, r)) return RootChoice{p, r};
  return std::nullopt;
}

bool root_eligible(const ParameterInfo& info) {
  return info.shape.size() == 2 && info.name != "embed" && info.name != "lm_head";
}

std::vector<double> root_step_costs(const std::vector<ParameterInfo>& params, int ns_steps) {
  std::vector<double> out;
  for (const ParameterInfo& info : params) {
    const auto numel = static_cast<double>(info.numel());
    if (!root_eligible(info)) {
      out.push_back(20.0 * numel);
      continue;
    }
    const auto r = static_cast<double>(std::min(info.shape[0], info.shape[1]));
    const auto c = static_cast<double>(std::max(info.shape[0], info.shape[1]));
    out.push_back(ns_steps * (4.0 * r * r * c + 2.0 * r * r * r) + 100.0 * numel);
  }
  return out;
}

NsOptions root_ns_options(const RootOptions& opt, int64_t rows, int64_t cols, RngStream sr) {
  NsOptions ns;
  ns.coef = opt.coefficients.value_or(
      opt.precision == NsPrecision::kNvfp4 ? kQRootNsCoefficients : ns_coefficients_for_shape(rows, cols));
  ns.steps = opt.ns_steps;
  ns.precision = opt.precision;
  ns.rounding = opt.rounding;
  ns.sr = sr;
  return ns;
}

RootStepInfo root_step(std::span<float> w, std::span<const float> g, std::span<float> m, int64_t rows,
                       int64_t cols, float lr, float weight_decay, const RootOptions& opt,
                       const std::string& name, RngStream sr) {
  check_root_options(opt, name);
  const int64_t n = rows * cols;
  FP4_CHECK(rows > 0 && cols > 0 && static_cast<int64_t>(w.size()) == n &&
                static_cast<int64_t>(g.size()) == n && static_cast<int64_t>(m.size()) == n,
            name, ": ROOT needs weight, gradient and momentum of [", rows, " x ", cols, "], got ", w.size(),
            ", ", g.size(), ", ", m.size(), " elements");
  FP4_CHECK(std::isfinite(lr) && lr >= 0.0f, name, ": ROOT learning rate must be finite and >= 0, got ", lr);
  FP4_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0f, name,
            ": ROOT weight decay must be finite and >= 0, got ", weight_decay);
  for (int64_t i = 0; i < n; ++i)
    FP4_CHECK(std::isfinite(g[i]), name, ": non-finite gradient at element ", i, " (row ", i / cols, ", col ",
              i % cols, ")");

  const float mu = opt.momentum;
  std::vector<float> m_new(static_cast<size_t>(n)), u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    m_new[i] = mu * m[i] + g[i];
    u[i] = opt.nesterov ? g[i] + mu * m_new[i] : m_new[i];
  }
  RootStepInfo info;
  info.clip_eps = abs_quantile(u, opt.clip_quantile);
  for (float& v : u) {
    info.clipped += std::abs(v) > info.clip_eps ? 1 : 0;
    v = std::clamp(v, -info.clip_eps, info.clip_eps);
  }

  newton_schulz(u.data(), rows, cols, root_ns_options(opt, rows, cols, sr), u.data());
  // A converged NS output has singular values near 1, so |X|_F^2 near min(rows, cols); far above it the
  // quintic has diverged (e.g. Muon's coefficients with NVFP4 operands).
  double fro2 = 0.0;
  for (int64_t i = 0; i < n; ++i) fro2 += static_cast<double>(u[i]) * u[i];
  FP4_CHECK(fro2 <= 4.0 * static_cast<double>(std::min(rows, cols)), name,
            ": ROOT's Newton-Schulz diverged (|X|_F^2 = ", fro2, " for a [", rows, " x ", cols,
            "] matrix, expected about ", std::min(rows, cols),
            "); use coefficients stable at this precision");
  std::copy(m_new.begin(), m_new.end(), m.begin());

  const float scale = opt.update_scale * std::sqrt(static_cast<float>(std::max(rows, cols)));
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * (scale * u[i] + weight_decay * w[i]);
  return info;
}

RootMatrix::RootMatrix(std::string name, int64_t rows, int64_t cols, uint32_t id, uint64_t seed)
    : name_(std::move(name)), rows_(rows), cols_(cols), id_(id), seed_(seed) {
  FP4_CHECK(rows > 0 && cols > 0, name_, ": ROOT needs a matrix, got [", rows, " x ", cols, "]");
  m_.assign(static_cast<size_t>(rows * cols), 0.0f);
}

RootStepInfo RootMatrix::step(std::span<float> w, std::span<const float> g, float lr, float weight_decay,
                              const RootOptions& opt) {
  const RngStream sr{seed_, make_stream(id_, static_cast<uint32_t>(step_), 0x52)};
  const RootStepInfo info = root_step(w, g, m_, rows_, cols_, lr, weight_decay, opt, name_, sr);
  ++step_;
  return info;
}

void RootMatrix::set_step_count(int64_t step) {
  FP4_CHECK(step >= 0, name_, ": ROOT step count must be >= 0, got ", step);
  step_ = step;
}

}  // namespace fp4
