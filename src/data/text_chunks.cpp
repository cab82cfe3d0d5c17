#include "data/text_chunks.h"

namespace fp4 {
namespace {
bool plain(char c) {
  return c >= 0x21 && c <= 0x7E;
}
}  // namespace

std::vector<std::string_view> split_for_tokenization(std::string_view text, int64_t chunk_bytes) {
  std::vector<std::string_view> pieces;
  const size_t step = chunk_bytes < 1 ? 1 : static_cast<size_t>(chunk_bytes);
  size_t start = 0;
  while (text.size() - start > step) {
    size_t cut = std::string_view::npos;
    for (size_t i = start + step; i + 1 < text.size(); ++i) {
      if (text[i] == '\n' && i > start && plain(text[i - 1]) && plain(text[i + 1])) {
        cut = i + 1;
        break;
      }
    }
    if (cut == std::string_view::npos) break;
    pieces.push_back(text.substr(start, cut - start));
    start = cut;
  }
  if (start < text.size() || pieces.empty()) pieces.push_back(text.substr(start));
  return pieces;
}

}  // namespace fp4
