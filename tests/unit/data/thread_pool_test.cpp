#include "data/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

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

}  // namespace
}  // namespace fp4
