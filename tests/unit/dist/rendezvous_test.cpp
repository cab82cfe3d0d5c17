#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "core/error.h"
#include "multi_process.h"

namespace fp4 {
namespace {

using namespace std::chrono_literals;

using testing::free_port;
using testing::reap;

DistEnv loopback_env(int rank, int world, int port) {
  return DistEnv{rank, world, rank, "127.0.0.1", port};
}

// Runs one rendezvous rank in a child process: exit 0 when it returns `expect`, 1 on a wrong blob,
// 2 on an fp4::Error.
pid_t spawn_rank(const DistEnv& env, const std::vector<uint8_t>& blob, const std::vector<uint8_t>& expect,
                 std::chrono::milliseconds timeout) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 3;
  try {
    const auto got = rendezvous_broadcast(env, blob, timeout);
    code = got == expect ? 0 : 1;
  } catch (const Error&) {
    code = 2;
  }
  ::_exit(code);
}

std::vector<uint8_t> random_blob(size_t n) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint8_t> blob(n);
  for (auto& b : blob) b = static_cast<uint8_t>(rng());
  return blob;
}

TEST(Rendezvous, FourProcessesReceiveRankZerosBlob) {
  const int port = free_port();
  const auto blob = random_blob(128);
  std::vector<pid_t> pids;
  // Non-zero ranks start first and must retry until rank 0 listens.
  for (int r = 1; r < 4; ++r) pids.push_back(spawn_rank(loopback_env(r, 4, port), {}, blob, 5000ms));
  std::this_thread::sleep_for(200ms);
  pids.push_back(spawn_rank(loopback_env(0, 4, port), blob, blob, 5000ms));
  const auto codes = reap(pids, 8000ms);
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << "child " << i;
}

TEST(Rendezvous, EmptyBlobAndSingleProcess) {
  const int port = free_port();
  const std::vector<uint8_t> empty;
  const auto codes = reap({spawn_rank(loopback_env(1, 2, port), {}, empty, 3000ms),
                           spawn_rank(loopback_env(0, 2, port), empty, empty, 3000ms)},
                          5000ms);
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  const auto blob = random_blob(7);
  EXPECT_EQ(rendezvous_broadcast(loopback_env(0, 1, port), blob, 10ms), blob);
}

TEST(Rendezvous, JoiningRankTimesOutNamingEndpointAndRank) {
  const int port = free_port();
  try {
    rendezvous_broadcast(loopback_env(2, 3, port), {}, 300ms);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2 of 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
  }
}

TEST(Rendezvous, MasterTimesOutCountingJoinedRanks) {
  const int port = free_port();
  const pid_t child = spawn_rank(loopback_env(1, 3, port), {}, {}, 1500ms);
  try {
    rendezvous_broadcast(loopback_env(0, 3, port), random_blob(16), 600ms);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 of 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 of 3 ranks joined"), std::string::npos) << msg;
  }
  EXPECT_EQ(reap({child}, 3000ms), std::vector<int>{2});  // its peer vanished: an error, not a hang
}

TEST(Rendezvous, DisagreeingWorldSizeIsAnError) {
  const int port = free_port();
  const pid_t child = spawn_rank(loopback_env(1, 3, port), {}, {}, 2000ms);
  try {
    rendezvous_broadcast(loopback_env(0, 2, port), random_blob(16), 2000ms);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("world size is 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(reap({child}, 3000ms), std::vector<int>{2});
}

}  // namespace
}  // namespace fp4
