// TokenStream: the shards of a split read as one stream (copies across shard boundaries, empty shards
// included), and the checks that tie each shard to its manifest entry.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::TempDir;

// Writes the given shards as the train split of a manifest in dir; returns the concatenated stream.
std::vector<int32_t> write_split(const TempDir& dir, const std::vector<std::vector<int32_t>>& shards,
                                 int32_t vocab) {
  Manifest m;
  m.tokenizer = m.tokenizer_name = "bytes";
  m.vocab_size = vocab;
  m.eot_id = vocab - 1;
  std::vector<int32_t> stream;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = "train_" + std::to_string(i) + ".bin";
    const ShardHeader h = write_shard(dir / name, shards[i], vocab);
    m.train.shards.push_back({name, static_cast<int64_t>(shards[i].size()), h.payload_fnv1a});
    stream.insert(stream.end(), shards[i].begin(), shards[i].end());
  }
  m.train.tokens = static_cast<int64_t>(stream.size());
  write_manifest(dir.path(), m);
  return stream;
}

// Random shard sizes (0 included) and vocabularies on both sides of the 16-bit token width: every random
// range, the empty one and the whole stream copy out as the concatenation.
TEST(TokenStream, CopiesAcrossShardBoundariesEqualTheConcatenation) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    TempDir dir;
    const int32_t vocab = rng() % 2 == 0 ? 257 : 70000;
    std::vector<std::vector<int32_t>> shards(1 + rng() % 6);
    for (auto& s : shards) {
      s.resize(rng() % 4 == 0 ? 0 : 1 + rng() % 300);
      for (auto& t : s) t = static_cast<int32_t>(rng() % vocab);
    }
    if (trial == 0) shards = {{}, {vocab - 1}, {}};  // a one-token stream between empty shards
    const auto stream = write_split(dir, shards, vocab);
    const TokenStream ts(dir.path(), "train");
    ASSERT_EQ(ts.size(), static_cast<int64_t>(stream.size()));
    EXPECT_EQ(ts.vocab_size(), vocab);
    std::vector<int32_t> all(stream.size());
    ts.copy(0, all);
    EXPECT_EQ(all, stream);
    std::vector<int32_t> none;
    ts.copy(ts.size(), none);
    for (int k = 0; k < 50 && !stream.empty(); ++k) {
      const int64_t a = static_cast<int64_t>(rng() % stream.size());
      const int64_t n = static_cast<int64_t>(rng() % (stream.size() - a + 1));
      std::vector<int32_t> out(n, -1);
      ts.copy(a, out);
      ASSERT_TRUE(std::equal(out.begin(), out.end(), stream.begin() + a)) << "[" << a << ", " << a + n << ")";
    }
  }
}

TEST(TokenStream, RangesOutsideTheStreamAreErrors) {
  TempDir dir;
  write_split(dir, {{1, 2, 3}, {4, 5}}, 257);
  const TokenStream ts(dir.path(), "train");
  std::vector<int32_t> two(2);
  EXPECT_THROW(ts.copy(-1, two), Error);
  EXPECT_THROW(ts.copy(4, two), Error);
  EXPECT_NO_THROW(ts.copy(3, two));
  EXPECT_EQ(two, (std::vector<int32_t>{4, 5}));
  std::vector<int32_t> six(6);
  try {
    ts.copy(0, six);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[0, 6) are outside [0, 5)"), std::string::npos) << e.what();
  }
}

TEST(TokenStream, ShardsThatDisagreeWithTheManifestAreNamed) {
  // No shards in the split asked for.
  {
    TempDir dir;
    write_split(dir, {{1, 2}}, 257);
    EXPECT_NE(
        std::string(testing::error_of([&] { TokenStream(dir.path(), "val"); })).find("has no val shards"),
        std::string::npos);
  }
  // A shard rewritten behind the manifest: other tokens, same length.
  {
    TempDir dir;
    write_split(dir, {{1, 2, 3}, {4, 5}}, 257);
    write_shard(dir / "train_1.bin", std::vector<int32_t>{5, 4}, 257);
    const std::string msg = testing::error_of([&] { TokenStream(dir.path(), "train"); });
    EXPECT_NE(msg.find("train_1.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not match its manifest entry"), std::string::npos) << msg;
  }
  // A shard of another vocabulary whose length and checksum the manifest was made to match.
  {
    TempDir dir;
    write_split(dir, {{1, 2, 3}}, 257);
    const ShardHeader h = write_shard(dir / "train_0.bin", std::vector<int32_t>{1, 2, 3}, 300);
    Manifest m = read_manifest(dir.path());
    m.train.shards[0].payload_fnv1a = h.payload_fnv1a;
    write_manifest(dir.path(), m);
    const std::string msg = testing::error_of([&] { TokenStream(dir.path(), "train"); });
    EXPECT_NE(msg.find("has vocab 300 but the manifest says 257"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace fp4
