#include "train/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace fp4 {
namespace {

// Every implementation this machine can run; SHA-NI is left out only where the CPU lacks it.
std::vector<Sha256Impl> runnable_impls() {
  std::vector<Sha256Impl> out = {Sha256Impl::kPortable, Sha256Impl::kAuto};
  if (sha256_ni_available()) out.push_back(Sha256Impl::kShaNi);
  return out;
}

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Hashes data in pieces of random sizes (including empty ones and ones that straddle blocks).
std::string hash_in_pieces(Sha256Impl impl, std::span<const uint8_t> data, std::mt19937_64& rng) {
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

// FIPS 180-4 example vectors, for each implementation.
TEST(Sha256, KnownVectors) {
  for (const Sha256Impl impl : runnable_impls()) {
    SCOPED_TRACE(sha256_impl_name(impl));
    EXPECT_EQ(sha256_hex("", impl), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc", impl), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", impl),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256_hex(
                  "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlm"
                  "nopqrsmnopqrstnopqrstu",
                  impl),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    EXPECT_EQ(sha256_hex(std::string(1000000, 'a'), impl),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

// The SHA-NI path gives the portable digest, bit for bit, on every length 0..300 (all padding
// cases, one to five blocks) and a few large odd lengths, fed in random pieces.
TEST(Sha256, ShaNiMatchesPortable) {
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
}

// Each implementation: random pieces give the same digest as one piece, around block boundaries.
TEST(Sha256, IncrementalMatchesOneShot) {
  std::mt19937_64 rng(std::random_device{}());
  for (const Sha256Impl impl : runnable_impls()) {
    for (size_t len : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 1000, 4097}) {
      const auto data = random_bytes(rng, len);
      const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
      EXPECT_EQ(hash_in_pieces(impl, data, rng), sha256_hex(text, impl))
          << sha256_impl_name(impl) << " length " << len;
    }
  }
}

TEST(Sha256, AutoPicksShaNiWhenAvailable) {
  const Sha256 h;
  EXPECT_EQ(h.impl(), sha256_ni_available() ? Sha256Impl::kShaNi : Sha256Impl::kPortable);
  EXPECT_EQ(Sha256(Sha256Impl::kPortable).impl(), Sha256Impl::kPortable);
}

// Agrees with coreutils' sha256sum on a random file, with each implementation.
TEST(Sha256, MatchesSha256sum) {
  std::mt19937_64 rng(std::random_device{}());
  const auto path = std::filesystem::temp_directory_path() / ("fp4_sha_" + std::to_string(rng()) + ".bin");
  // More than the reader's 4 MiB chunk now and then, so a file spans several reads.
  const size_t len = rng() % 2 == 0 ? rng() % 300000 + 1 : (size_t{4} << 20) + rng() % 300000;
  std::string data(len, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary) << data;
  const std::string cmd = "sha256sum '" + path.string() + "'";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char out[65] = {};
  ASSERT_EQ(std::fread(out, 1, 64, p), 64u);
  ::pclose(p);
  for (const Sha256Impl impl : runnable_impls()) {
    EXPECT_EQ(sha256_file(path, impl), std::string(out)) << sha256_impl_name(impl);
    EXPECT_EQ(sha256_hex(data, impl), std::string(out)) << sha256_impl_name(impl);
  }
  std::filesystem::remove(path);
}

TEST(Sha256, MissingFileNamesIt) {
  try {
    sha256_file("/nonexistent/fp4/file.bin");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/fp4/file.bin"), std::string::npos);
  }
}

TEST(Sha256, UpdateAfterDigestIsAnError) {
  for (const Sha256Impl impl : runnable_impls()) {
    Sha256 h(impl);
    h.update("x");
    h.hex();
    EXPECT_THROW(h.update("y"), Error);
    EXPECT_THROW(h.hex(), Error);
  }
}

}  // namespace
}  // namespace fp4
