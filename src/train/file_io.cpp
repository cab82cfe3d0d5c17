#include "train/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "train/sha256.h"
#include "train/unique_fd.h"

namespace fp4 {
namespace {

// Hashing a piece just before writing it keeps it in cache for the copy into the page cache.
constexpr size_t kHashPiece = size_t{1} << 20;
// Writeback is started after this many bytes, so the disk works while the rest is hashed and
// copied, and the final fsync has little left to wait for.
constexpr uint64_t kWritebackEvery = uint64_t{32} << 20;

std::string errno_text() {
  return std::strerror(errno);
}

std::span<const uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

void write_all(int fd, const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    FP4_CHECK(n > 0, path.string(), ": write failed after ", done, " of ", bytes.size(),
              " bytes of a piece: ", n < 0 ? errno_text() : std::string("no progress"));
    done += static_cast<size_t>(n);
  }
}

// Writes and fsyncs; hashes each piece first when `hasher` is given. Returns the bytes written.
uint64_t write_synced(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts,
                      Sha256* hasher) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  FP4_CHECK(fd.get() >= 0, path.string(), ": cannot create: ", errno_text());
  uint64_t total = 0, kicked = 0;
  for (auto part : parts) {
    for (size_t at = 0; at < part.size(); at += kHashPiece) {
      const auto piece = part.subspan(at, std::min(kHashPiece, part.size() - at));
      if (hasher) hasher->update(piece);
      write_all(fd.get(), path, piece);
      total += piece.size();
      if (total - kicked >= kWritebackEvery) {
        // Only a hint (its failure changes nothing): the fsync below is what makes the file durable.
        ::sync_file_range(fd.get(), static_cast<off_t>(kicked), static_cast<off_t>(total - kicked),
                          SYNC_FILE_RANGE_WRITE);
        kicked = total;
      }
    }
  }
  FP4_CHECK(::fsync(fd.get()) == 0, path.string(), ": fsync failed: ", errno_text());
  struct stat st {};
  FP4_CHECK(::fstat(fd.get(), &st) == 0, path.string(), ": fstat failed: ", errno_text());
  FP4_CHECK(static_cast<uint64_t>(st.st_size) == total, path.string(), ": short write: ", st.st_size,
            " bytes on disk, ", total, " written");
  FP4_CHECK(::close(fd.release()) == 0, path.string(), ": close failed: ", errno_text());
  return total;
}

}  // namespace

void write_file_synced(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts) {
  write_synced(path, parts, nullptr);
}

void write_file_synced(const std::filesystem::path& path, std::string_view text) {
  const auto part = bytes_of(text);
  write_synced(path, std::span(&part, 1), nullptr);
}

FileDigest write_file_synced_hashed(const std::filesystem::path& path,
                                    std::span<const std::span<const uint8_t>> parts) {
  Sha256 hasher;
  FileDigest out;
  out.bytes = write_synced(path, parts, &hasher);
  out.sha256 = hasher.hex();
  return out;
}

FileDigest write_file_synced_hashed(const std::filesystem::path& path, std::string_view text) {
  const auto part = bytes_of(text);
  return write_file_synced_hashed(path, std::span(&part, 1));
}

void fsync_directory(const std::filesystem::path& dir) {
  const auto target = dir.empty() ? std::filesystem::path(".") : dir;
  UniqueFd fd(::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  FP4_CHECK(fd.get() >= 0, target.string(), ": cannot open directory: ", errno_text());
  FP4_CHECK(::fsync(fd.get()) == 0, target.string(), ": fsync of directory failed: ", errno_text());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  write_file_synced(tmp, text);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    FP4_THROW(path.string(), ": cannot replace: ", ec.message());
  }
  fsync_directory(path.parent_path());
}

std::string read_file(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  FP4_CHECK(fd.get() >= 0, path.string(), ": missing or unreadable: ", errno_text());
  struct stat st {};
  FP4_CHECK(::fstat(fd.get(), &st) == 0, path.string(), ": fstat failed: ", errno_text());
  FP4_CHECK(!S_ISDIR(st.st_mode), path.string(), ": missing or unreadable: is a directory");
  std::string out(static_cast<size_t>(std::max<off_t>(st.st_size, 0)), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    FP4_CHECK(n > 0, path.string(), ": read error: ", errno_text());
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  // Bytes beyond the size fstat gave: a file still growing, or one (as in /proc) that reports 0.
  char more[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), more, sizeof more);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    FP4_CHECK(n > 0, path.string(), ": read error: ", errno_text());
    out.append(more, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace fp4
