// A fixed set of worker threads running submitted jobs in FIFO order; used by prepare to tokenize
// documents in parallel while one thread writes the results in order.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4 {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // at least one worker; fp4::Error when the system refuses one
  ~ThreadPool();                     // finishes queued jobs, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues fn; the future yields its result or rethrows its exception.
  template <typename F>
  auto submit(F fn) -> std::future<decltype(fn())> {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }

  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void enqueue(std::function<void()> job);
  void run();
  void stop_and_join();  // lets the queued jobs finish, then joins every started worker

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace fp4
