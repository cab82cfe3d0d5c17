// FNV-1a 64-bit: the checksum of shards and the fingerprint of tokenizers (fast, no table, and
// the same on every platform).
#pragma once

#include <cstdint>
#include <span>

namespace fp4 {

inline constexpr uint64_t kFnvOffset = 14695981039346656037ull;

// FNV-1a 64 over bytes, continuing from `state` (start with kFnvOffset).
constexpr uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t state = kFnvOffset) {
  constexpr uint64_t kPrime = 1099511628211ull;
  for (uint8_t b : bytes) state = (state ^ b) * kPrime;
  return state;
}

}  // namespace fp4
