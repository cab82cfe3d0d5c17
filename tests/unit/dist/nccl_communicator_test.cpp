// The NCCL backend without a GPU: NVLink multicast is switched off before NCCL is touched, and a
// library that is not NCCL is refused with a message naming the missing entry point.
#include "dist/nccl_communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"

namespace fp4 {
namespace {

TEST(NcclCommunicator, ForcesNvlsOffAndRefusesALibraryThatIsNotNccl) {
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);
  ::setenv("FP4_NCCL_LIBRARY", "libm.so.6", 1);  // loads, but has no NCCL symbols
  std::vector<std::string> lines;
  DistEnv env;
  env.launched = true;
  std::string message;
  try {
    NcclCommunicator comm(env, std::chrono::seconds(5), std::chrono::seconds(5),
                          [&](const std::string& l) { lines.push_back(l); });
  } catch (const Error& e) {
    message = e.what();
  }
  ::unsetenv("FP4_NCCL_LIBRARY");
  EXPECT_NE(message.find("libm.so.6 has no symbol nccl"), std::string::npos) << message;
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("NCCL_NVLS_ENABLE=1 replaced by 0"), std::string::npos) << lines[0];
  ::unsetenv("NCCL_NVLS_ENABLE");
}

}  // namespace
}  // namespace fp4
