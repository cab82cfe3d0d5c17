// Helpers of the CUDA quantizer tests: fresh random inputs with planted special values, device copies,
// and byte-for-byte comparison of GPU results against the CPU reference (src/numerics/quantize.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/quantize.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4::cudatest {

// A fresh seed per run, or FP4_TEST_SEED to replay a failure.
inline uint64_t test_seed() {
  if (const char* s = std::getenv("FP4_TEST_SEED")) return std::stoull(s);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline std::string seed_note(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay with FP4_TEST_SEED=" + std::to_string(seed) + ")";
}

// "[rows x cols] " (snprintf: g++ 12 warns falsely on chains of std::string operator+ with literals).
inline std::string shape_tag(int64_t rows, int64_t cols) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "[%lld x %lld] ", static_cast<long long>(rows),
                static_cast<long long>(cols));
  return buf;
}

inline const char* io_name(QuantIoType t) {
  return t == QuantIoType::kF32 ? "f32" : "bf16";
}

// A host input as the GPU sees it: FP32 values (for BF16, already rounded to BF16) and the BF16 bits.
struct HostInput {
  int64_t rows = 0, cols = 0;
  QuantIoType dtype = QuantIoType::kF32;
  std::vector<float> values;
  std::vector<uint16_t> bf16;
};

// Random matrix: per-row magnitudes from 2^-20 to 2^20, Gaussian elements, some all-zero 16-blocks, and
// (with `specials`) planted 1e30, 3e38 (the RHT can overflow it), 1e-30, FP32 subnormals, NaN and +-Inf,
// a row of tiny values and a block of subnormals.
inline HostInput random_input(std::mt19937_64& g, int64_t rows, int64_t cols, QuantIoType dtype,
                              bool specials) {
  HostInput in;
  in.rows = rows;
  in.cols = cols;
  in.dtype = dtype;
  in.values.resize(rows * cols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, exponent(g));
    for (int64_t c = 0; c < cols; ++c) in.values[r * cols + c] = normal(g) * row_scale;
  }
  for (int64_t b = 0; b < rows * cols / 16; ++b)
    if (unit(g) < 0.02)
      for (int i = 0; i < 16; ++i) in.values[b * 16 + i] = 0.0f;
  if (specials) {
    const float planted[] = {1e30f,
                             -1e30f,
                             3e38f,
                             1e-30f,
                             -1e-30f,
                             1e-40f,
                             -1e-44f,
                             1.4e-45f,
                             std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
    std::uniform_int_distribution<int64_t> pos(0, rows * cols - 1);
    const int64_t count = std::max<int64_t>(11, rows * cols / 2000);
    for (int64_t k = 0; k < count; ++k) in.values[pos(g)] = planted[k % 11];
    std::uniform_int_distribution<int64_t> row(0, rows - 1);
    const int64_t tiny_row = row(g);
    for (int64_t c = 0; c < cols; ++c) in.values[tiny_row * cols + c] = normal(g) * 1e-30f;
    const int64_t sub_block = pos(g) / 16 * 16;
    for (int i = 0; i < 16; ++i) in.values[sub_block + i] = normal(g) * 1e-41f;
  }
  if (dtype == QuantIoType::kBF16) {
    in.bf16.resize(in.values.size());
    for (size_t i = 0; i < in.values.size(); ++i) {
      in.bf16[i] = bf16_bits_rne(in.values[i]);
      in.values[i] = bf16_bits_to_float(in.bf16[i]);
    }
  }
  return in;
}

// The input on the device (FP32 or BF16 bits).
class DeviceCopy {
 public:
  explicit DeviceCopy(const HostInput& in) : rows_(in.rows), cols_(in.cols), dtype_(in.dtype) {
    if (in.dtype == QuantIoType::kF32) {
      f32_ = DeviceBuffer<float>(in.values.size());
      f32_.upload(in.values.data(), in.values.size());
    } else {
      bf16_ = DeviceBuffer<uint16_t>(in.bf16.size());
      bf16_.upload(in.bf16.data(), in.bf16.size());
    }
  }
  DeviceInput input() const {
    DeviceInput x;
    x.data = dtype_ == QuantIoType::kF32 ? static_cast<const void*>(f32_.data()) : bf16_.data();
    x.dtype = dtype_;
    x.rows = rows_;
    x.cols = cols_;
    return x;
  }

 private:
  int64_t rows_, cols_;
  QuantIoType dtype_;
  DeviceBuffer<float> f32_;
  DeviceBuffer<uint16_t> bf16_;
};

// The operand a quantizer sees: x with spec's RHT on every segment (as quantize_cpu.cpp's transformed()).
inline std::vector<float> transformed_operand(const std::vector<float>& x, const QuantSpec& spec,
                                              const QuantRandomness& rnd) {
  std::vector<float> t = x;
  if (spec.rht_n > 0)
    for (size_t i = 0; i < t.size(); i += spec.rht_n) rht_segment_n(&t[i], rnd.signs);
  return t;
}

