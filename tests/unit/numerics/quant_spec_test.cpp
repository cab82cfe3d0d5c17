// QuantSpec text forms, parsing errors and validate() (numerics/quant_spec.h).
#include "numerics/quant_spec.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace fp4 {
namespace {

// Runs f, which must throw fp4::Error, and returns its message.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no fp4::Error thrown";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <typename E>
void check_field(E (*parse)(const std::string&, const std::string&), const std::vector<std::string>& valid,
                 const std::string& field) {
  for (const std::string& v : valid) {
    const E e = parse(v, field);
    EXPECT_EQ(to_string(e), v == "none" ? "bf16" : v) << field;  // "none" is an alias of bf16
  }
  for (const std::string& bad : {std::string(""), std::string("x"), " " + valid[0], valid[0] + "!"}) {
    const std::string msg = error_of([&] { parse(bad, field); });
    EXPECT_TRUE(contains(msg, field)) << msg;
    EXPECT_TRUE(contains(msg, "'" + bad + "'")) << msg;
    for (const std::string& v : valid)
      EXPECT_TRUE(contains(msg, v)) << "message should list '" << v << "': " << msg;
  }
}

TEST(QuantSpec, ParsesEveryValidStringAndNamesTheFieldOnErrors) {
  check_field(parse_quant_format, {"bf16", "none", "nvfp4", "mxfp8"}, "recipe.linear.q1.format");
  check_field(parse_block_shape, {"1x16", "16x16"}, "q2.block");
  check_field(parse_outer_scale, {"tensor", "block128"}, "q3.outer");
  check_field(parse_rounding, {"rtn", "sr"}, "q4.rounding");
  check_field(parse_four_over_six, {"off", "mse"}, "q5.four_over_six");
  check_field(parse_quant_source, {"original", "aligned", "reuse"}, "q6.source");
  const std::string msg = error_of([] { parse_block_shape("1x32", "q2.block"); });
  EXPECT_TRUE(contains(msg, "1x32")) << msg;
}

QuantSpec nvfp4() {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  return s;
}

TEST(QuantSpec, ValidateRejectsWhatCannotRun) {
  struct Case {
    QuantSpec spec;
    const char* needle;
  };
  std::vector<Case> cases;
  QuantSpec s = nvfp4();
  s.block = BlockShape::k16x16, s.outer = OuterScale::kBlock128;
  cases.push_back({s, "16x16"});
  for (int n : {-16, 1, 8, 24, 48, 256}) {
    s = nvfp4();
    s.rht_n = n;
    cases.push_back({s, "rht_n"});
  }
  s = nvfp4();
  s.four_over_six = FourOverSix::kMse, s.block = BlockShape::k16x16;
  cases.push_back({s, "four_over_six"});
  s = nvfp4();
  s.four_over_six = FourOverSix::kMse, s.sr_headroom = true;
  cases.push_back({s, "sr_headroom"});
  for (const Case& c : cases) {
    const std::string msg = error_of([&] { validate(c.spec, "layer 3 Q2"); });
    EXPECT_TRUE(contains(msg, "layer 3 Q2")) << msg;
    EXPECT_TRUE(contains(msg, c.needle)) << msg;
  }
}

// Over every combination of the fields, validate() throws exactly when one of the four rules applies.
TEST(QuantSpec, ValidateAcceptsEveryOtherCombination) {
  int accepted = 0;
  for (BlockShape block : {BlockShape::k1x16, BlockShape::k16x16})
    for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
      for (Rounding rounding : {Rounding::kRtn, Rounding::kSr})
        for (int rht : {0, 16, 32, 64, 128})
          for (FourOverSix fos : {FourOverSix::kOff, FourOverSix::kMse})
            for (QuantSource source : {QuantSource::kOriginal, QuantSource::kAligned, QuantSource::kReuse})
              for (bool headroom : {false, true}) {
                const QuantSpec s{QuantFormat::kNvfp4, block, outer, rounding, rht, fos, source, headroom};
                const bool fos_on = fos == FourOverSix::kMse;
                const bool bad = (block == BlockShape::k16x16 && outer == OuterScale::kBlock128) ||
                                 (fos_on && block == BlockShape::k16x16) || (fos_on && headroom);
                if (bad) {
                  EXPECT_THROW(validate(s, "op"), Error) << describe(s);
                } else {
                  EXPECT_NO_THROW(validate(s, "op")) << describe(s);
                  ++accepted;
                }
              }
  EXPECT_GT(accepted, 0);
}

TEST(QuantSpec, DescribeNamesEveryNonDefaultChoice) {
  EXPECT_EQ(describe(QuantSpec{}), "bf16");
  QuantSpec s;
  s.format = QuantFormat::kMxfp8;
  EXPECT_EQ(describe(s), "mxfp8");
  s = nvfp4();
  EXPECT_EQ(describe(s), "nvfp4 1x16 tensor rtn");
  EXPECT_FALSE(QuantSpec{}.quantized());
  EXPECT_TRUE(s.quantized());
  s.outer = OuterScale::kBlock128, s.rounding = Rounding::kSr, s.rht_n = 16, s.source = QuantSource::kAligned;
  EXPECT_EQ(describe(s), "nvfp4 1x16 block128 sr rht16 aligned");
  s = nvfp4();
  s.four_over_six = FourOverSix::kMse;
  EXPECT_EQ(describe(s), "nvfp4 1x16 tensor rtn 4/6");
  s = nvfp4();
  s.block = BlockShape::k16x16, s.sr_headroom = true, s.source = QuantSource::kReuse;
  EXPECT_EQ(describe(s), "nvfp4 16x16 tensor rtn headroom reuse");
}

}  // namespace
}  // namespace fp4
