#include "dist/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace fp4 {
namespace {

using Clock = std::chrono::steady_clock;

// Children the signal handler passes SIGINT/SIGTERM on to; -1 marks a reaped child (its pid may be
// reused). Written only while those signals are blocked, so the handler never sees a torn update.
pid_t* g_children = nullptr;
volatile sig_atomic_t g_child_count = 0;

extern "C" void forward_signal(int sig) {
  for (sig_atomic_t i = 0; i < g_child_count; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], sig);
}

// Blocks SIGINT and SIGTERM for its lifetime (fork and bookkeeping happen inside).
class SignalBlock {
 public:
  SignalBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalBlock() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;
  const sigset_t& old_mask() const { return old_; }

 private:
  sigset_t old_;
};

// Installs forward_signal over pids for the launcher's lifetime and restores the caller's handlers.
class SignalForwarder {
 public:
  explicit SignalForwarder(std::vector<pid_t>& pids) {
    g_children = pids.data();  // pids never reallocates: sized before the first fork
    g_child_count = 0;
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalForwarder() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    g_child_count = 0;
    g_children = nullptr;
  }
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;

  // In a fresh child: the dispositions the caller had, so exec sees what it would have without us.
  void restore_in_child() const {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FP4_CHECK(fd >= 0, "launch: socket() failed while picking MASTER_PORT: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  FP4_CHECK(ok, "launch: cannot bind 127.0.0.1 to pick MASTER_PORT: ", std::strerror(err));
  return ntohs(addr.sin_port);
}

bool is_launcher_variable(const char* entry) {
  static const char* const kNames[] = {
      "RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "NCCL_NVLS_ENABLE="};
  for (const char* name : kNames)
    if (std::strncmp(entry, name, std::strlen(name)) == 0) return true;
  return false;
}

// Exit code of a reaped child: its status, or 128 + N for death by signal N (shell convention).
int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void describe_failure(int rank, int status) {
  if (WIFSIGNALED(status))
    std::fprintf(stderr, "launch: rank %d was killed by signal %d (%s); stopping the other ranks\n", rank,
                 WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    std::fprintf(stderr, "launch: rank %d exited with code %d; stopping the other ranks\n", rank,
                 exit_code(status));
}

void signal_running(const std::vector<pid_t>& pids, int sig) {
  for (const pid_t pid : pids)
    if (pid > 0) ::kill(pid, sig);
}

// Reaps every started child; the first to fail sets the result and gets the rest SIGTERM (SIGKILL
// if they outlive a grace period).
int supervise(std::vector<pid_t>& pids, int started) {
  constexpr auto kPoll = std::chrono::milliseconds(10);
  constexpr auto kKillGrace = std::chrono::seconds(10);
  int running = started, result = 0, failed_rank = -1;
  Clock::time_point kill_at{};
  bool killed = false;
  while (running > 0) {
    for (int i = 0; i < started; ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      int code = 0;
      {
        SignalBlock block;
        const pid_t r = ::waitpid(pids[i], &status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) continue;
        if (r < 0) {  // reaped elsewhere (SIGCHLD ignored by the caller): the outcome is lost
          std::fprintf(stderr, "launch: lost rank %d: waitpid: %s\n", i, std::strerror(errno));
          status = 1 << 8;
        }
        pids[i] = -1;
        code = exit_code(status);
      }
      --running;
      if (code != 0 && failed_rank < 0) {
        failed_rank = i;
        result = code;
        describe_failure(i, status);
        signal_running(pids, SIGTERM);
        kill_at = Clock::now() + kKillGrace;
      }
    }
    if (running > 0 && failed_rank >= 0 && !killed && Clock::now() >= kill_at) {
      std::fprintf(stderr, "launch: ranks still running %lld s after SIGTERM; sending SIGKILL\n",
                   static_cast<long long>(kKillGrace.count()));
      signal_running(pids, SIGKILL);
      killed = true;
    }
    if (running > 0) std::this_thread::sleep_for(kPoll);
  }
  return result;
}

// Stops and reaps the children started so far after a launch error.
void abandon(std::vector<pid_t>& pids, int started) {
  signal_running(pids, SIGTERM);
  for (int i = 0; i < started; ++i)
    if (pids[i] > 0) {
      int status = 0;
      while (::waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
      }
      pids[i] = -1;
    }
}

}  // namespace

int launch_local(const LaunchOptions& o) {
  FP4_CHECK(o.nprocs >= 1, "launch: the number of processes must be at least 1, got ", o.nprocs);
  FP4_CHECK(!o.command.empty() && !o.command[0].empty(), "launch: no command to run (give it after --)");
  FP4_CHECK(!o.master_addr.empty(), "launch: MASTER_ADDR is empty");
  FP4_CHECK(o.master_port >= 0 && o.master_port <= 65535, "launch: MASTER_PORT must be in 0..65535, got ",
            o.master_port);
  const int port = o.master_port == 0 ? free_loopback_port() : o.master_port;

  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!is_launcher_variable(*e)) base_env.emplace_back(*e);
  base_env.push_back("WORLD_SIZE=" + std::to_string(o.nprocs));
  base_env.push_back("MASTER_ADDR=" + o.master_addr);
  base_env.push_back("MASTER_PORT=" + std::to_string(port));
  base_env.push_back("NCCL_NVLS_ENABLE=0");  // NVLink multicast off (see docs/DIST.md)

  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  std::vector<pid_t> pids(o.nprocs, -1);
  SignalForwarder forwarder(pids);
  for (int rank = 0; rank < o.nprocs; ++rank) {
    std::vector<std::string> env = base_env;
    env.push_back("RANK=" + std::to_string(rank));
    env.push_back("LOCAL_RANK=" + std::to_string(rank));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    // The child reports a failed exec through this pipe; a successful exec closes it (O_CLOEXEC).
    int fds[2];
    FP4_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe failed: ", std::strerror(errno));
    pid_t pid;
    {
      SignalBlock block;
      pid = ::fork();
      if (pid == 0) {
        forwarder.restore_in_child();
        pthread_sigmask(SIG_SETMASK, &block.old_mask(), nullptr);
        ::close(fds[0]);
        ::execvpe(argv[0], argv.data(), envp.data());
        const int err = errno;
        [[maybe_unused]] const ssize_t n = ::write(fds[1], &err, sizeof(err));
        ::_exit(127);
      }
      if (pid > 0) {
        pids[rank] = pid;
        g_child_count = rank + 1;
      }
    }
    const int fork_errno = errno;
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      abandon(pids, rank);
      FP4_THROW("launch: fork failed for rank ", rank, ": ", std::strerror(fork_errno));
    }
    int exec_errno = 0;
    ssize_t n;
    while ((n = ::read(fds[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
    }
    ::close(fds[0]);
    if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
      abandon(pids, rank + 1);
      FP4_THROW("launch: cannot execute '", o.command[0], "' for rank ", rank, ": ",
                std::strerror(exec_errno));
    }
  }
  std::fprintf(stderr, "launch: %d processes, MASTER_ADDR=%s MASTER_PORT=%d\n", o.nprocs,
               o.master_addr.c_str(), port);
  return supervise(pids, o.nprocs);
}

}  // namespace fp4
