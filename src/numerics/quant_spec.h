// QuantSpec: how one GEMM operand is quantized (RECIPES.md sections 2-4).
#pragma once

#include <cstdint>
#include <string>

namespace fp4 {

enum class QuantFormat : uint8_t { kNone, kNvfp4, kMxfp8 };  // kNone: the operand stays BF16
enum class BlockShape : uint8_t { k1x16, k16x16 };
enum class OuterScale : uint8_t { kTensor, kBlock128 };
enum class Rounding : uint8_t { kRtn, kSr };
enum class FourOverSix : uint8_t { kOff, kMse };
// Where a backward operand comes from: the high-precision tensor (`original`), the forward-quantized
// tensor dequantized, transposed and re-quantized (`aligned`), or the forward-quantized values themselves,
// transposed (`reuse`: only where 16x16 blocks make X^ and X^^T the same values).
enum class QuantSource : uint8_t { kOriginal, kAligned, kReuse };

struct QuantSpec {
  QuantFormat format = QuantFormat::kNone;
  BlockShape block = BlockShape::k1x16;
  OuterScale outer = OuterScale::kTensor;
  Rounding rounding = Rounding::kRtn;
  int rht_n = 0;  // 0: no random Hadamard transform; else 16, 32, 64 or 128
  FourOverSix four_over_six = FourOverSix::kOff;
  QuantSource source = QuantSource::kOriginal;
  bool sr_headroom = false;  // Quartet II: target 6*16/17 so a rounded-down scale cannot saturate

  bool quantized() const { return format != QuantFormat::kNone; }
};

// Text forms used in TOML recipes and --set overrides ("1x16", "block128", "sr", ...).
std::string to_string(QuantFormat v);
std::string to_string(BlockShape v);
std::string to_string(OuterScale v);
std::string to_string(Rounding v);
std::string to_string(FourOverSix v);
std::string to_string(QuantSource v);
std::string describe(const QuantSpec& spec);  // one line, e.g. "nvfp4 1x16 block128 sr rht16"

// Parsers throw fp4::Error naming `field` and the accepted values.
QuantFormat parse_quant_format(const std::string& s, const std::string& field);
BlockShape parse_block_shape(const std::string& s, const std::string& field);
OuterScale parse_outer_scale(const std::string& s, const std::string& field);
Rounding parse_rounding(const std::string& s, const std::string& field);
FourOverSix parse_four_over_six(const std::string& s, const std::string& field);
QuantSource parse_quant_source(const std::string& s, const std::string& field);

// Throws fp4::Error if the combination cannot be executed (e.g. rht_n not in {0,16,32,64,128},
// four_over_six with SR, 16x16 blocks with block128 outer scales). `what` names the operand.
void validate(const QuantSpec& spec, const std::string& what);

}  // namespace fp4
