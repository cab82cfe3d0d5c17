#include "dist/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

fs::path fresh_dir() {
  std::random_device rd;
  const fs::path dir =
      fs::temp_directory_path() / ("fp4_launcher_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  fs::create_directories(dir);
  return dir;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(Launcher, EveryRankGetsItsEnvironment) {
  const fs::path dir = fresh_dir();
  std::mt19937 rng(std::random_device{}());
  const std::string mark = std::to_string(rng());
  ::setenv("FP4_LAUNCH_TEST_MARK", mark.c_str(), 1);
  ::setenv("RANK", "99", 1);  // a stale value the launcher must replace
  for (const int port : {0, 20000 + static_cast<int>(rng() % 20000)}) {
    LaunchOptions o;
    o.nprocs = 3;
    o.master_port = port;
    o.command = {"/bin/sh", "-c",
                 "echo $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $NCCL_NVLS_ENABLE "
                 "$FP4_LAUNCH_TEST_MARK > " +
                     dir.string() + "/rank$RANK"};
    ASSERT_EQ(launch_local(o), 0);
    int seen_port = -1;
    for (int r = 0; r < 3; ++r) {
      std::ifstream in(dir / ("rank" + std::to_string(r)));
      ASSERT_TRUE(in) << "rank " << r << " wrote nothing";
      int rank = -1, local = -1, world = -1, mport = -1, nvls = -1;
      std::string addr, got_mark;
      in >> rank >> local >> world >> addr >> mport >> nvls >> got_mark;
      EXPECT_EQ(rank, r);
      EXPECT_EQ(local, r);
      EXPECT_EQ(world, 3);
      EXPECT_EQ(addr, "127.0.0.1");
      EXPECT_EQ(nvls, 0);
      EXPECT_EQ(got_mark, mark);
      if (port != 0) {
        EXPECT_EQ(mport, port);
      }
      EXPECT_GT(mport, 0);
      EXPECT_LE(mport, 65535);
      if (seen_port >= 0) {
        EXPECT_EQ(mport, seen_port) << "ranks disagree on MASTER_PORT";
      }
      seen_port = mport;
    }
    EXPECT_FALSE(fs::exists(dir / "rank3"));
    EXPECT_FALSE(fs::exists(dir / "rank99"));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ::unsetenv("RANK");
  ::unsetenv("FP4_LAUNCH_TEST_MARK");
  fs::remove_all(dir);
}

TEST(Launcher, FailingRankStopsTheOthersAndGivesItsCode) {
  LaunchOptions o;
  o.nprocs = 3;
  o.command = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 5"};
  const auto t0 = Clock::now();
  EXPECT_EQ(launch_local(o), 3);
  // The launcher waits for every child, so returning early means the sleepers were killed.
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST(Launcher, RankKilledBySignalGives128PlusSignal) {
  LaunchOptions o;
  o.nprocs = 2;
  o.command = {"/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; exec sleep 5"};
  const auto t0 = Clock::now();
  EXPECT_EQ(launch_local(o), 128 + SIGKILL);
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST(Launcher, ForwardsSigtermToChildren) {
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions o;
    o.nprocs = 2;
    o.command = {"sleep", "5"};
    ::_exit(launch_local(o));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  EXPECT_LT(seconds_since(t0), 2.0);
  ASSERT_TRUE(WIFEXITED(status)) << "the launcher itself died instead of forwarding";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

TEST(Launcher, SingleProcessAndAllSucceed) {
  LaunchOptions o;
  o.nprocs = 1;
  o.command = {"true"};
  EXPECT_EQ(launch_local(o), 0);
  o.nprocs = 4;
  EXPECT_EQ(launch_local(o), 0);
  o.command = {"false"};
  EXPECT_EQ(launch_local(o), 1);
}

void expect_error(const LaunchOptions& o, const std::string& needle) {
  try {
    launch_local(o);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Launcher, BadOptionsAreErrors) {
  LaunchOptions o;
  o.command = {"true"};
  o.nprocs = 0;
  expect_error(o, "at least 1");
  o.nprocs = -2;
  expect_error(o, "got -2");
  o.nprocs = 2;
  o.master_port = 70000;
  expect_error(o, "MASTER_PORT");
  o.master_port = 0;
  o.master_addr = "";
  expect_error(o, "MASTER_ADDR");
  o.master_addr = "127.0.0.1";
  o.command = {};
  expect_error(o, "no command");
  o.command = {"/nonexistent/fp4_no_such_program", "x"};
  expect_error(o, "/nonexistent/fp4_no_such_program");
}

}  // namespace
}  // namespace fp4
