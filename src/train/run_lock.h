// RunLock: one trainer per run directory. Two processes writing the same checkpoints and metrics
// would corrupt each other's resume state, so the second one fails at once.
#pragma once

#include <filesystem>

namespace fp4 {

class RunLock {
 public:
  // Takes an exclusive lock on <run_dir>/.lock (created if needed); throws fp4::Error naming the
  // directory (and the holder's pid) when another trainer holds it. Released on destruction or
  // when the process ends, however it ends.
  explicit RunLock(const std::filesystem::path& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace fp4
