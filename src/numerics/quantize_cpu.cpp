// CPU reference of the tensor-level quantizers: straightforward loops over the per-block functions of
// nvfp4_block.h / mxfp8.h. Clarity over speed: this is the definition the CUDA kernels are tested against.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "numerics/formats.h"
#include "numerics/mxfp8.h"
#include "numerics/nvfp4_block.h"
#include "numerics/quantize.h"

namespace fp4 {
namespace {

float target_of(const QuantSpec& s) {
  return s.sr_headroom ? kNvfp4HeadroomTarget : kNvfp4Target;
}

// x with the RHT applied to each rht_n segment of every row (a copy; x itself when no RHT).
std::vector<float> transformed(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec,
                               const QuantRandomness& rnd) {
  std::vector<float> t(x, x + rows * cols);
  if (spec.rht_n > 0) {
    FP4_CHECK(rnd.signs.n == spec.rht_n, "quantizer: RHT signs have n=", rnd.signs.n,
              " but spec.rht_n=", spec.rht_n);
    for (int64_t i = 0; i < rows * cols; i += spec.rht_n) rht_segment_n(&t[i], rnd.signs);
  }
  return t;
}

float amax_finite(const std::vector<float>& v) {
  float m = 0.0f;
  for (float f : v)
    if (is_finite_f(f)) m = std::max(m, abs_f(f));
  return m;
}

uint32_t random_word(const QuantSpec& spec, const QuantRandomness& rnd, int64_t index) {
  return spec.rounding == Rounding::kSr ? philox_sr_word(rnd.sr, static_cast<uint64_t>(index)) : 0u;
}

void set_code(Nvfp4Tensor& q, int64_t index, uint8_t code) {
  uint8_t& b = q.codes[index >> 1];
  b = (index & 1) ? static_cast<uint8_t>((b & 0x0F) | (code << 4)) : static_cast<uint8_t>((b & 0xF0) | code);
}

void quantize_tensor_outer(const std::vector<float>& v, const QuantSpec& spec, const QuantRandomness& rnd,
                           std::optional<float> amax_given, Nvfp4Tensor& q) {
  const int64_t rows = q.rows, cols = q.cols, nblk = cols / 16;
  const bool fos = spec.four_over_six == FourOverSix::kMse;
  const bool sr = spec.rounding == Rounding::kSr;
  q.amax = amax_given ? *amax_given : amax_finite(v);
  const TensorScale ts = nvfp4_tensor_scale(q.amax, fos, target_of(spec));
  q.outer_scales = {ts.s_dec};

  // Scales: per 1x16 block, or per 16x16 tile written to each of its 16 rows.
  if (spec.block == BlockShape::k16x16) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
      for (int64_t b = 0; b < nblk; ++b) {
        bool bad = false;
        float amax16 = 0.0f;
        for (int64_t r = r0; r < r0 + 16; ++r)
          amax16 = max_f(amax16, amax_finite16(&v[r * cols + b * 16], bad));
        const uint8_t s = bad ? kE4m3Nan : nvfp4_scale_tensor(amax16, ts, target_of(spec));
        for (int64_t r = r0; r < r0 + 16; ++r) q.scales[r * nblk + b] = s;
      }
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nblk; ++b) {
        const float* blk = &v[r * cols + b * 16];
        bool bad = false;
        const float amax16 = amax_finite16(blk, bad);
        uint8_t s = fos ? nvfp4_scale_tensor_4o6(blk, amax16, q.amax, ts)
                        : nvfp4_scale_tensor(amax16, ts, target_of(spec));
        q.scales[r * nblk + b] = bad ? kE4m3Nan : s;
      }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nblk; ++b) {
      const float e_b = nvfp4_encode_multiplier(q.scales[r * nblk + b], ts.s_dec);
      for (int64_t i = b * 16; i < b * 16 + 16; ++i) {
        const int64_t idx = r * cols + i;
        set_code(q, idx, nvfp4_encode_tensor(v[idx], e_b, sr, random_word(spec, rnd, idx)));
      }
    }
}

