// The SHA-NI compression function against the portable one: the same state from random states and block
// counts (0 included), and through the hasher on every length 0..300 against the portable digest.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "sha256_test_util.h"
#include "train/sha256.h"
#include "train/sha256_blocks.h"

namespace fp4 {
namespace {

using fp4::testing::hash_in_pieces;
using fp4::testing::random_bytes;

#ifdef FP4_SHA256_HAVE_NI
TEST(Sha256Ni, CompressMatchesPortableFromRandomStates) {
  if (!sha256_detail::cpu_has_sha_ni()) GTEST_SKIP() << "this CPU has no SHA extensions";
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const size_t count = rng() % 6;  // 0: the state must come back unchanged
    const auto data = random_bytes(rng, 64 * count);
    sha256_detail::State start;
    for (auto& w : start) w = static_cast<uint32_t>(rng());
    sha256_detail::State ni = start, portable = start;
    sha256_detail::compress_sha_ni(ni, data.data(), count);
    sha256_detail::compress_portable(portable, data.data(), count);
    EXPECT_EQ(ni, portable) << count << " blocks";
    if (count == 0) {
      EXPECT_EQ(ni, start);
    }
  }
}
#endif

// The SHA-NI path gives the portable digest, bit for bit, on every length 0..300 (all padding
// cases, one to five blocks) and a few large odd lengths, fed in random pieces.
TEST(Sha256Ni, HasherMatchesPortableOnEveryLength) {
  if (!sha256_ni_available()) {
    EXPECT_THROW(Sha256(Sha256Impl::kShaNi), Error);
    GTEST_SKIP() << "this CPU has no SHA extensions; only the portable path can run";
  }
  std::mt19937_64 rng(std::random_device{}());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (int i = 0; i < 4; ++i) lengths.push_back((rng() % (3 << 20)) | 1);
  for (const size_t len : lengths) {
    const auto data = random_bytes(rng, len);
    const std::string portable = hash_in_pieces(Sha256Impl::kPortable, data, rng);
    EXPECT_EQ(hash_in_pieces(Sha256Impl::kShaNi, data, rng), portable) << "length " << len;
    Sha256 one_shot(Sha256Impl::kShaNi);
    one_shot.update(data);
    EXPECT_EQ(one_shot.hex(), portable) << "length " << len;
  }
  // The padding boundaries (55 bytes leave room for the length, 56 do not, 64 fill a block) against
  // digests from coreutils' sha256sum.
  EXPECT_EQ(sha256_hex(std::string(55, 'a'), Sha256Impl::kShaNi),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a'), Sha256Impl::kShaNi),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a'), Sha256Impl::kShaNi),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

}  // namespace
}  // namespace fp4
