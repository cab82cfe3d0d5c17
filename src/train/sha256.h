// SHA-256 (FIPS 180-4), for the checksums of checkpoint files.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace fp4 {

// Incremental hasher: update() any number of times, then hex() or digest() once.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  std::array<uint8_t, 32> digest();  // finishes the hash; the object must not be updated after
  std::string hex();                 // lower-case hex of digest()

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed so far
  bool finished_ = false;
};

std::string sha256_hex(std::string_view text);
// Hashes a file in chunks; throws fp4::Error naming the path when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace fp4
