// check_micro_batch_tokens: block128 scaling over the tokens needs 128-token micro-batches on every rank.
#include "train/token_blocks.h"

#include <gtest/gtest.h>

#include <random>

#include "recipe/recipe_io.h"
#include "test_util.h"

namespace fp4 {
namespace {

TEST(TokenBlocks, Block128RecipesNeedMultiplesOf128TokensOnEveryRank) {
  const Recipe tetrajet = load_recipe("tetrajet-v2-base");
  // Rank r gets ceil((batch - r) / world) rows: find the failing rank by brute force and compare.
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int world = 1 + static_cast<int>(rng() % 4);
    const int batch = world + static_cast<int>(rng() % 12);
    const int seq = 16 * (1 + static_cast<int>(rng() % 16));
    bool ok = true;
    for (int r = 0; r < world; ++r) ok = ok && ((batch - r + world - 1) / world) * seq % 128 == 0;
    if (ok) {
      EXPECT_NO_THROW(check_micro_batch_tokens(tetrajet, batch, seq, world))
          << batch << " " << seq << " " << world;
    } else {
      const std::string msg =
          testing::error_of([&] { check_micro_batch_tokens(tetrajet, batch, seq, world); });
      EXPECT_NE(msg.find("data.seq = " + std::to_string(seq)), std::string::npos) << msg;
      EXPECT_NE(msg.find("multiple of 128 tokens"), std::string::npos) << msg;
    }
  }
  // The DistCuda shapes that met the quantizer's refusal on the GPU: 2 x 48 and 3 x 64 tokens.
  EXPECT_NE(testing::error_of([&] {
              check_micro_batch_tokens(tetrajet, 2, 48, 1);
            }).find("96 (data.batch = 2, data.seq = 48)"),
            std::string::npos);
  EXPECT_NE(
      testing::error_of([&] { check_micro_batch_tokens(tetrajet, 6, 64, 2); }).find("rank 0 of 2 gets 192"),
      std::string::npos);
}

TEST(TokenBlocks, TensorScaleAndBf16RecipesTakeAnyShape) {
  for (const char* name : {"bf16", "nvidia-nvfp4"})
    for (int seq : {1, 17, 48, 100})
      for (int world : {1, 3})
        EXPECT_NO_THROW(check_micro_batch_tokens(load_recipe(name), 5, seq, world)) << name;
}

}  // namespace
}  // namespace fp4
