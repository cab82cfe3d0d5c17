#include "data/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <thread>

#include "core/error.h"
#include "data/byte_unicode.h"
#include "data/pretokenizer.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::make_hand_bpe;
using Ids = std::vector<int32_t>;

BpeTokenizer make(const std::vector<std::pair<std::string, std::string>>& merges, bool with_eot = false) {
  auto h = make_hand_bpe(merges, with_eot);
  return BpeTokenizer(h.vocab, h.merges, "hand-made");
}

// The id a byte string has in a hand-made vocabulary (bytes 0..255, then merges in order).
int32_t id_of(const BpeTokenizer& t, const std::string& bytes) {
  if (bytes.size() == 1) return static_cast<uint8_t>(bytes[0]);
  for (int32_t id = 256; id < t.vocab_size(); ++id) {
    if (t.token_bytes(id) == bytes) return id;
  }
  return -1;
}

// BPE the slow, obvious way: merge the lowest-ranked adjacent pair (leftmost on ties) until none.
std::vector<std::string> naive_bpe(const std::string& piece,
                                   const std::map<std::pair<std::string, std::string>, int>& rank) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int best = std::numeric_limits<int>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = rank.find({parts[i], parts[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == std::numeric_limits<int>::max()) return parts;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
}

TEST(BpeTokenizer, LowerRankMergesFirst) {
  auto ab_first = make({{"a", "b"}, {"b", "c"}});
  EXPECT_EQ(ab_first.encode("abc"), (Ids{id_of(ab_first, "ab"), 'c'}));
  auto bc_first = make({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(bc_first.encode("abc"), (Ids{'a', id_of(bc_first, "bc")}));
}

TEST(BpeTokenizer, MergesChainIntoLongerTokens) {
  auto t = make({{"a", "b"}, {"ab", "c"}, {"abc", "abc"}});
  EXPECT_EQ(t.encode("abc"), (Ids{id_of(t, "abc")}));
  EXPECT_EQ(t.encode("abcabc"), (Ids{id_of(t, "abcabc")}));
  EXPECT_EQ(t.encode("abcab"), (Ids{id_of(t, "abc"), id_of(t, "ab")}));
}

TEST(BpeTokenizer, EqualPairsMergeLeftmostFirst) {
  auto t = make({{"a", "a"}});
  EXPECT_EQ(t.encode("aaa"), (Ids{id_of(t, "aa"), 'a'}));
  EXPECT_EQ(t.encode("aaaa"), (Ids{id_of(t, "aa"), id_of(t, "aa")}));
}

TEST(BpeTokenizer, EveryByteFallsBackToItsOwnToken) {
  auto t = make({{"a", "b"}});
  for (int b = 0; b < 256; ++b) {
    std::string s(1, static_cast<char>(b));
    ASSERT_EQ(t.encode(s), (Ids{b})) << "byte " << b;
    EXPECT_EQ(t.decode(Ids{b}), s);
  }
}

TEST(BpeTokenizer, MultiByteCharactersMergeOnlyWhenAMergeSaysSo) {
  auto plain = make({});
  EXPECT_EQ(plain.encode("\xC3\xA9"), (Ids{0xC3, 0xA9}));  // é as its two bytes
  auto merged = make({{"\xC3", "\xA9"}});
  EXPECT_EQ(merged.encode(" \xC3\xA9"), (Ids{' ', id_of(merged, "\xC3\xA9")}));
}

TEST(BpeTokenizer, MergesNeverCrossPreTokenizerPieces) {
  // "o" + "'" and " " + " " are merges, but "o's" splits as "o" | "'s" and "a  b" as "a" | " " | " b".
  auto t = make({{"o", "'"}, {" ", " "}, {" ", "b"}});
  EXPECT_EQ(t.encode("o's"), (Ids{'o', '\'', 's'}));
  EXPECT_EQ(t.encode("a  b"), (Ids{'a', ' ', id_of(t, " b")}));
  EXPECT_EQ(t.encode("a   b"), (Ids{'a', id_of(t, "  "), id_of(t, " b")}));
}

TEST(BpeTokenizer, MatchesNaiveBpeOnRandomMergesAndText) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    // Random merges over tokens built from "abc ", each made of tokens that exist already.
    std::vector<std::string> tokens = {"a", "b", "c", " "};
    std::vector<std::pair<std::string, std::string>> merges;
    std::map<std::pair<std::string, std::string>, int> rank;
    for (int m = 0; m < 40; ++m) {
      auto a = tokens[rng() % tokens.size()];
      auto b = tokens[rng() % tokens.size()];
      if (a.size() + b.size() > 8) continue;
      merges.emplace_back(a, b);
      rank.emplace(std::make_pair(a, b), static_cast<int>(merges.size()) - 1);  // first rank wins
      tokens.push_back(a + b);
    }
    auto t = make(merges);
    Pretokenizer pre;
    for (int i = 0; i < 50; ++i) {
      std::string text;
      size_t n = rng() % 40;
      for (size_t k = 0; k < n; ++k) text += "abc "[rng() % 4];
      Ids expected;
      for (auto piece : pre.split(text)) {
        for (const auto& part : naive_bpe(std::string(piece), rank)) expected.push_back(id_of(t, part));
      }
      ASSERT_EQ(t.encode(text), expected) << "text '" << text << "'";
    }
  }
}

TEST(BpeTokenizer, RoundTripsRandomBytesIncludingInvalidUtf8) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto t = make(
      {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"\xC3", "\xA9"}, {"\n", "\n"}, {" ", " "}, {"\xFF", "\xFE"}});
  for (int i = 0; i < 300; ++i) {
    std::string s = i % 2 ? testing::random_bytes(rng, rng() % 300) : testing::random_text(rng, rng() % 80);
    auto ids = t.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
    ASSERT_EQ(t.decode(ids), s);
    ASSERT_EQ(t.encode(s), ids);  // the second call is served by the cache
  }
}

