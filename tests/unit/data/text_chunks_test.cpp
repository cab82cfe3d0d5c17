#include "data/text_chunks.h"

#include <gtest/gtest.h>

#include <random>

#include "data/bpe_tokenizer.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

TEST(TextChunks, CutsOnlyAfterANewlineBetweenPlainCharacters) {
  auto pieces = split_for_tokenization("aaaa\nbbbb\n\ncccc dd\nee", 2);
  std::vector<std::string_view> expected = {"aaaa\n", "bbbb\n\ncccc dd\n", "ee"};
  EXPECT_EQ(pieces, expected);
  EXPECT_EQ(split_for_tokenization("no newline at all", 3).size(), 1u);
  EXPECT_EQ(split_for_tokenization("", 3), std::vector<std::string_view>{""});
  EXPECT_EQ(split_for_tokenization("a\nb", 100).size(), 1u);
}

TEST(TextChunks, PiecesConcatenateAndEncodeLikeTheWholeText) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto h = testing::make_hand_bpe(
      {{"\n", "\n"}, {" ", "\n"}, {"t", "h"}, {"th", "e"}, {" ", " "}, {"a", "\n"}, {"\n", "b"}});
  BpeTokenizer tok(h.vocab, h.merges, "hand-made");
  for (int i = 0; i < 200; ++i) {
    std::string text = testing::random_text(rng, rng() % 400);
    if (i % 4 == 0) text += testing::random_bytes(rng, 50) + "x\ny" + testing::random_text(rng, 40);
    auto pieces = split_for_tokenization(text, 1 + static_cast<int64_t>(rng() % 40));
    std::string joined;
    std::vector<int32_t> ids;
    for (auto p : pieces) {
      joined += p;
      auto part = tok.encode(p);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    ASSERT_EQ(joined, text);
    ASSERT_EQ(ids, tok.encode(text)) << "pieces " << pieces.size();
  }
}

}  // namespace
}  // namespace fp4
