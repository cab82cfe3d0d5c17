#include "dist/nccl_communicator.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace fp4 {
namespace {

int nccl_type(CommType t) {
  switch (t) {
    case CommType::kF32:
      return nccl::kFloat32;
    case CommType::kF64:
      return nccl::kFloat64;
    case CommType::kI64:
      return nccl::kInt64;
  }
  FP4_THROW("NCCL: unknown element type");
}

// Must happen before NCCL reads its environment (its first call in this process).
void disable_nvls(const std::function<void(const std::string&)>& log) {
  const char* before = std::getenv("NCCL_NVLS_ENABLE");
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (before && std::strcmp(before, "0") != 0)
    log(std::string("NCCL_NVLS_ENABLE=") + before +
        " replaced by 0: NVLink multicast stays off on these machines");
  else
    log("NCCL_NVLS_ENABLE=0 (NVLink multicast off)");
}

}  // namespace

NcclCommunicator::NcclCommunicator(const DistEnv& env, std::chrono::milliseconds setup_timeout,
                                   std::chrono::milliseconds op_timeout,
                                   const std::function<void(const std::string&)>& log)
    : api_((disable_nvls(log), nccl::load_api())) {
  nccl::UniqueId id{};
  if (env.rank == 0) check(api_.get_unique_id(&id), "ncclGetUniqueId");
  std::vector<uint8_t> blob(sizeof(id));
  std::memcpy(blob.data(), &id, sizeof(id));
  host_ = std::make_unique<TcpCommunicator>(
      env, setup_timeout, op_timeout,
      env.rank == 0 ? std::span<const uint8_t>(blob) : std::span<const uint8_t>());
  FP4_CHECK(host_->setup_payload().size() == sizeof(id), "NCCL setup: rank ", env.rank, " received a ",
            host_->setup_payload().size(), "-byte unique id, expected ", sizeof(id));
  std::memcpy(&id, host_->setup_payload().data(), sizeof(id));
  check(api_.comm_init_rank(&comm_, env.world_size, id, env.rank), "ncclCommInitRank");
  if (env.rank == 0)
    log("NCCL " + std::to_string(api_.version) + " from " + api_.library + ": " +
        std::to_string(env.world_size) + " ranks");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) api_.comm_destroy(comm_);
}

void NcclCommunicator::check(nccl::Result r, const char* call) const {
  FP4_CHECK(r == 0, call, " failed on rank ", host_ ? host_->rank() : -1, ": ", api_.get_error_string(r),
            " (set NCCL_DEBUG=WARN for NCCL's own explanation)");
}

void NcclCommunicator::all_reduce_sum(void* data, int64_t count, CommType type, void* stream) {
  FP4_CHECK(count >= 0, "NCCL all_reduce_sum of ", count, " elements");
  if (count == 0) return;
  check(api_.all_reduce(data, data, static_cast<size_t>(count), nccl_type(type), nccl::kSum, comm_, stream),
        "ncclAllReduce");
}

void NcclCommunicator::reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void* stream) {
  FP4_CHECK(static_cast<int>(ranges.size()) == world_size(), "NCCL reduce_scatter_sum: ", ranges.size(),
            " ranges for ", world_size(), " ranks");
  // One in-place reduce per owner: rank q receives the sum of its range (a reduce-scatter with uneven
  // counts). Grouped so NCCL runs them as one operation.
  check(api_.group_start(), "ncclGroupStart");
  for (int q = 0; q < world_size(); ++q) {
    const IndexRange& r = ranges[static_cast<size_t>(q)];
    if (r.size() == 0) continue;
    float* p = data + r.begin;
    check(api_.reduce(p, p, static_cast<size_t>(r.size()), nccl::kFloat32, nccl::kSum, q, comm_, stream),
          "ncclReduce");
  }
  check(api_.group_end(), "ncclGroupEnd");
}

void NcclCommunicator::all_gather(float* data, std::span<const IndexRange> ranges, void* stream) {
  FP4_CHECK(static_cast<int>(ranges.size()) == world_size(), "NCCL all_gather: ", ranges.size(),
            " ranges for ", world_size(), " ranks");
  check(api_.group_start(), "ncclGroupStart");
  for (int q = 0; q < world_size(); ++q) {
    const IndexRange& r = ranges[static_cast<size_t>(q)];
    if (r.size() == 0) continue;
    float* p = data + r.begin;
    check(api_.broadcast(p, p, static_cast<size_t>(r.size()), nccl::kFloat32, q, comm_, stream),
          "ncclBroadcast");
  }
  check(api_.group_end(), "ncclGroupEnd");
}

void NcclCommunicator::barrier(void*) {
  host_->barrier();
}

}  // namespace fp4