void quantize_block128_outer(const std::vector<float>& v, const QuantSpec& spec, const QuantRandomness& rnd,
                             Nvfp4Tensor& q) {
  const int64_t rows = q.rows, cols = q.cols, nblk = cols / 16, nout = cols / 128;
  const bool fos = spec.four_over_six == FourOverSix::kMse;
  const bool sr = spec.rounding == Rounding::kSr;
  const float target = target_of(spec);
  q.outer_scales.assign(rows * nout, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < nout; ++o) {
      float amax128 = 0.0f;
      bool unused = false;
      for (int64_t b = 0; b < 8; ++b)
        amax128 = max_f(amax128, amax_finite16(&v[r * cols + o * 128 + b * 16], unused));
      const float s_out = nvfp4_block128_outer(amax128, fos, target);
      q.outer_scales[r * nout + o] = s_out;
      for (int64_t b = o * 8; b < o * 8 + 8; ++b) {
        const float* blk = &v[r * cols + b * 16];
        bool bad = false;
        const float amax16 = amax_finite16(blk, bad);
        uint8_t s =
            fos ? nvfp4_scale_block128_4o6(blk, amax16, s_out) : nvfp4_scale_block128(amax16, s_out, target);
        if (bad) s = kE4m3Nan;
        q.scales[r * nblk + b] = s;
        const float p = e4m3_decode(s) * s_out;
        const float e = block128_encode_multiplier(p);
        for (int64_t i = b * 16; i < b * 16 + 16; ++i) {
          const int64_t idx = r * cols + i;
          set_code(q, idx, nvfp4_encode_block128(v[idx], e, sr, random_word(spec, rnd, idx)));
        }
      }
    }
}

}  // namespace

void check_nvfp4_shape(int64_t rows, int64_t cols, const QuantSpec& spec, const char* what) {
  FP4_CHECK(rows > 0 && cols > 0, what, ": cannot quantize an empty tensor [", rows, " x ", cols, "]");
  FP4_CHECK(cols % 16 == 0, what, ": NVFP4 needs the reduction dimension to be a multiple of 16, got [", rows,
            " x ", cols, "]");
  FP4_CHECK(spec.outer != OuterScale::kBlock128 || cols % 128 == 0, what,
            ": block128 outer scales need the reduction dimension to be a multiple of 128, got [", rows,
            " x ", cols, "]");
  FP4_CHECK(spec.block != BlockShape::k16x16 || rows % 16 == 0, what,
            ": 16x16 blocks need the row count to be a multiple of 16, got [", rows, " x ", cols, "]");
  FP4_CHECK(spec.rht_n == 0 || cols % spec.rht_n == 0, what, ": RHT", spec.rht_n,
            " needs the reduction dimension to be a multiple of ", spec.rht_n, ", got [", rows, " x ", cols,
            "]");
}

Nvfp4Tensor quantize_nvfp4(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec,
                           const QuantRandomness& rnd, std::optional<float> amax) {
  validate(spec, "quantize_nvfp4");
  FP4_CHECK(spec.format == QuantFormat::kNvfp4, "quantize_nvfp4: spec format is ", to_string(spec.format));
  check_nvfp4_shape(rows, cols, spec, "quantize_nvfp4");
  const std::vector<float> v = transformed(x, rows, cols, spec, rnd);
  Nvfp4Tensor q;
  q.rows = rows;
  q.cols = cols;
  q.block = spec.block;
  q.outer = spec.outer;
  q.codes.assign(rows * cols / 2, 0);
  q.scales.assign(rows * cols / 16, 0);
  for (float f : v) q.nonfinite += is_finite_f(f) ? 0 : 1;
  if (spec.outer == OuterScale::kTensor)
    quantize_tensor_outer(v, spec, rnd, amax, q);
  else
    quantize_block128_outer(v, spec, rnd, q);
  return q;
}

float Nvfp4Tensor::value(int64_t r, int64_t c) const {
  return outer == OuterScale::kTensor ? nvfp4_decode_tensor(code(r, c), scale(r, c), outer_scales[0])
                                      : nvfp4_decode_block128(code(r, c), scale(r, c), outer_scale(r, c));
}

