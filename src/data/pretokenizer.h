// The GPT-2 pre-tokenizer: splits text into the pieces BPE runs on, with PCRE2 (UTF + UCP) and
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Invalid UTF-8 bytes match no pattern item; each run of bytes between matches becomes a piece of
// its own, so the pieces always concatenate back to the input.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace fp4 {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern (JIT when available); throws fp4::Error on failure
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Thread-safe. The pieces are views into text, in order, covering it exactly.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4
