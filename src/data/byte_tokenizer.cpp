#include "data/byte_tokenizer.h"

#include "core/error.h"

namespace fp4 {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string ByteTokenizer::token_bytes(int32_t id) const {
  FP4_CHECK(id >= 0 && id < kVocab, "byte tokenizer: token id ", id, " is outside [0, ", kVocab, ")");
  if (id == kEot) return "<|endoftext|>";
  return std::string(1, static_cast<char>(id));
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < kEot) {
      out.push_back(static_cast<char>(id));
    } else {
      out += token_bytes(id);
    }
  }
  return out;
}

}  // namespace fp4
