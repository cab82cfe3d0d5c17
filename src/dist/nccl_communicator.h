// The device backend of Communicator: NCCL (loaded at run time, dist/nccl_api.h) over the ranks'
// GPUs, with a TcpCommunicator beside it for host-side barriers. Uneven per-rank ranges (ZeRO-1
// shards) are served by grouped ncclReduce / ncclBroadcast calls, one per rank.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/dist_env.h"
#include "dist/nccl_api.h"
#include "dist/tcp_communicator.h"

namespace fp4 {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over env's job. The calling thread's current CUDA device must be this rank's GPU (the
  // CUDA engine selects device LOCAL_RANK when it is built). Forces NCCL_NVLS_ENABLE=0 (NVLink
  // multicast must stay off on the shared machines) and tells `log` so. Rank 0's ncclUniqueId
  // travels over the TCP rendezvous. Throws fp4::Error when NCCL cannot be loaded or initialised.
  NcclCommunicator(const DistEnv& env, std::chrono::milliseconds setup_timeout,
                   std::chrono::milliseconds op_timeout, const std::function<void(const std::string&)>& log);
  ~NcclCommunicator() override;

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  std::string backend() const override { return "nccl"; }
  bool device_memory() const override { return true; }

  void all_reduce_sum(void* data, int64_t count, CommType type, void* stream) override;
  void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void* stream) override;
  void all_gather(float* data, std::span<const IndexRange> ranges, void* stream) override;
  // Host-side, over the TCP side channel.
  void host_all_reduce_sum(void* data, int64_t count, CommType type) override {
    host_->all_reduce_sum(data, count, type);
  }
  void barrier(void* stream) override;

 private:
  void check(nccl::Result r, const char* call) const;

  const nccl::Api& api_;
  std::unique_ptr<TcpCommunicator> host_;
  nccl::Comm comm_ = nullptr;
};

}  // namespace fp4
