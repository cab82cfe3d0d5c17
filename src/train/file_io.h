// Durable file writes for checkpoints and run files: write, fsync, rename, fsync the directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "train/sha256.h"
#include "train/unique_fd.h"

namespace fp4 {

// The size of a file and the SHA-256 (lower-case hex) of its content.
struct FileDigest {
  uint64_t bytes = 0;
  std::string sha256;
};

// Writes a file (created or truncated) piece by piece, starting writeback as it goes; with `hash`,
// each piece is hashed from memory just before it is written, so the checksum needs no read-back
// (it is the SHA-256 of the whole file, as sha256sum gives). finish() fsyncs, checks the size on disk
// and returns it with the hash (empty without `hash`). Errors name the path. A writer dropped before
// finish() (after an error) closes the partial file and leaves it to the caller's cleanup.
class SyncedFileWriter {
 public:
  SyncedFileWriter(const std::filesystem::path& path, bool hash);
  void write(std::span<const uint8_t> bytes);
  FileDigest finish();

 private:
  std::filesystem::path path_;
  UniqueFd fd_;
  std::optional<Sha256> hasher_;
  uint64_t written_ = 0;
  uint64_t kicked_ = 0;  // bytes whose writeback has been started
};

// Writes the parts one after another into path (created or truncated), fsyncs it and checks the
// size on disk. Throws fp4::Error naming the path and the system error.
void write_file_synced(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts);
void write_file_synced(const std::filesystem::path& path, std::string_view text);

// The same, also returning the size and SHA-256 of the bytes in memory (no read-back); a large file
// is hashed on a second thread while this one writes it.
FileDigest write_file_synced_hashed(const std::filesystem::path& path,
                                    std::span<const std::span<const uint8_t>> parts);
FileDigest write_file_synced_hashed(const std::filesystem::path& path, std::string_view text);

// Replaces path by a new file with the given text so that a reader sees the old or the new
// content, never a mix: a temp file beside it, fsync, rename, fsync of the directory.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// fsync of a directory, so a rename or a new entry in it survives a crash.
void fsync_directory(const std::filesystem::path& dir);

// The whole file; throws fp4::Error naming the path when it is missing or unreadable.
std::string read_file(const std::filesystem::path& path);

}  // namespace fp4
