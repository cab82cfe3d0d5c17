#include "train/run_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

namespace fp4 {
namespace {

TEST(RunLock, ExclusiveUntilReleased) {
  testing::TempDir dir;
  {
    RunLock a(dir.path());
    EXPECT_THAT(testing::error_of([&] { RunLock b(dir.path()); }),
                ::testing::HasSubstr("another fp4train (pid " + std::to_string(::getpid()) + ")"));
    std::filesystem::create_directories(dir / "other");
    RunLock elsewhere(dir / "other");  // another directory is independent
  }
  RunLock again(dir.path());  // released with its owner
}

// A child process cannot take the lock while the parent holds it.
TEST(RunLock, HeldAcrossProcesses) {
  testing::TempDir dir;
  RunLock a(dir.path());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      RunLock b(dir.path());
      ::_exit(0);
    } catch (const Error&) {
      ::_exit(3);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

}  // namespace
}  // namespace fp4
