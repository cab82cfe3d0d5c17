#include "data/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>

#include "core/error.h"

namespace fp4 {
namespace {

TEST(ThreadPool, RunsEveryJobAndReturnsItsResult) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  std::vector<std::future<int>> results;
  for (int i = 0; i < 200; ++i) results.push_back(pool.submit([i] { return i * i; }));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(results[i].get(), i * i);
}

TEST(ThreadPool, ExceptionsReachTheFuture) {
  ThreadPool pool(2);
  auto bad = pool.submit([]() -> int { throw std::runtime_error("job failed"); });
  auto good = pool.submit([] { return 7; });
  EXPECT_THROW(bad.get(), std::runtime_error);
  EXPECT_EQ(good.get(), 7);
}

TEST(ThreadPool, DestructorFinishesQueuedJobs) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(0);  // clamped to one worker
    EXPECT_EQ(pool.size(), 1);
    for (int i = 0; i < 50; ++i) pool.submit([&done] { ++done; });
  }
  EXPECT_EQ(done.load(), 50);
}

// More threads than the system gives (here: an address space too small for their stacks) is an
// fp4::Error naming the thread, not std::terminate on the threads already started. In a child process, so
// the limit stays there; the old pool died of SIGABRT.
TEST(ThreadPool, ThreadsTheSystemRefusesAreAnErrorNotACrash) {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reserves its shadow memory (terabytes of address space) at start-up and maps more as it
  // runs: under a 1 GiB RLIMIT_AS its own mmap fails before the pool is reached.
  GTEST_SKIP() << "RLIMIT_AS cannot be lowered under AddressSanitizer";
#endif
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{};
    ::getrlimit(RLIMIT_AS, &limit);
    limit.rlim_cur = rlim_t{1} << 30;  // 1 GiB: about a hundred 8 MiB thread stacks
    ::setrlimit(RLIMIT_AS, &limit);
    try {
      ThreadPool pool(100000);
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("could not start thread") != std::string::npos ? 0 : 3);
    } catch (...) {
      ::_exit(4);
    }
    ::_exit(5);  // the system gave 100000 threads: the limit did not take
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace fp4
