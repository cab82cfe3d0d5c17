#include "train/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "core/error.h"

namespace fp4 {
namespace {

// Hashing a piece just before writing it keeps it in cache for the copy into the page cache.
constexpr size_t kHashPiece = size_t{1} << 20;
// Writeback is started after this many bytes, so the disk works while the rest is hashed and
// copied, and the final fsync has little left to wait for.
constexpr uint64_t kWritebackEvery = uint64_t{32} << 20;
// Files at least this large are hashed on a thread of their own while being written.
constexpr uint64_t kHashOnItsOwnThread = uint64_t{16} << 20;

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

}  // namespace

SyncedFileWriter::SyncedFileWriter(const std::filesystem::path& path, bool hash)
    : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  FP4_CHECK(fd_.get() >= 0, path.string(), ": cannot create: ", errno_text());
  if (hash) hasher_.emplace();
}

void SyncedFileWriter::write(std::span<const uint8_t> bytes) {
  FP4_CHECK(fd_.get() >= 0, path_.string(), ": write after finish");
  for (size_t at = 0; at < bytes.size(); at += kHashPiece) {
    const auto piece = bytes.subspan(at, std::min(kHashPiece, bytes.size() - at));
    if (hasher_) hasher_->update(piece);
    write_all(fd_.get(), path_, piece);
    written_ += piece.size();
    if (written_ - kicked_ >= kWritebackEvery) {
      // Only a hint (its failure changes nothing): the fsync in finish() makes the file durable.
      ::sync_file_range(fd_.get(), static_cast<off_t>(kicked_), static_cast<off_t>(written_ - kicked_),
                        SYNC_FILE_RANGE_WRITE);
      kicked_ = written_;
    }
  }
}

FileDigest SyncedFileWriter::finish() {
  FP4_CHECK(fd_.get() >= 0, path_.string(), ": finish called twice");
  FP4_CHECK(::fsync(fd_.get()) == 0, path_.string(), ": fsync failed: ", errno_text());
  struct stat st {};
  FP4_CHECK(::fstat(fd_.get(), &st) == 0, path_.string(), ": fstat failed: ", errno_text());
  FP4_CHECK(static_cast<uint64_t>(st.st_size) == written_, path_.string(), ": short write: ", st.st_size,
            " bytes on disk, ", written_, " written");
  FP4_CHECK(::close(fd_.release()) == 0, path_.string(), ": close failed: ", errno_text());
  return {written_, hasher_ ? hasher_->hex() : std::string()};
}

void write_file_synced(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts) {
  SyncedFileWriter out(path, false);
  for (auto part : parts) out.write(part);
  out.finish();
}

void write_file_synced(const std::filesystem::path& path, std::string_view text) {
  SyncedFileWriter out(path, false);
  out.write(bytes_of(text));
  out.finish();
}

FileDigest write_file_synced_hashed(const std::filesystem::path& path,
                                    std::span<const std::span<const uint8_t>> parts) {
  uint64_t total = 0;
  for (auto part : parts) total += part.size();
  if (total < kHashOnItsOwnThread) {
    SyncedFileWriter out(path, true);
    for (auto part : parts) out.write(part);
    return out.finish();
  }
  // The bytes stay in memory, so a second thread hashes them while this one writes them: hashing
  // and the disk overlap instead of taking turns (write() blocks when dirty pages pile up).
  auto hashed = std::async(std::launch::async, [parts] {
    Sha256 h;
    for (auto part : parts) h.update(part);
    return h.hex();
  });
  SyncedFileWriter out(path, false);
  for (auto part : parts) out.write(part);
  FileDigest d = out.finish();
  d.sha256 = hashed.get();
  return d;
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
  // O_NONBLOCK so that a FIFO in the file's place is refused instead of blocking the open.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  FP4_CHECK(fd.get() >= 0, path.string(), ": missing or unreadable: ", errno_text());
  struct stat st {};
  FP4_CHECK(::fstat(fd.get(), &st) == 0, path.string(), ": fstat failed: ", errno_text());
  FP4_CHECK(!S_ISDIR(st.st_mode), path.string(), ": missing or unreadable: is a directory");
  FP4_CHECK(S_ISREG(st.st_mode) || path.string().rfind("/proc/", 0) == 0, path.string(),
            ": not a regular file");
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
