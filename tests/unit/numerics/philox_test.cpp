// Philox4x32-10 and the stream/index conventions of RECIPES.md section 5 (numerics/philox.h).
#include "numerics/philox.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <set>
#include <tuple>
#include <vector>

#include "numerics_test_util.h"

namespace fp4 {
namespace {

// Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, output.
struct Kat {
  std::array<uint32_t, 4> ctr;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> out;
};
constexpr Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, Random123KnownAnswers) {
  for (const Kat& k : kKats) {
    const Philox4 r = philox4x32_10(Philox4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << "word " << i << " of counter " << k.ctr[0];
  }
}

TEST(Philox, StreamSeedAndIndexMapOntoCounterAndKey) {
  FP4_SEEDED_RNG(g);
  for (int t = 0; t < 1000; ++t) {
    const RngStream s{g(), g()};
    const uint64_t block = g() >> (t % 64);
    const Philox4 want =
        philox4x32_10(Philox4{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(s.stream), static_cast<uint32_t>(s.stream >> 32)}},
                      static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
    const Philox4 got = philox_block(s, block);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(got.v[i], want.v[i]);
    const uint64_t index = g() >> 2;  // element index: word index & 3 of block index >> 2
    const Philox4 b = philox_block(s, index >> 2);
    ASSERT_EQ(philox_word(s, index), b.v[index & 3]);
    const float u = philox_uniform(s, index);
    ASSERT_EQ(u, static_cast<float>(b.v[index & 3] >> 8) * std::ldexp(1.0f, -24));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

TEST(Philox, DeterministicAndCounterSensitive) {
  FP4_SEEDED_RNG(g);
  const RngStream s{g(), g()};
  std::set<std::array<uint32_t, 4>> seen;
  const uint64_t base = g();
  for (uint64_t b = 0; b < 20000; ++b) {
    const Philox4 r1 = philox_block(s, base + b), r2 = philox_block(s, base + b);
    ASSERT_EQ(std::tie(r1.v[0], r1.v[1], r1.v[2], r1.v[3]), std::tie(r2.v[0], r2.v[1], r2.v[2], r2.v[3]));
    seen.insert({r1.v[0], r1.v[1], r1.v[2], r1.v[3]});
  }
  EXPECT_EQ(seen.size(), 20000u) << "distinct counters gave equal 128-bit outputs";
}

// Flipping one bit of counter or key changes about half of the 128 output bits.
TEST(Philox, OneBitChangeAvalanches) {
  FP4_SEEDED_RNG(g);
  double total = 0.0;
  const int trials = 4000;
  for (int t = 0; t < trials; ++t) {
    Philox4 c{{static_cast<uint32_t>(g()), static_cast<uint32_t>(g()), static_cast<uint32_t>(g()),
               static_cast<uint32_t>(g())}};
    uint32_t k[2] = {static_cast<uint32_t>(g()), static_cast<uint32_t>(g())};
    const Philox4 a = philox4x32_10(c, k[0], k[1]);
    const int bit = static_cast<int>(g() % 192);
    if (bit < 128)
      c.v[bit / 32] ^= 1u << (bit % 32);
    else
      k[(bit - 128) / 32] ^= 1u << (bit % 32);
    const Philox4 b = philox4x32_10(c, k[0], k[1]);
    int diff = 0;
    for (int i = 0; i < 4; ++i) diff += std::popcount(a.v[i] ^ b.v[i]);
    ASSERT_GT(diff, 0);
    total += diff;
  }
  // Binomial(128, 1/2) has sd sqrt(32); the mean over 4000 trials has sd 0.09.
  EXPECT_NEAR(total / trials, 64.0, 0.6);
}

TEST(Philox, DifferentStreamsAndSeedsDiffer) {
  FP4_SEEDED_RNG(g);
  const uint64_t seed = g(), stream = g(), index = g();
  const uint32_t w = philox_word({seed, stream}, index);
  int same_stream = 0, same_seed = 0;
  for (uint64_t d = 1; d <= 1000; ++d) {
    same_stream += philox_word({seed, stream + d}, index) == w;
    same_seed += philox_word({seed ^ (d << 20), stream}, index) == w;
  }
  EXPECT_LE(same_stream, 1);  // 32-bit words: a chance match has probability 1000 * 2^-32
  EXPECT_LE(same_seed, 1);
}

// Chi-square of the byte histogram of 10^6 words, per byte position (255 degrees of freedom).
TEST(Philox, BytesAreUniform) {
  FP4_SEEDED_RNG(g);
  const RngStream s{g(), g()};
  std::array<std::array<int64_t, 256>, 4> hist{};
  double sum_u = 0.0;
  const int64_t n = 1000000;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t w = philox_word(s, static_cast<uint64_t>(i));
    for (int b = 0; b < 4; ++b) ++hist[b][(w >> (8 * b)) & 0xFF];
    sum_u += philox_uniform(s, static_cast<uint64_t>(i));
  }
  const double expect = static_cast<double>(n) / 256.0;
  for (int b = 0; b < 4; ++b) {
    double chi2 = 0.0;
    for (int64_t c : hist[b]) chi2 += (c - expect) * (c - expect) / expect;
    // Chi-square(255): P(> 380) and P(< 155) are each below 1e-6 (Wilson-Hilferty).
    EXPECT_LT(chi2, 380.0) << "byte " << b;
    EXPECT_GT(chi2, 155.0) << "byte " << b << " is too uniform to be random";
  }
  EXPECT_NEAR(sum_u / n, 0.5, 5.0 * std::sqrt(1.0 / 12.0 / n));
}

TEST(Philox, MakeStreamPacksPurposeTensorAndStep) {
  EXPECT_EQ(make_stream(0x123456, 0x89ABCDEF, 0x42), 0x42123456'89ABCDEFull);
  EXPECT_EQ(make_stream(0xFF123456, 7, 0x1FF), 0xFF123456'00000007ull);  // fields masked to their widths
  std::set<uint64_t> ids;
  for (uint32_t purpose = 0; purpose < 4; ++purpose)
    for (uint32_t tensor = 0; tensor < 50; ++tensor)
      for (uint32_t step = 0; step < 50; ++step) ids.insert(make_stream(tensor, step, purpose));
  EXPECT_EQ(ids.size(), 4u * 50u * 50u);
}

// The per-stream precomputation returns philox_block's words for every block below 2^32: random seeds
// and streams (all 64 bits), the edge words 0 and all-ones, and random blocks.
TEST(Philox, StreamScheduleGivesTheSameWords) {
  FP4_SEEDED_RNG(g);
  std::vector<RngStream> streams = {{0, 0}, {~0ull, ~0ull}, {0, ~0ull}, {~0ull, 0}};
  for (int i = 0; i < 60; ++i) streams.push_back({g(), g()});
  int checked = 0;
  for (const RngStream& s : streams) {
    const PhiloxStream32 p = philox_stream32(s);
    std::vector<uint32_t> blocks = {0u, 1u, 0xFFFFFFFFu, 0x80000000u};
    for (int i = 0; i < 200; ++i) blocks.push_back(static_cast<uint32_t>(g()));
    for (uint32_t b : blocks) {
      const Philox4 want = philox_block(s, b), got = philox_block32(p, b);
      for (int w = 0; w < 4; ++w)
        ASSERT_EQ(got.v[w], want.v[w])
            << "word " << w << " of block " << b << ", seed " << s.seed << " stream " << s.stream;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 64 * 204);
}

// SR's 16-bit decisions (RECIPES.md section 1, docs/NUMERICS.md): element i takes the low half of word i / 2
// for an even i and the high half for an odd one, in the top 16 bits; eight elements share one Philox block.
TEST(Philox, SrWordsAreTheHalvesOfOneWordInOrder) {
  FP4_SEEDED_RNG(g);
  for (int t = 0; t < 200; ++t) {
    const RngStream s{g(), g()};
    // Random indices, the first and last of a block, and indices past 2^32 (the 64-bit counter).
    const uint64_t base = t < 4 ? (uint64_t{t} << 33) : (g() >> 3) << 3;
    const Philox4 b = philox_block(s, base >> 3);
    for (int i = 0; i < 8; ++i) {
      const uint32_t w = philox_sr_word(s, base + static_cast<uint64_t>(i));
      const uint32_t word = philox_word(s, ((base >> 3) << 2) + static_cast<uint64_t>(i >> 1));
      ASSERT_EQ(word, b.v[i >> 1]);
      ASSERT_EQ(w & 0xFFFFu, 0u) << "the low 16 bits are zero";
      ASSERT_EQ(w >> 16, (i & 1) ? word >> 16 : word & 0xFFFFu) << "element " << i;
      ASSERT_EQ(w, sr16_word(b, i));
    }
  }
}

// The 16-bit halves are uniform: each of the 16 bits is set about half the time and the two halves of a
// word are not equal more often than chance.
TEST(Philox, SrWordHalvesAreUniform) {
  FP4_SEEDED_RNG(g);
  const RngStream s{g(), g()};
  const int n = 1 << 18;
  int bit_count[16] = {};
  int equal_halves = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t w = philox_sr_word(s, static_cast<uint64_t>(i)) >> 16;
    for (int b = 0; b < 16; ++b) bit_count[b] += (w >> b) & 1u;
    if (i & 1) equal_halves += w == (philox_sr_word(s, static_cast<uint64_t>(i - 1)) >> 16);
  }
  const double sd = std::sqrt(n * 0.25);
  for (int b = 0; b < 16; ++b) EXPECT_NEAR(bit_count[b], n / 2.0, 6 * sd) << "bit " << b;
  EXPECT_LE(equal_halves, 20) << "expected about " << (n / 2) / 65536.0;
}

}  // namespace
}  // namespace fp4
