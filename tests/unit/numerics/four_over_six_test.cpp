// Four Over Six (RECIPES.md section 2): per 16-block the scale maps the block max to 4 or to 6, whichever
// has the lower squared error (ties -> 6), with the tensor bound 256 instead of 448.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "numerics/formats.h"
#include "numerics/quantize.h"
#include "numerics_test_util.h"

namespace fp4 {
namespace {

QuantSpec four_over_six(OuterScale outer) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.outer = outer;
  s.four_over_six = FourOverSix::kMse;
  return s;
}

std::vector<float> dequant(const Nvfp4Tensor& q) {
  std::vector<float> d(q.rows * q.cols);
  dequantize(q, d.data());
  return d;
}

// Three blocks, each with amax16 = 6 (so the tensor amax is 6):
//   S_enc = 256*6/6 = 256, S_dec = 2^-8; base = (6/6) * 256 = 256
//   s4 = E4M3(256 * 1.5 = 384) = 1.5 * 2^8 -> exponent 15, mantissa 4 -> 0x7C: grid 1.5 * {0, .5, 1, 1.5, 2,
//   3, 4} s6 = E4M3(256) -> 0x78: grid {0, .5, 1, 1.5, 2, 3, 4, 6}
// A: 4.5, 2.25 and 0.75 lie on the 4-grid only: err4 = 0, err6 = 3*.25 + 2*.0625 + 2*.0625 = 1 -> s4
// B: 1, 0.5, 2, 4 lie on the 6-grid only: err6 = 0, err4 > 0 -> s6
// C: every value lies on both grids: err4 = err6 = 0 -> tie -> s6
const float kBlockA[16] = {6, 4.5f, -4.5f, 2.25f, 0.75f, 3, 1.5f, 0, -6, 4.5f, 2.25f, -0.75f, 3, 1.5f, 6, 0};
const float kBlockB[16] = {6, 1, 0.5f, -1, 2, 4, -6, 3, 0.5f, 1.5f, 0, 2, -4, 1, 6, 0.5f};
const float kBlockC[16] = {6, 3, 1.5f, 0, -6, -3, -1.5f, 0, 6, 3, 1.5f, 0, -6, -3, -1.5f, 0};
// Codes: A under s4 is E2M1(x / 1.5); B and C under s6 are E2M1(x).
const uint8_t kCodesA[16] = {0x6, 0x5, 0xD, 0x3, 0x1, 0x4, 0x2, 0x0, 0xE, 0x5, 0x3, 0x9, 0x4, 0x2, 0x6, 0x0};
const uint8_t kCodesB[16] = {0x7, 0x2, 0x1, 0xA, 0x4, 0x6, 0xF, 0x5, 0x1, 0x3, 0x0, 0x4, 0xE, 0x2, 0x7, 0x1};
const uint8_t kCodesC[16] = {0x7, 0x5, 0x3, 0x0, 0xF, 0xD, 0xB, 0x0, 0x7, 0x5, 0x3, 0x0, 0xF, 0xD, 0xB, 0x0};

TEST(FourOverSix, HandExampleTensorScale) {
  std::vector<float> x(kBlockA, kBlockA + 16);
  x.insert(x.end(), kBlockB, kBlockB + 16);
  x.insert(x.end(), kBlockC, kBlockC + 16);
  const Nvfp4Tensor q = quantize_nvfp4(x.data(), 1, 48, four_over_six(OuterScale::kTensor), {});
  EXPECT_EQ(q.outer_scales, std::vector<float>{std::ldexp(1.0f, -8)});
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x7C, 0x78, 0x78}));
  const uint8_t* want[3] = {kCodesA, kCodesB, kCodesC};
  for (int i = 0; i < 48; ++i) EXPECT_EQ(q.code(0, i), want[i / 16][i % 16]) << i;
  EXPECT_EQ(dequant(q), x);  // all three blocks are represented exactly by the chosen grid
  // The standard quantizer (bound 448, map to 6) cannot represent block A.
  QuantSpec standard = four_over_six(OuterScale::kTensor);
  standard.four_over_six = FourOverSix::kOff;
  const std::vector<float> d = dequant(quantize_nvfp4(x.data(), 1, 48, standard, {}));
  EXPECT_NE(std::vector<float>(d.begin(), d.begin() + 16), std::vector<float>(kBlockA, kBlockA + 16));
}

TEST(FourOverSix, HandExampleBlock128Scale) {
  // amax128 = 6: s_out = 6 / 256 / 6 = 2^-8 (exact), so base = amax16 / 2^-8 / 6 as in the tensor case.
  //   A, B, C as above; D = A/2 and E = B/2 (base 128: s4 = E4M3(192) = 0x74, s6 = E4M3(128) = 0x70);
  //   a zero block (base 0: s4 = s6 = 0, tie -> 0x00); -B and -A.
  std::vector<float> x;
  auto add = [&](const float* b, float k) {
    for (int i = 0; i < 16; ++i) x.push_back(b[i] * k);
  };
  add(kBlockA, 1), add(kBlockB, 1), add(kBlockC, 1), add(kBlockA, 0.5f), add(kBlockB, 0.5f);
  x.insert(x.end(), 16, 0.0f);
  add(kBlockB, -1), add(kBlockA, -1);
  const Nvfp4Tensor q = quantize_nvfp4(x.data(), 1, 128, four_over_six(OuterScale::kBlock128), {});
  EXPECT_EQ(q.outer_scales, std::vector<float>{std::ldexp(1.0f, -8)});
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x7C, 0x78, 0x78, 0x74, 0x70, 0x00, 0x78, 0x7C}));
  const uint8_t* want[8] = {kCodesA, kCodesB, kCodesC, kCodesA, kCodesB, nullptr, kCodesB, kCodesA};
  for (int i = 0; i < 128; ++i) {
    const int b = i / 16;
    uint8_t code = b == 5 ? uint8_t{0} : want[b][i % 16];
    if (b >= 6) code ^= 0x8;  // negated blocks: sign bit flipped (0 becomes -0)
    EXPECT_EQ(q.code(0, i), code) << i;
  }
  EXPECT_EQ(dequant(q), x);
}

