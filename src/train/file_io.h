// Durable file writes for checkpoints and run files: write, fsync, rename, fsync the directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace fp4 {

// The size of a file and the SHA-256 (lower-case hex) of its content.
struct FileDigest {
  uint64_t bytes = 0;
  std::string sha256;
};

// Writes the parts one after another into path (created or truncated), fsyncs it and checks the
// size on disk. Throws fp4::Error naming the path and the system error.
void write_file_synced(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts);
void write_file_synced(const std::filesystem::path& path, std::string_view text);

// The same, also hashing the bytes in memory piece by piece just before each piece is written, so
// the checksum needs no read-back of the file (its SHA-256 is that of the whole file, as sha256sum).
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
