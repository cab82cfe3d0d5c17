#include "data/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "data_test_util.h"

namespace fp4 {
namespace {

std::vector<std::string> pieces(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  for (auto v : p.split(text)) out.emplace_back(v);
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenizer, SplitsWordsWithTheirLeadingSpace) {
  Pretokenizer p;
  EXPECT_EQ(pieces(p, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces(p, "a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces(p, ""), V{});
}

TEST(Pretokenizer, Contractions) {
  Pretokenizer p;
  EXPECT_EQ(pieces(p, "I'm they've we'll it's he'd you're"),
            (V{"I", "'m", " they", "'ve", " we", "'ll", " it", "'s", " he", "'d", " you", "'re"}));
  EXPECT_EQ(pieces(p, "'t"), (V{"'t"}));
  // Only lower case contractions are special; "'S" is punctuation then a letter.
  EXPECT_EQ(pieces(p, "IT'S"), (V{"IT", "'", "S"}));
}

TEST(Pretokenizer, WhitespaceRunsLeaveTheLastSpaceToTheNextWord) {
  Pretokenizer p;
  EXPECT_EQ(pieces(p, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(p, "a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces(p, "a \nb"), (V{"a", " ", "\n", "b"}));
  EXPECT_EQ(pieces(p, "end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces(p, "x\t\ty"), (V{"x", "\t", "\t", "y"}));
}

TEST(Pretokenizer, NumbersPunctuationAndUnicodeClasses) {
  Pretokenizer p;
  EXPECT_EQ(pieces(p, "abc123 456!!? ok"), (V{"abc", "123", " 456", "!!?", " ok"}));
  EXPECT_EQ(pieces(p, " h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC"),
            (V{" h\xC3\xA9llo", " \xE6\x97\xA5\xE6\x9C\xAC"}));
  // Ⅻ (U+216B) is a number (Nl), not a letter.
  EXPECT_EQ(pieces(p, "x\xE2\x85\xAB"), (V{"x", "\xE2\x85\xAB"}));
}

TEST(Pretokenizer, InvalidUtf8BecomesPiecesOfItsOwn) {
  Pretokenizer p;
  EXPECT_EQ(pieces(p, "ab\xFF\xFE cd"), (V{"ab", "\xFF\xFE", " cd"}));
  EXPECT_EQ(pieces(p, "\xC3"), (V{"\xC3"}));  // a lone lead byte at the end
}

TEST(Pretokenizer, PiecesCoverRandomBytesExactly) {
  Pretokenizer p;
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 300; ++i) {
    std::string s = i % 2 ? testing::random_bytes(rng, rng() % 200) : testing::random_text(rng, rng() % 60);
    std::string joined;
    for (auto v : p.split(s)) {
      EXPECT_FALSE(v.empty());
      joined += v;
    }
    ASSERT_EQ(joined, s);
  }
}

TEST(Pretokenizer, ThreadsGetTheSamePieces) {
  Pretokenizer p;
  std::mt19937_64 rng(testing::fresh_seed());
  std::string text = testing::random_text(rng, 5000);
  auto expected = pieces(p, text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { ok[t] = pieces(p, text) == expected; });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

}  // namespace
}  // namespace fp4
