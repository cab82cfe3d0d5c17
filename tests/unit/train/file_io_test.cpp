#include "train/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "train/sha256.h"

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

// The digest is that of the bytes on disk: parts of random sizes, some empty, some spanning several
// of the writer's 1 MiB hashing pieces.
TEST(FileIo, HashedWriteDigestsTheWholeFile) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  std::vector<std::vector<uint8_t>> chunks(rng() % 6 + 2);
  for (auto& c : chunks) {
    const auto kind = rng() % 3;
    c.resize(kind == 0 ? 0 : kind == 1 ? rng() % 200 : (size_t{1} << 20) + rng() % (size_t{2} << 20));
    for (auto& b : c) b = static_cast<uint8_t>(rng());
  }
  std::vector<std::span<const uint8_t>> parts(chunks.begin(), chunks.end());
  const FileDigest d = write_file_synced_hashed(dir / "f.bin", parts);
  const std::string on_disk = read_file(dir / "f.bin");
  EXPECT_EQ(d.bytes, on_disk.size());
  EXPECT_EQ(d.bytes, std::filesystem::file_size(dir / "f.bin"));
  EXPECT_EQ(d.sha256, sha256_file(dir / "f.bin", Sha256Impl::kPortable));
  EXPECT_EQ(d.sha256, sha256_hex(on_disk, Sha256Impl::kPortable));
  const FileDigest empty = write_file_synced_hashed(dir / "e.bin", "");
  EXPECT_EQ(empty.bytes, 0u);
  EXPECT_EQ(empty.sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_THAT(error_of([&] { write_file_synced_hashed(dir / "no/dir/f", "x"); }),
              HasSubstr("no/dir/f: cannot create"));
}

// Pieces of any size (many beyond the 32 MiB writeback step in total) give the file and digest of
// their concatenation; the writer refuses use after finish().
TEST(FileIo, StreamingWriterMatchesTheConcatenation) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint8_t> all;
  for (bool hash : {true, false}) {
    all.clear();
    SyncedFileWriter out(dir / "s.bin", hash);
    while (all.size() < (size_t{40} << 20)) {
      std::vector<uint8_t> piece(rng() % 4 == 0 ? rng() % (size_t{5} << 20) : rng() % 100);
      for (auto& b : piece) b = static_cast<uint8_t>(rng());
      out.write(piece);
      all.insert(all.end(), piece.begin(), piece.end());
    }
    const FileDigest d = out.finish();
    EXPECT_EQ(d.bytes, all.size());
    const std::string on_disk = read_file(dir / "s.bin");
    EXPECT_TRUE(on_disk == std::string(all.begin(), all.end()));
    EXPECT_EQ(d.sha256, hash ? sha256_hex(on_disk, Sha256Impl::kPortable) : "");
    EXPECT_THAT(error_of([&] { out.write(all); }), HasSubstr("s.bin: write after finish"));
    EXPECT_THAT(error_of([&] { out.finish(); }), HasSubstr("s.bin: finish called twice"));
  }
}

// read_file sizes its buffer from the file, and still reads files that report size 0 (/proc).
TEST(FileIo, ReadFileWholeContent) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  std::string data((size_t{1} << 20) + rng() % 100000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  write_file_synced(dir / "big.bin", data);
  EXPECT_EQ(read_file(dir / "big.bin"), data);
  write_file_synced(dir / "empty", "");
  EXPECT_EQ(read_file(dir / "empty"), "");
  EXPECT_THAT(read_file("/proc/self/status"), HasSubstr("Name:"));
  EXPECT_THAT(error_of([&] { read_file(dir.path()); }), HasSubstr("is a directory"));
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
