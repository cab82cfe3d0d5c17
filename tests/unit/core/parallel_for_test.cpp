#include "core/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fp4 {
namespace {

// Every index runs exactly once, on several threads when asked, for sizes around the thread count.
TEST(ParallelFor, EveryIndexRunsOnceOnUpToTheThreadsAsked) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{57}, size_t{1000}})
    for (size_t threads : {size_t{0}, size_t{1}, size_t{4}, size_t{16}}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::set<std::thread::id> ids;
      parallel_for(n, threads, [&](size_t i) {
        hits[i].fetch_add(1);
        if (i % 3 == 0) std::this_thread::yield();  // uneven task lengths
        const std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n " << n << ", index " << i;
      EXPECT_LE(ids.size(), std::max<size_t>(std::min(threads, n), 1))
          << "n " << n << ", threads " << threads;
    }
}

// Results written by index do not depend on the thread count.
TEST(ParallelFor, ResultsByIndexDoNotDependOnTheThreadCount) {
  auto run = [](size_t threads) {
    std::vector<double> out(200);
    parallel_for(out.size(), threads, [&](size_t i) {
      double s = 0;
      for (size_t k = 1; k <= 1000 + i; ++k) s += 1.0 / static_cast<double>(k * k + i);
      out[i] = s;
    });
    return out;
  };
  EXPECT_EQ(run(1), run(8));
  EXPECT_EQ(run(1), run(host_threads()));
  EXPECT_GE(host_threads(), size_t{1});
}

// A throwing task: the others still run and the exception reaches the caller.
TEST(ParallelFor, TheFirstExceptionReachesTheCallerAfterEveryTaskRan) {
  std::atomic<int> ran{0};
  try {
    parallel_for(40, 6, [&](size_t i) {
      ran.fetch_add(1);
      if (i == 7 || i == 23) throw std::runtime_error("task " + std::to_string(i) + " failed");
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what == "task 7 failed" || what == "task 23 failed") << what;
  }
  EXPECT_EQ(ran.load(), 40);
}

}  // namespace
}  // namespace fp4