int64_t Nvfp4Tensor::packed_bytes() const {
  return static_cast<int64_t>(codes.size() + scales.size() + outer_scales.size() * sizeof(float));
}

void dequantize(const Nvfp4Tensor& q, float* out, bool apply_tensor_scale) {
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] = (q.outer == OuterScale::kTensor && !apply_tensor_scale)
                                ? e2m1_decode(q.code(r, c)) * e4m3_decode(q.scale(r, c))
                                : q.value(r, c);
}

void dequantize_bf16(const Nvfp4Tensor& q, uint16_t* out, bool apply_tensor_scale) {
  std::vector<float> f(q.rows * q.cols);
  dequantize(q, f.data(), apply_tensor_scale);
  for (size_t i = 0; i < f.size(); ++i) out[i] = bf16_bits_rne(f[i]);
}

float amax_nvfp4_input(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec,
                       const QuantRandomness& rnd) {
  return amax_finite(transformed(x, rows, cols, spec, rnd));
}

DualQuant quantize_dual(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec_rows,
                        const QuantRandomness& rnd_rows, const QuantSpec& spec_cols,
                        const QuantRandomness& rnd_cols) {
  FP4_CHECK(
      spec_cols.source != QuantSource::kReuse,
      "quantize_dual: source = reuse needs no second quantization (use the row-wise operand transposed)");
  DualQuant d;
  d.rows = quantize_nvfp4(x, rows, cols, spec_rows, rnd_rows);
  std::vector<float> src(rows * cols);
  if (spec_cols.source == QuantSource::kAligned)
    dequantize(d.rows, src.data());
  else
    std::memcpy(src.data(), x, sizeof(float) * rows * cols);
  std::vector<float> t(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = src[r * cols + c];
  d.cols = quantize_nvfp4(t.data(), cols, rows, spec_cols, rnd_cols);
  return d;
}

Mxfp8Tensor quantize_mxfp8(const float* x, int64_t rows, int64_t cols) {
  FP4_CHECK(rows > 0 && cols > 0 && cols % kMxfp8Block == 0,
            "quantize_mxfp8: the reduction dimension must be a positive multiple of 32, got [", rows, " x ",
            cols, "]");
  Mxfp8Tensor q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(rows * cols);
  q.scales.resize(rows * cols / kMxfp8Block);
  for (int64_t b = 0; b < rows * cols / kMxfp8Block; ++b) {
    const float* blk = x + b * kMxfp8Block;
    float amax = 0.0f;
    bool bad = false;
    for (int i = 0; i < kMxfp8Block; ++i) {
      if (is_finite_f(blk[i]))
        amax = max_f(amax, abs_f(blk[i]));
      else
        bad = true, ++q.nonfinite;
    }
    const uint8_t s = bad ? uint8_t{0xFF} : mxfp8_scale_code(amax);
    q.scales[b] = s;
    for (int i = 0; i < kMxfp8Block; ++i) q.codes[b * kMxfp8Block + i] = mxfp8_encode(blk[i], s);
  }
  return q;
}

float Mxfp8Tensor::value(int64_t r, int64_t c) const {
  return mxfp8_decode(codes[r * cols + c], scales[(r * cols + c) / kMxfp8Block]);
}

void dequantize(const Mxfp8Tensor& q, float* out) {
  for (int64_t i = 0; i < q.rows * q.cols; ++i) out[i] = mxfp8_decode(q.codes[i], q.scales[i / kMxfp8Block]);
}

int64_t cublaslt_scale_offset(int64_t r, int64_t c, int64_t scale_cols) {
  const int64_t col_tiles = (scale_cols + 3) / 4;
  const int64_t tile = (r / 128) * col_tiles + c / 4;
  return tile * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

std::vector<uint8_t> to_cublaslt_scale_layout(const uint8_t* scales, int64_t rows, int64_t scale_cols) {
  const int64_t prow = (rows + 127) / 128 * 128, pcol = (scale_cols + 3) / 4 * 4;
  std::vector<uint8_t> out(prow * pcol, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < scale_cols; ++c)
      out[cublaslt_scale_offset(r, c, scale_cols)] = scales[r * scale_cols + c];
  return out;
}

}  // namespace fp4
