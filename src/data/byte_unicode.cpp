#include "data/byte_unicode.h"

#include <array>

namespace fp4 {
namespace {

// Bytes GPT-2 keeps as themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF.
constexpr bool keeps_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_table() {
  std::array<char32_t, 256> t{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) t[b] = keeps_itself(b) ? static_cast<char32_t>(b) : next++;
  return t;
}
constexpr std::array<char32_t, 256> kTable = make_table();

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    // The table only reaches U+0143, so three-byte forms never occur.
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

char32_t byte_to_codepoint(uint8_t b) {
  return kTable[b];
}

std::optional<uint8_t> codepoint_to_byte(char32_t cp) {
  if (cp < 0x100 && keeps_itself(cp)) return static_cast<uint8_t>(cp);
  if (cp >= 0x100 && cp < 0x100 + 68) {
    // The (cp - 0x100)-th byte that does not keep itself.
    unsigned k = cp - 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      if (!keeps_itself(b) && k-- == 0) return static_cast<uint8_t>(b);
    }
  }
  return std::nullopt;
}

std::string bytes_to_vocab_string(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, kTable[static_cast<uint8_t>(c)]);
  return out;
}

std::optional<std::string> vocab_string_to_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c0 = static_cast<uint8_t>(s[i]);
    char32_t cp;
    size_t len;
    if (c0 < 0x80) {
      cp = c0, len = 1;
    } else if ((c0 & 0xE0) == 0xC0) {
      cp = c0 & 0x1F, len = 2;
    } else if ((c0 & 0xF0) == 0xE0) {
      cp = c0 & 0x0F, len = 3;
    } else if ((c0 & 0xF8) == 0xF0) {
      cp = c0 & 0x07, len = 4;
    } else {
      return std::nullopt;
    }
    if (i + len > s.size()) return std::nullopt;
    for (size_t k = 1; k < len; ++k) {
      auto ck = static_cast<uint8_t>(s[i + k]);
      if ((ck & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (ck & 0x3F);
    }
    auto b = codepoint_to_byte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += len;
  }
  return out;
}

}  // namespace fp4
