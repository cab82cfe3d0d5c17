// Gradient buckets: on random models the buckets tile the flat buffer in backward order (head, blocks
// L-1..0, embedding), each bucket's parameters are its block's; bucket_shards intersects each rank's shard.
#include "optim/grad_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace fp4 {
namespace {

TEST(GradBuckets, RandomModelsGiveContiguousBucketsInBackwardOrder) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int blocks = static_cast<int>(rng() % 13);  // 12 and more: two-digit block numbers
    const bool embed = rng() % 4 != 0, head = rng() % 4 != 0;
    std::vector<ParameterInfo> params;
    std::vector<int> owner;  // the bucket block each parameter should fall into (-1 head, blocks embed)
    auto add = [&](const std::string& name, int who) {
      params.push_back({name, {1 + static_cast<int64_t>(rng() % 7), 1 + static_cast<int64_t>(rng() % 5)}});
      owner.push_back(who);
    };
    if (embed) add("embed.weight", blocks);
    for (int l = 0; l < blocks; ++l)
      for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k)
        add("blocks." + std::to_string(l) + ".w" + std::to_string(k), l);
    // Without blocks everything comes before the first one: the head's tensors join the embedding bucket.
    const int head_owner = blocks > 0 ? -1 : blocks;
    if (head) {
      add("final_norm.weight", head_owner);
      if (rng() % 2) add("lm_head.weight", head_owner);
    }
    const auto buckets = gradient_buckets(params);
    // Expected: head, blocks L-1 .. 0, embed, each only where it has parameters.
    std::vector<int> want;
    if (head && blocks > 0) want.push_back(-1);
    for (int l = blocks - 1; l >= 0; --l) want.push_back(l);
    if (embed || (head && blocks == 0)) want.push_back(blocks);
    ASSERT_EQ(buckets.size(), want.size()) << "trial " << trial;
    int64_t total = 0;
    for (const auto& p : params) total += p.numel();
    // In backward order the ranges run from the end of the flat buffer down to 0 with no gap.
    int64_t end = total;
    for (size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(buckets[b].block, want[b]);
      EXPECT_EQ(buckets[b].name, want[b] == -1       ? "head"
                                 : want[b] == blocks ? "embed"
                                                     : "blocks." + std::to_string(want[b]));
      EXPECT_EQ(buckets[b].range.end, end);
      EXPECT_GT(buckets[b].range.size(), 0);
      end = buckets[b].range.begin;
    }
    EXPECT_EQ(end, 0);
    // Every parameter lies in its owner's bucket.
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const GradBucket* in = nullptr;
      for (const auto& b : buckets)
        if (offset >= b.range.begin && offset + params[i].numel() <= b.range.end) in = &b;
      ASSERT_NE(in, nullptr) << params[i].name;
      EXPECT_EQ(in->block, owner[i]) << params[i].name;
      offset += params[i].numel();
    }
  }
}

TEST(GradBuckets, ABlockSplitByAnotherIsAnError) {
  const std::vector<ParameterInfo> params = {
      {"embed.weight", {4, 2}}, {"blocks.0.a", {2}}, {"blocks.1.a", {2}}, {"blocks.0.b", {2}}};
  try {
    gradient_buckets(params);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the parameters of blocks.0 are not contiguous (blocks.0.b"),
              std::string::npos)
        << e.what();
  }
  // A name like blocks.x.y or "blocks." alone is not a block: it goes with the embedding or the head.
  const auto b = gradient_buckets({{"blocks.x.w", {3}}, {"blocks.0.w", {2}}, {"blocks.", {1}}});
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].name, "head");
  EXPECT_EQ(b[0].range, (IndexRange{5, 6}));
  EXPECT_EQ(b[2].name, "embed");
  EXPECT_EQ(b[2].range, (IndexRange{0, 3}));
  EXPECT_TRUE(gradient_buckets({}).empty());
}

TEST(GradBuckets, BucketShardsAreTheIntersections) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t total = 1 + rng() % 200;
    // Random contiguous shards over [0, total), some empty.
    const int ranks = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> cuts = {0, total};
    for (int r = 1; r < ranks; ++r) cuts.push_back(static_cast<int64_t>(rng() % (total + 1)));
    std::sort(cuts.begin(), cuts.end());
    std::vector<IndexRange> shards;
    for (int r = 0; r < ranks; ++r) shards.push_back({cuts[r], cuts[r + 1]});
    const int64_t a = rng() % (total + 1), b = a + rng() % (total - a + 1);
    const IndexRange bucket{a, b};
    const auto parts = bucket_shards(bucket, shards);
    ASSERT_EQ(parts.size(), shards.size());
    int64_t covered = 0;
    for (size_t r = 0; r < parts.size(); ++r) {
      for (int64_t e = 0; e < total; ++e) {
        const bool in_both = e >= bucket.begin && e < bucket.end && e >= shards[r].begin && e < shards[r].end;
        ASSERT_EQ(e >= parts[r].begin && e < parts[r].end, in_both) << "element " << e << " rank " << r;
      }
      EXPECT_GE(parts[r].size(), 0);
      covered += parts[r].size();
    }
    EXPECT_EQ(covered, bucket.size());  // the shards tile the buffer, so the parts tile the bucket
  }
}

}  // namespace
}  // namespace fp4
