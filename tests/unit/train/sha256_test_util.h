// Helpers shared by the SHA-256 tests: random bytes, and hashing them in pieces of random sizes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "train/sha256.h"

namespace fp4::testing {

inline std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Hashes data in pieces of random sizes (including empty ones and ones that straddle blocks).
inline std::string hash_in_pieces(Sha256Impl impl, std::span<const uint8_t> data, std::mt19937_64& rng) {
  Sha256 h(impl);
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t cap = rng() % 4 == 0 ? 300 : 80;  // now and then a piece of several blocks
    const size_t n = std::min(data.size() - pos, static_cast<size_t>(rng() % cap));
    h.update(data.subspan(pos, n));
    pos += n;
  }
  return h.hex();
}

}  // namespace fp4::testing
