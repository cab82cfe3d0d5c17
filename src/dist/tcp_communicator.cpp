#include "dist/tcp_communicator.h"

#include <cstring>

#include "core/error.h"
#include "dist/rendezvous.h"

namespace fp4 {
namespace {

constexpr uint32_t kMagic = 0x46503443;  // "FP4C"

const char* op_name(uint32_t op) {
  switch (op) {
    case 1:
      return "all_reduce_sum";
    case 2:
      return "reduce_scatter_sum";
    case 3:
      return "all_gather";
    case 4:
      return "barrier";
    default:
      return "an unknown collective";
  }
}

template <typename T>
void add_into(void* acc, const void* x, int64_t n) {
  auto* a = static_cast<T*>(acc);
  const auto* b = static_cast<const T*>(x);
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void add_typed(void* acc, const void* x, int64_t n, CommType t) {
  if (t == CommType::kF32)
    add_into<float>(acc, x, n);
  else if (t == CommType::kF64)
    add_into<double>(acc, x, n);
  else
    add_into<int64_t>(acc, x, n);
}

}  // namespace

TcpCommunicator::TcpCommunicator(const DistEnv& env, std::chrono::milliseconds setup_timeout,
                                 std::chrono::milliseconds op_timeout, std::span<const uint8_t> payload)
    : rank_(env.rank), world_(env.world_size), master_addr_(env.master_addr), op_timeout_(op_timeout) {
  FP4_CHECK(world_ >= 1 && rank_ >= 0 && rank_ < world_, where(), ": invalid rank or world size");
  if (world_ == 1) {
    payload_.assign(payload.begin(), payload.end());
    return;
  }
  const auto deadline = SteadyClock::now() + setup_timeout;
  if (rank_ == 0) {
    int port = 0;
    Socket listener = listen_ephemeral(env.master_addr, world_, port, where());
    // One rendezvous carries the port and the payload: a second round on MASTER_PORT could race
    // with ranks still finishing the first.
    const uint32_t p = static_cast<uint32_t>(port);
    std::vector<uint8_t> blob(sizeof(p));
    std::memcpy(blob.data(), &p, sizeof(p));
    blob.insert(blob.end(), payload.begin(), payload.end());
    payload_.assign(payload.begin(), payload.end());
    rendezvous_broadcast(env, blob, setup_timeout);
    peers_.resize(static_cast<size_t>(world_));
    for (int joined = 1; joined < world_; ++joined) {
      Socket conn = accept_one(listener, deadline, where());
      uint32_t hello[3];
      recv_exactly(conn, hello, sizeof(hello), deadline, where(), "a rank's hello");
      FP4_CHECK(hello[0] == kMagic && hello[2] == static_cast<uint32_t>(world_), where(),
                ": a connection that is not a rank of this job");
      const int r = static_cast<int>(hello[1]);
      FP4_CHECK(r >= 1 && r < world_ && peers_[static_cast<size_t>(r)].fd() < 0, where(),
                ": a peer claims rank ", r, " (taken or out of range)");
      peers_[static_cast<size_t>(r)] = std::move(conn);
    }
  } else {
    const std::vector<uint8_t> blob = rendezvous_broadcast(env, {}, setup_timeout);
    FP4_CHECK(blob.size() >= sizeof(uint32_t), where(), ": rank 0 sent a ", blob.size(), "-byte setup blob");
    uint32_t port = 0;
    std::memcpy(&port, blob.data(), sizeof(port));
    payload_.assign(blob.begin() + sizeof(port), blob.end());
    peers_.resize(1);
    peers_[0] = connect_retrying(env.master_addr, static_cast<int>(port), deadline, where());
    const uint32_t hello[3] = {kMagic, static_cast<uint32_t>(rank_), static_cast<uint32_t>(world_)};
    send_exactly(peers_[0], hello, sizeof(hello), deadline, where(), "the hello");
  }
  barrier();  // every rank is connected before anyone returns
}

std::string TcpCommunicator::where() const {
  return detail::concat("tcp communicator (rank ", rank_, " of ", world_, ", master ", master_addr_, ")");
}

void TcpCommunicator::send(int peer, Op op, const void* data, size_t bytes) {
  const auto deadline = SteadyClock::now() + op_timeout_;
  const Header h{kMagic, static_cast<uint32_t>(op), seq_, 0, bytes};
  const Socket& s = peers_[static_cast<size_t>(peer)];
  send_exactly(s, &h, sizeof(h), deadline, where(), op_name(h.op));
  if (bytes > 0) send_exactly(s, data, bytes, deadline, where(), op_name(h.op));
}

void TcpCommunicator::recv(int peer, Op op, void* data, size_t bytes) {
  const auto deadline = SteadyClock::now() + op_timeout_;
  const Socket& s = peers_[static_cast<size_t>(peer)];
  Header h{};
  recv_exactly(s, &h, sizeof(h), deadline, where(), op_name(static_cast<uint32_t>(op)));
  const int from = rank_ == 0 ? peer : 0;
  FP4_CHECK(h.magic == kMagic, where(), ": rank ", from, " sent a malformed message");
  FP4_CHECK(h.op == static_cast<uint32_t>(op) && h.seq == seq_, where(), ": rank ", from, " called ",
            op_name(h.op), " (collective #", h.seq, ") while this rank called ",
            op_name(static_cast<uint32_t>(op)), " (collective #", seq_, ")");
  FP4_CHECK(h.bytes == bytes, where(), ": rank ", from, " sent ", h.bytes, " bytes for ", op_name(h.op),
            ", this rank expected ", bytes, " (buffers of different sizes)");
  if (bytes > 0) recv_exactly(s, data, bytes, deadline, where(), op_name(h.op));
}

void TcpCommunicator::check_ranges(std::span<const IndexRange> ranges, const char* op) const {
  FP4_CHECK(static_cast<int>(ranges.size()) == world_, where(), ": ", op, " got ", ranges.size(),
            " ranges for ", world_, " ranks");
  for (const auto& r : ranges)
    FP4_CHECK(r.begin >= 0 && r.end >= r.begin, where(), ": ", op, " got range [", r.begin, ", ", r.end, ")");
}

void TcpCommunicator::all_reduce_sum(void* data, int64_t count, CommType type, void*) {
  FP4_CHECK(count >= 0, where(), ": all_reduce_sum of ", count, " elements");
  ++seq_;
  if (world_ == 1 || count == 0) {
    if (world_ > 1) barrier();
    return;
  }
  const size_t bytes = static_cast<size_t>(count) * comm_type_bytes(type);
  if (rank_ == 0) {
    std::vector<uint8_t> incoming(bytes);
    for (int r = 1; r < world_; ++r) {  // rank order: the same sum on every run
      recv(r, Op::kAllReduce, incoming.data(), bytes);
      add_typed(data, incoming.data(), count, type);
    }
    for (int r = 1; r < world_; ++r) send(r, Op::kAllReduce, data, bytes);
  } else {
    send(0, Op::kAllReduce, data, bytes);
    recv(0, Op::kAllReduce, data, bytes);
  }
}

void TcpCommunicator::reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void*) {
  check_ranges(ranges, "reduce_scatter_sum");
  ++seq_;
  if (world_ == 1) return;
  int64_t total = 0;
  for (const auto& r : ranges) total += r.size();
  // Every rank sends all ranges, concatenated in rank order; rank 0 sums and returns each its own.
  std::vector<float> packed(static_cast<size_t>(total));
  int64_t at = 0;
  for (const auto& r : ranges) {
    std::copy(data + r.begin, data + r.end, packed.begin() + at);
    at += r.size();
  }
  const size_t bytes = packed.size() * sizeof(float);
  if (rank_ == 0) {
    std::vector<float> incoming(packed.size());
    for (int r = 1; r < world_; ++r) {
      recv(r, Op::kReduceScatter, incoming.data(), bytes);
      add_into<float>(packed.data(), incoming.data(), total);
    }
    at = 0;
    for (int q = 0; q < world_; ++q) {
      const IndexRange& r = ranges[static_cast<size_t>(q)];
      if (q == 0)
        std::copy(packed.begin() + at, packed.begin() + at + r.size(), data + r.begin);
      else
        send(q, Op::kReduceScatter, packed.data() + at, static_cast<size_t>(r.size()) * sizeof(float));
      at += r.size();
    }
  } else {
    send(0, Op::kReduceScatter, packed.data(), bytes);
    const IndexRange& mine = ranges[static_cast<size_t>(rank_)];
    recv(0, Op::kReduceScatter, data + mine.begin, static_cast<size_t>(mine.size()) * sizeof(float));
  }
}

void TcpCommunicator::all_gather(float* data, std::span<const IndexRange> ranges, void*) {
  check_ranges(ranges, "all_gather");
  ++seq_;
  if (world_ == 1) return;
  if (rank_ == 0) {
    for (int q = 1; q < world_; ++q) {
      const IndexRange& r = ranges[static_cast<size_t>(q)];
      recv(q, Op::kAllGather, data + r.begin, static_cast<size_t>(r.size()) * sizeof(float));
    }
    std::vector<float> packed;
    for (const auto& r : ranges) packed.insert(packed.end(), data + r.begin, data + r.end);
    for (int q = 1; q < world_; ++q) send(q, Op::kAllGather, packed.data(), packed.size() * sizeof(float));
  } else {
    const IndexRange& mine = ranges[static_cast<size_t>(rank_)];
    send(0, Op::kAllGather, data + mine.begin, static_cast<size_t>(mine.size()) * sizeof(float));
    int64_t total = 0;
    for (const auto& r : ranges) total += r.size();
    std::vector<float> packed(static_cast<size_t>(total));
    recv(0, Op::kAllGather, packed.data(), packed.size() * sizeof(float));
    int64_t at = 0;
    for (const auto& r : ranges) {
      std::copy(packed.begin() + at, packed.begin() + at + r.size(), data + r.begin);
      at += r.size();
    }
  }
}

void TcpCommunicator::barrier(void*) {
  ++seq_;
  if (world_ == 1) return;
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) recv(r, Op::kBarrier, nullptr, 0);
    for (int r = 1; r < world_; ++r) send(r, Op::kBarrier, nullptr, 0);
  } else {
    send(0, Op::kBarrier, nullptr, 0);
    recv(0, Op::kBarrier, nullptr, 0);
  }
}

}  // namespace fp4
