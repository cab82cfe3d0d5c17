#include "dist/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace fp4 {
namespace {

int remaining_ms(SteadyClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return left.count() > 0 ? static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)) : 0;
}

// Waits until fd is ready for events; false on timeout.
bool wait_ready(int fd, short events, SteadyClock::time_point deadline, const std::string& where) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    FP4_CHECK(errno == EINTR, where, ": poll failed: ", std::strerror(errno));
  }
}

void configure(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // small collectives are latency-bound
}

addrinfo* resolve(const std::string& addr, int port, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  FP4_CHECK(rc == 0 && res, where, ": cannot resolve ", addr, ": ", ::gai_strerror(rc));
  return res;
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void send_exactly(const Socket& s, const void* data, size_t n, SteadyClock::time_point deadline,
                  const std::string& where, const char* what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    FP4_CHECK(wait_ready(s.fd(), POLLOUT, deadline, where), where, ": timed out sending ", what);
    const ssize_t k = ::send(s.fd(), p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    FP4_CHECK(!(k < 0 && (errno == ECONNRESET || errno == EPIPE)), where,
              ": the peer closed the connection (it stopped) while sending ", what);
    FP4_CHECK(k > 0, where, ": sending ", what, " failed: ", std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recv_exactly(const Socket& s, void* data, size_t n, SteadyClock::time_point deadline,
                  const std::string& where, const char* what) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    FP4_CHECK(wait_ready(s.fd(), POLLIN, deadline, where), where, ": timed out waiting for ", what);
    const ssize_t k = ::recv(s.fd(), p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    FP4_CHECK(k != 0 && !(k < 0 && errno == ECONNRESET), where,
              ": the peer closed the connection (it stopped) before sending ", what);
    FP4_CHECK(k > 0, where, ": receiving ", what, " failed: ", std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

Socket listen_on(const std::string& addr, int port, int backlog, const std::string& where) {
  addrinfo* res = resolve(addr, port, where);
  Socket s(::socket(res->ai_family, SOCK_STREAM, 0));
  int bound = -1;
  if (s.fd() >= 0) {
    const int one = 1;
    if (port != 0) ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bound = ::bind(s.fd(), res->ai_addr, res->ai_addrlen);
  }
  const int err = errno;
  ::freeaddrinfo(res);
  FP4_CHECK(bound == 0, where, ": cannot listen on ", addr, ":", port, " (bind failed: ", std::strerror(err),
            ")");
  FP4_CHECK(::listen(s.fd(), backlog) == 0, where, ": listen failed: ", std::strerror(errno));
  configure(s.fd());
  return s;
}

Socket listen_ephemeral(const std::string& addr, int backlog, int& port, const std::string& where) {
  Socket s = listen_on(addr, 0, backlog, where);
  sockaddr_storage got{};
  socklen_t len = sizeof(got);
  FP4_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&got), &len) == 0, where,
            ": getsockname failed: ", std::strerror(errno));
  port = got.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&got)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  return s;
}

Socket accept_one(const Socket& listener, SteadyClock::time_point deadline, const std::string& where,
                  const std::string& waiting_for) {
  for (;;) {
    FP4_CHECK(wait_ready(listener.fd(), POLLIN, deadline, where), where, ": timed out waiting for ",
              waiting_for);
    Socket conn(::accept(listener.fd(), nullptr, nullptr));
    if (conn.fd() < 0) continue;  // the client gave up between poll and accept
    configure(conn.fd());
    return conn;
  }
}

Socket connect_retrying(const std::string& addr, int port, SteadyClock::time_point deadline,
                        const std::string& where) {
  std::string last_error = "no attempt";
  while (SteadyClock::now() < deadline) {
    addrinfo* res = resolve(addr, port, where);
    Socket s(::socket(res->ai_family, SOCK_STREAM, 0));
    FP4_CHECK(s.fd() >= 0, where, ": socket failed: ", std::strerror(errno));
    configure(s.fd());
    int rc = ::connect(s.fd(), res->ai_addr, res->ai_addrlen);
    const int connect_errno = errno;
    ::freeaddrinfo(res);
    errno = connect_errno;
    if (rc != 0 && errno == EINPROGRESS) {
      if (wait_ready(s.fd(), POLLOUT, deadline, where)) {
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
  FP4_THROW(where, ": timed out connecting to ", addr, ":", port, " (last error: ", last_error, ")");
}

}  // namespace fp4
