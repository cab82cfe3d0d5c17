#include "optim/quantized_moments.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "numerics/formats.h"
#include "numerics/hadamard.h"

namespace fp4 {
namespace {

constexpr int64_t kTile = 128;  // the quantized tensor's row length and the mean's tile

QuantSpec moment_spec() {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = BlockShape::k1x16;
  s.outer = OuterScale::kTensor;
  s.rounding = Rounding::kSr;
  s.four_over_six = FourOverSix::kMse;
  return s;
}

int64_t padded(int64_t n) {
  return (n + kTile - 1) / kTile * kTile;
}

// The orthonormal 16-point Hadamard transform of every 16-element group, in place (its own inverse).
void mix(std::vector<float>& x) {
  const RhtSigns plus;  // no sign flips: H / 4
  for (size_t g = 0; g < x.size(); g += 16) rht_segment<16>(x.data() + g, plus);
}

QuantizedMoment quantize_already_mixed(const std::vector<float>& x, int64_t size, RngStream sr,
                                       const char* what) {
  QuantRandomness rnd;
  rnd.sr = sr;
  QuantizedMoment out;
  out.size = size;
  out.q = quantize_nvfp4(x.data(), static_cast<int64_t>(x.size()) / kTile, kTile, moment_spec(), rnd);
  FP4_CHECK(out.q.nonfinite == 0, "quantized AdamW: the ", what, " holds ", out.q.nonfinite,
            " non-finite values");
  return out;
}

std::vector<float> dequantize_mixed(const QuantizedMoment& q) {
  std::vector<float> x(static_cast<size_t>(q.q.rows * q.q.cols));
  dequantize(q.q, x.data());
  mix(x);
  return x;
}

void check_out(const QuantizedMoment& q, std::span<float> out) {
  FP4_CHECK(static_cast<int64_t>(out.size()) == q.size, "quantized AdamW: decoding ", q.size, " values into ",
            out.size());
}

}  // namespace

int64_t QuantizedMoment::packed_bytes() const {
  return q.packed_bytes() + static_cast<int64_t>(mean.size() * sizeof(uint16_t));
}

MixedMoment mix_first_moment(std::span<const float> m, const char* what) {
  const auto n = static_cast<int64_t>(m.size());
  for (int64_t i = 0; i < n; ++i)  // before the mixing, which would spread it over its group
    FP4_CHECK(std::isfinite(m[static_cast<size_t>(i)]), "quantized AdamW: the ", what, " holds ",
              m[static_cast<size_t>(i)], " at element ", i);
  MixedMoment out;
  out.size = n;
  out.x.assign(static_cast<size_t>(padded(n)), 0.0f);
  std::copy(m.begin(), m.end(), out.x.begin());
  mix(out.x);
  return out;
}

QuantizedMoment encode_first_moment(std::span<const float> m, RngStream sr, const char* what) {
  MixedMoment x = mix_first_moment(m, what);
  return quantize_already_mixed(x.x, x.size, sr, what);
}

void decode_first_moment(const QuantizedMoment& q, std::span<float> out) {
  check_out(q, out);
  const std::vector<float> x = dequantize_mixed(q);
  std::copy(x.begin(), x.begin() + q.size, out.begin());
}

MixedMoment mix_second_moment(std::span<const float> v, const char* what) {
  const auto n = static_cast<int64_t>(v.size());
  const int64_t np = padded(n);
  std::vector<float> u(static_cast<size_t>(np), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float vi = v[static_cast<size_t>(i)];
    FP4_CHECK(vi >= 0.0f && std::isfinite(vi), "quantized AdamW: the ", what, " holds ", vi, " at element ",
              i, " (it must be finite and >= 0)");
    u[static_cast<size_t>(i)] = std::sqrt(vi);
  }
  std::vector<uint16_t> mean(static_cast<size_t>(np / kTile));
  for (int64_t t = 0; t < np / kTile; ++t) {
    double s = 0;  // over the tile's logical elements only: padding is not data
    const int64_t lo = t * kTile, hi = std::min(n, lo + kTile);
    for (int64_t i = lo; i < hi; ++i) s += u[static_cast<size_t>(i)];
    const float mu = hi > lo ? static_cast<float>(s / static_cast<double>(hi - lo)) : 0.0f;
    mean[static_cast<size_t>(t)] = bf16_bits_rne(mu);
    const float mu_stored = bf16_bits_to_float(mean[static_cast<size_t>(t)]);
    for (int64_t i = lo; i < hi; ++i) u[static_cast<size_t>(i)] -= mu_stored;  // the residual r
  }
  mix(u);
  return MixedMoment{n, std::move(u), std::move(mean)};
}

QuantizedMoment encode_second_moment(std::span<const float> v, RngStream sr, const char* what) {
  MixedMoment x = mix_second_moment(v, what);
  QuantizedMoment out = quantize_already_mixed(x.x, x.size, sr, what);
  out.mean = std::move(x.mean);
  return out;
}

float MixedMoment::amax() const {
  float a = 0.0f;
  for (const float e : x) a = std::max(a, std::fabs(e));
  return a;
}

QuantizedMoment quantize_tiles(MixedMoment mixed, float amax, uint64_t key, int64_t first_tile,
                               const char* what) {
  FP4_CHECK(std::isfinite(amax) && amax >= mixed.amax(), "quantized AdamW: the ", what,
            " is quantized with amax ", amax, " below its own ", mixed.amax());
  const int64_t tiles = static_cast<int64_t>(mixed.x.size()) / kTile;
  QuantizedMoment out;
  out.size = mixed.size;
  out.mean = std::move(mixed.mean);
  Nvfp4Tensor& q = out.q;
  q.rows = tiles;
  q.cols = kTile;
  q.amax = amax;
  q.codes.reserve(static_cast<size_t>(tiles * kTile / 2));
  q.scales.reserve(static_cast<size_t>(tiles * kTile / 16));
  for (int64_t t = 0; t < tiles; ++t) {
    QuantRandomness rnd;
    rnd.sr = RngStream{key, static_cast<uint64_t>(first_tile + t)};
    const Nvfp4Tensor one = quantize_nvfp4(mixed.x.data() + t * kTile, 1, kTile, moment_spec(), rnd, amax);
    FP4_CHECK(one.nonfinite == 0, "quantized AdamW: the ", what, " holds non-finite values in tile ", t);
    if (t == 0) {
      q.block = one.block;
      q.outer = one.outer;
      q.outer_scales = one.outer_scales;  // a function of amax alone: the same for every tile
    }
    q.codes.insert(q.codes.end(), one.codes.begin(), one.codes.end());
    q.scales.insert(q.scales.end(), one.scales.begin(), one.scales.end());
  }
  if (tiles == 0) q.outer_scales = {0.0f};
  return out;
}

void decode_second_moment(const QuantizedMoment& q, std::span<float> out) {
  check_out(q, out);
  FP4_CHECK(static_cast<int64_t>(q.mean.size()) * kTile == q.q.rows * q.q.cols,
            "quantized AdamW: second moment without its tile means");
  const std::vector<float> r = dequantize_mixed(q);
  for (int64_t i = 0; i < q.size; ++i) {
    const float u = r[static_cast<size_t>(i)] + bf16_bits_to_float(q.mean[static_cast<size_t>(i / kTile)]);
    const float uc = u > 0.0f ? u : 0.0f;
    out[static_cast<size_t>(i)] = uc * uc;
  }
}

}  // namespace fp4
