#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "core/error.h"

namespace fp4 {
namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Pretokenizer::Pretokenizer() : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 in a subject matches nothing instead of failing the match.
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  FP4_CHECK(impl_->code != nullptr, "pre-tokenizer: PCRE2 cannot compile the GPT-2 pattern at offset ",
            offset, ": ", pcre2_message(err));
  // JIT is only an accelerator: when the platform lacks it the interpreter gives the same matches.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Pretokenizer::~Pretokenizer() = default;

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  FP4_CHECK(md != nullptr, "pre-tokenizer: out of memory for PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    FP4_CHECK(rc > 0, "pre-tokenizer: PCRE2 match failed at byte ", pos, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    // Every alternative consumes at least one character, so a match is never empty.
    FP4_CHECK(ov[1] > ov[0], "pre-tokenizer: empty match at byte ", ov[0]);
    if (ov[0] > pos) pieces.push_back(text.substr(pos, ov[0] - pos));  // skipped invalid bytes
    pieces.push_back(text.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
  if (pos < text.size()) pieces.push_back(text.substr(pos));
  return pieces;
}

}  // namespace fp4
