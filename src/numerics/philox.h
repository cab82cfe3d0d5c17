// Philox4x32-10 counter-based RNG (Salmon et al., SC'11), RECIPES.md section 5. Every random decision in
// fp4train is a pure function of (seed, stream, index), so CPU and GPU draw identical bits on any
// thread layout and a resumed run repeats them.
#pragma once

#include <cstdint>

#include "numerics/hd.h"

namespace fp4 {

struct Philox4 {
  uint32_t v[4];
};

FP4_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on counter c with key k.
FP4_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c.v[0], hi0, lo0);
    philox_mulhilo(kM1, c.v[2], hi1, lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// A random stream: the seed is the key, the stream id and a 64-bit block index form the counter.
struct RngStream {
  uint64_t seed = 0;
  uint64_t stream = 0;
};

// Four random words for block `block` (elements 4*block .. 4*block+3) of the stream.
FP4_HD Philox4 philox_block(RngStream s, uint64_t block) {
  const Philox4 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                     static_cast<uint32_t>(s.stream), static_cast<uint32_t>(s.stream >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
}

// Philox4x32-10 of one stream for block indices below 2^32, with the work that depends on the stream alone
// done once: the ten round keys, and the halves of rounds 1 and 2 that never see the block index (with
// counter word 1 zero, round 1's words 0 and 1 are the stream's, so round 2's product of word 0 is too).
// philox_block32 then costs about half of philox_block's instructions and returns the same words.
struct PhiloxStream32 {
  uint32_t k0[10], k1[10];  // round keys
  uint32_t r1_w0, r1_w1;    // round 1: words 0 and 1
  uint32_t r1_x2;           // round 1: stream word 3 ^ key, xored into word 2
  uint32_t r2_x0, r2_x2;    // round 2: xored into words 0 and 2
  uint32_t r2_w3;           // round 2: word 3
};

FP4_HD PhiloxStream32 philox_stream32(RngStream s) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  PhiloxStream32 p{};
  uint32_t k0 = static_cast<uint32_t>(s.seed), k1 = static_cast<uint32_t>(s.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    p.k0[round] = k0;
    p.k1[round] = k1;
    k0 += kW0;
    k1 += kW1;
  }
  uint32_t hi, lo;
  philox_mulhilo(kM1, static_cast<uint32_t>(s.stream), hi, lo);
  p.r1_w0 = hi ^ p.k0[0];
  p.r1_w1 = lo;
  p.r1_x2 = static_cast<uint32_t>(s.stream >> 32) ^ p.k1[0];
  philox_mulhilo(kM0, p.r1_w0, hi, lo);
  p.r2_x0 = p.r1_w1 ^ p.k0[1];
  p.r2_x2 = hi ^ p.k1[1];
  p.r2_w3 = lo;
  return p;
}

// philox_block(s, block) for the stream s that p was made from.
FP4_HD Philox4 philox_block32(const PhiloxStream32& p, uint32_t block) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(kM0, block, hi0, lo0);          // round 1 (M1 * word 2 is the stream's)
  philox_mulhilo(kM1, hi0 ^ p.r1_x2, hi1, lo1);  // round 2 (M0 * word 0 is the stream's)
  Philox4 c{{hi1 ^ p.r2_x0, lo1, lo0 ^ p.r2_x2, p.r2_w3}};
  for (int round = 2; round < 10; ++round) {
    philox_mulhilo(kM0, c.v[0], hi0, lo0);
    philox_mulhilo(kM1, c.v[2], hi1, lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ p.k0[round], lo1, hi0 ^ c.v[3] ^ p.k1[round], lo0}};
  }
  return c;
}

// The random word of element `index` of a stream.
FP4_HD uint32_t philox_word(RngStream s, uint64_t index) {
  return philox_block(s, index >> 2).v[index & 3];
}

// Stochastic rounding's random bits (RECIPES.md section 1, 16 bits a decision): element i of a stream takes
// one half of Philox word i / 2, the low half for an even i and the high half for an odd one, so a Philox
// block serves eight consecutive elements (block i / 8, word (i / 2) % 4). The half is returned in the top 16
// bits of a 32-bit word with the low 16 bits zero, the form the E2M1 SR rounding compares (its top 22 bits).
FP4_HD uint32_t sr16_word(const Philox4& block, int i) {
  const uint32_t w = block.v[(i >> 1) & 3];
  return (i & 1) ? (w & 0xFFFF0000u) : (w << 16);
}
FP4_HD uint32_t philox_sr_word(RngStream s, uint64_t index) {
  return sr16_word(philox_block(s, index >> 3), static_cast<int>(index & 7));
}

// Uniform float in [0, 1) with 24 random bits.
FP4_HD float philox_uniform(RngStream s, uint64_t index) {
  return static_cast<float>(philox_word(s, index) >> 8) * 5.9604644775390625e-8f;
}

// Derives the stream id of a (tensor id, step, purpose) triple so that callers need not invent ids.
FP4_HD uint64_t make_stream(uint32_t tensor_id, uint32_t step, uint32_t purpose) {
  return (static_cast<uint64_t>(purpose & 0xFFu) << 56) |
         (static_cast<uint64_t>(tensor_id & 0xFFFFFFu) << 32) | step;
}

}  // namespace fp4
