#include "data/thread_pool.h"

#include <system_error>

#include "core/error.h"

namespace fp4 {

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) threads = 1;
  workers_.reserve(threads);
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
  } catch (const std::system_error& e) {
    // The system refused a thread: the ones started must be joined before the vector is destroyed
    // (a joinable std::thread's destructor terminates the process).
    const size_t started = workers_.size();
    stop_and_join();
    FP4_THROW("thread pool: could not start thread ", started + 1, " of ", threads, ": ", e.what());
  }
}

void ThreadPool::stop_and_join() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

ThreadPool::~ThreadPool() {
  stop_and_join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ThreadPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // packaged_task stores any exception in its future
  }
}

}  // namespace fp4
