#include "data/loader.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "data/prepare.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::TempDir;

// A prepared directory whose token stream is known: random byte documents, small shards, so
// windows cross shard boundaries.
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::fresh_seed();
    std::mt19937_64 rng(seed_);
    for (int i = 0; i < 6; ++i) {
      std::string text = testing::random_bytes(rng, 300 + rng() % 400);
      testing::write_file(in_ / ("d" + std::to_string(i) + ".txt"), text);
      for (char c : text) stream_.push_back(static_cast<uint8_t>(c));
      stream_.push_back(256);
    }
    testing::write_file(in_ / "val" / "v.txt", testing::random_bytes(rng, 500));
    PrepareOptions o;
    o.inputs = {in_ / "d0.txt", in_ / "d1.txt", in_ / "d2.txt",
                in_ / "d3.txt", in_ / "d4.txt", in_ / "d5.txt"};
    o.val_inputs = {in_ / "val"};
    o.out_dir = out_.path();
    o.shard_tokens = 211;
    o.threads = 2;
    prepare_shards(o);
  }

  LoaderOptions options(int batch, int seq, uint64_t seed = 7, int rank = 0, int world = 1) const {
    LoaderOptions o;
    o.data = out_.path();
    o.batch = batch;
    o.seq = seq;
    o.seed = seed;
    o.rank = rank;
    o.world_size = world;
    return o;
  }

  // The window (by start / seq) a batch row came from, checked against the stream.
  int64_t window_of_row(const Batch& b, int row) const {
    for (int64_t w = 0; (w + 1) * b.seq < static_cast<int64_t>(stream_.size()); ++w) {
      bool match = true;
      for (int t = 0; t < b.seq && match; ++t) {
        match = b.tokens[row * b.seq + t] == stream_[w * b.seq + t] &&
                b.targets[row * b.seq + t] == stream_[w * b.seq + t + 1];
      }
      if (match) return w;
    }
    return -1;
  }

  uint64_t seed_ = 0;
  TempDir in_;
  TempDir out_;
  std::vector<int32_t> stream_;
};

TEST_F(LoaderTest, RowsAreStreamWindowsWithTargetsShiftedByOne) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  DataLoader loader(options(3, 37));
  EXPECT_EQ(loader.tokens(), static_cast<int64_t>(stream_.size()));
  EXPECT_EQ(loader.windows(), (static_cast<int64_t>(stream_.size()) - 1) / 37);
  for (int i = 0; i < 10; ++i) {
    Batch b = loader.next();
    ASSERT_EQ(b.batch, 3);
    ASSERT_EQ(b.seq, 37);
    ASSERT_EQ(b.tokens.size(), 3u * 37);
    for (int r = 0; r < 3; ++r) {
      for (int t = 0; t + 1 < 37; ++t) EXPECT_EQ(b.targets[r * 37 + t], b.tokens[r * 37 + t + 1]);
      EXPECT_GE(window_of_row(b, r), 0) << "row " << r << " is no window of the stream";
    }
  }
}

TEST_F(LoaderTest, EachEpochVisitsEveryWindowOnceInASeededOrder) {
  DataLoader loader(options(1, 50));
  const int64_t w = loader.windows();
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t i = 0; i < w; ++i) epoch0.push_back(window_of_row(loader.next(), 0));
  for (int64_t i = 0; i < w; ++i) epoch1.push_back(window_of_row(loader.next(), 0));
  EXPECT_EQ(loader.state().epoch, 1);
  for (auto* e : {&epoch0, &epoch1}) {
    std::set<int64_t> seen(e->begin(), e->end());
    EXPECT_EQ(static_cast<int64_t>(seen.size()), w);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), w - 1);
  }
  EXPECT_NE(epoch0, epoch1);  // a new permutation each epoch (w! orders: equal by chance is negligible)
  std::vector<int64_t> in_order(w);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_NE(epoch0, in_order);
}

TEST_F(LoaderTest, SameSeedSameBatchesOtherSeedOtherBatches) {
  DataLoader a(options(2, 40, 123)), b(options(2, 40, 123)), c(options(2, 40, 124));
  bool any_difference = false;
  for (int i = 0; i < 30; ++i) {
    Batch x = a.next(), y = b.next(), z = c.next();
    ASSERT_EQ(x.tokens, y.tokens);
    ASSERT_EQ(x.targets, y.targets);
    any_difference = any_difference || x.tokens != z.tokens;
  }
  EXPECT_TRUE(any_difference);
}

