// Runs a function as N forked processes on loopback and collects their exit codes (dist tests).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/dist_env.h"

namespace fp4::testing {

// A loopback port that was free a moment ago (the kernel picks it).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Exit codes of the children, waiting at most `limit`; children still running then are killed and
// reported as -1; killed by signal N: 100 + N.
inline std::vector<int> reap(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  std::vector<int> codes(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t left = pids.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || ::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    ::kill(pids[i], SIGKILL);
    ::waitpid(pids[i], nullptr, 0);
  }
  return codes;
}

// Forks world processes; child r runs body(env of rank r) and exits with its result (2 when it
// throws fp4::Error, whose message it prints). Returns the exit codes, waiting at most `limit` (children
// still running then are killed and reported as -1; killed by signal N: 100 + N).
inline std::vector<int> run_ranks(int world, const std::function<int(const DistEnv&)>& body,
                                  std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 3;
      try {
        DistEnv env{r, world, r, "127.0.0.1", port};
        env.launched = true;
        code = body(env);
      } catch (const Error& e) {
        std::fprintf(stderr, "rank %d of %d: %s\n", r, world, e.what());  // the test reports only the code
        code = 2;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  return reap(pids, limit);
}

}  // namespace fp4::testing
