#include "data/shard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <random>

#include "core/error.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::TempDir;

std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  if (n > 0) t[rng() % n] = vocab - 1;  // the largest id must fit too
  return t;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void flip_byte(const std::filesystem::path& p, size_t offset) {
  std::string bytes = testing::read_file(p);
  bytes.at(offset) = static_cast<char>(bytes.at(offset) ^ 0x20);
  testing::write_file(p, bytes);
}

TEST(Fnv1a, KnownValues) {
  EXPECT_EQ(fnv1a64({}), 0xcbf29ce484222325ull);
  const uint8_t a[] = {'a'};
  EXPECT_EQ(fnv1a64(a), 0xaf63dc4c8601ec8cull);
  const uint8_t foobar[] = {'f', 'o', 'o', 'b', 'a', 'r'};
  EXPECT_EQ(fnv1a64(foobar), 0x85944171f73967e8ull);
  // Continuing from a state equals hashing the concatenation.
  EXPECT_EQ(fnv1a64({foobar + 3, 3}, fnv1a64({foobar, 3})), fnv1a64(foobar));
}

TEST(Shard, RoundTripsUint16AndUint32Tokens) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  for (int32_t vocab : {2, 257, 50257, 65536, 65537, 200000}) {
    auto tokens = random_tokens(rng, 1 + rng() % 5000, vocab);
    auto path = dir / ("s" + std::to_string(vocab) + ".bin");
    ShardHeader written = write_shard(path, tokens, vocab);
    const uint32_t width = vocab <= 65536 ? 2 : 4;
    EXPECT_EQ(written.token_bytes, width);
    EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + tokens.size() * width);
    ShardFile shard(path);
    EXPECT_EQ(shard.header().token_count, tokens.size());
    EXPECT_EQ(shard.header().vocab_size, static_cast<uint32_t>(vocab));
    EXPECT_EQ(shard.header().payload_fnv1a, written.payload_fnv1a);
    EXPECT_EQ(shard.read_all(), tokens);
    size_t start = rng() % tokens.size();
    std::vector<int32_t> part(rng() % (tokens.size() - start + 1));
    shard.copy(static_cast<int64_t>(start), part);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), tokens.begin() + static_cast<std::ptrdiff_t>(start)));
    EXPECT_EQ(shard.at(static_cast<int64_t>(start)), tokens[start]);
  }
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  write_shard(dir / "empty.bin", {}, 257);
  ShardFile shard(dir / "empty.bin");
  EXPECT_EQ(shard.size(), 0);
  EXPECT_TRUE(shard.read_all().empty());
  EXPECT_THROW(shard.at(0), Error);
}

TEST(Shard, MovedShardKeepsItsMapping) {
  std::mt19937_64 rng(testing::fresh_seed());
  TempDir dir;
  auto tokens = random_tokens(rng, 100, 1000);
  write_shard(dir / "a.bin", tokens, 1000);
  std::vector<ShardFile> shards;
  shards.emplace_back(dir / "a.bin");
  shards.emplace_back(dir / "a.bin");
  ShardFile moved = std::move(shards[0]);
  shards.clear();
  EXPECT_EQ(moved.read_all(), tokens);
}

TEST(Shard, WriteRejectsIdsOutsideTheVocabularyAndLeavesNoFile) {
  TempDir dir;
  auto msg = error_of([&] { write_shard(dir / "bad.bin", std::vector<int32_t>{1, 2, 300}, 257); });
  EXPECT_NE(msg.find("token 2 is 300"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.bin"), std::string::npos) << msg;
  EXPECT_THROW(write_shard(dir / "neg.bin", std::vector<int32_t>{-1}, 257), Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Shard, WriteReplacesAtomicallyAndLeavesNoTempFiles) {
  std::mt19937_64 rng(testing::fresh_seed());
  TempDir dir;
  write_shard(dir / "s.bin", random_tokens(rng, 50, 300), 300);
  auto second = random_tokens(rng, 70, 300);
  write_shard(dir / "s.bin", second, 300);
  EXPECT_EQ(ShardFile(dir / "s.bin").read_all(), second);
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_shard(dir / "no_such_dir" / "s.bin", second, 300), Error);
}

class CorruptShard : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(testing::fresh_seed());
    tokens_ = random_tokens(rng, 1000, 50257);
    write_shard(path_, tokens_, 50257);
  }
  std::string open_error() {
    return error_of([&] { ShardFile shard(path_); });
  }
  TempDir dir_;
  std::filesystem::path path_ = dir_ / "shard.bin";
  std::vector<int32_t> tokens_;
};

TEST_F(CorruptShard, TruncatedPayloadNamesExpectedAndActualSizes) {
  std::filesystem::resize_file(path_, 1000);
  auto msg = open_error();
  EXPECT_NE(msg.find(path_.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated: expected 2064 bytes, got 1000"), std::string::npos) << msg;
}

TEST_F(CorruptShard, TruncatedHeader) {
  std::filesystem::resize_file(path_, 20);
  auto msg = open_error();
  EXPECT_NE(msg.find("truncated: expected at least 64 header bytes, got 20"), std::string::npos) << msg;
}

TEST_F(CorruptShard, TrailingBytes) {
  testing::write_file(path_, testing::read_file(path_) + "xx");
  auto msg = open_error();
  EXPECT_NE(msg.find("2 trailing bytes"), std::string::npos) << msg;
}

TEST_F(CorruptShard, FlippedPayloadByteFailsTheChecksum) {
  std::mt19937_64 rng(testing::fresh_seed());
  flip_byte(path_, kShardHeaderBytes + rng() % (2 * tokens_.size()));
  auto msg = open_error();
  EXPECT_NE(msg.find("payload checksum mismatch"), std::string::npos) << msg;
  // Without payload verification it opens (the header is intact).
  EXPECT_NO_THROW(ShardFile(path_, false));
}

TEST_F(CorruptShard, FlippedHeaderByteFailsTheHeaderChecksum) {
  flip_byte(path_, 17);  // inside the token count
  auto msg = open_error();
  EXPECT_NE(msg.find("corrupt header"), std::string::npos) << msg;
}

// Bytes 48..63 are reserved and outside the header checksum: a flip there was accepted before.
TEST_F(CorruptShard, FlippedReservedByteIsACorruptHeader) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (size_t at : {size_t{48}, size_t{48} + rng() % 16, size_t{63}}) {
    write_shard(path_, tokens_, 50257);
    flip_byte(path_, at);
    const auto msg = open_error();
    EXPECT_NE(msg.find("corrupt header: reserved byte " + std::to_string(at)), std::string::npos) << msg;
  }
}

// A FIFO in a shard's place is refused at once instead of blocking the open until a writer comes.
TEST_F(CorruptShard, FifoIsNotARegularFile) {
  std::filesystem::remove(path_);
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  const auto msg = open_error();
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;
}

TEST_F(CorruptShard, WrongMagic) {
  flip_byte(path_, 0);
  auto msg = open_error();
  EXPECT_NE(msg.find("wrong magic"), std::string::npos) << msg;
  testing::write_file(path_, std::string(100, 'x'));
  EXPECT_NE(open_error().find("wrong magic"), std::string::npos);
}

TEST_F(CorruptShard, UnsupportedVersion) {
  flip_byte(path_, 8);  // version 1 -> 33
  auto msg = open_error();
  EXPECT_NE(msg.find("unsupported format version 33"), std::string::npos) << msg;
}

TEST_F(CorruptShard, MissingFile) {
  std::filesystem::remove(path_);
  auto msg = open_error();
  EXPECT_NE(msg.find("cannot open shard " + path_.string()), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
