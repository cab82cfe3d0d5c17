#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace fp4 {

RunLock::RunLock(const std::filesystem::path& run_dir) {
  const auto path = run_dir / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  FP4_CHECK(fd_ >= 0, path.string(), ": cannot open: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    FP4_CHECK(err != EWOULDBLOCK, "another fp4train (pid ",
              n > 0 ? std::string(holder, static_cast<size_t>(n)) : "?", ") is training in ",
              run_dir.string(), ": wait for it or choose another --out");
    FP4_THROW(path.string(), ": cannot lock: ", std::strerror(err));
  }
  // The holder's pid, for the message above; without it the lock works the same (the message says "?").
  const std::string pid = std::to_string(::getpid());
  const bool recorded = ::ftruncate(fd_, 0) == 0 &&
                        ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  (void)recorded;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace fp4
