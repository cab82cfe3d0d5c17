// The portable SHA-256 compression function on its own: one padded block against the FIPS 180-4 "abc"
// state, and many blocks in one call equal to the same blocks one call at a time.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "train/sha256_blocks.h"

namespace fp4 {
namespace {

using sha256_detail::State;

// FIPS 180-4 initial hash value: the first 32 bits of the fractional parts of the square roots of the
// first 8 primes.
constexpr State kInitial = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

TEST(Sha256Portable, AbcBlockGivesTheFipsState) {
  // "abc", the 0x80 marker, zeros, and the length in bits (24) big-endian in the last 8 bytes.
  uint8_t block[64] = {'a', 'b', 'c', 0x80};
  block[63] = 24;
  State s = kInitial;
  sha256_detail::compress_portable(s, block, 1);
  const State want = {0xba7816bf, 0x8f01cfea, 0x414140de, 0x5dae2223,
                      0xb00361a3, 0x96177a9c, 0xb410ff61, 0xf20015ad};
  EXPECT_EQ(s, want);
}

TEST(Sha256Portable, ZeroBlocksLeaveTheStateAlone) {
  std::mt19937 rng(std::random_device{}());
  State s;
  for (auto& w : s) w = rng();
  const State before = s;
  sha256_detail::compress_portable(s, nullptr, 0);
  EXPECT_EQ(s, before);
}

// Several blocks in one call fold in order, as the same blocks one by one; a changed byte in any block
// changes the result.
TEST(Sha256Portable, ManyBlocksEqualOneAtATimeOnRandomData) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const size_t count = 1 + rng() % 9;
    std::vector<uint8_t> data(64 * count);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    State start;
    for (auto& w : start) w = rng();
    State together = start, apart = start;
    sha256_detail::compress_portable(together, data.data(), count);
    for (size_t i = 0; i < count; ++i) sha256_detail::compress_portable(apart, data.data() + 64 * i, 1);
    EXPECT_EQ(together, apart) << count << " blocks";
    data[rng() % data.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    State flipped = start;
    sha256_detail::compress_portable(flipped, data.data(), count);
    EXPECT_NE(flipped, together) << count << " blocks";
  }
}

}  // namespace
}  // namespace fp4
