#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "train/file_io.h"
#include "train/safetensors.h"
#include "train/sha256.h"

namespace fp4 {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

// Random tensors of mixed dtypes; some empty, some larger than the reader's 1 MiB pieces.
std::vector<StateTensor> random_tensors(std::mt19937_64& rng) {
  std::vector<StateTensor> out;
  const int n = static_cast<int>(rng() % 6) + 1;
  for (int i = 0; i < n; ++i) {
    const std::string dtype = rng() % 2 ? "F32" : "U8";
    const int64_t rows = static_cast<int64_t>(rng() % 4),
                  cols = static_cast<int64_t>(rng() % 3 == 0 ? 300000 : rng() % 50);
    StateTensor t{std::to_string(i) + "t", dtype, {rows, cols}, {}};
    t.bytes.resize(static_cast<size_t>(rows * cols) * safetensors_dtype_size(dtype));
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
    out.push_back(std::move(t));
  }
  return out;
}

// Written and read back with hashing: both digests are the file's SHA-256, the content round-trips.
TEST(SafetensorsHashed, DigestsAreThoseOfTheFile) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  for (int round = 0; round < 3; ++round) {
    const auto tensors = random_tensors(rng);
    const auto path = dir / "h.safetensors";
    const FileDigest written = write_safetensors_hashed(path, tensors, {{"k", std::to_string(rng())}});
    const std::string independent = sha256_file(path, Sha256Impl::kPortable);
    EXPECT_EQ(written.sha256, independent);
    EXPECT_EQ(written.bytes, std::filesystem::file_size(path));
    const HashedSafetensors read = read_safetensors_hashed(path);
    EXPECT_EQ(read.digest.sha256, independent);
    EXPECT_EQ(read.digest.bytes, written.bytes);
    ASSERT_EQ(read.content.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(read.content.tensors[i].name, tensors[i].name);
      EXPECT_EQ(read.content.tensors[i].shape, tensors[i].shape);
      EXPECT_EQ(read.content.tensors[i].bytes, tensors[i].bytes) << tensors[i].name;
    }
    // The plain reader gives the same content.
    const auto plain = read_safetensors(path);
    ASSERT_EQ(plain.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(plain.tensors[i].bytes, tensors[i].bytes);
  }
}

// A file streamed as safetensors_header + the tensors' bytes is the file write_safetensors writes.
TEST(SafetensorsHashed, StreamedHeaderGivesTheSameFile) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const auto tensors = random_tensors(rng);
  const SafetensorsMetadata meta = {{"step", std::to_string(rng() % 1000)}};
  write_safetensors(dir / "a.safetensors", tensors, meta);
  std::vector<SafetensorsEntry> entries;
  for (const auto& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  SyncedFileWriter out(dir / "b.safetensors", true);
  const std::string head = safetensors_header(dir / "b.safetensors", entries, meta);
  out.write({reinterpret_cast<const uint8_t*>(head.data()), head.size()});
  for (const auto& t : tensors) out.write(t.bytes);
  const FileDigest d = out.finish();
  EXPECT_EQ(read_file(dir / "a.safetensors"), read_file(dir / "b.safetensors"));
  EXPECT_EQ(d.sha256, sha256_file(dir / "a.safetensors", Sha256Impl::kPortable));
  entries.push_back(entries.front());
  EXPECT_THAT(error_of([&] { safetensors_header(dir / "c", entries); }), HasSubstr("c: duplicate tensor"));
  entries.back() = {"neg", "F32", {2, -1}};
  EXPECT_THAT(error_of([&] { safetensors_header(dir / "c", entries); }),
              HasSubstr("'neg' has a negative dimension"));
  entries.back() = {"odd", "F31", {2}};
  EXPECT_THAT(error_of([&] { safetensors_header(dir / "c", entries); }),
              HasSubstr("'odd': unknown safetensors dtype"));
}

// A flipped data bit keeps the structure valid: the read succeeds and the digest changes.
TEST(SafetensorsHashed, FlippedDataBitChangesTheDigest) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const auto path = dir / "f.safetensors";
  const std::vector<StateTensor> tensors = {make_f32_tensor("w", {64}, std::vector<float>(64, 1.5f))};
  const FileDigest written = write_safetensors_hashed(path, tensors);
  std::string raw = read_file(path);
  const size_t at = raw.size() - 1 - rng() % 256;  // inside the data
  raw[at] = static_cast<char>(raw[at] ^ (1 << (rng() % 8)));
  write_file_synced(path, raw);
  const HashedSafetensors read = read_safetensors_hashed(path);
  EXPECT_NE(read.digest.sha256, written.sha256);
  EXPECT_EQ(read.digest.sha256, sha256_hex(raw, Sha256Impl::kPortable));
}

TEST(SafetensorsHashed, ErrorsNameTheFile) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { read_safetensors_hashed(dir / "absent.safetensors"); }),
              HasSubstr("absent.safetensors: missing"));
  EXPECT_THAT(error_of([&] { read_safetensors_hashed(dir.path()); }),
              HasSubstr("not a readable regular file"));
  write_file_synced(dir / "short.safetensors", "1234");
  EXPECT_THAT(error_of([&] { read_safetensors_hashed(dir / "short.safetensors"); }),
              HasSubstr("short.safetensors: truncated"));
}

}  // namespace
}  // namespace fp4
