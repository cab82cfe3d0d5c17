#include "data/byte_unicode.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "data_test_util.h"

namespace fp4 {
namespace {

TEST(ByteUnicode, IsABijectionOverAllBytes) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    char32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << "byte " << b << " shares code point " << static_cast<uint32_t>(cp);
    auto back = codepoint_to_byte(cp);
    ASSERT_TRUE(back.has_value()) << "byte " << b;
    EXPECT_EQ(*back, b);
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(ByteUnicode, PrintableBytesStandForThemselvesOthersShiftAbove255) {
  EXPECT_EQ(byte_to_codepoint('A'), U'A');
  EXPECT_EQ(byte_to_codepoint('~'), U'~');
  EXPECT_EQ(byte_to_codepoint(0xE9), U'\u00E9');
  EXPECT_EQ(byte_to_codepoint(0x00), U'\u0100');
  EXPECT_EQ(byte_to_codepoint(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(byte_to_codepoint('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(byte_to_codepoint(0xAD), U'\u0143');  // the last shifted byte
  EXPECT_FALSE(codepoint_to_byte(U' ').has_value());
  EXPECT_FALSE(codepoint_to_byte(U'\u0144').has_value());
  EXPECT_FALSE(codepoint_to_byte(U'\u4E00').has_value());
}

TEST(ByteUnicode, VocabStringsRoundTripRandomBytes) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200; ++i) {
    std::string bytes = testing::random_bytes(rng, rng() % 64);
    std::string v = bytes_to_vocab_string(bytes);
    auto back = vocab_string_to_bytes(v);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(bytes_to_vocab_string(" world"), "\xC4\xA0world");
}

TEST(ByteUnicode, RejectsStringsThatStandForNoBytes) {
  EXPECT_FALSE(vocab_string_to_bytes("a b").has_value());           // a raw space stands for no byte
  EXPECT_FALSE(vocab_string_to_bytes("\xE4\xB8\x80").has_value());  // U+4E00
  EXPECT_FALSE(vocab_string_to_bytes("\xC4").has_value());          // truncated UTF-8
  EXPECT_FALSE(vocab_string_to_bytes("\xFF").has_value());          // not UTF-8
}

}  // namespace
}  // namespace fp4
