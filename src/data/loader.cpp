#include "data/loader.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace fp4 {
namespace {

// A counter-based 64-bit hash (splitmix64 finaliser over the mixed counters): the shuffle of an
// epoch is a pure function of (seed, epoch, index), with no generator state to save.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t hash3(uint64_t seed, uint64_t epoch, uint64_t i) {
  return mix(mix(mix(seed) ^ epoch) ^ i);
}

void check_shape(const LoaderOptions& o) {
  FP4_CHECK(o.batch > 0, "data loader: batch must be positive, got ", o.batch);
  FP4_CHECK(o.seq > 0, "data loader: seq must be positive, got ", o.seq);
  FP4_CHECK(o.world_size > 0 && o.rank >= 0 && o.rank < o.world_size, "data loader: rank ", o.rank,
            " is outside world size ", o.world_size);
}

Batch empty_batch(int rows, int seq) {
  Batch b;
  b.batch = rows;
  b.seq = seq;
  b.tokens.resize(static_cast<size_t>(rows) * seq);
  b.targets.resize(static_cast<size_t>(rows) * seq);
  return b;
}

}  // namespace

void fill_window(const TokenStream& stream, int64_t start, int seq, int row, Batch& batch) {
  std::vector<int32_t> w(static_cast<size_t>(seq) + 1);
  stream.copy(start, w);
  const size_t base = static_cast<size_t>(row) * seq;
  for (int t = 0; t < seq; ++t) {
    batch.tokens[base + t] = w[t];
    batch.targets[base + t] = w[t + 1];
  }
}

nlohmann::json LoaderState::to_json() const {
  return {{"seed", seed},       {"epoch", epoch}, {"position", position},    {"seq", seq},
          {"windows", windows}, {"rank", rank},   {"world_size", world_size}};
}

LoaderState LoaderState::from_json(const nlohmann::json& j) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    FP4_CHECK(j.is_object() && j.contains(key) && j.at(key).is_number_integer(),
              "data loader state: field \"", key, "\" is missing or not an integer in ", j.dump());
    return j.at(key);
  };
  LoaderState s;
  s.seed = need("seed").get<uint64_t>();
  s.epoch = need("epoch").get<int64_t>();
  s.position = need("position").get<int64_t>();
  s.seq = need("seq").get<int>();
  s.windows = need("windows").get<int64_t>();
  s.rank = need("rank").get<int>();
  s.world_size = need("world_size").get<int>();
  return s;
}

DataLoader::DataLoader(const LoaderOptions& options)
    : options_((check_shape(options), options)),
      stream_(options.data, options.split, options.verify_payload) {
  windows_ = (stream_.size() - 1) / options_.seq;
  per_rank_ = windows_ / options_.world_size;
  FP4_CHECK(per_rank_ > 0, "data ", options_.data.string(), " (", options_.split, "): ", stream_.size(),
            " tokens give ", windows_, " windows of ", options_.seq + 1,
            " tokens, fewer than one per rank (world size ", options_.world_size, ")");
  build_permutation();
}

void DataLoader::build_permutation() {
  permutation_.resize(static_cast<size_t>(windows_));
  for (int64_t i = 0; i < windows_; ++i) permutation_[i] = i;
  // Fisher-Yates with the counter hash; the modulo bias (< windows / 2^64) is negligible.
  for (int64_t i = windows_ - 1; i > 0; --i) {
    auto j =
        static_cast<int64_t>(hash3(options_.seed, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(i)) %
                             static_cast<uint64_t>(i + 1));
    std::swap(permutation_[i], permutation_[j]);
  }
}

int64_t DataLoader::window_of(int64_t position) const {
  return permutation_[position * options_.world_size + options_.rank];
}

Batch DataLoader::next() {
  Batch b = empty_batch(options_.batch, options_.seq);
  for (int row = 0; row < options_.batch; ++row) {
    if (position_ == per_rank_) {
      ++epoch_;
      position_ = 0;
      build_permutation();
    }
    fill_window(stream_, window_of(position_++) * options_.seq, options_.seq, row, b);
  }
  return b;
}

