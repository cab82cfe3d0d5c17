// SHA-256 (FIPS 180-4), for the checksums of checkpoint files. Uses the x86 SHA extensions when the
// CPU has them (several GB/s) and portable C++ otherwise; both give the same digests.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "train/sha256_blocks.h"

namespace fp4 {

// Which compression function a hasher runs. kAuto: SHA-NI when available, else portable.
// kShaNi on a CPU or build without it throws fp4::Error (tests pick each path explicitly).
enum class Sha256Impl { kAuto, kPortable, kShaNi };

// Whether this build and CPU can run Sha256Impl::kShaNi.
bool sha256_ni_available();
const char* sha256_impl_name(Sha256Impl impl);  // "auto", "portable", "sha-ni"

// Incremental hasher: update() any number of times, then hex() or digest() once.
class Sha256 {
 public:
  explicit Sha256(Sha256Impl impl = Sha256Impl::kAuto);
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  std::array<uint8_t, 32> digest();          // finishes the hash; the object must not be updated after
  std::string hex();                         // lower-case hex of digest()
  Sha256Impl impl() const { return impl_; }  // the one in use (never kAuto)

 private:
  using Compress = void (*)(sha256_detail::State&, const uint8_t*, size_t);

  Sha256Impl impl_;
  Compress compress_;
  sha256_detail::State h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed so far
  bool finished_ = false;
};

std::string sha256_hex(std::string_view text, Sha256Impl impl = Sha256Impl::kAuto);
// Hashes a file in chunks; throws fp4::Error naming the path when it cannot be read.
std::string sha256_file(const std::filesystem::path& path, Sha256Impl impl = Sha256Impl::kAuto);

}  // namespace fp4
