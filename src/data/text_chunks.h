// Cutting a large text into pieces that tokenize independently to the same ids as the whole text.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace fp4 {

// Pieces of about chunk_bytes (or more), concatenating to text. A cut is made only right after a
// '\n' whose neighbours on both sides are printable non-space ASCII: there the GPT-2 pre-tokenizer
// always ends a piece ("\n" alone), and nothing before the cut looks past it, so encoding the
// pieces one by one gives the same ids as encoding the whole text. Text without such a place
// stays whole.
std::vector<std::string_view> split_for_tokenization(std::string_view text, int64_t chunk_bytes);

}  // namespace fp4
