// Tests of the RMSNorm, QK-norm + RoPE and SwiGLU kernels (ops/cuda/{rmsnorm,rope,swiglu}_cuda.h) against
// FP64 references written here, on fresh random inputs: the vectorized widths (512, 1024, 2048, and 200 /
// 96 with idle lanes), the general paths (widths not a multiple of 8 or above 2048, heads not a multiple
// of 16 columns, rows not 16-byte aligned), odd and ragged row counts, many rows per warp. Outputs and
// the scratch are poisoned with NaN first, so anything left unwritten fails; each element is checked
// against a bound from BF16 output rounding plus FP32 arithmetic on the magnitudes involved.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/swiglu_cuda.h"

namespace fp4::cuda {
namespace {

constexpr double kBf16Rel = 1.0 / 256;  // half an ulp of an 8-bit significand, relative
constexpr double kF32Rel = 1e-5;        // FP32 sums of up to a few thousand terms, relative to their size

uint32_t new_seed() {
  static std::random_device device;
  return device();
}

std::vector<float> gaussian(std::mt19937& rng, size_t count, float stddev = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// Values exactly representable in BF16 (what a BF16 input holds).
std::vector<float> bf16_exact(std::vector<float> v) {
  for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
  return v;
}

std::vector<bf16> as_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

std::vector<float> as_f32(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}
std::vector<float> as_f32(std::vector<float> v) {
  return v;
}

// Device array of `count` elements starting `offset` elements into its allocation: an offset of 2 makes
// every row start off the 16-byte grid, which sends the kernels down their general paths.
template <typename T>
class DevArray {
 public:
  explicit DevArray(size_t count, size_t offset = 0) : buf_(count + offset), offset_(offset), count_(count) {}
  DevArray(const std::vector<T>& host, size_t offset = 0) : DevArray(host.size(), offset) { set(host); }
  T* p() { return buf_.data() + offset_; }
  void set(const std::vector<T>& host) {
    FP4_CUDA_CHECK(cudaMemcpy(p(), host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() { FP4_CUDA_CHECK(cudaMemset(p(), 0xFF, count_ * sizeof(T))); }  // NaN in FP32 and BF16
  std::vector<T> get() {
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    FP4_CUDA_CHECK(cudaMemcpy(host.data(), p(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  DeviceBuffer<T> buf_;
  size_t offset_, count_;
};

// Reference values with a per-element error bound.
struct Expect {
  std::vector<double> want, tol;
  explicit Expect(size_t count = 0) : want(count), tol(count) {}
};

// Every got[i] within tol[i] of want[i] (a NaN fails); reports the count and the first miss.
void expect_within(const std::vector<float>& got, const Expect& e, const std::string& what) {
  ASSERT_EQ(got.size(), e.want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(static_cast<double>(got[i]) - e.want[i]) <= e.tol[i])) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off; first at " << first
                     << ": got " << got[first] << ", want " << e.want[first] << " +- " << e.tol[first];
}

// Columns [c0, c0 + w) of each row of a [rows][ld] matrix.
template <typename T>
std::vector<T> cols(const std::vector<T>& m, int rows, int ld, int c0, int w) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(rows) * w);
  for (int r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + static_cast<int64_t>(r) * ld + c0,
               m.begin() + static_cast<int64_t>(r) * ld + c0 + w);
  return out;
}

// ---------------------------------------------------------------- RMSNorm references

// out = x r w (+ res), r = 1/sqrt(mean(x^2) + eps), for rows [n][c] of stride ld.
struct NormForwardRef {
  Expect out_f32, out_bf16;
  std::vector<double> rstd;
};
NormForwardRef norm_forward_ref(const std::vector<float>& x, int ld, int col0, const std::vector<float>& w,
                                const std::vector<float>* res, int n, int c, double eps) {
  NormForwardRef ref{Expect(static_cast<size_t>(n) * c), Expect(static_cast<size_t>(n) * c),
                     std::vector<double>(static_cast<size_t>(n))};
  for (int i = 0; i < n; ++i) {
    const float* xi = x.data() + static_cast<size_t>(i) * ld + col0;
    double ss = 0;
    for (int j = 0; j < c; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const double r = 1.0 / std::sqrt(ss / c + eps);
    ref.rstd[static_cast<size_t>(i)] = r;
    for (int j = 0; j < c; ++j) {
      const size_t o = static_cast<size_t>(i) * c + j;
      const double y = xi[j] * r * w[static_cast<size_t>(j)], add = res != nullptr ? (*res)[o] : 0.0;
      const double mag = std::fabs(y) + std::fabs(add);
      ref.out_f32.want[o] = ref.out_bf16.want[o] = y + add;
      ref.out_f32.tol[o] = kF32Rel * mag;
      ref.out_bf16.tol[o] = kBf16Rel * std::fabs(y + add) + kF32Rel * mag;
    }
  }
  return ref;
}

// dx = g w r - x r^3 mean(g w x) with r the given (FP32) rstd; dw = dw0 + sum_rows g x r.
struct NormBackwardRef {
  Expect dx, dw;
};
NormBackwardRef norm_backward_ref(const std::vector<float>& g, const std::vector<float>& x,
                                  const std::vector<float>& w, const std::vector<float>& rstd,
                                  const std::vector<float>& dw0, int n, int c, bool dx_bf16) {
  NormBackwardRef ref{Expect(static_cast<size_t>(n) * c), Expect(static_cast<size_t>(c))};
  std::vector<double> dw_mag(static_cast<size_t>(c), 0.0);
  for (int j = 0; j < c; ++j) ref.dw.want[static_cast<size_t>(j)] = dw0[static_cast<size_t>(j)];
  for (int i = 0; i < n; ++i) {
    const size_t row = static_cast<size_t>(i) * c;
    const double r = rstd[static_cast<size_t>(i)];
    double dot = 0, dot_mag = 0;
    for (int j = 0; j < c; ++j) {
      const double t = static_cast<double>(g[row + j]) * w[static_cast<size_t>(j)] * x[row + j];
      dot += t;
      dot_mag += std::fabs(t);
    }
    const double k = dot / c * r * r * r, k_mag = dot_mag / c * r * r * r;
    for (int j = 0; j < c; ++j) {
      const double gw = static_cast<double>(g[row + j]) * w[static_cast<size_t>(j)], xv = x[row + j];
      const double v = gw * r - xv * k, mag = std::fabs(gw * r) + std::fabs(xv) * k_mag;
      ref.dx.want[row + j] = v;
      ref.dx.tol[row + j] = (dx_bf16 ? kBf16Rel * std::fabs(v) : 0.0) + kF32Rel * mag;
      ref.dw.want[static_cast<size_t>(j)] += g[row + j] * xv * r;
      dw_mag[static_cast<size_t>(j)] += std::fabs(g[row + j] * xv * r);
    }
  }
  for (int j = 0; j < c; ++j)
    ref.dw.tol[static_cast<size_t>(j)] =
        2 * kF32Rel * (dw_mag[static_cast<size_t>(j)] + std::fabs(dw0[static_cast<size_t>(j)]));
  return ref;
}

Expect exact_rstd(const std::vector<double>& rstd) {
  Expect e(rstd.size());
  for (size_t i = 0; i < rstd.size(); ++i) {
    e.want[i] = rstd[i];
    e.tol[i] = kF32Rel * rstd[i];
  }
  return e;
}

std::string shape_name(int n, int c, size_t offset) {
  return "n=" + std::to_string(n) + " c=" + std::to_string(c) + (offset > 0 ? " (misaligned rows)" : "");
}

struct NormShape {
  int n, c;
  size_t offset;  // elements of misalignment (general path) or 0
};

// Vectorized widths, widths with idle lanes (200), the general path (98: not a multiple of 8; 4096: too
// wide; misaligned rows), odd and ragged row counts, and many rows per warp (9001).
std::vector<NormShape> norm_shapes() {
  std::vector<NormShape> s;
  for (const int c : {512, 1024, 2048, 200, 98, 4096})
    for (const int n : {1, 37, 1001}) s.push_back({n, c, 0});
  s.push_back({9001, 512, 0});
  s.push_back({9001, 1024, 0});
  s.push_back({333, 512, 2});
  return s;
}

TEST(NormKernels, RmsNormForwardMatchesReference) {
  const uint32_t seed = new_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const float eps = 1e-6f;
  for (const NormShape& s : norm_shapes()) {
    SCOPED_TRACE(shape_name(s.n, s.c, s.offset));
    const size_t count = static_cast<size_t>(s.n) * s.c;
    const auto w = gaussian(rng, static_cast<size_t>(s.c), 0.2f, 1.0f);
    const auto res = gaussian(rng, count);
    DevArray<float> dw(w, s.offset), drstd(static_cast<size_t>(s.n));

    // BF16 rows with the residual, both outputs (the attention branch's norm).
    const auto x = bf16_exact(gaussian(rng, count, 3.0f));
    const auto ref = norm_forward_ref(x, s.c, 0, w, &res, s.n, s.c, eps);
    DevArray<bf16> dx(as_bf16(x), s.offset), dout16(count, s.offset);
    DevArray<float> dres(res, s.offset), dout(count, s.offset);
    dout.poison(), dout16.poison(), drstd.poison();
    rmsnorm_forward(dx.p(), dw.p(), dres.p(), dout.p(), dout16.p(), drstd.p(), s.n, s.c, eps, nullptr);
    const auto out32 = dout.get();
    expect_within(out32, ref.out_f32, "bf16 rows: FP32 output");
    expect_within(as_f32(dout16.get()), ref.out_bf16, "bf16 rows: BF16 output");
    EXPECT_EQ(as_f32(dout16.get()), bf16_exact(out32)) << "the BF16 output is the FP32 one rounded";
    expect_within(drstd.get(), exact_rstd(ref.rstd), "bf16 rows: rstd");

    // Residual read from and overwritten by the FP32 output, BF16 copy (the MLP branch's norm in place).
    DevArray<float> dinout(res, s.offset);
    dout16.poison(), drstd.poison();
    rmsnorm_forward(dx.p(), dw.p(), dinout.p(), dinout.p(), dout16.p(), drstd.p(), s.n, s.c, eps, nullptr);
    expect_within(dinout.get(), ref.out_f32, "bf16 rows, in place: FP32 output");
    expect_within(as_f32(dout16.get()), ref.out_bf16, "bf16 rows, in place: BF16 output");

    // FP32 rows without residual, BF16 output only (the final norm).
    const auto xf = gaussian(rng, count, 0.5f);
    const auto ref_f = norm_forward_ref(xf, s.c, 0, w, nullptr, s.n, s.c, eps);
    DevArray<float> dxf(xf, s.offset);
    dout16.poison(), drstd.poison();
    rmsnorm_forward(dxf.p(), dw.p(), nullptr, nullptr, dout16.p(), drstd.p(), s.n, s.c, eps, nullptr);
    expect_within(as_f32(dout16.get()), ref_f.out_bf16, "fp32 rows: BF16 output");
    expect_within(drstd.get(), exact_rstd(ref_f.rstd), "fp32 rows: rstd");

    // FP32 rows with the residual, FP32 output only.
    const auto ref_fr = norm_forward_ref(xf, s.c, 0, w, &res, s.n, s.c, eps);
    dout.poison();
    rmsnorm_forward(dxf.p(), dw.p(), dres.p(), dout.p(), nullptr, drstd.p(), s.n, s.c, eps, nullptr);
    expect_within(dout.get(), ref_fr.out_f32, "fp32 rows with residual: FP32 output");
  }
}

template <typename XT>
void check_norm_backward(std::mt19937& rng, const NormShape& s, const char* what) {
  SCOPED_TRACE(what);
  const size_t count = static_cast<size_t>(s.n) * s.c;
  const auto x = bf16_exact(gaussian(rng, count, 2.0f, 0.3f));  // exact in either row type
  const auto w = gaussian(rng, static_cast<size_t>(s.c), 0.2f, 1.0f);
  const auto g = gaussian(rng, count);
  const auto dw0 = gaussian(rng, static_cast<size_t>(s.c));
  std::vector<float> rstd(static_cast<size_t>(s.n));
  const auto fwd = norm_forward_ref(x, s.c, 0, w, nullptr, s.n, s.c, 1e-6);
  for (size_t i = 0; i < rstd.size(); ++i) rstd[i] = static_cast<float>(fwd.rstd[i]);
  constexpr bool kBf16 = std::is_same_v<XT, bf16>;
  const auto ref = norm_backward_ref(g, x, w, rstd, dw0, s.n, s.c, kBf16);

  std::vector<XT> x_dev(count);
  for (size_t i = 0; i < count; ++i) x_dev[i] = static_cast<XT>(x[i]);
  DevArray<float> dg(g, s.offset), dw(w, s.offset), drstd(rstd), ddw(dw0),
      scratch(norm_backward_scratch_floats(s.n, s.c));
  DevArray<XT> dx(x_dev, s.offset), ddx(count, s.offset);
  ddx.poison(), scratch.poison();
  rmsnorm_backward(dg.p(), dx.p(), dw.p(), drstd.p(), ddx.p(), ddw.p(), scratch.p(), s.n, s.c, nullptr);
  expect_within(as_f32(ddx.get()), ref.dx, "dx");
  const auto dw_first = ddw.get();
  expect_within(dw_first, ref.dw, "dw");

  // Same inputs again: the weight gradient is summed in a fixed order (bit for bit the same).
  ddw.set(dw0);
  scratch.poison();
  rmsnorm_backward(dg.p(), dx.p(), dw.p(), drstd.p(), ddx.p(), ddw.p(), scratch.p(), s.n, s.c, nullptr);
  const auto dw_second = ddw.get();
  EXPECT_EQ(std::memcmp(dw_first.data(), dw_second.data(), dw_first.size() * sizeof(float)), 0)
      << "dw differs between two identical calls";
}

TEST(NormKernels, RmsNormBackwardMatchesReferenceAndIsDeterministic) {
  const uint32_t seed = new_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const NormShape& s : norm_shapes()) {
    SCOPED_TRACE(shape_name(s.n, s.c, s.offset));
    check_norm_backward<bf16>(rng, s, "bf16 rows, bf16 dx");
    check_norm_backward<float>(rng, s, "fp32 rows, fp32 dx");
  }
}

TEST(NormKernels, ReducePartialsAddsColumnSumsToBothHalves) {
  const uint32_t seed = new_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const int blocks : {1, 33, 1024}) {
    for (const int width : {64, 1030}) {
      const int split = width / 2 + 1;  // uneven halves
      SCOPED_TRACE("blocks=" + std::to_string(blocks) + " width=" + std::to_string(width));
      const auto parts = gaussian(rng, static_cast<size_t>(blocks) * width);
      const auto a0 = gaussian(rng, static_cast<size_t>(split)),
                 b0 = gaussian(rng, static_cast<size_t>(width - split));
      Expect ea(a0.size()), eb(b0.size());
      for (int j = 0; j < width; ++j) {
        double s = j < split ? a0[static_cast<size_t>(j)] : b0[static_cast<size_t>(j - split)],
               mag = std::fabs(s);
        for (int b = 0; b < blocks; ++b) {
          s += parts[static_cast<size_t>(b) * width + j];
          mag += std::fabs(parts[static_cast<size_t>(b) * width + j]);
        }
        Expect& e = j < split ? ea : eb;
        const size_t k = static_cast<size_t>(j < split ? j : j - split);
        e.want[k] = s;
        e.tol[k] = kF32Rel * mag;
      }
      DevArray<float> dparts(parts), da(a0), db(b0);
      reduce_norm_partials(dparts.p(), blocks, width, split, da.p(), db.p(), nullptr);
      expect_within(da.get(), ea, "first half");
      expect_within(db.get(), eb, "second half");
    }
  }
}

// ---------------------------------------------------------------- QK-norm + RoPE

struct QkCase {
  int b, t, heads, head_dim;
  size_t offset;
};

// Vectorized (head sizes 64, 128, and 32 with idle lanes), the general path (head size 24; d = 4096;
// misaligned rows), odd row counts and many rows per warp.
std::vector<QkCase> qk_cases() {
  return {{2, 19, 8, 64, 0}, {1, 37, 8, 128, 0}, {3, 111, 16, 128, 0}, {9, 1001, 8, 64, 0},
          {5, 13, 3, 32, 0}, {2, 21, 5, 24, 0},  {1, 33, 32, 128, 0},  {3, 67, 8, 64, 2}};
}

struct Rope {
  std::vector<float> cos_t, sin_t;  // [t][head_dim / 2]
};
Rope rope_tables(int t, int head_dim, double theta) {
  const int half = head_dim / 2;
  Rope r{std::vector<float>(static_cast<size_t>(t) * half),
         std::vector<float>(static_cast<size_t>(t) * half)};
  for (int pos = 0; pos < t; ++pos)
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(theta, -2.0 * i / head_dim);
      r.cos_t[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::cos(angle));
      r.sin_t[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::sin(angle));
    }
  return r;
}

std::string qk_name(const QkCase& c) {
  return "b=" + std::to_string(c.b) + " t=" + std::to_string(c.t) + " heads=" + std::to_string(c.heads) +
         " head_dim=" + std::to_string(c.head_dim) + (c.offset > 0 ? " (misaligned rows)" : "");
}

// The expected q or k part (columns col0.. of the [n][3d] rows) after norm and rotation by +angle.
Expect qk_forward_ref(const std::vector<float>& qkv, int col0, const std::vector<float>& w, const Rope& rope,
                      const QkCase& c, double eps, std::vector<double>& rstd) {
  const int n = c.b * c.t, d = c.heads * c.head_dim, half = c.head_dim / 2;
  const auto norm = norm_forward_ref(qkv, 3 * d, col0, w, nullptr, n, d, eps);
  rstd = norm.rstd;
  Expect e(static_cast<size_t>(n) * d);
  for (int r = 0; r < n; ++r) {
    const size_t angles = static_cast<size_t>(r % c.t) * half, row = static_cast<size_t>(r) * d;
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < half; ++i) {
        const size_t a = row + static_cast<size_t>(h) * c.head_dim + i, b = a + half;
        const double ya = norm.out_f32.want[a], yb = norm.out_f32.want[b];
        const double cs = rope.cos_t[angles + i], sn = rope.sin_t[angles + i];
        const double mag = std::fabs(ya) + std::fabs(yb);
        e.want[a] = ya * cs - yb * sn;
        e.want[b] = yb * cs + ya * sn;
        e.tol[a] = kBf16Rel * std::fabs(e.want[a]) + kF32Rel * mag;
        e.tol[b] = kBf16Rel * std::fabs(e.want[b]) + kF32Rel * mag;
      }
  }
  return e;
}

TEST(NormKernels, QkNormRopeForwardMatchesReference) {
  const uint32_t seed = new_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const float eps = 1e-6f;
  for (const QkCase& c : qk_cases()) {
    SCOPED_TRACE(qk_name(c));
    const int n = c.b * c.t, d = c.heads * c.head_dim;
    const auto qkv = bf16_exact(gaussian(rng, static_cast<size_t>(n) * 3 * d, 1.5f, 0.2f));
    const auto wq = gaussian(rng, static_cast<size_t>(d), 0.2f, 1.0f),
               wk = gaussian(rng, static_cast<size_t>(d), 0.2f, 1.0f);
    const Rope rope = rope_tables(c.t, c.head_dim, 500000.0);
    std::vector<double> rq, rk;
    const Expect eq = qk_forward_ref(qkv, 0, wq, rope, c, eps, rq);
    const Expect ek = qk_forward_ref(qkv, d, wk, rope, c, eps, rk);

    DevArray<bf16> din(as_bf16(qkv), c.offset), dout(qkv.size(), c.offset);
    DevArray<float> dwq(wq), dwk(wk), dcos(rope.cos_t), dsin(rope.sin_t), drq(static_cast<size_t>(n)),
        drk(static_cast<size_t>(n));
    dout.poison(), drq.poison(), drk.poison();
    qk_norm_rope_forward(din.p(), dout.p(), dwq.p(), dwk.p(), dcos.p(), dsin.p(), drq.p(), drk.p(), n, c.t, d,
                         c.head_dim, eps, nullptr);
    const auto out = as_f32(dout.get());
    expect_within(cols(out, n, 3 * d, 0, d), eq, "q");
    expect_within(cols(out, n, 3 * d, d, d), ek, "k");
    EXPECT_EQ(cols(out, n, 3 * d, 2 * d, d), cols(qkv, n, 3 * d, 2 * d, d)) << "v is copied as it is";
    expect_within(drq.get(), exact_rstd(rq), "rstd_q");
    expect_within(drk.get(), exact_rstd(rk), "rstd_k");
  }
}

// Expected gradient for the raw q or k part from the gradient g of the rotated output: rotate g by
// -angle, then the RMSNorm backward.
NormBackwardRef qk_backward_ref(const std::vector<float>& dqkv, const std::vector<float>& qkv, int col0,
                                const std::vector<float>& w, const std::vector<float>& rstd,
                                const std::vector<float>& dw0, const Rope& rope, const QkCase& c) {
  const int n = c.b * c.t, d = c.heads * c.head_dim, half = c.head_dim / 2;
  auto g = cols(dqkv, n, 3 * d, col0, d);
  const auto g_in = g;
  std::vector<double> pair_mag(g.size());  // |g_a| + |g_b| of each element's rotation pair
  for (int r = 0; r < n; ++r) {
    const size_t angles = static_cast<size_t>(r % c.t) * half, row = static_cast<size_t>(r) * d;
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < half; ++i) {
        const size_t a = row + static_cast<size_t>(h) * c.head_dim + i, b = a + half;
        const double cs = rope.cos_t[angles + i], sn = rope.sin_t[angles + i];
        g[a] = static_cast<float>(g_in[a] * cs + g_in[b] * sn);
        g[b] = static_cast<float>(g_in[b] * cs - g_in[a] * sn);
        pair_mag[a] = pair_mag[b] = std::fabs(g_in[a]) + std::fabs(g_in[b]);
      }
  }
  NormBackwardRef ref = norm_backward_ref(g, cols(qkv, n, 3 * d, col0, d), w, rstd, dw0, n, d, true);
  // The unrotated gradient is rounded to FP32 on the GPU (and here): widen dx's bound by that rounding.
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < d; ++j) {
      const size_t i = static_cast<size_t>(r) * d + j;
      ref.dx.tol[i] +=
          kF32Rel * pair_mag[i] * std::fabs(w[static_cast<size_t>(j)]) * rstd[static_cast<size_t>(r)];
    }
  return ref;
}

TEST(NormKernels, QkNormRopeBackwardMatchesReferenceAndIsDeterministic) {
  const uint32_t seed = new_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const QkCase& c : qk_cases()) {
    SCOPED_TRACE(qk_name(c));
    const int n = c.b * c.t, d = c.heads * c.head_dim;
    const size_t count = static_cast<size_t>(n) * 3 * d;
    const auto qkv = bf16_exact(gaussian(rng, count, 1.5f, 0.2f));
    const auto dqkv = bf16_exact(gaussian(rng, count));
    const auto wq = gaussian(rng, static_cast<size_t>(d), 0.2f, 1.0f),
               wk = gaussian(rng, static_cast<size_t>(d), 0.2f, 1.0f);
    const auto dwq0 = gaussian(rng, static_cast<size_t>(d)), dwk0 = gaussian(rng, static_cast<size_t>(d));
    const Rope rope = rope_tables(c.t, c.head_dim, 10000.0);
    std::vector<double> rq64, rk64;
    (void)qk_forward_ref(qkv, 0, wq, rope, c, 1e-6, rq64);
    (void)qk_forward_ref(qkv, d, wk, rope, c, 1e-6, rk64);
    const std::vector<float> rq(rq64.begin(), rq64.end()), rk(rk64.begin(), rk64.end());
    const auto ref_q = qk_backward_ref(dqkv, qkv, 0, wq, rq, dwq0, rope, c);
    const auto ref_k = qk_backward_ref(dqkv, qkv, d, wk, rk, dwk0, rope, c);

    DevArray<bf16> dx(as_bf16(qkv), c.offset), dg(as_bf16(dqkv), c.offset);
    DevArray<float> dwq(wq), dwk(wk), dcos(rope.cos_t), dsin(rope.sin_t), drq(rq), drk(rk), ddwq(dwq0),
        ddwk(dwk0), scratch(norm_backward_scratch_floats(n, 2 * d));
    scratch.poison();
    qk_norm_rope_backward(dg.p(), dx.p(), dwq.p(), dwk.p(), dcos.p(), dsin.p(), drq.p(), drk.p(), ddwq.p(),
                          ddwk.p(), scratch.p(), n, c.t, d, c.head_dim, nullptr);
    const auto got = as_f32(dg.get());
    expect_within(cols(got, n, 3 * d, 0, d), ref_q.dx, "dq");
    expect_within(cols(got, n, 3 * d, d, d), ref_k.dx, "dk");
    EXPECT_EQ(cols(got, n, 3 * d, 2 * d, d), cols(dqkv, n, 3 * d, 2 * d, d)) << "dv is left as it is";
    const auto dwq_first = ddwq.get(), dwk_first = ddwk.get();
    expect_within(dwq_first, ref_q.dw, "dw_q");
    expect_within(dwk_first, ref_k.dw, "dw_k");

    dg.set(as_bf16(dqkv)), ddwq.set(dwq0), ddwk.set(dwk0);
    scratch.poison();
    qk_norm_rope_backward(dg.p(), dx.p(), dwq.p(), dwk.p(), dcos.p(), dsin.p(), drq.p(), drk.p(), ddwq.p(),
                          ddwk.p(), scratch.p(), n, c.t, d, c.head_dim, nullptr);
    const auto dwq_second = ddwq.get(), dwk_second = ddwk.get();
    EXPECT_EQ(std::memcmp(dwq_first.data(), dwq_second.data(), dwq_first.size() * sizeof(float)), 0)
        << "dw_q differs between two identical calls";
    EXPECT_EQ(std::memcmp(dwk_first.data(), dwk_second.data(), dwk_first.size() * sizeof(float)), 0)
        << "dw_k differs between two identical calls";
  }
}

// ---------------------------------------------------------------- SwiGLU

TEST(NormKernels, SwigluForwardAndBackwardMatchReference) {
  const uint32_t seed = new_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Case {
    int n, f;
    size_t offset;
  };
  // Vectorized (f a multiple of 8), general (f = 130; misaligned rows).
  for (const Case c : {Case{1, 1024, 0}, Case{37, 1024, 0}, Case{1001, 2048, 0}, Case{333, 200, 0},
                       Case{37, 130, 0}, Case{1001, 130, 0}, Case{77, 1024, 2}}) {
    SCOPED_TRACE(shape_name(c.n, c.f, c.offset));
    const size_t out_count = static_cast<size_t>(c.n) * c.f;
    const auto gu = bf16_exact(gaussian(rng, 2 * out_count, 3.0f));
    const auto dout = bf16_exact(gaussian(rng, out_count));
    Expect e_out(out_count), e_dgu(2 * out_count);
    for (int r = 0; r < c.n; ++r)
      for (int j = 0; j < c.f; ++j) {
        const size_t o = static_cast<size_t>(r) * c.f + j, gi = static_cast<size_t>(r) * 2 * c.f + j,
                     ui = gi + static_cast<size_t>(c.f);
        const double g = gu[gi], u = gu[ui], dv = dout[o], s = 1.0 / (1.0 + std::exp(-g));
        e_out.want[o] = g * s * u;
        e_out.tol[o] = kBf16Rel * std::fabs(e_out.want[o]) + kF32Rel * std::fabs(g * u);
        e_dgu.want[gi] = dv * u * s * (1.0 + g * (1.0 - s));
        e_dgu.tol[gi] =
            kBf16Rel * std::fabs(e_dgu.want[gi]) + kF32Rel * std::fabs(dv * u) * (1.0 + std::fabs(g));
        e_dgu.want[ui] = dv * g * s;
        e_dgu.tol[ui] = kBf16Rel * std::fabs(e_dgu.want[ui]) + kF32Rel * std::fabs(dv * g);
      }
    DevArray<bf16> dgu(as_bf16(gu), c.offset), ddout(as_bf16(dout), c.offset), dout_fwd(out_count, c.offset),
        ddgu(2 * out_count, c.offset);
    dout_fwd.poison(), ddgu.poison();
    swiglu_forward(dgu.p(), dout_fwd.p(), c.n, c.f, nullptr);
    swiglu_backward(ddout.p(), dgu.p(), ddgu.p(), c.n, c.f, nullptr);
    expect_within(as_f32(dout_fwd.get()), e_out, "forward");
    expect_within(as_f32(ddgu.get()), e_dgu, "backward");
  }
}

}  // namespace
}  // namespace fp4::cuda