// The two candidates and their errors as RECIPES.md writes them, with the test's reference rounding.
struct Candidates {
  uint8_t s4, s6;
  double err4, err6;
};

float e4m3_value(int code) {
  return static_cast<float>(test::ref_e4m3_value(code));
}
float rtn(float v) {
  return test::kE2m1Grid[test::ref_e2m1_index(std::fabs(v))] * (std::signbit(v) ? -1.0f : 1.0f);
}

Candidates tensor_candidates(const float* v, float amax) {
  const float s_enc = (256.0f * 6.0f) / amax, s_dec = 1.0f / s_enc;
  float amax16 = 0.0f;
  for (int i = 0; i < 16; ++i) amax16 = std::max(amax16, std::fabs(v[i]));
  const float base = (amax16 / 6.0f) * s_enc;
  Candidates c{static_cast<uint8_t>(test::ref_e4m3_encode(std::min(base * 1.5f, 448.0f))),
               static_cast<uint8_t>(test::ref_e4m3_encode(std::min(base, 448.0f))), 0.0, 0.0};
  for (int k = 0; k < 2; ++k) {
    const uint8_t sc = k == 0 ? c.s4 : c.s6;
    const float s = e4m3_value(sc), e = std::min(1.0f / (s * s_dec), 3.40282347e38f);
    float err = 0.0f;  // FP32 sum in element order, as specified
    for (int i = 0; i < 16; ++i) {
      const float q = rtn(std::clamp(v[i] * e, -6.0f, 6.0f));
      const float d = ((q * s) * amax) / 1536.0f - v[i];
      err = err + d * d;
    }
    (k == 0 ? c.err4 : c.err6) = err;
  }
  return c;
}

Candidates block128_candidates(const float* v, float s_out) {
  float amax16 = 0.0f;
  for (int i = 0; i < 16; ++i) amax16 = std::max(amax16, std::fabs(v[i]));
  const float base = amax16 / s_out / 6.0f;
  Candidates c{static_cast<uint8_t>(test::ref_e4m3_encode(std::min(base * 1.5f, 448.0f))),
               static_cast<uint8_t>(test::ref_e4m3_encode(std::min(base, 448.0f))), 0.0, 0.0};
  for (int k = 0; k < 2; ++k) {
    const float p = e4m3_value(k == 0 ? c.s4 : c.s6) * s_out;
    float err = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const float q = p == 0.0f ? 0.0f : rtn(std::fabs(v[i]) / p);
      const float d = q * p - std::fabs(v[i]);  // |q p - |x|| = |sign(x) q p - x|
      err = err + d * d;
    }
    (k == 0 ? c.err4 : c.err6) = err;
  }
  return c;
}

// Gaussian and heavy-tailed blocks: the chosen scale is the candidate with the strictly lower error
// (ties -> s6), so the block's error never exceeds that of the other candidate.
TEST(FourOverSix, PicksTheLowerErrorCandidateOnRandomBlocks) {
  FP4_SEEDED_RNG(g);
  const int64_t rows = 64, cols = 512;
  std::student_t_distribution<float> t3(3.0f);
  for (int dist = 0; dist < 2; ++dist) {
    std::vector<float> x = test::gaussian(g, rows * cols);
    if (dist == 1)
      for (auto& v : x) v = t3(g);
    int chose4[2] = {0, 0};
    for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128}) {
      const Nvfp4Tensor q = quantize_nvfp4(x.data(), rows, cols, four_over_six(outer), {});
      const std::vector<float> d = dequant(q);
      if (outer == OuterScale::kTensor) {
        EXPECT_EQ(q.outer_scales[0], 1.0f / ((256.0f * 6.0f) / q.amax));
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / 16; ++b) {
          const float* v = &x[r * cols + b * 16];
          const Candidates c = outer == OuterScale::kTensor
                                   ? tensor_candidates(v, q.amax)
                                   : block128_candidates(v, q.outer_scale(r, b * 16));
          const uint8_t want = c.err4 < c.err6 ? c.s4 : c.s6;
          ASSERT_EQ(q.scale(r, b * 16), want)
              << "row " << r << " block " << b << " err4 " << c.err4 << " err6 " << c.err6;
          chose4[outer == OuterScale::kBlock128] += want == c.s4 && c.s4 != c.s6;
          if (outer == OuterScale::kBlock128) {
            // Here the specified error is the true dequantization error of the block.
            double err = 0.0;
            for (int i = 0; i < 16; ++i)
              err += double(d[r * cols + b * 16 + i] - v[i]) * (d[r * cols + b * 16 + i] - v[i]);
            ASSERT_LE(err, std::min(c.err4, c.err6) * (1 + 1e-5) + 1e-30);
          }
        }
    }
    // Both choices occur on such data (Four Over Six's paper: a sizeable share of blocks prefer 4).
    const int blocks = static_cast<int>(rows * cols / 16);
    EXPECT_GT(chose4[0], blocks / 20) << "distribution " << dist;
    EXPECT_LT(chose4[0], blocks * 19 / 20) << "distribution " << dist;
    EXPECT_GT(chose4[1], blocks / 20) << "distribution " << dist;
    EXPECT_LT(chose4[1], blocks * 19 / 20) << "distribution " << dist;
  }
}

}  // namespace
}  // namespace fp4