TEST_F(LoaderTest, ResumeReproducesTheSameBatchesAcrossEpochs) {
  std::mt19937_64 rng(seed_);
  DataLoader reference(options(3, 29, 99));
  const int total = static_cast<int>(3 * reference.windows_per_rank() / 3 + 20);  // past an epoch end
  std::vector<Batch> expected;
  for (int i = 0; i < total; ++i) expected.push_back(reference.next());
  for (int trial = 0; trial < 5; ++trial) {
    int cut = static_cast<int>(rng() % total);
    DataLoader first(options(3, 29, 99));
    for (int i = 0; i < cut; ++i) first.next();
    // Through JSON, as a checkpoint would store it; the resumed run is configured with another seed.
    nlohmann::json saved = first.state().to_json();
    DataLoader resumed(options(3, 29, 5));
    resumed.restore(LoaderState::from_json(nlohmann::json::parse(saved.dump())));
    EXPECT_EQ(resumed.state(), first.state());
    for (int i = cut; i < total; ++i) {
      Batch b = resumed.next();
      ASSERT_EQ(b.tokens, expected[i].tokens) << "cut " << cut << ", batch " << i;
      ASSERT_EQ(b.targets, expected[i].targets);
    }
  }
}

TEST_F(LoaderTest, RestoreRejectsAStateOfAnotherLayout) {
  DataLoader loader(options(2, 30));
  LoaderState s = loader.state();
  DataLoader other_seq(options(2, 31));
  EXPECT_THROW(other_seq.restore(s), Error);
  DataLoader other_rank(options(2, 30, 7, 1, 2));
  EXPECT_THROW(other_rank.restore(s), Error);
  s.position = loader.windows_per_rank() + 1;
  EXPECT_THROW(loader.restore(s), Error);
  EXPECT_THROW(LoaderState::from_json(nlohmann::json{{"seed", 1}}), Error);
}

TEST_F(LoaderTest, RankSlicesAreDisjointAndCoverTheEpoch) {
  for (int world : {2, 3, 5}) {
    std::vector<int64_t> all;
    int64_t per_rank = -1;
    for (int rank = 0; rank < world; ++rank) {
      DataLoader loader(options(1, 20, 11, rank, world));
      per_rank = loader.windows_per_rank();
      EXPECT_EQ(per_rank, loader.windows() / world);
      for (int64_t i = 0; i < per_rank; ++i) all.push_back(window_of_row(loader.next(), 0));
    }
    std::set<int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), all.size()) << "world " << world << ": ranks share a window";
    // Together the ranks read world * per_rank windows: all but fewer than `world` of them.
    DataLoader single(options(1, 20, 11));
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), world * per_rank);
    EXPECT_GT(static_cast<int64_t>(distinct.size()), single.windows() - world);
  }
}

TEST_F(LoaderTest, ValidationVisitsEveryWindowOnceInOrder) {
  for (int world : {1, 2}) {
    std::vector<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      LoaderOptions o = options(4, 16, 0, rank, world);
      ValidationLoader val(o);
      Batch b;
      int batches = 0;
      while (val.next(b)) {
        ++batches;
        for (int r = 0; r < b.batch; ++r) seen.push_back(window_of_row(b, r));
      }
      EXPECT_EQ(batches, val.batches());
      EXPECT_FALSE(val.next(b));
      val.reset();
      EXPECT_TRUE(val.next(b));
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all((static_cast<int64_t>(stream_.size()) - 1) / 16);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all) << "world " << world;
  }
}

TEST_F(LoaderTest, ValidationOfTheValSplitAndMaxWindows) {
  LoaderOptions o = options(8, 10);
  o.split = "val";
  ValidationLoader val(o);
  EXPECT_EQ(val.windows(), (500 + 1 - 1) / 10);
  Batch b;
  int rows = 0;
  while (val.next(b)) rows += b.batch;
  EXPECT_EQ(rows, 50);
  EXPECT_EQ(b.batch, 50 % 8);  // the last batch is partial

  o.max_windows = 7;
  ValidationLoader few(o);
  EXPECT_EQ(few.windows_per_rank(), 7);
  ASSERT_TRUE(few.next(b));
  EXPECT_EQ(b.batch, 7);
  EXPECT_FALSE(few.next(b));
}

TEST_F(LoaderTest, ClearErrors) {
  EXPECT_THROW(DataLoader(options(0, 10)), Error);
  EXPECT_THROW(DataLoader(options(1, 10, 0, 2, 2)), Error);
  EXPECT_THROW(DataLoader(options(1, 100000)), Error);  // not one window
  LoaderOptions o = options(1, 10);
  o.data = in_ / "nowhere";
  try {
    DataLoader bad(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no data manifest"), std::string::npos) << e.what();
  }
}

TEST_F(LoaderTest, ShardRewrittenBehindTheManifestIsDetected) {
  write_shard(out_ / "train_000001.bin", std::vector<int32_t>(211, 5), 257);
  try {
    DataLoader loader(options(1, 10));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its manifest entry"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4
