// manifest.json of a prepared data directory: which tokenizer made the shards and which shards
// make each split, so the loader and the trainer never guess from file names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fp4 {

struct ManifestShard {
  std::string file;  // relative to the manifest's directory
  int64_t tokens = 0;
  uint64_t payload_fnv1a = 0;
};

struct ManifestSplit {
  std::vector<ManifestShard> shards;
  int64_t documents = 0;
  int64_t bytes = 0;   // input text bytes
  int64_t tokens = 0;  // end-of-text separators included
};

struct Manifest {
  int format_version = 1;
  std::string tokenizer;  // the spec given to load_tokenizer
  std::string tokenizer_name;
  int32_t vocab_size = 0;
  int32_t eot_id = 0;
  ManifestSplit train;
  ManifestSplit val;
  std::vector<std::string> inputs;  // the input files, in the order they were tokenized
  std::vector<std::string> val_inputs;

  const ManifestSplit& split(const std::string& name) const;  // "train" or "val"
};

inline constexpr const char* kManifestName = "manifest.json";

// Writes <dir>/manifest.json atomically.
void write_manifest(const std::filesystem::path& dir, const Manifest& m);
// Reads a manifest from a data directory or a manifest.json path; throws fp4::Error naming the
// file and the missing or malformed field.
Manifest read_manifest(const std::filesystem::path& dir_or_file);
// The directory the shard files of a manifest are relative to.
std::filesystem::path manifest_dir(const std::filesystem::path& dir_or_file);

}  // namespace fp4
