// ByteTokenizer: one token per byte (ids 0..255) plus end-of-text (id 256), vocab 257. Needs no
// files, so the tiny CPU default runs on raw text with nothing downloaded.
#pragma once

#include "data/tokenizer.h"

namespace fp4 {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEot = 256;
  static constexpr int32_t kVocab = 257;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return kVocab; }
  int32_t eot_id() const override { return kEot; }
  std::string name() const override { return "bytes"; }
};

}  // namespace fp4
