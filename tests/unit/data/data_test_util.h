// Helpers shared by the data tests: temp directories, fresh random seeds, a hand-made BPE.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../error_of.h"
#include "core/error.h"
#include "data/byte_unicode.h"

namespace fp4::testing {

// A fresh directory under the system temp dir, removed when the object goes.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "fp4_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    if (info != nullptr) name += std::string("_") + info->name();
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A seed that differs on every run, reported with SCOPED_TRACE so a failure can be replayed.
inline uint64_t fresh_seed() {
  return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

inline std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Text mixing words, spaces, newlines, digits, punctuation, contractions and multi-byte letters.
inline std::string random_text(std::mt19937_64& rng, size_t words) {
  static const std::vector<std::string> kParts = {
      "the",  "cat",   "dog", "Hello", "world", "'s", "'ll", "'ve",  " ",   "  ",
      "\n",   "\n\n",  "\t",  "123",   "4",     "!",  "?!",  "...",  "(x)", "héllo",
      "日本", "naïve", "ok",  "a",     "b",     "ab", "abc", "\r\n", " \n", "--"};
  std::string s;
  for (size_t i = 0; i < words; ++i) {
    s += kParts[rng() % kParts.size()];
    if (rng() % 3 == 0) s += ' ';
  }
  return s;
}

// A byte-level vocabulary: the 256 single bytes (ids 0..255 in byte order) plus merged tokens in
// merge order, as vocabulary strings. merges are given as raw-byte pairs.
struct HandBpe {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // vocabulary strings
};

inline HandBpe make_hand_bpe(const std::vector<std::pair<std::string, std::string>>& raw_merges,
                             bool with_eot = false) {
  HandBpe h;
  for (int b = 0; b < 256; ++b)
    h.vocab.emplace_back(bytes_to_vocab_string(std::string(1, static_cast<char>(b))), b);
  std::vector<std::string> have;
  for (const auto& [a, b] : raw_merges) {
    std::string merged = bytes_to_vocab_string(a + b);
    bool known = false;
    for (const auto& [t, id] : h.vocab) known = known || t == merged;
    if (!known) h.vocab.emplace_back(merged, static_cast<int32_t>(h.vocab.size()));
    h.merges.emplace_back(bytes_to_vocab_string(a), bytes_to_vocab_string(b));
  }
  if (with_eot) h.vocab.emplace_back("<|endoftext|>", static_cast<int32_t>(h.vocab.size()));
  return h;
}

}  // namespace fp4::testing
