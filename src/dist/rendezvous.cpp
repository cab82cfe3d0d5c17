#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.h"

namespace fp4 {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x46503452;  // "FP4R": tells our peers from strays on the port
constexpr uint32_t kMaxBlob = 1u << 20;

// Owns one socket descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Socket() { reset(); }
  int fd() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Names the job and endpoint in every message.
struct Where {
  const DistEnv& env;
  std::string str() const {
    return detail::concat("rendezvous at ", env.master_addr, ":", env.master_port, " (rank ", env.rank,
                          " of ", env.world_size, ")");
  }
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits until fd is ready for events; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline, const Where& where) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    FP4_CHECK(errno == EINTR, where.str(), ": poll failed: ", std::strerror(errno));
  }
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const Where& where,
              const char* what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    FP4_CHECK(wait_for(fd, POLLOUT, deadline, where), where.str(), ": timed out sending ", what);
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    FP4_CHECK(k > 0, where.str(), ": sending ", what, " failed: ", std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const Where& where,
              const char* what) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    FP4_CHECK(wait_for(fd, POLLIN, deadline, where), where.str(), ": timed out waiting for ", what);
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    FP4_CHECK(k != 0, where.str(), ": peer closed the connection before sending ", what);
    FP4_CHECK(k > 0, where.str(), ": receiving ", what, " failed: ", std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void send_u32s(int fd, std::initializer_list<uint32_t> values, Clock::time_point deadline, const Where& where,
               const char* what) {
  std::vector<uint32_t> wire;
  for (auto v : values) wire.push_back(htonl(v));
  send_all(fd, wire.data(), wire.size() * sizeof(uint32_t), deadline, where, what);
}

std::vector<uint32_t> recv_u32s(int fd, size_t count, Clock::time_point deadline, const Where& where,
                                const char* what) {
  std::vector<uint32_t> wire(count);
  recv_all(fd, wire.data(), count * sizeof(uint32_t), deadline, where, what);
  for (auto& v : wire) v = ntohl(v);
  return wire;
}

// The address of MASTER_ADDR:MASTER_PORT (first IPv4/IPv6 result).
sockaddr_storage resolve(const Where& where, socklen_t& len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(where.env.master_port);
  const int rc = ::getaddrinfo(where.env.master_addr.c_str(), port.c_str(), &hints, &res);
  FP4_CHECK(rc == 0 && res, where.str(), ": cannot resolve MASTER_ADDR: ", ::gai_strerror(rc));
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return addr;
}

std::vector<uint8_t> serve(const DistEnv& env, std::span<const uint8_t> blob, Clock::time_point deadline,
                           const Where& where) {
  FP4_CHECK(blob.size() <= kMaxBlob, where.str(), ": blob of ", blob.size(), " bytes exceeds ", kMaxBlob);
  socklen_t len = 0;
  const sockaddr_storage addr = resolve(where, len);
  Socket listener(::socket(addr.ss_family, SOCK_STREAM, 0));
  FP4_CHECK(listener.fd() >= 0, where.str(), ": socket failed: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  FP4_CHECK(::bind(listener.fd(), reinterpret_cast<const sockaddr*>(&addr), len) == 0, where.str(),
            ": cannot listen (bind failed: ", std::strerror(errno), ")");
  FP4_CHECK(::listen(listener.fd(), env.world_size) == 0, where.str(),
            ": listen failed: ", std::strerror(errno));
  set_nonblocking(listener.fd());

  // Collect one connection per non-zero rank; each introduces itself with (magic, rank, world size).
  std::vector<Socket> peers(env.world_size);
  for (int joined = 1; joined < env.world_size;) {
    FP4_CHECK(wait_for(listener.fd(), POLLIN, deadline, where), where.str(), ": timed out with ", joined,
              " of ", env.world_size, " ranks joined");
    Socket conn(::accept(listener.fd(), nullptr, nullptr));
    if (conn.fd() < 0) continue;  // the client gave up between poll and accept
    set_nonblocking(conn.fd());
    const auto hello = recv_u32s(conn.fd(), 3, deadline, where, "a joining rank's hello");
    FP4_CHECK(hello[0] == kMagic, where.str(), ": a connection that is not an fp4train rank");
    const int rank = static_cast<int>(hello[1]);
    FP4_CHECK(static_cast<int>(hello[2]) == env.world_size, where.str(), ": rank ", rank,
              " believes the world size is ", hello[2]);
    FP4_CHECK(rank >= 1 && rank < env.world_size, where.str(), ": a peer claims rank ", rank);
    FP4_CHECK(peers[rank].fd() < 0, where.str(), ": rank ", rank, " joined twice");
    peers[rank] = std::move(conn);
    ++joined;
  }
  for (int r = 1; r < env.world_size; ++r) {
    send_u32s(peers[r].fd(), {kMagic, static_cast<uint32_t>(blob.size())}, deadline, where, "the blob");
    send_all(peers[r].fd(), blob.data(), blob.size(), deadline, where, "the blob");
  }
  for (int r = 1; r < env.world_size; ++r) {
    const auto ack = recv_u32s(peers[r].fd(), 1, deadline, where, "a rank's acknowledgement");
    FP4_CHECK(ack[0] == kMagic, where.str(), ": rank ", r, " sent a bad acknowledgement");
  }
  return {blob.begin(), blob.end()};
}

// Connects to rank 0, retrying while it is not listening yet.
Socket connect_to_master(Clock::time_point deadline, const Where& where) {
  socklen_t len = 0;
  const sockaddr_storage addr = resolve(where, len);
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    Socket s(::socket(addr.ss_family, SOCK_STREAM, 0));
    FP4_CHECK(s.fd() >= 0, where.str(), ": socket failed: ", std::strerror(errno));
    set_nonblocking(s.fd());
    int rc = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr), len);
    if (rc != 0 && errno == EINPROGRESS) {
      if (wait_for(s.fd(), POLLOUT, deadline, where)) {
        int err = 0;
        socklen_t err_len = sizeof(err);
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &err_len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) return s;
    last_error = std::strerror(errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, remaining_ms(deadline))));
  }
  FP4_THROW(where.str(), ": timed out connecting to rank 0 (last error: ", last_error, ")");
}

std::vector<uint8_t> join(const DistEnv& env, Clock::time_point deadline, const Where& where) {
  Socket s = connect_to_master(deadline, where);
  send_u32s(s.fd(), {kMagic, static_cast<uint32_t>(env.rank), static_cast<uint32_t>(env.world_size)},
            deadline, where, "the hello");
  const auto header = recv_u32s(s.fd(), 2, deadline, where, "the blob from rank 0");
  FP4_CHECK(header[0] == kMagic && header[1] <= kMaxBlob, where.str(),
            ": rank 0 sent a malformed blob header");
  std::vector<uint8_t> blob(header[1]);
  recv_all(s.fd(), blob.data(), blob.size(), deadline, where, "the blob from rank 0");
  send_u32s(s.fd(), {kMagic}, deadline, where, "the acknowledgement");
  return blob;
}

}  // namespace

std::vector<uint8_t> rendezvous_broadcast(const DistEnv& env, std::span<const uint8_t> blob,
                                          std::chrono::milliseconds timeout) {
  const Where where{env};
  FP4_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, where.str(),
            ": invalid rank or world size");
  if (env.world_size == 1) return {blob.begin(), blob.end()};
  const auto deadline = Clock::now() + timeout;
  return env.rank == 0 ? serve(env, blob, deadline, where) : join(env, deadline, where);
}

}  // namespace fp4
