// Blocking-with-deadline TCP helpers for the host communicator: an owning socket, full sends and
// receives that fail with a message instead of hanging, listening on an ephemeral port, connecting.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace fp4 {

using SteadyClock = std::chrono::steady_clock;

// Owns one socket descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }
  int fd() const { return fd_; }
  void reset();

 private:
  int fd_ = -1;
};

// Sends or receives exactly n bytes before the deadline; otherwise throws fp4::Error with
// "<where>: ... <what>" (timeout, peer closed, system error).
void send_exactly(const Socket& s, const void* data, size_t n, SteadyClock::time_point deadline,
                  const std::string& where, const char* what);
void recv_exactly(const Socket& s, void* data, size_t n, SteadyClock::time_point deadline,
                  const std::string& where, const char* what);

// A listening socket on addr:port (a host name or address; SO_REUSEADDR, so a fixed port can be taken
// again right after a previous job).
Socket listen_on(const std::string& addr, int port, int backlog, const std::string& where);

// A listening socket on addr (a host name or address) with a port the kernel picks; port receives it.
Socket listen_ephemeral(const std::string& addr, int backlog, int& port, const std::string& where);

// Accepts one connection before the deadline; the timeout error says "timed out waiting for <waiting_for>".
Socket accept_one(const Socket& listener, SteadyClock::time_point deadline, const std::string& where,
                  const std::string& waiting_for = "ranks to connect");

// Connects to addr:port, retrying every 50 ms until the deadline.
Socket connect_retrying(const std::string& addr, int port, SteadyClock::time_point deadline,
                        const std::string& where);

}  // namespace fp4
