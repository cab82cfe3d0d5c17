// The TCP helpers on the loopback: random payloads (empty, one byte, several MiB) arrive whole in both
// directions; a silent peer, a closed peer, no listener and no connecting rank each fail before their
// deadline with a message naming the caller and the wait.
#include "dist/socket_io.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../error_of.h"
#include "core/error.h"

namespace fp4 {
namespace {

using std::chrono::milliseconds;

SteadyClock::time_point in(milliseconds ms) {
  return SteadyClock::now() + ms;
}

using testing::error_of;

// A connected pair over 127.0.0.1.
std::pair<Socket, Socket> connected_pair() {
  int port = 0;
  Socket listener = listen_ephemeral("127.0.0.1", 4, port, "test listener");
  EXPECT_GT(port, 0);
  Socket client;
  std::thread t([&] { client = connect_retrying("127.0.0.1", port, in(milliseconds(5000)), "test client"); });
  Socket server = accept_one(listener, in(milliseconds(5000)), "test listener");
  t.join();
  return {std::move(server), std::move(client)};
}

TEST(SocketIo, RandomPayloadsArriveWholeBothWays) {
  std::mt19937 rng(std::random_device{}());
  auto [server, client] = connected_pair();
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{(3u << 20) + 7}, size_t(rng() % 100000)}) {
    std::vector<uint8_t> out(n), back(n);
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    // The large payload exceeds the socket buffers: the send must interleave with the receive.
    std::thread sender(
        [&] { send_exactly(client, out.data(), n, in(milliseconds(10000)), "client", "payload"); });
    recv_exactly(server, back.data(), n, in(milliseconds(10000)), "server", "payload");
    sender.join();
    EXPECT_EQ(back, out) << n << " bytes";
    std::thread echo(
        [&] { send_exactly(server, back.data(), n, in(milliseconds(10000)), "server", "echo"); });
    std::vector<uint8_t> again(n);
    recv_exactly(client, again.data(), n, in(milliseconds(10000)), "client", "echo");
    echo.join();
    EXPECT_EQ(again, out) << n << " bytes";
  }
}

TEST(SocketIo, TimeoutsAndClosedPeersAreNamed) {
  auto [server, client] = connected_pair();
  uint8_t buf[16];
  // Nothing sent: the receive gives up at its deadline, and says so.
  const auto t0 = SteadyClock::now();
  std::string msg =
      error_of([&] { recv_exactly(server, buf, sizeof buf, in(milliseconds(200)), "rank 1", "the header"); });
  EXPECT_LT(SteadyClock::now() - t0, milliseconds(3000));
  EXPECT_EQ(msg.rfind("rank 1: timed out waiting for the header", 0), 0u) << msg;
  // Half the bytes, then the peer closes: a closed peer, not a timeout.
  send_exactly(client, buf, 8, in(milliseconds(1000)), "client", "half");
  client.reset();
  EXPECT_EQ(client.fd(), -1);
  msg = error_of(
      [&] { recv_exactly(server, buf, sizeof buf, in(milliseconds(5000)), "rank 1", "the header"); });
  EXPECT_NE(msg.find("rank 1: the peer closed the connection (it stopped) before sending the header"),
            std::string::npos)
      << msg;
  // No rank connects.
  int port = 0;
  const Socket lonely = listen_ephemeral("127.0.0.1", 1, port, "rendezvous");
  msg = error_of([&] { accept_one(lonely, in(milliseconds(200)), "rendezvous", "rank 3"); });
  EXPECT_NE(msg.find("timed out waiting for rank 3"), std::string::npos) << msg;
  // Nobody listens on a port that was just freed.
  int dead_port = 0;
  { const Socket gone = listen_ephemeral("127.0.0.1", 1, dead_port, "x"); }
  msg = error_of([&] { connect_retrying("127.0.0.1", dead_port, in(milliseconds(300)), "rank 2"); });
  EXPECT_NE(msg.find("rank 2: timed out connecting to 127.0.0.1:" + std::to_string(dead_port)),
            std::string::npos)
      << msg;
  // Moving a socket moves the descriptor.
  Socket a = std::move(server);
  EXPECT_EQ(server.fd(), -1);
  EXPECT_GE(a.fd(), 0);
}

}  // namespace
}  // namespace fp4
