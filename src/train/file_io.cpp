#include "train/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace fp4 {
namespace {

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

void write_file_synced(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  FP4_CHECK(fd.get() >= 0, path.string(), ": cannot create: ", errno_text());
  for (auto part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      const ssize_t n = ::write(fd.get(), part.data() + done, part.size() - done);
      if (n < 0 && errno == EINTR) continue;
      FP4_CHECK(n > 0, path.string(), ": write failed: ", errno_text());
      done += static_cast<size_t>(n);
    }
  }
  FP4_CHECK(::fsync(fd.get()) == 0, path.string(), ": fsync failed: ", errno_text());
  FP4_CHECK(::close(fd.release()) == 0, path.string(), ": close failed: ", errno_text());
}

void write_file_synced(const std::filesystem::path& path, std::string_view text) {
  const std::span<const uint8_t> part(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  write_file_synced(path, std::span(&part, 1));
}

void fsync_directory(const std::filesystem::path& dir) {
  const auto target = dir.empty() ? std::filesystem::path(".") : dir;
  Fd fd(::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
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
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in, path.string(), ": missing or unreadable");
  std::ostringstream os;
  os << in.rdbuf();
  FP4_CHECK(!in.bad(), path.string(), ": read error");
  return os.str();
}

}  // namespace fp4
