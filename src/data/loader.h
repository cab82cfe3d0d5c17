// DataLoader: B x T training windows from the shards of a prepared directory, in a seeded order
// that is the same on every run, on every thread layout, and after a resume.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "data/shard.h"

namespace fp4 {

// The token stream of one split: its shards concatenated in manifest order (eot between documents).
class TokenStream {
 public:
  // dir_or_manifest: a prepared directory or its manifest.json; split: "train" or "val".
  TokenStream(const std::filesystem::path& dir_or_manifest, const std::string& split,
              bool verify_payload = true);
  int64_t size() const { return total_; }
  int32_t vocab_size() const { return vocab_size_; }
  // Copies tokens [start, start + out.size()), which may span shards.
  void copy(int64_t start, std::span<int32_t> out) const;

 private:
  std::vector<ShardFile> shards_;
  std::vector<int64_t> offsets_;  // offsets_[i]: stream position of shard i's first token
  int64_t total_ = 0;
  int32_t vocab_size_ = 0;
};

struct LoaderOptions {
  std::filesystem::path data;  // prepared directory or its manifest.json
  std::string split = "train";
  int batch = 1;  // rows per micro-batch
  int seq = 256;  // tokens per row
  uint64_t seed = 0;
  int rank = 0;                // this process's slice ...
  int world_size = 1;          // ... of world_size disjoint slices
  bool verify_payload = true;  // check shard checksums when opening
  // ValidationLoader only: when > 0 and fewer than this rank's windows, visit this many windows
  // spread evenly over the split (so a short evaluation still sees all of it), in order.
  int64_t max_windows = 0;
};

// Where a DataLoader is: enough to resume and see exactly the batches an uninterrupted run sees.
struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // windows of this rank's slice already returned in this epoch
  int seq = 0;           // checked on restore: the windows depend on it
  int64_t windows = 0;   // windows per epoch of the whole split, checked on restore
  int rank = 0;
  int world_size = 1;

  nlohmann::json to_json() const;
  // Throws fp4::Error naming the missing or mistyped field.
  static LoaderState from_json(const nlohmann::json& j);
  bool operator==(const LoaderState&) const = default;
};

// Training batches. The split is cut into windows of seq + 1 tokens that overlap by one (window w
// starts at w * seq; tokens are its first seq, targets its last seq). Each epoch visits the windows
// in a permutation drawn from (seed, epoch) with a counter-based hash; rank r takes permutation
// entries r, r + world_size, ... so ranks are disjoint, and each rank's epoch has
// floor(windows / world_size) windows. Epochs repeat without end.
class DataLoader {
 public:
  explicit DataLoader(const LoaderOptions& options);

  Batch next();
  // Data parallelism: consumes the same `batch` windows as next() but returns only rows rank,
  // rank + world, ... of them (in order), as a batch of ceil((batch - rank) / world) rows. Every rank
  // of a job holds the same loader (world_size 1 in its options) and calls this with its own rank, so
  // the ranks' rows are disjoint, together make next()'s batch, and state() resumes on any world size.
  // Throws fp4::Error unless 0 <= rank < world <= batch and the loader itself is unsliced.
  Batch next_slice(int rank, int world);
  LoaderState state() const;
  // Throws fp4::Error when the state was made for another seq length, data size or rank layout.
  void restore(const LoaderState& state);

  int64_t windows() const { return windows_; }            // whole split, per epoch
  int64_t windows_per_rank() const { return per_rank_; }  // this rank, per epoch
  int64_t tokens() const { return stream_.size(); }
  int32_t vocab_size() const { return stream_.vocab_size(); }
  const LoaderOptions& options() const { return options_; }

 private:
  void build_permutation();
  int64_t window_of(int64_t position) const;  // the window this rank reads at a position

  LoaderOptions options_;
  TokenStream stream_;
  int64_t windows_ = 0;
  int64_t per_rank_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> permutation_;  // of the current epoch
};

// Validation batches: every window of this rank's slice (windows r, r + world_size, ...) once, in
// order, or max_windows of them evenly spaced; the last batch may have fewer rows. next() returns
// false at the end; reset() starts over.
class ValidationLoader {
 public:
  explicit ValidationLoader(const LoaderOptions& options);

  bool next(Batch& out);
  void reset() { position_ = 0; }

  int64_t windows() const { return windows_; }
  int64_t windows_per_rank() const { return per_rank_; }  // visited per pass (max_windows applied)
  int64_t batches() const;
  int32_t vocab_size() const { return stream_.vocab_size(); }

 private:
  LoaderOptions options_;
  TokenStream stream_;
  int64_t windows_ = 0;
  int64_t per_rank_ = 0;
  int64_t slice_ = 0;  // this rank's windows before max_windows
  int64_t position_ = 0;
};

// Fills row `row` of a batch from window start `start` (seq + 1 tokens of the stream).
void fill_window(const TokenStream& stream, int64_t start, int seq, int row, Batch& batch);

}  // namespace fp4
