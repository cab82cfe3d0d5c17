#include "train/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sha256_test_util.h"

namespace fp4 {
namespace {

using fp4::testing::hash_in_pieces;
using fp4::testing::random_bytes;

// Every implementation this machine can run; SHA-NI is left out only where the CPU lacks it.
std::vector<Sha256Impl> runnable_impls() {
  std::vector<Sha256Impl> out = {Sha256Impl::kPortable, Sha256Impl::kAuto};
  if (sha256_ni_available()) out.push_back(Sha256Impl::kShaNi);
  return out;
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
