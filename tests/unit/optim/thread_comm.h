// An in-process Communicator for optimizer tests: N ranks as N threads over shared host buffers, with
// the host backends' semantics (sums taken in rank order, so every rank gets the same bits).
#pragma once

#include <algorithm>
#include <barrier>
#include <climits>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace fp4::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int world) : world_(world), sync_(world), slots_(static_cast<size_t>(world)) {}
  int world() const { return world_; }
  void wait() { sync_.arrive_and_wait(); }
  std::vector<std::vector<uint8_t>>& slots() { return slots_; }

 private:
  int world_;
  std::barrier<> sync_;
  std::vector<std::vector<uint8_t>> slots_;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_.world(); }
  std::string backend() const override { return "threads"; }
  bool device_memory() const override { return false; }

  void all_reduce_sum(void* data, int64_t count, CommType type, void*) override {
    const size_t bytes = static_cast<size_t>(count) * comm_type_bytes(type);
    publish(data, bytes);
    std::vector<uint8_t> acc(g_.slots()[0]);
    for (int r = 1; r < g_.world(); ++r)
      add(acc.data(), g_.slots()[static_cast<size_t>(r)].data(), count, type);
    g_.wait();  // everyone has read the slots
    std::memcpy(data, acc.data(), bytes);
  }
  void host_all_reduce_sum(void* data, int64_t count, CommType type) override {
    all_reduce_sum(data, count, type, nullptr);
  }
  // Sums the whole span the ranges cover (a bucket), which leaves every rank's range summed.
  void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void*) override {
    int64_t lo = INT64_MAX, hi = 0;
    for (const auto& r : ranges)
      if (r.size() > 0) lo = std::min(lo, r.begin), hi = std::max(hi, r.end);
    if (hi > lo)
      all_reduce_sum(data + lo, hi - lo, CommType::kF32, nullptr);
    else
      all_reduce_sum(data, 0, CommType::kF32, nullptr);
  }
  void all_gather(float* data, std::span<const IndexRange> ranges, void*) override {
    int64_t n = 0;  // the ranges may come in any order, some empty
    for (const auto& r : ranges) n = std::max(n, r.end);
    publish(data, static_cast<size_t>(n) * 4);
    for (int r = 0; r < g_.world(); ++r) {
      const IndexRange q = ranges[static_cast<size_t>(r)];
      std::memcpy(data + q.begin, g_.slots()[static_cast<size_t>(r)].data() + q.begin * 4,
                  static_cast<size_t>(q.size()) * 4);
    }
    g_.wait();
  }
  void barrier(void*) override { g_.wait(); }

 private:
  void publish(const void* data, size_t bytes) {
    auto& mine = g_.slots()[static_cast<size_t>(rank_)];
    mine.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    g_.wait();  // every slot written
  }
  static void add(uint8_t* acc, const uint8_t* x, int64_t n, CommType t) {
    for (int64_t i = 0; i < n; ++i) {
      if (t == CommType::kF32) {
        float a, b;
        std::memcpy(&a, acc + 4 * i, 4);
        std::memcpy(&b, x + 4 * i, 4);
        a += b;
        std::memcpy(acc + 4 * i, &a, 4);
      } else if (t == CommType::kF64) {
        double a, b;
        std::memcpy(&a, acc + 8 * i, 8);
        std::memcpy(&b, x + 8 * i, 8);
        a += b;
        std::memcpy(acc + 8 * i, &a, 8);
      } else {
        uint64_t a, b;  // wrap-around sum, as two's complement int64
        std::memcpy(&a, acc + 8 * i, 8);
        std::memcpy(&b, x + 8 * i, 8);
        a += b;
        std::memcpy(acc + 8 * i, &a, 8);
      }
    }
  }

  ThreadGroup& g_;
  int rank_;
};

// Runs body(comm of rank r) on `world` threads and waits for all. Comm: ThreadComm, or another test
// communicator made from (ThreadGroup&, rank), such as tests/cuda/staged_thread_comm.h's.
template <typename Comm = ThreadComm>
void run_threads(int world, const std::function<void(Communicator&)>& body) {
  ThreadGroup g(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&g, r, &body] {
      Comm c(g, r);
      body(c);
    });
  for (auto& t : threads) t.join();
}

}  // namespace fp4::test
