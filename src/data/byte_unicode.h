// GPT-2's reversible byte <-> unicode map: printable Latin-1 bytes stand for themselves, the other
// 68 bytes map to U+0100.. in byte order, so every byte string is a printable vocabulary string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp4 {

// The code point standing for byte b.
char32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or nullopt when it stands for none.
std::optional<uint8_t> codepoint_to_byte(char32_t cp);

// Raw bytes -> the UTF-8 vocabulary string (e.g. " world" -> "Ġworld").
std::string bytes_to_vocab_string(std::string_view bytes);
// Vocabulary string -> raw bytes; nullopt when it is not valid UTF-8 or holds a code point that
// stands for no byte.
std::optional<std::string> vocab_string_to_bytes(std::string_view s);

}  // namespace fp4