Batch DataLoader::next_slice(int rank, int world) {
  FP4_CHECK(options_.world_size == 1, "data loader: next_slice needs an unsliced loader (world size ",
            options_.world_size, ")");
  FP4_CHECK(world >= 1 && rank >= 0 && rank < world, "data loader: rank ", rank, " outside world size ",
            world);
  FP4_CHECK(world <= options_.batch, "data loader: a batch of ", options_.batch, " rows cannot give each of ",
            world, " ranks a row (data.batch must be >= the number of processes)");
  Batch b = empty_batch((options_.batch - rank + world - 1) / world, options_.seq);
  for (int row = 0; row < options_.batch; ++row) {
    if (position_ == per_rank_) {
      ++epoch_;
      position_ = 0;
      build_permutation();
    }
    const int64_t w = window_of(position_++);
    if (row % world == rank) fill_window(stream_, w * options_.seq, options_.seq, row / world, b);
  }
  return b;
}

LoaderState DataLoader::state() const {
  return {options_.seed, epoch_, position_, options_.seq, windows_, options_.rank, options_.world_size};
}

void DataLoader::restore(const LoaderState& s) {
  FP4_CHECK(s.seq == options_.seq, "data loader: the saved state is for seq ", s.seq, ", this run uses ",
            options_.seq);
  FP4_CHECK(s.windows == windows_, "data loader: the saved state is for ", s.windows,
            " windows per epoch, the data now gives ", windows_, " (was the data prepared again?)");
  FP4_CHECK(s.rank == options_.rank && s.world_size == options_.world_size,
            "data loader: the saved state is for rank ", s.rank, " of ", s.world_size,
            ", this process is rank ", options_.rank, " of ", options_.world_size);
  FP4_CHECK(s.epoch >= 0 && s.position >= 0 && s.position <= per_rank_, "data loader: saved position ",
            s.position, " (epoch ", s.epoch, ") is outside [0, ", per_rank_, "]");
  // The saved seed wins: resuming reproduces the interrupted run even if the configured seed changed.
  options_.seed = s.seed;
  epoch_ = s.epoch;
  position_ = s.position;
  build_permutation();
}

ValidationLoader::ValidationLoader(const LoaderOptions& options)
    : options_((check_shape(options), options)),
      stream_(options.data, options.split, options.verify_payload) {
  FP4_CHECK(options_.max_windows >= 0, "data loader: max_windows must be >= 0, got ", options_.max_windows);
  windows_ = (stream_.size() - 1) / options_.seq;
  FP4_CHECK(windows_ > 0, "data ", options_.data.string(), " (", options_.split, "): ", stream_.size(),
            " tokens are fewer than one window of ", options_.seq + 1, " tokens");
  const int64_t world = options_.world_size;
  slice_ = options_.rank < windows_ ? (windows_ - options_.rank + world - 1) / world : 0;
  per_rank_ = options_.max_windows > 0 ? std::min(slice_, options_.max_windows) : slice_;
}

int64_t ValidationLoader::batches() const {
  return (per_rank_ + options_.batch - 1) / options_.batch;
}

bool ValidationLoader::next(Batch& out) {
  int64_t rows = std::min<int64_t>(options_.batch, per_rank_ - position_);
  if (rows <= 0) return false;
  out = empty_batch(static_cast<int>(rows), options_.seq);
  for (int row = 0; row < rows; ++row) {
    // The k-th visited window of the slice: all of them, or every (slice / per_rank)-th.
    int64_t k = position_++;
    int64_t in_slice =
        per_rank_ == slice_ ? k : static_cast<int64_t>((static_cast<__int128>(k) * slice_) / per_rank_);
    int64_t w = in_slice * options_.world_size + options_.rank;
    fill_window(stream_, w * options_.seq, options_.seq, row, out);
  }
  return true;
}

}  // namespace fp4
