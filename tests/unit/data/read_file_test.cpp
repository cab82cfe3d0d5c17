// Whole-file reads: random contents (empty, with NULs and high bytes) come back byte for byte, plain and
// through xz; missing files, directories and broken .xz files are errors naming the path.
#include "data/read_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "core/error.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::TempDir;

bool have_xz() {
  return std::system("xz --version >/dev/null 2>&1") == 0;
}

TEST(ReadFile, WholeFileRoundTripsRandomBytes) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{70001},
                   static_cast<size_t>(rng() % 300000)}) {
    const std::string bytes = testing::random_bytes(rng, n);
    const auto p = dir / ("f" + std::to_string(n));
    testing::write_file(p, bytes);
    EXPECT_EQ(read_whole_file(p), bytes) << n << " bytes";
  }
}

TEST(ReadFile, MissingFilesAndDirectoriesAreNamed) {
  TempDir dir;
  for (const auto& p : {dir / "absent.txt", dir.path()}) {
    const std::string msg = testing::error_of([&] { read_whole_file(p); });
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
    EXPECT_NE(testing::error_of([&] { read_xz_file(p); }).find(p.string()), std::string::npos);
  }
}

TEST(ReadFile, XzRoundTripsAndBrokenFilesAreNamed) {
  if (!have_xz()) GTEST_SKIP() << "xz is not installed";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  for (size_t n : {size_t{0}, size_t{65536}, size_t{65537}, static_cast<size_t>(rng() % 200000)}) {
    const std::string bytes = testing::random_bytes(rng, n);
    // A name with a quote and a space, which the shell command must keep intact.
    const auto plain = dir / ("it's a file " + std::to_string(n));
    testing::write_file(plain, bytes);
    const std::string cmd =
        "xz -k -- '" + dir.path().string() + "/it'\\''s a file " + std::to_string(n) + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    EXPECT_EQ(read_xz_file(plain.string() + ".xz"), bytes) << n << " bytes";
  }
  // Not xz data, and an .xz cut short: both name the file.
  const std::string good = read_whole_file(dir / "it's a file 65536.xz");
  testing::write_file(dir / "text.xz", "plain text, not xz");
  testing::write_file(dir / "short.xz", good.substr(0, good.size() / 2));
  for (const char* name : {"text.xz", "short.xz"}) {
    const std::string msg = testing::error_of([&] { read_xz_file(dir / name); });
    EXPECT_NE(msg.find((dir / name).string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("xz -dc failed"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace fp4
