#include "train/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace fp4 {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

TEST(FileIo, SyncedWriteConcatenatesParts) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  std::vector<std::vector<uint8_t>> chunks(rng() % 5 + 1);
  std::string expected;
  for (auto& c : chunks) {
    c.resize(rng() % 3000);
    for (auto& b : c) b = static_cast<uint8_t>(rng());
    expected.append(c.begin(), c.end());
  }
  std::vector<std::span<const uint8_t>> parts(chunks.begin(), chunks.end());
  write_file_synced(dir / "f.bin", parts);
  EXPECT_EQ(read_file(dir / "f.bin"), expected);
  write_file_synced(dir / "f.bin", "short");  // truncates
  EXPECT_EQ(read_file(dir / "f.bin"), "short");
}

TEST(FileIo, AtomicReplaceLeavesNoTempFile) {
  TempDir dir;
  write_file_atomically(dir / "latest", "step_000001\n");
  write_file_atomically(dir / "latest", "step_000002\n");
  EXPECT_EQ(read_file(dir / "latest"), "step_000002\n");
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);
}

TEST(FileIo, ErrorsNameThePath) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { read_file(dir / "absent"); }), HasSubstr("absent: missing or unreadable"));
  EXPECT_THAT(error_of([&] { write_file_synced(dir / "no/such/dir/f", "x"); }),
              HasSubstr("no/such/dir/f: cannot create"));
  EXPECT_THAT(error_of([&] { write_file_atomically(dir / "no/such/f", "x"); }), HasSubstr("no/such/f"));
  EXPECT_THAT(error_of([&] { fsync_directory(dir / "absent-dir"); }),
              HasSubstr("absent-dir: cannot open directory"));
}

}  // namespace
}  // namespace fp4
