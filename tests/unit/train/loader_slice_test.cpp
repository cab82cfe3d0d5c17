// DataLoader::next_slice: the ranks' rows of a micro-batch are disjoint, together make the single
// process's batch, and the loader state resumes on another world size.
#include <gtest/gtest.h>

#include <random>

#include "data/loader.h"
#include "test_util.h"
#include "train/evaluate.h"

namespace fp4 {
namespace {

using testing::TempDir;

class LoaderSliceTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }
  LoaderOptions options(int batch) const {
    LoaderOptions o;
    o.data = tmp_ / "shards";
    o.batch = batch;
    o.seq = 16;
    o.seed = seed_;
    return o;
  }
  TempDir tmp_;
  uint64_t seed_ = std::random_device{}();
};

// Row `row` of a batch as tokens followed by targets.
std::vector<int32_t> row_of(const Batch& b, int row) {
  const auto at = static_cast<ptrdiff_t>(row) * b.seq;
  std::vector<int32_t> r(b.tokens.begin() + at, b.tokens.begin() + at + b.seq);
  r.insert(r.end(), b.targets.begin() + at, b.targets.begin() + at + b.seq);
  return r;
}

bool same(const Batch& a, const Batch& b) {
  return a.batch == b.batch && a.seq == b.seq && a.tokens == b.tokens && a.targets == b.targets;
}

TEST_F(LoaderSliceTest, RanksRowsAreDisjointAndMakeTheWholeBatchAcrossEpochs) {
  std::mt19937_64 rng(seed_);
  const int batch = 1 + static_cast<int>(rng() % 7);
  DataLoader whole(options(batch));
  // Enough steps to cross epoch boundaries (the corpus has a few hundred windows).
  const int64_t steps = 2 * whole.windows() / batch + 3;
  for (int world = 1; world <= batch; ++world) {
    DataLoader reference(options(batch));
    std::vector<DataLoader> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(options(batch));
    for (int64_t s = 0; s < steps; ++s) {
      const Batch full = reference.next();
      std::vector<Batch> parts;
      int rows = 0;
      for (int r = 0; r < world; ++r) {
        parts.push_back(ranks[static_cast<size_t>(r)].next_slice(r, world));
        rows += parts.back().batch;
        // Rank r holds rows r, r + world, ... of the whole batch, in order.
        for (int k = 0; k < parts.back().batch; ++k)
          ASSERT_EQ(row_of(parts.back(), k), row_of(full, r + k * world))
              << "world " << world << " step " << s;
        EXPECT_TRUE(same(parts.back(), batch_rows(full, r, world))) << "batch_rows agrees with the loader";
      }
      ASSERT_EQ(rows, full.batch);  // covering; disjoint because each row has one owner above
      for (int r = 0; r < world; ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)].state(), reference.state());
    }
  }
}

TEST_F(LoaderSliceTest, StateSavedByTwoRanksResumesOnThree) {
  DataLoader a(options(6)), b(options(6));
  for (int i = 0; i < 17; ++i) {
    a.next_slice(0, 2);
    b.next_slice(1, 2);
  }
  ASSERT_EQ(a.state(), b.state());
  for (int r = 0; r < 3; ++r) {
    DataLoader reference(options(6));
    for (int i = 0; i < 17; ++i) reference.next();
    DataLoader resumed(options(6));
    resumed.restore(a.state());
    for (int i = 0; i < 5; ++i)
      EXPECT_TRUE(same(resumed.next_slice(r, 3), batch_rows(reference.next(), r, 3)));
  }
}

TEST_F(LoaderSliceTest, BadSlicesAreErrors) {
  DataLoader l(options(2));
  EXPECT_NE(testing::error_of([&] { l.next_slice(0, 3); }).find("data.batch must be >= the number"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { l.next_slice(2, 2); }).find("rank 2 outside world size 2"),
            std::string::npos);
  LoaderOptions sliced = options(4);
  sliced.world_size = 2;
  DataLoader s(sliced);
  EXPECT_NE(testing::error_of([&] { s.next_slice(0, 2); }).find("unsliced"), std::string::npos);
}

}  // namespace
}  // namespace fp4
