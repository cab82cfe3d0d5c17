// The host backend of Communicator: processes exchange host buffers over TCP through rank 0 (a star:
// every rank sends to rank 0, which sums in rank order and sends back). Meant for the CPU engine and
// for testing the data-parallel logic without a GPU; one host (loopback) or several.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "dist/communicator.h"
#include "dist/dist_env.h"
#include "dist/socket_io.h"

namespace fp4 {

class TcpCommunicator final : public Communicator {
 public:
  // Collective over env's job: rank 0 listens on an ephemeral port of MASTER_ADDR and hands its
  // number to the others through rendezvous_broadcast (MASTER_ADDR:MASTER_PORT); they connect.
  // setup_timeout bounds the assembly, op_timeout each collective (a rank busy saving a checkpoint
  // makes the others wait). payload: bytes rank 0 hands to every rank during the setup (NCCL's unique
  // id), returned by setup_payload() on every rank. Throws fp4::Error naming the rank and endpoint.
  TcpCommunicator(const DistEnv& env, std::chrono::milliseconds setup_timeout,
                  std::chrono::milliseconds op_timeout, std::span<const uint8_t> payload = {});

  const std::vector<uint8_t>& setup_payload() const { return payload_; }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "tcp"; }
  bool device_memory() const override { return false; }

  void all_reduce_sum(void* data, int64_t count, CommType type, void* stream = nullptr) override;
  void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void* stream = nullptr) override;
  void all_gather(float* data, std::span<const IndexRange> ranges, void* stream = nullptr) override;
  void host_all_reduce_sum(void* data, int64_t count, CommType type) override {
    all_reduce_sum(data, count, type);
  }
  void barrier(void* stream = nullptr) override;

 private:
  enum class Op : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBarrier };
  struct Header {
    uint32_t magic, op, seq, reserved;
    uint64_t bytes;
  };

  std::string where() const;
  void check_ranges(std::span<const IndexRange> ranges, const char* op) const;
  // One message to or from a peer (rank 0: peers_[r]; others: peers_[0] is rank 0).
  void send(int peer, Op op, const void* data, size_t bytes);
  void recv(int peer, Op op, void* data, size_t bytes);

  int rank_ = 0;
  int world_ = 1;
  std::string master_addr_;
  std::chrono::milliseconds op_timeout_;
  uint32_t seq_ = 0;  // collectives so far: tells a rank that called a different collective
  std::vector<Socket> peers_;
  std::vector<uint8_t> payload_;
};

}  // namespace fp4
