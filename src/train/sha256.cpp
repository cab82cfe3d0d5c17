#include "train/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "train/unique_fd.h"

namespace fp4 {
namespace {

namespace sha_blocks = sha256_detail;

// First 32 bits of the fractional parts of the square roots of the first 8 primes.
constexpr sha_blocks::State kInit = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

Sha256Impl resolve(Sha256Impl impl) {
  if (impl == Sha256Impl::kAuto) return sha256_ni_available() ? Sha256Impl::kShaNi : Sha256Impl::kPortable;
  FP4_CHECK(impl != Sha256Impl::kShaNi || sha256_ni_available(),
            "SHA-256: the SHA-NI implementation was requested but this CPU or build lacks the x86 SHA "
            "extensions");
  return impl;
}

}  // namespace

bool sha256_ni_available() {
#ifdef FP4_SHA256_HAVE_NI
  static const bool kHave = sha_blocks::cpu_has_sha_ni();
  return kHave;
#else
  return false;
#endif
}

const char* sha256_impl_name(Sha256Impl impl) {
  switch (impl) {
    case Sha256Impl::kAuto:
      return "auto";
    case Sha256Impl::kPortable:
      return "portable";
    case Sha256Impl::kShaNi:
      return "sha-ni";
  }
  return "?";
}

Sha256::Sha256(Sha256Impl impl) : impl_(resolve(impl)), compress_(&sha_blocks::compress_portable), h_(kInit) {
#ifdef FP4_SHA256_HAVE_NI
  if (impl_ == Sha256Impl::kShaNi) compress_ = &sha_blocks::compress_sha_ni;
#endif
}

void Sha256::update(std::span<const uint8_t> bytes) {
  FP4_CHECK(!finished_, "Sha256::update after digest");
  length_ += bytes.size();
  size_t i = 0;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes.size(), 64 - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes.data(), take);
    buffered_ += take;
    i = take;
    if (buffered_ < 64) return;
    compress_(h_, buffer_.data(), 1);
    buffered_ = 0;
  }
  const size_t blocks = (bytes.size() - i) / 64;
  if (blocks > 0) compress_(h_, bytes.data() + i, blocks);
  i += 64 * blocks;
  if (i < bytes.size()) std::memcpy(buffer_.data(), bytes.data() + i, bytes.size() - i);
  buffered_ = bytes.size() - i;
}

void Sha256::update(std::string_view text) {
  update(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::array<uint8_t, 32> Sha256::digest() {
  FP4_CHECK(!finished_, "Sha256::digest called twice");
  const uint64_t bits = length_ * 8;
  // Padding: 0x80, zeros up to 56 mod 64, then the message length in bits, big-endian.
  std::array<uint8_t, 72> pad{};
  pad[0] = 0x80;
  const size_t zeros = (buffered_ < 56 ? 56 - buffered_ : 120 - buffered_);
  for (int i = 0; i < 8; ++i) pad[zeros + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(std::span<const uint8_t>(pad.data(), zeros + 8));
  finished_ = true;
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
  return out;
}

std::string Sha256::hex() {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest()) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view text, Sha256Impl impl) {
  Sha256 h(impl);
  h.update(text);
  return h.hex();
}

std::string sha256_file(const std::filesystem::path& path, Sha256Impl impl) {
  Sha256 h(impl);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  FP4_CHECK(fd.get() >= 0, path.string(), ": cannot open for reading: ", std::strerror(errno));
  std::vector<uint8_t> chunk(size_t{4} << 20);
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    FP4_CHECK(n > 0, path.string(), ": read error: ", std::strerror(errno));
    h.update(std::span<const uint8_t>(chunk.data(), static_cast<size_t>(n)));
  }
  return h.hex();
}

}  // namespace fp4
