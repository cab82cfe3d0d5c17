// prepare_shards: text files -> token shards + manifest.json (what `fp4train prepare` runs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/manifest.h"

namespace fp4 {

inline constexpr int kMaxPrepareThreads = 1024;  // tokenizer threads prepare accepts

struct PrepareOptions {
  // Files or directories (searched recursively, in sorted path order). Files ending in .txt are
  // read as they are, .xz through `xz -dc`; other files in a directory are ignored, but a file named
  // explicitly is read whatever its extension. Each file is one document.
  std::vector<std::filesystem::path> inputs;
  // Validation documents. When empty and val_fraction > 0, a deterministic val_fraction of the
  // input documents (chosen by a hash of the file name) goes to validation instead.
  std::vector<std::filesystem::path> val_inputs;
  double val_fraction = 0.0;
  // Validation sampled from inside the training documents, so that it follows the training mix even
  // when a corpus is a few large files: when > 0, each training document is cut into pieces of about
  // val_piece_bytes (at the same safe places as chunk_bytes) and the pieces whose hash of (file name,
  // piece index) falls below val_sample go to validation. An eot closes every run of pieces on either
  // side of a cut. Combines with val_inputs / val_fraction; the split does not depend on chunk_bytes.
  double val_sample = 0.0;
  int64_t val_piece_bytes = int64_t{1} << 18;
  std::string tokenizer = "bytes";  // a load_tokenizer spec
  std::filesystem::path out_dir;
  int64_t shard_tokens = int64_t{1} << 24;  // tokens per shard file (the last one may hold fewer)
  int threads = 0;  // 0: std::thread::hardware_concurrency(); at most kMaxPrepareThreads
  // Large documents are cut into pieces of about this many bytes, only at places where the cut
  // cannot change the GPT-2 pre-tokenization, so the tokens are the same as for the whole file.
  int64_t chunk_bytes = int64_t{1} << 20;
  // Called from the calling thread after each document is written: (documents done, total).
  std::function<void(int64_t, int64_t)> progress;
};

// Tokenizes every document (in parallel), appends eot after each, and writes train_000000.bin ...,
// val_000000.bin ... and manifest.json into out_dir (created if needed; old shards of the same names
// are replaced). The output bytes do not depend on `threads`. Returns the manifest written. Throws
// fp4::Error naming the input that cannot be read, or when no input documents are found.
Manifest prepare_shards(const PrepareOptions& options);

// The input files an input list expands to, in the order prepare_shards reads them.
std::vector<std::filesystem::path> expand_inputs(const std::vector<std::filesystem::path>& inputs);

}  // namespace fp4
