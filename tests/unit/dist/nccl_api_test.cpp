// Loading NCCL at run time, in child processes (the loaded library is kept for the life of a process): a
// path that does not exist is listed among the attempts with the hint to set FP4_NCCL_LIBRARY, and a
// library without NCCL's symbols is named with the missing one. On a machine with NCCL the default load
// succeeds and reports a version.
#include "dist/nccl_api.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace fp4 {
namespace {

// Runs load_api() in a child with FP4_NCCL_LIBRARY = library; returns "ok <library> <version>" or the
// error's message.
std::string load_in_child(const char* library) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (library)
      ::setenv("FP4_NCCL_LIBRARY", library, 1);
    else
      ::unsetenv("FP4_NCCL_LIBRARY");
    std::string out;
    try {
      const nccl::Api& api = nccl::load_api();
      out = "ok " + api.library + " " + std::to_string(api.version);
    } catch (const Error& e) {
      out = e.what();
    }
    const ssize_t w = ::write(fds[1], out.data(), out.size());
    ::_exit(w == static_cast<ssize_t>(out.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(k));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << got;
  return got;
}

TEST(NcclApi, AMissingPathIsListedWithTheHint) {
  const std::string msg = load_in_child("/nonexistent/fp4/libnccl.so.2");
  if (msg.rfind("ok ", 0) == 0) {
    // NCCL is installed: the default name was found after the bad path.
    EXPECT_EQ(msg.find("/nonexistent/"), std::string::npos) << msg;
    return;
  }
  EXPECT_NE(msg.find("cannot load NCCL"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\n  /nonexistent/fp4/libnccl.so.2: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("\n  libnccl.so.2: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("set FP4_NCCL_LIBRARY"), std::string::npos) << msg;
}

TEST(NcclApi, ALibraryWithoutTheSymbolsIsNamed) {
  const std::string msg = load_in_child("libm.so.6");
  EXPECT_NE(msg.find("NCCL library libm.so.6 has no symbol ncclGetVersion"), std::string::npos) << msg;
}

TEST(NcclApi, TheDefaultLoadReportsAVersionWhereNcclIsInstalled) {
  const std::string msg = load_in_child(nullptr);
  if (msg.rfind("ok ", 0) != 0) {
    EXPECT_NE(msg.find("cannot load NCCL"), std::string::npos) << msg;
    GTEST_SKIP() << "NCCL is not installed here";
  }
  const int version = std::atoi(msg.substr(msg.rfind(' ') + 1).c_str());
  EXPECT_GE(version, 20000) << msg;  // NCCL 2.x encodes major * 10000 + minor * 100 + patch
}

}  // namespace
}  // namespace fp4