TEST(BpeTokenizer, ConcurrentEncodesAgree) {
  std::mt19937_64 rng(testing::fresh_seed());
  auto t = make({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"c", "a"}, {"ca", "t"}});
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(testing::random_text(rng, 200));
  std::vector<Ids> expected;
  {
    auto fresh = make({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"c", "a"}, {"ca", "t"}});
    for (const auto& s : texts) expected.push_back(fresh.encode(s));
  }
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t k = (i * 7 + th * 13 + rep) % texts.size();
          bad[th] += t.encode(texts[k]) != expected[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int th = 0; th < 4; ++th) EXPECT_EQ(bad[th], 0) << "thread " << th;
}

TEST(BpeTokenizer, EndOfTextIsAppendedOrTakenFromTheVocabulary) {
  auto appended = make({{"a", "b"}});
  EXPECT_EQ(appended.eot_id(), 257);
  EXPECT_EQ(appended.vocab_size(), 258);
  EXPECT_EQ(appended.decode(Ids{'a', 257}), "a<|endoftext|>");
  auto given = make({{"a", "b"}}, /*with_eot=*/true);
  EXPECT_EQ(given.eot_id(), 257);
  EXPECT_EQ(given.vocab_size(), 258);
  // The text "<|endoftext|>" is ordinary characters, never the special id.
  auto ids = given.encode("<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), given.eot_id()), 0);
}

TEST(BpeTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  auto t = make({});
  EXPECT_THROW(t.decode(Ids{-1}), Error);
  EXPECT_THROW(t.decode(Ids{t.vocab_size()}), Error);
  EXPECT_THROW(t.token_bytes(100000), Error);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BpeTokenizer, BadVocabulariesGiveClearErrors) {
  auto h = make_hand_bpe({{"a", "b"}});
  auto missing_byte = h.vocab;
  missing_byte.erase(missing_byte.begin() + 'x');
  for (auto& [tok, id] : missing_byte) id = id > 'x' ? id - 1 : id;
  EXPECT_NE(error_of([&] { BpeTokenizer(missing_byte, h.merges, "v.json"); }).find("byte 120"),
            std::string::npos);

  auto gap = h.vocab;
  gap.back().second = 1000;
  EXPECT_NE(error_of([&] { BpeTokenizer(gap, h.merges, "v.json"); }).find("has id 1000"), std::string::npos);

  auto unknown_merge = h.merges;
  unknown_merge.emplace_back("zz", "q");
  auto msg = error_of([&] { BpeTokenizer(h.vocab, unknown_merge, "v.json"); });
  EXPECT_NE(msg.find("merge 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'zz'"), std::string::npos) << msg;

  auto no_result = h.merges;
  no_result.emplace_back("b", "a");
  msg = error_of([&] { BpeTokenizer(h.vocab, no_result, "v.json"); });
  EXPECT_NE(msg.find("merged token 'ba'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
