#include "train/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "core/error.h"

namespace fp4 {
namespace {

// FIPS 180-4 example vectors.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundary (55, 56, 63, 64 bytes) hashed in random pieces give the
// same digest as in one piece.
TEST(Sha256, IncrementalMatchesOneShot) {
  std::mt19937_64 rng(std::random_device{}());
  for (size_t len : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 1000, 4097}) {
    std::string data(len, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    Sha256 h;
    size_t pos = 0;
    while (pos < len) {
      const size_t n = std::min(len - pos, static_cast<size_t>(rng() % 80));
      h.update(std::string_view(data).substr(pos, n));
      pos += n;
    }
    EXPECT_EQ(h.hex(), sha256_hex(data)) << "length " << len;
  }
}

// Agrees with coreutils' sha256sum on a random file.
TEST(Sha256, MatchesSha256sum) {
  std::mt19937_64 rng(std::random_device{}());
  const auto path = std::filesystem::temp_directory_path() / ("fp4_sha_" + std::to_string(rng()) + ".bin");
  std::string data(static_cast<size_t>(rng() % 300000 + 1), '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary) << data;
  const std::string cmd = "sha256sum '" + path.string() + "'";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char out[65] = {};
  ASSERT_EQ(std::fread(out, 1, 64, p), 64u);
  ::pclose(p);
  EXPECT_EQ(sha256_file(path), std::string(out));
  EXPECT_EQ(sha256_file(path), sha256_hex(data));
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
  Sha256 h;
  h.update("x");
  h.hex();
  EXPECT_THROW(h.update("y"), Error);
}

}  // namespace
}  // namespace fp4
