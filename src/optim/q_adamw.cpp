#include "optim/q_adamw.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "numerics/philox.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/q_adamw_keys.h"

namespace fp4 {
namespace {

QuantizedMoment zeros(int64_t n, bool second) {
  const std::vector<float> z(static_cast<size_t>(n), 0.0f);
  MixedMoment x = second ? mix_second_moment(z) : mix_first_moment(z);
  return quantize_tiles(std::move(x), 0.0f, 0, 0, second ? "second moment" : "first moment");
}

}  // namespace

// cpu::adamw_update runs with ratio_bound: the normalized step m / (sqrt(v) / sqrt(bc2) + eps) clipped to the
// bound below. Exact AdamW never exceeds it, but decoded moments can disagree (a second moment far below its
// tile mean decodes to 0 while m does not), and an unclipped m / eps would throw the weight away.

// The largest |m_t| / (sqrt(v_t / bc2)) exact AdamW reaches after t steps, for any gradients (Cauchy-
// Schwarz on the two moving sums): sqrt(bc2) (1 - b1) / sqrt(1 - b2) * sqrt(sum_{j<t} (b1^2 / b2)^j),
// widened by 0.1% for FP32 rounding.
float q_adamw_ratio_bound(double b1, double b2, int64_t t) {
  if (b2 <= 0.0) return std::numeric_limits<float>::infinity();  // v = g^2 alone bounds nothing
  const double rho = b1 * b1 / b2;
  const double sum =
      std::abs(rho - 1.0) < 1e-12 ? static_cast<double>(t) : (1.0 - std::pow(rho, t)) / (1.0 - rho);
  const double bc2 = 1.0 - std::pow(b2, t);
  const double b = 1.001 * std::sqrt(bc2) * (1.0 - b1) / std::sqrt(1.0 - b2) * std::sqrt(sum);
  return std::isfinite(b) && b < 3e38 ? static_cast<float>(b) : std::numeric_limits<float>::infinity();
}

QAdamW::QAdamW(const ParameterSet& params, const OptimizerPlacement& place, uint64_t seed,
               const TensorSelection& select)
    : place_(place), shard_(place.shard(params.numel())), seed_(seed) {
  const int rank = place.comm ? place.comm->rank() : 0;
  for (int i = 0; i < params.size(); ++i) {
    const auto& p = params.at(i);
    selected_.push_back(!select || select(p.info));
    if (!selected_.back()) continue;
    const int64_t n = p.info.numel();
    const int64_t lo = std::max(p.offset, shard_.begin) - p.offset;
    const int64_t hi = std::min(p.offset + n, shard_.end) - p.offset;
    if (lo >= hi) continue;
    const bool cut_lo = lo % kQAdamTile != 0, cut_hi = hi != n && hi % kQAdamTile != 0;
    FP4_CHECK(!cut_lo && !cut_hi, "q-adamw: rank ", rank, "'s shard [", shard_.begin, ", ", shard_.end,
              ") cuts parameter ", p.info.name, " (", n, " elements) at element ", cut_lo ? lo : hi,
              "; shard boundaries inside a tensor must fall on its ", kQAdamTile,
              "-element tiles (shard alignment 128 and tensor sizes multiple of 128 guarantee it)");
    Piece piece{i, lo, hi, p.offset + lo, zeros(hi - lo, false), zeros(hi - lo, true)};
    pieces_.push_back(std::move(piece));
  }
}

void QAdamW::step(ParameterSet& params, const StepHyper& h) {
  check_layout(params, "step");
  FP4_CHECK(shard_.end <= params.numel(), "q-adamw: state for elements up to ", shard_.end,
            ", parameters hold ", params.numel());
  check_adamw_hyper(h);
  ++step_;
  cpu::AdamWArgs args = adamw_args(h, step_);
  args.ratio_bound = q_adamw_ratio_bound(h.beta1, h.beta2, step_);
  auto values = params.values();
  auto grads = params.grads();
  const int tensors = params.size();
  const int world = place_.comm ? place_.comm->world_size() : 1;
  const int rank = place_.comm ? place_.comm->rank() : 0;

  // Decodes a piece and runs AdamW on it: p (a copy or the master weights), m and v in FP32 temporaries.
  std::vector<float> m, v, scratch;
  auto update = [&](const Piece& pc, float* p) {
    const auto n = static_cast<size_t>(pc.end - pc.begin);
    m.resize(n);
    v.resize(n);
    decode_first_moment(pc.m, m);
    decode_second_moment(pc.v, v);
    args.weight_decay = params.at(pc.param).info.weight_decay ? h.weight_decay : 0.0f;
    cpu::adamw_update(p, m.data(), v.data(), grads.data() + pc.flat, static_cast<int64_t>(n), args);
  };

  // Pass 1: each tensor's amax of the new mixed moments, over every rank's pieces (one all-reduce; each
  // rank fills its own slots, so the sum is exact). The update runs on a copy of the weights.
  std::vector<double> amax(static_cast<size_t>(world) * tensors * 2, 0.0);
  for (const Piece& pc : pieces_) {
    scratch.assign(values.begin() + pc.flat, values.begin() + pc.flat + (pc.end - pc.begin));
    update(pc, scratch.data());
    const size_t slot = (static_cast<size_t>(rank) * tensors + pc.param) * 2;
    amax[slot] = mix_first_moment(m).amax();
    amax[slot + 1] = mix_second_moment(v).amax();
  }
  if (place_.comm)
    place_.comm->all_reduce_sum(amax.data(), static_cast<int64_t>(amax.size()), CommType::kF64);

  // Pass 2: the same update on the master weights, re-encoded with the tensor amax (SR on every write).
  for (Piece& pc : pieces_) {
    update(pc, values.data() + pc.flat);
    float a[2] = {0.0f, 0.0f};
    for (int r = 0; r < world; ++r)
      for (int k = 0; k < 2; ++k)
        a[k] =
            std::max(a[k], static_cast<float>(amax[(static_cast<size_t>(r) * tensors + pc.param) * 2 + k]));
    const int64_t tile = pc.begin / kQAdamTile;
    pc.m = quantize_tiles(mix_first_moment(m), a[0], q_adamw_sr_key(seed_, step_, pc.param, 0), tile,
                          "first moment");
    pc.v = quantize_tiles(mix_second_moment(v), a[1], q_adamw_sr_key(seed_, step_, pc.param, 1), tile,
                          "second moment");
  }
}

std::vector<float> QAdamW::decoded(bool second) const {
  std::vector<float> out(static_cast<size_t>(shard_.size()), 0.0f);
  for (const Piece& pc : pieces_) {
    std::span<float> dst(out.data() + (pc.flat - shard_.begin), static_cast<size_t>(pc.end - pc.begin));
    if (second)
      decode_second_moment(pc.v, dst);
    else
      decode_first_moment(pc.m, dst);
  }
  return out;
}

std::vector<float> QAdamW::decoded_first_moment() const {
  return decoded(false);
}
std::vector<float> QAdamW::decoded_second_moment() const {
  return decoded(true);
}

int64_t QAdamW::state_bytes() const {
  int64_t b = 0;
  for (const Piece& pc : pieces_)
    for (const QuantizedMoment* q : {&pc.m, &pc.v})
      b += static_cast<int64_t>(q->q.codes.capacity() + q->q.scales.capacity() +
                                q->q.outer_scales.capacity() * sizeof(float) +
                                q->mean.capacity() * sizeof(uint16_t));
  return b;
}

}  // namespace fp4
