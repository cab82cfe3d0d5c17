#include "dist/rendezvous.h"

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "dist/socket_io.h"

namespace fp4 {
namespace {

using Clock = SteadyClock;
constexpr uint32_t kMagic = 0x46503452;  // "FP4R": tells our peers from strays on the port
constexpr uint32_t kMaxBlob = 1u << 20;

// Names the job and endpoint in every message.
std::string where_of(const DistEnv& env) {
  return detail::concat("rendezvous at ", env.master_addr, ":", env.master_port, " (rank ", env.rank, " of ",
                        env.world_size, ")");
}

void send_u32s(const Socket& s, std::initializer_list<uint32_t> values, Clock::time_point deadline,
               const std::string& where, const char* what) {
  std::vector<uint32_t> wire;
  for (auto v : values) wire.push_back(htonl(v));
  send_exactly(s, wire.data(), wire.size() * sizeof(uint32_t), deadline, where, what);
}

std::vector<uint32_t> recv_u32s(const Socket& s, size_t count, Clock::time_point deadline,
                                const std::string& where, const char* what) {
  std::vector<uint32_t> wire(count);
  recv_exactly(s, wire.data(), count * sizeof(uint32_t), deadline, where, what);
  for (auto& v : wire) v = ntohl(v);
  return wire;
}

std::vector<uint8_t> serve(const DistEnv& env, std::span<const uint8_t> blob, Clock::time_point deadline,
                           const std::string& where) {
  FP4_CHECK(blob.size() <= kMaxBlob, where, ": blob of ", blob.size(), " bytes exceeds ", kMaxBlob);
  const Socket listener = listen_on(env.master_addr, env.master_port, env.world_size, where);

  // Collect one connection per non-zero rank; each introduces itself with (magic, rank, world size).
  std::vector<Socket> peers(env.world_size);
  for (int joined = 1; joined < env.world_size; ++joined) {
    Socket conn =
        accept_one(listener, deadline, where,
                   detail::concat("the other ranks (", joined, " of ", env.world_size, " ranks joined)"));
    const auto hello = recv_u32s(conn, 3, deadline, where, "a joining rank's hello");
    FP4_CHECK(hello[0] == kMagic, where, ": a connection that is not an fp4train rank");
    const int rank = static_cast<int>(hello[1]);
    FP4_CHECK(static_cast<int>(hello[2]) == env.world_size, where, ": rank ", rank,
              " believes the world size is ", hello[2]);
    FP4_CHECK(rank >= 1 && rank < env.world_size, where, ": a peer claims rank ", rank);
    FP4_CHECK(peers[rank].fd() < 0, where, ": rank ", rank, " joined twice");
    peers[rank] = std::move(conn);
  }
  for (int r = 1; r < env.world_size; ++r) {
    send_u32s(peers[r], {kMagic, static_cast<uint32_t>(blob.size())}, deadline, where, "the blob");
    send_exactly(peers[r], blob.data(), blob.size(), deadline, where, "the blob");
  }
  for (int r = 1; r < env.world_size; ++r) {
    const auto ack = recv_u32s(peers[r], 1, deadline, where, "a rank's acknowledgement");
    FP4_CHECK(ack[0] == kMagic, where, ": rank ", r, " sent a bad acknowledgement");
  }
  return {blob.begin(), blob.end()};
}

std::vector<uint8_t> join(const DistEnv& env, Clock::time_point deadline, const std::string& where) {
  const Socket s =
      connect_retrying(env.master_addr, env.master_port, deadline, where + " connecting to rank 0");
  send_u32s(s, {kMagic, static_cast<uint32_t>(env.rank), static_cast<uint32_t>(env.world_size)}, deadline,
            where, "the hello");
  const auto header = recv_u32s(s, 2, deadline, where, "the blob from rank 0");
  FP4_CHECK(header[0] == kMagic && header[1] <= kMaxBlob, where, ": rank 0 sent a malformed blob header");
  std::vector<uint8_t> blob(header[1]);
  recv_exactly(s, blob.data(), blob.size(), deadline, where, "the blob from rank 0");
  send_u32s(s, {kMagic}, deadline, where, "the acknowledgement");
  return blob;
}

}  // namespace

std::vector<uint8_t> rendezvous_broadcast(const DistEnv& env, std::span<const uint8_t> blob,
                                          std::chrono::milliseconds timeout) {
  const std::string where = where_of(env);
  FP4_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, where,
            ": invalid rank or world size");
  if (env.world_size == 1) return {blob.begin(), blob.end()};
  const auto deadline = Clock::now() + timeout;
  return env.rank == 0 ? serve(env, blob, deadline, where) : join(env, deadline, where);
}

}  // namespace fp4
