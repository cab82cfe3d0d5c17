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

// The random word of element `index` of a stream.
FP4_HD uint32_t philox_word(RngStream s, uint64_t index) { return philox_block(s, index >> 2).v[index & 3]; }

// Uniform float in [0, 1) with 24 random bits.
FP4_HD float philox_uniform(RngStream s, uint64_t index) {
  return static_cast<float>(philox_word(s, index) >> 8) * 5.9604644775390625e-8f;
}

// Derives the stream id of a (tensor id, step, purpose) triple so that callers need not invent ids.
FP4_HD uint64_t make_stream(uint32_t tensor_id, uint32_t step, uint32_t purpose) {
  return (static_cast<uint64_t>(purpose & 0xFFu) << 56) | (static_cast<uint64_t>(tensor_id & 0xFFFFFFu) << 32) |
         step;
}

}  // namespace fp4
