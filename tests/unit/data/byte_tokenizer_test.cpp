// ByteTokenizer: ids are the bytes, 256 is end-of-text; random bytes round-trip and ids outside the
// vocabulary are errors.
#include "data/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using Ids = std::vector<int32_t>;

TEST(ByteTokenizer, RoundTripsRandomBytes) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  ByteTokenizer t;
  for (int i = 0; i < 100; ++i) {
    auto s = testing::random_bytes(rng, rng() % 500);
    auto ids = t.encode(s);
    ASSERT_EQ(ids.size(), s.size());
    for (size_t k = 0; k < s.size(); ++k) ASSERT_EQ(ids[k], static_cast<uint8_t>(s[k]));
    ASSERT_EQ(t.decode(ids), s);
  }
  EXPECT_EQ(t.decode(Ids{'a', 256}), "a<|endoftext|>");
  EXPECT_THROW(t.decode(Ids{257}), Error);
  EXPECT_THROW(t.token_bytes(-1), Error);
}

TEST(ByteTokenizer, TokenBytesOfEveryIdAndTheEdges) {
  const ByteTokenizer t;
  for (int32_t id = 0; id < 256; ++id) EXPECT_EQ(t.token_bytes(id), std::string(1, static_cast<char>(id)));
  EXPECT_EQ(t.token_bytes(256), "<|endoftext|>");
  const std::string msg = testing::error_of([&] { t.token_bytes(257); });
  EXPECT_NE(msg.find("token id 257 is outside [0, 257)"), std::string::npos) << msg;
  EXPECT_THROW(t.decode(Ids{'a', -1}), Error);
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_EQ(t.decode(Ids{}), "");
  EXPECT_EQ(t.encode(std::string("\0\x80", 2)), (Ids{0, 128}));
}

}  // namespace
}  // namespace fp4
