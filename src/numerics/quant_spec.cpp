#include "numerics/quant_spec.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace fp4 {
namespace {

template <typename E, size_t N>
std::string name_of(E v, const std::array<std::pair<E, const char*>, N>& table) {
  for (const auto& [e, n] : table)
    if (e == v) return n;
  return "?";
}

template <typename E, size_t N>
E parse_of(const std::string& s, const std::string& field,
           const std::array<std::pair<E, const char*>, N>& table) {
  std::string known;
  for (const auto& [e, n] : table) {
    if (s == n) return e;
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  FP4_THROW(field, ": unknown value '", s, "' (expected one of: ", known, ")");
}

constexpr std::array<std::pair<QuantFormat, const char*>, 4> kFormats{{{QuantFormat::kNone, "bf16"},
                                                                       {QuantFormat::kNone, "none"},
                                                                       {QuantFormat::kNvfp4, "nvfp4"},
                                                                       {QuantFormat::kMxfp8, "mxfp8"}}};
constexpr std::array<std::pair<BlockShape, const char*>, 2> kBlocks{
    {{BlockShape::k1x16, "1x16"}, {BlockShape::k16x16, "16x16"}}};
constexpr std::array<std::pair<OuterScale, const char*>, 2> kOuters{
    {{OuterScale::kTensor, "tensor"}, {OuterScale::kBlock128, "block128"}}};
constexpr std::array<std::pair<Rounding, const char*>, 2> kRoundings{
    {{Rounding::kRtn, "rtn"}, {Rounding::kSr, "sr"}}};
constexpr std::array<std::pair<FourOverSix, const char*>, 2> kFos{
    {{FourOverSix::kOff, "off"}, {FourOverSix::kMse, "mse"}}};
constexpr std::array<std::pair<QuantSource, const char*>, 3> kSources{{{QuantSource::kOriginal, "original"},
                                                                       {QuantSource::kAligned, "aligned"},
                                                                       {QuantSource::kReuse, "reuse"}}};

}  // namespace

std::string to_string(QuantFormat v) {
  return name_of(v, kFormats);
}
std::string to_string(BlockShape v) {
  return name_of(v, kBlocks);
}
std::string to_string(OuterScale v) {
  return name_of(v, kOuters);
}
std::string to_string(Rounding v) {
  return name_of(v, kRoundings);
}
std::string to_string(FourOverSix v) {
  return name_of(v, kFos);
}
std::string to_string(QuantSource v) {
  return name_of(v, kSources);
}

QuantFormat parse_quant_format(const std::string& s, const std::string& f) {
  return parse_of(s, f, kFormats);
}
BlockShape parse_block_shape(const std::string& s, const std::string& f) {
  return parse_of(s, f, kBlocks);
}
OuterScale parse_outer_scale(const std::string& s, const std::string& f) {
  return parse_of(s, f, kOuters);
}
Rounding parse_rounding(const std::string& s, const std::string& f) {
  return parse_of(s, f, kRoundings);
}
FourOverSix parse_four_over_six(const std::string& s, const std::string& f) {
  return parse_of(s, f, kFos);
}
QuantSource parse_quant_source(const std::string& s, const std::string& f) {
  return parse_of(s, f, kSources);
}

std::string describe(const QuantSpec& s) {
  if (s.format == QuantFormat::kNone) return "bf16";
  if (s.format == QuantFormat::kMxfp8) return "mxfp8";
  std::string out = "nvfp4 " + to_string(s.block) + " " + to_string(s.outer) + " " + to_string(s.rounding);
  if (s.rht_n) out += " rht" + std::to_string(s.rht_n);
  if (s.four_over_six == FourOverSix::kMse) out += " 4/6";
  if (s.sr_headroom) out += " headroom";
  if (s.source == QuantSource::kAligned) out += " aligned";
  if (s.source == QuantSource::kReuse) out += " reuse";
  return out;
}

void validate(const QuantSpec& s, const std::string& what) {
  if (s.format != QuantFormat::kNvfp4) return;
  FP4_CHECK(s.rht_n == 0 || s.rht_n == 16 || s.rht_n == 32 || s.rht_n == 64 || s.rht_n == 128, what,
            ": rht_n must be 0, 16, 32, 64 or 128, got ", s.rht_n);
  FP4_CHECK(!(s.block == BlockShape::k16x16 && s.outer == OuterScale::kBlock128), what,
            ": 16x16 blocks need the tensor outer scale (block128 scales differ per row, so W and W^T would "
            "not quantize identically)");
  FP4_CHECK(!(s.four_over_six == FourOverSix::kMse && s.block == BlockShape::k16x16), what,
            ": four_over_six = mse is defined for 1x16 blocks only");
  FP4_CHECK(!(s.four_over_six == FourOverSix::kMse && s.sr_headroom), what,
            ": four_over_six and sr_headroom both choose the block scale; use one of them");
}

}  // namespace fp4
