// StopSignalScope: the first SIGINT or SIGTERM only sets the flag, a second one ends the process, a new
// scope clears the flag, and leaving the scope restores the handlers that were there before.
#include "train/stop_signal.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace fp4 {
namespace {

volatile std::sig_atomic_t g_previous_calls = 0;
extern "C" void previous_handler(int) {
  g_previous_calls = g_previous_calls + 1;
}

sighandler_t current_handler(int sig) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

TEST(StopSignal, FirstSignalSetsTheFlagAndANewScopeClearsIt) {
  for (const int sig : {SIGINT, SIGTERM}) {
    StopSignalScope scope;
    EXPECT_EQ(StopSignalScope::received(), 0);
    ASSERT_EQ(std::raise(sig), 0);  // survives: the handler only records it
    EXPECT_EQ(StopSignalScope::received(), sig);
    // The handler was reset by the first signal, so a second one would get the default action.
    EXPECT_EQ(current_handler(sig), SIG_DFL);
  }
  const StopSignalScope fresh;
  EXPECT_EQ(StopSignalScope::received(), 0);
}

TEST(StopSignal, LeavingTheScopeRestoresThePreviousHandlers) {
  struct sigaction mine {
  }, old_int{}, old_term{};
  mine.sa_handler = previous_handler;
  sigemptyset(&mine.sa_mask);
  sigaction(SIGINT, &mine, &old_int);
  sigaction(SIGTERM, &mine, &old_term);
  g_previous_calls = 0;
  {
    const StopSignalScope scope;
    EXPECT_NE(current_handler(SIGINT), previous_handler);
    EXPECT_NE(current_handler(SIGTERM), previous_handler);
    std::raise(SIGTERM);
    EXPECT_EQ(g_previous_calls, 0);  // the scope's handler took it
  }
  EXPECT_EQ(current_handler(SIGINT), previous_handler);
  EXPECT_EQ(current_handler(SIGTERM), previous_handler);
  std::raise(SIGINT);
  EXPECT_EQ(g_previous_calls, 1);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
}

// In a child process: the first SIGINT is survived, the second one kills it by that signal.
TEST(StopSignal, SecondSignalEndsTheProcess) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const StopSignalScope scope;
      std::raise(sig);
      if (StopSignalScope::received() != sig) ::_exit(2);
      std::raise(sig);
      ::_exit(3);  // reached only if the second signal was caught too
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), sig);
  }
}

}  // namespace
}  // namespace fp4
