// Token shards: a 64-byte header then the token ids, little-endian.
//
//   offset size field
//   0      8    magic "FP4TOK\0\0"
//   8      4    format version (kShardVersion)
//   12     4    bytes per token: 2 (uint16, when vocab_size <= 65536) or 4 (uint32)
//   16     8    token count N
//   24     4    vocab size (every id < vocab size)
//   28     4    reserved, 0
//   32     8    FNV-1a 64 of the payload (the N * bytes-per-token bytes after the header)
//   40     8    FNV-1a 64 of header bytes 0..39
//   48     16   reserved, 0
//   64     ...  payload
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "data/fnv1a.h"

namespace fp4 {

inline constexpr char kShardMagic[8] = {'F', 'P', '4', 'T', 'O', 'K', '\0', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;  // 2 or 4
  uint64_t token_count = 0;
  uint32_t vocab_size = 0;
  uint64_t payload_fnv1a = 0;
};

// Writes tokens as a shard, atomically (a temp file beside `path`, then rename): an interrupted
// write never leaves a partial shard under the final name. Throws fp4::Error naming the path when
// an id is outside [0, vocab_size) or the file cannot be written. Returns the header written.
ShardHeader write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                        int32_t vocab_size);

// A shard opened for reading: validated (magic, version, header checksum, file size, payload
// checksum when asked) and memory-mapped. Move-only; unmaps on destruction.
class ShardFile {
 public:
  // Throws fp4::Error naming the file and the fault: "wrong magic", "unsupported version 7",
  // "truncated: expected 2064 bytes, got 1000", "payload checksum mismatch", ...
  explicit ShardFile(const std::filesystem::path& path, bool verify_payload = true);
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&& other) noexcept;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  ~ShardFile();

  const std::filesystem::path& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  int64_t size() const { return static_cast<int64_t>(header_.token_count); }

  int32_t at(int64_t i) const;
  // Copies tokens [start, start + out.size()) into out; throws fp4::Error if out of range.
  void copy(int64_t start, std::span<int32_t> out) const;
  std::vector<int32_t> read_all() const;

 private:
  void unmap() noexcept;

  std::filesystem::path path_;
  ShardHeader header_;
  const uint8_t* map_ = nullptr;  // the whole file, header included
  size_t map_bytes_ = 0;
};

}  // namespace fp4
