// Q-AdamW checkpoints: per parameter "<name>", the packed moments as full tensors (every rank's tiles):
// qadamw.{m,v}.codes.<name> U8 [tiles, 64] (FP4 codes, low nibble first), qadamw.{m,v}.scales.<name>
// U8 [tiles, 8] (E4M3 block scales), qadamw.{m,v}.scale.<name> F32 [2] (tensor scale S_dec and amax),
// qadamw.v.mean.<name> BF16 [tiles] (mean of sqrt(v) per tile), qadamw.step I64 [1] and qadamw.seed I64 [1]
// (the run seed the SR keys derive from).
#include "optim/q_adamw_state.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/q_adamw.h"

namespace fp4 {
namespace {

constexpr int64_t kCodeBytes = kQAdamTile / 2, kScaleBytes = kQAdamTile / 16;

// The seven byte regions of one parameter in the gather buffer, each starting on 8 bytes.
struct Regions {
  size_t at[7];  // m codes, m scales, m scale, v codes, v scales, v scale, v mean
};

size_t round8(size_t b) {
  return (b + 7) / 8 * 8;
}

// Regions of the selected tensors only (the others have none).
std::vector<Regions> layout(const ParameterSet& ps, const std::vector<bool>& selected, size_t& total) {
  std::vector<Regions> out(static_cast<size_t>(ps.size()));
  total = 0;
  for (int i = 0; i < ps.size(); ++i) {
    if (!selected[static_cast<size_t>(i)]) continue;
    const auto t = static_cast<size_t>(q_adamw_tiles(ps.at(i).info.numel()));
    const size_t sizes[7] = {t * kCodeBytes, t * kScaleBytes, 8, t * kCodeBytes, t * kScaleBytes, 8, t * 2};
    for (int r = 0; r < 7; ++r) {
      out[static_cast<size_t>(i)].at[r] = total;
      total += round8(sizes[r]);
    }
  }
  return out;
}

StateTensor bytes_tensor(std::string name, const char* dtype, std::vector<int64_t> shape, const uint8_t* p,
                         size_t n) {
  return StateTensor{std::move(name), dtype, std::move(shape), std::vector<uint8_t>(p, p + n)};
}

void put(uint8_t* dst, const void* src, size_t n) {
  std::memcpy(dst, src, n);
}

}  // namespace

std::string q_adamw_tensor_name(int region, const std::string& param) {
  static const char* const kRegionName[kQAdamStateRegions] = {
      "m.codes.", "m.scales.", "m.scale.", "v.codes.", "v.scales.", "v.scale.", "v.mean."};
  FP4_CHECK(region >= 0 && region < kQAdamStateRegions, "q_adamw_tensor_name: region ", region);
  return std::string("qadamw.") + kRegionName[region] + param;
}

int64_t q_adamw_tiles(int64_t numel) {
  return (numel + kQAdamTile - 1) / kQAdamTile;
}

QAdamStateTensors require_q_adamw_tensors(const StateIndex& index, const std::string& param, int64_t tiles) {
  QAdamStateTensors f{};
  for (int k = 0; k < 2; ++k) {
    f[static_cast<size_t>(3 * k)] =
        &index.require(q_adamw_tensor_name(3 * k, param), "U8", {tiles, kCodeBytes});
    f[static_cast<size_t>(3 * k + 1)] =
        &index.require(q_adamw_tensor_name(3 * k + 1, param), "U8", {tiles, kScaleBytes});
    const StateTensor& s = index.require(q_adamw_tensor_name(3 * k + 2, param), "F32", {2});
    float v[2];
    std::memcpy(v, s.bytes.data(), sizeof(v));
    FP4_CHECK(std::isfinite(v[0]) && v[0] >= 0.0f && std::isfinite(v[1]) && v[1] >= 0.0f,
              "load_state: tensor '", s.name, "' holds scale ", v[0], " and amax ", v[1],
              " (both must be finite and >= 0)");
    f[static_cast<size_t>(3 * k + 2)] = &s;
  }
  f[6] = &index.require(q_adamw_tensor_name(6, param), "BF16", {tiles});
  return f;
}

QAdamSavedCounters require_q_adamw_counters(const StateIndex& index) {
  QAdamSavedCounters c;
  std::memcpy(&c.step, index.require(kQAdamStepName, "I64", {1}).bytes.data(), sizeof(c.step));
  FP4_CHECK(c.step >= 0, "load_state: tensor '", kQAdamStepName, "' holds a negative step ", c.step);
  std::memcpy(&c.seed, index.require(kQAdamSeedName, "I64", {1}).bytes.data(), sizeof(c.seed));
  return c;
}

void QAdamW::check_layout(const ParameterSet& ps, const char* what) const {
  FP4_CHECK(static_cast<size_t>(ps.size()) == selected_.size(), "q-adamw ", what, ": built for ",
            selected_.size(), " parameters, given ", ps.size());
}

std::vector<StateTensor> QAdamW::save_state(const ParameterSet& ps) const {
  check_layout(ps, "save_state");
  size_t total = 0;
  const std::vector<Regions> reg = layout(ps, selected_, total);
  // Each rank writes the bytes of its own tiles (and the owner of a tensor's first tile its scales), zero
  // elsewhere: the integer sum over ranks assembles every tensor exactly.
  std::vector<int64_t> words(total / 8, 0);
  auto* buf = reinterpret_cast<uint8_t*>(words.data());
  for (const Piece& pc : pieces_) {
    const Regions& r = reg[static_cast<size_t>(pc.param)];
    const auto t0 = static_cast<size_t>(pc.begin / kQAdamTile);
    const QuantizedMoment* mv[2] = {&pc.m, &pc.v};
    for (int k = 0; k < 2; ++k) {
      const Nvfp4Tensor& q = mv[k]->q;
      put(buf + r.at[3 * k] + t0 * kCodeBytes, q.codes.data(), q.codes.size());
      put(buf + r.at[3 * k + 1] + t0 * kScaleBytes, q.scales.data(), q.scales.size());
      if (pc.begin == 0) {
        const float s[2] = {q.outer_scales.at(0), q.amax};
        put(buf + r.at[3 * k + 2], s, sizeof(s));
      }
    }
    put(buf + r.at[6] + t0 * 2, pc.v.mean.data(), pc.v.mean.size() * 2);
  }
  if (place_.comm)
    place_.comm->all_reduce_sum(words.data(), static_cast<int64_t>(words.size()), CommType::kI64);

  std::vector<StateTensor> out;
  for (int i = 0; i < ps.size(); ++i) {
    if (!selected_[static_cast<size_t>(i)]) continue;
    const std::string& name = ps.at(i).info.name;
    const Regions& r = reg[static_cast<size_t>(i)];
    const int64_t t = q_adamw_tiles(ps.at(i).info.numel());
    for (int k = 0; k < 2; ++k) {
      out.push_back(bytes_tensor(q_adamw_tensor_name(3 * k, name), "U8", {t, kCodeBytes}, buf + r.at[3 * k],
                                 static_cast<size_t>(t * kCodeBytes)));
      out.push_back(bytes_tensor(q_adamw_tensor_name(3 * k + 1, name), "U8", {t, kScaleBytes},
                                 buf + r.at[3 * k + 1], static_cast<size_t>(t * kScaleBytes)));
      out.push_back(bytes_tensor(q_adamw_tensor_name(3 * k + 2, name), "F32", {2}, buf + r.at[3 * k + 2], 8));
    }
    out.push_back(
        bytes_tensor(q_adamw_tensor_name(6, name), "BF16", {t}, buf + r.at[6], static_cast<size_t>(t * 2)));
  }
  StateTensor step{kQAdamStepName, "I64", {1}, std::vector<uint8_t>(8)};
  std::memcpy(step.bytes.data(), &step_, 8);
  out.push_back(std::move(step));
  StateTensor seed{kQAdamSeedName, "I64", {1}, std::vector<uint8_t>(8)};  // the SR keys derive from it
  std::memcpy(seed.bytes.data(), &seed_, 8);
  out.push_back(std::move(seed));
  return out;
}

void QAdamW::load_state(const StateIndex& index, const ParameterSet& ps) {
  check_layout(ps, "load_state");
  FP4_CHECK(index.has(kQAdamStepName) || !index.has(kAdamStepName),
            "load_state: the state holds AdamW moments ('", kAdamStepName,
            "'), but this run's optimizer is q-adamw (recipe field 'optimizer'); resume with ",
            "the optimizer that wrote it");
  // Every tensor checked before anything changes.
  std::vector<QAdamStateTensors> found(static_cast<size_t>(ps.size()));
  for (int i = 0; i < ps.size(); ++i)
    if (selected_[static_cast<size_t>(i)])
      found[static_cast<size_t>(i)] =
          require_q_adamw_tensors(index, ps.at(i).info.name, q_adamw_tiles(ps.at(i).info.numel()));
  const QAdamSavedCounters saved = require_q_adamw_counters(index);

  for (Piece& pc : pieces_) {
    const auto& f = found[static_cast<size_t>(pc.param)];
    const auto t0 = static_cast<size_t>(pc.begin / kQAdamTile);
    const int64_t tiles = q_adamw_tiles(pc.end - pc.begin);
    QuantizedMoment* mv[2] = {&pc.m, &pc.v};
    for (int k = 0; k < 2; ++k) {
      Nvfp4Tensor q;
      q.rows = tiles;
      q.cols = kQAdamTile;
      const auto* c = f[static_cast<size_t>(3 * k)]->bytes.data() + t0 * kCodeBytes;
      const auto* s = f[static_cast<size_t>(3 * k + 1)]->bytes.data() + t0 * kScaleBytes;
      q.codes.assign(c, c + tiles * kCodeBytes);
      q.scales.assign(s, s + tiles * kScaleBytes);
      float sc[2];
      std::memcpy(sc, f[static_cast<size_t>(3 * k + 2)]->bytes.data(), sizeof(sc));
      q.outer_scales = {sc[0]};
      q.amax = sc[1];
      mv[k]->size = pc.end - pc.begin;
      mv[k]->q = std::move(q);
    }
    const auto* mean = f[6]->bytes.data() + t0 * 2;
    pc.v.mean.resize(static_cast<size_t>(tiles));
    std::memcpy(pc.v.mean.data(), mean, static_cast<size_t>(tiles) * 2);
  }
  step_ = saved.step;
  seed_ = saved.seed;  // a resumed run keeps drawing the SR bits of the run that wrote the state
}

}  // namespace fp4