inline std::vector<float> transpose(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// Mismatch counts of one GPU operand against the reference, with the first difference described.
struct Diff {
  int64_t codes = 0, scales = 0, outer = 0, nonfinite = 0, dequant = 0;
  std::string first;

  int64_t total() const { return codes + scales + outer + nonfinite + dequant; }
  void note(const std::string& what) {
    if (first.empty()) first = what;
  }
  void add(const Diff& o) {
    codes += o.codes, scales += o.scales, outer += o.outer, nonfinite += o.nonfinite, dequant += o.dequant;
    if (first.empty()) first = o.first;
  }
  std::string summary() const {
    if (total() == 0) return "identical";
    return "codes " + std::to_string(codes) + ", scales " + std::to_string(scales) + ", outer " +
           std::to_string(outer) + ", nonfinite " + std::to_string(nonfinite) + ", dequant " +
           std::to_string(dequant) + " differ; first: " + first;
  }
};

// Codes, scales and outer scales byte for byte. The one allowance: the sign bit of an element whose
// transformed value is NaN. IEEE leaves the sign of a NaN produced by arithmetic (inf - inf in the RHT)
// open; x86 gives -NaN, CUDA +NaN, and the block128 encoder copies that sign into the code. Such blocks
// carry the NaN scale (0x7F), which the scale comparison checks exactly.
inline Diff compare_nvfp4(const Nvfp4Tensor& want, const Nvfp4Tensor& got,
                          const std::vector<float>& operand) {
  Diff d;
  const int64_t n = want.rows * want.cols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / want.cols, c = i % want.cols;
    const uint8_t cw = want.code(r, c), cg = got.code(r, c);
    const uint8_t mask = is_nan_f(operand[i]) ? 0x7 : 0xF;
    if ((cw ^ cg) & mask) {
      if (d.codes++ == 0)
        d.note("code (" + std::to_string(r) + ", " + std::to_string(c) + "): want " + std::to_string(cw) +
               " got " + std::to_string(cg) + " (operand " + std::to_string(operand[i]) + ")");
    }
  }
  for (size_t i = 0; i < want.scales.size(); ++i)
    if (want.scales[i] != got.scales[i] && d.scales++ == 0)
      d.note("scale " + std::to_string(i) + ": want " + std::to_string(want.scales[i]) + " got " +
             std::to_string(got.scales[i]));
  if (want.outer_scales.size() != got.outer_scales.size()) {
    d.outer += 1;
    d.note("outer scale count differs");
  } else {
    for (size_t i = 0; i < want.outer_scales.size(); ++i)
      if (float_bits(want.outer_scales[i]) != float_bits(got.outer_scales[i]) && d.outer++ == 0) {
        char buf[128];
        std::snprintf(buf, sizeof(buf), "outer %zu: want %a got %a", i, want.outer_scales[i],
                      got.outer_scales[i]);
        d.note(buf);
      }
  }
  return d;
}

inline void compare_nonfinite(uint64_t want, uint64_t got, Diff& d) {
  if (want != got) {
    d.nonfinite += 1;
    d.note("nonfinite count: want " + std::to_string(want) + " got " + std::to_string(got));
  }
}

// The device MXFP8 codes and scales of an operand against the CPU reference's, counted into d (the first
// mismatch of each noted).
inline void compare_mxfp8(const Mxfp8Tensor& want, const DeviceBuffer<uint8_t>& codes,
                          const DeviceBuffer<uint8_t>& scales, Diff& d) {
  const auto n = static_cast<int64_t>(want.codes.size());
  std::vector<uint8_t> got_codes(static_cast<size_t>(n)), got_scales(static_cast<size_t>(n / 32));
  codes.download(got_codes.data(), got_codes.size());
  scales.download(got_scales.data(), got_scales.size());
  for (int64_t i = 0; i < n; ++i)
    if (got_codes[i] != want.codes[i] && d.codes++ == 0)
      d.note("code " + std::to_string(i) + ": want " + std::to_string(want.codes[i]) + " got " +
             std::to_string(got_codes[i]));
  for (int64_t i = 0; i < n / 32; ++i)
    if (got_scales[i] != want.scales[i] && d.scales++ == 0)
      d.note("scale " + std::to_string(i) + ": want " + std::to_string(want.scales[i]) + " got " +
             std::to_string(got_scales[i]));
}

// Dequantized values bit for bit; NaN matches NaN (its payload and sign are platform-dependent).
inline void compare_f32(const std::vector<float>& want, const std::vector<float>& got, Diff& d) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (is_nan_f(want[i]) && is_nan_f(got[i])) continue;
    if (float_bits(want[i]) != float_bits(got[i]) && d.dequant++ == 0) {
      char buf[128];
      std::snprintf(buf, sizeof(buf), "dequant %zu: want %a got %a", i, want[i], got[i]);
      d.note(buf);
    }
  }
}

inline void compare_bf16(const std::vector<uint16_t>& want, const std::vector<uint16_t>& got, Diff& d) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (is_nan_f(bf16_bits_to_float(want[i])) && is_nan_f(bf16_bits_to_float(got[i]))) continue;
    if (want[i] != got[i] && d.dequant++ == 0)
      d.note("bf16 dequant " + std::to_string(i) + ": want " + std::to_string(want[i]) + " got " +
             std::to_string(got[i]));
  }
}

// A device value read back (synchronous).
template <typename T>
T read_back(const DeviceBuffer<T>& b) {
  T v{};
  b.download(&v, 1);
  return v;
}

inline QuantSpec nvfp4_spec(BlockShape block, OuterScale outer, Rounding rounding, int rht_n, bool fos,
                            QuantSource source = QuantSource::kOriginal) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = block;
  s.outer = outer;
  s.rounding = rounding;
  s.rht_n = rht_n;
  s.four_over_six = fos ? FourOverSix::kMse : FourOverSix::kOff;
  s.source = source;
  return s;
}

// Random signs and SR stream of one quantizer call.
inline QuantRandomness randomness(std::mt19937_64& g, int rht_n) {
  QuantRandomness r;
  r.sr.seed = g();
  r.sr.stream = g();
  r.signs = rht_signs_from_seed(RngStream{g(), g()}, rht_n == 0 ? 16 : rht_n);
  return r;
}

// Whether the CPU reference accepts the spec on this shape (validate + check_nvfp4_shape).
inline bool shape_ok(int64_t rows, int64_t cols, const QuantSpec& spec) {
  try {
    validate(spec, "test");
    check_nvfp4_shape(rows, cols, spec, "test");
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace fp4::cudatest
