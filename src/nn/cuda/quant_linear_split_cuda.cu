#include <algorithm>

#include "core/error.h"
#include "nn/cuda/quant_linear_split_cuda.h"
#include "numerics/mxfp8.h"
#include "ops/cuda/out_control_cuda.h"
#include "tensor/carver.h"

namespace fp4::cuda {
namespace {

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// One packed NVFP4 operand in transient storage.
struct Packed {
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
  float* outer = nullptr;
};

Packed take_packed(Carver& c, int64_t rows, int64_t cols, const QuantSpec& spec) {
  Packed p;
  p.codes = c.take<uint8_t>(static_cast<size_t>(rows * cols / 2));
  p.scales = c.take<uint8_t>(static_cast<size_t>(rows * cols / 16));
  p.outer = c.take<float>(static_cast<size_t>(nvfp4_outer_count(rows, cols, spec.outer)));
  return p;
}

Nvfp4DeviceView view_of(const Packed& p, int64_t rows, int64_t cols, const QuantSpec& spec) {
  return Nvfp4DeviceView{p.codes, p.scales, p.outer, rows, cols, spec.block, spec.outer};
}

// The forward's transients, in one order.
struct Forward {
  float* amax;
  float *x4, *w4, *x4_hat, *w4_hat;  // [n x p4], [out x p4]
  Packed q1, q2;
  float *x8, *w8, *x8_hat, *w8_hat;  // [n x p8], [out x p8]
  uint8_t *x8_codes, *x8_scales, *w8_codes, *w8_scales;
  uint16_t *x_cat, *w_cat;  // BF16 [n x (p4 + p8)], [out x (p4 + p8)]
  float *w_hat, *w_hat_t;   // [out x in], [in x out]
  float* x6;                // [k4 x n]
  float* x8t;               // [k8 x pn]
};

template <typename D>
Forward carve_forward(uint8_t* base, const D& d, const LinearPolicy& p, size_t* bytes) {
  Carver c(base);
  Forward f{};
  const auto sz = [](int64_t a, int64_t b) { return static_cast<size_t>(a * b); };
  f.amax = c.take<float>(4);
  f.x4 = c.take<float>(sz(d.n, d.p4));
  f.w4 = c.take<float>(sz(d.out, d.p4));
  f.x4_hat = c.take<float>(sz(d.n, d.p4));
  f.w4_hat = c.take<float>(sz(d.out, d.p4));
  f.q1 = take_packed(c, d.n, d.p4, p[Operand::kQ1X]);
  f.q2 = take_packed(c, d.out, d.p4, p[Operand::kQ2W]);
  f.x8 = c.take<float>(sz(d.n, d.p8));
  f.w8 = c.take<float>(sz(d.out, d.p8));
  f.x8_hat = c.take<float>(sz(d.n, d.p8));
  f.w8_hat = c.take<float>(sz(d.out, d.p8));
  f.x8_codes = c.take<uint8_t>(sz(d.n, d.p8));
  f.x8_scales = c.take<uint8_t>(sz(d.n, d.p8 / kMxfp8Block));
  f.w8_codes = c.take<uint8_t>(sz(d.out, d.p8));
  f.w8_scales = c.take<uint8_t>(sz(d.out, d.p8 / kMxfp8Block));
  f.x_cat = c.take<uint16_t>(sz(d.n, d.p4 + d.p8));
  f.w_cat = c.take<uint16_t>(sz(d.out, d.p4 + d.p8));
  f.w_hat = c.take<float>(sz(d.out, d.in));
  f.w_hat_t = c.take<float>(sz(d.in, d.out));
  f.x6 = c.take<float>(sz(d.k4, d.n));
  f.x8t = c.take<float>(sz(d.k8, d.pn));
  if (bytes) *bytes = c.used();
  return f;
}

// The backward's transients.
struct Backward {
  float* dyt;                       // [out x pn]
  uint8_t *dyt_codes, *dyt_scales;  // MX8 of it
  bf16 *a8, *b8, *q6_values;        // [out x pn], [k8 x pn], [k4 x n]
  float* dw;                        // [out x in]: dW[:, C4] then dW[:, C8]
};

template <typename D>
Backward carve_backward(uint8_t* base, const D& d, size_t* bytes) {
  Carver c(base);
  Backward b{};
  const auto sz = [](int64_t a, int64_t x) { return static_cast<size_t>(a * x); };
  b.dyt = c.take<float>(sz(d.out, d.pn));
  b.dyt_codes = c.take<uint8_t>(sz(d.out, d.pn));
  b.dyt_scales = c.take<uint8_t>(sz(d.out, d.pn / kMxfp8Block));
  b.a8 = c.take<bf16>(sz(d.out, d.pn));
  b.b8 = c.take<bf16>(sz(d.k8, d.pn));
  b.q6_values = c.take<bf16>(sz(d.k4, d.n));
  b.dw = c.take<float>(sz(d.out, d.in));
  if (bytes) *bytes = c.used();
  return b;
}

// quantize_nvfp4_cuda with its tensor amax first (when the spec has one) and optional FP32 values.
void quantize(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& r,
              const Nvfp4DeviceView& out, float* amax, float* values, cudaStream_t s) {
  if (spec.outer == OuterScale::kTensor) amax_nvfp4_cuda(x, spec, r, amax, s);
  quantize_nvfp4_cuda(x, spec, r, out, amax, nullptr, DequantOutput{values, QuantIoType::kF32, true}, s);
}

template <typename T>
void ensure(DeviceBuffer<T>& b, size_t n) {
  if (b.size() < n) b = DeviceBuffer<T>(n);
}

template <typename T>
std::vector<T> fetch(const T* p, size_t n, cudaStream_t s) {
  std::vector<T> v(n);
  if (n) FP4_CUDA_CHECK(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, s));
  FP4_CUDA_CHECK(cudaStreamSynchronize(s));
  return v;
}

Nvfp4Tensor fetch_nvfp4(const Nvfp4DeviceView& v, cudaStream_t s) {
  Nvfp4Tensor t;
  t.rows = v.rows;
  t.cols = v.cols;
  t.block = v.block;
  t.outer = v.outer_mode;
  t.codes = fetch(v.codes, static_cast<size_t>(v.rows * v.cols / 2), s);
  t.scales = fetch(v.scales, static_cast<size_t>(v.rows * v.cols / 16), s);
  t.outer_scales = fetch(v.outer, static_cast<size_t>(nvfp4_outer_count(v.rows, v.cols, v.outer_mode)), s);
  return t;
}

Mxfp8Tensor fetch_mxfp8(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                        cudaStream_t s) {
  Mxfp8Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.codes = fetch(codes, static_cast<size_t>(rows * cols), s);
  t.scales = fetch(scales, static_cast<size_t>(rows * cols / kMxfp8Block), s);
  return t;
}

DequantOutput bf16_values(bf16* p) {
  return DequantOutput{p, QuantIoType::kBF16, true};
}

}  // namespace

QuantLinearSplitCuda::QuantLinearSplitCuda(const LinearSpec& spec, const DeviceWeight& w, GemmRunner& gemm,
                                           cudaStream_t stream)
    : spec_(spec), w_(w), gemm_(gemm), stream_(stream), p_(spec.policy) {
  const std::string where = "linear " + spec_.name + " (recipe " + spec_.recipe_name + ")";
  FP4_CHECK(p_[Operand::kQ4Wt].source == QuantSource::kAligned, where,
            ": out_control on CUDA needs Q4 source = aligned (W^T from the assembled W^)");
  FP4_CHECK(p_[Operand::kQ6Xt].source != QuantSource::kReuse, where, ": out_control needs Q6 re-quantized");
}

QuantLinearSplitCuda::Dims QuantLinearSplitCuda::dims(const OutChannels& ch, int n) const {
  Dims d{};
  d.n = n;
  d.in = spec_.in_features;
  d.out = spec_.out_features;
  d.k8 = static_cast<int64_t>(ch.c8().size());
  d.k4 = d.in - d.k8;
  d.p4 = round_up(d.k4, 128);
  d.p8 = round_up(d.k8, kMxfp8Block);
  d.pn = round_up(d.n, kMxfp8Block);
  return d;
}

size_t QuantLinearSplitCuda::workspace_bytes(const OutChannels& ch, int n) const {
  const Dims d = dims(ch, n);
  size_t f = 0, b = 0;
  carve_forward(nullptr, d, p_, &f);
  carve_backward(nullptr, d, &b);
  return std::max(f, b);
}

void QuantLinearSplitCuda::sync_channels(const OutChannels& ch) {
  FP4_CHECK(ch.frozen() && ch.in_features() == spec_.in_features, "linear ", spec_.name,
            ": out_control state for ", ch.in_features(), " channels (frozen ", ch.frozen(), "), layer has ",
            spec_.in_features);
  if (ch.c4() == c4_ && ch.c8() == c8_ && idx_.size() > 0) return;
  c4_ = ch.c4();
  c8_ = ch.c8();
  std::vector<int32_t> idx(c4_);
  idx.insert(idx.end(), c8_.begin(), c8_.end());
  ensure(idx_, idx.size());
  FP4_CUDA_CHECK(cudaMemcpyAsync(idx_.data(), idx.data(), idx.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host vector goes out of scope
}

void QuantLinearSplitCuda::forward(const OutChannels& ch, const bf16* x, bf16* y, int n,
                                   const QuantContext& ctx, uint8_t* workspace) {
  sync_channels(ch);
  ctx_ = ctx;
  d_ = dims(ch, n);
  fwd_ws_ = workspace;
  const Dims& d = d_;
  const Forward f = carve_forward(workspace, d, p_, nullptr);
  const cudaStream_t s = stream_;
  const auto rnd = [&](QuantPurpose sr, QuantPurpose rht, int rht_n) {
    return quant_randomness(p_, ctx_, spec_.layer_id, sr, rht, rht_n);
  };
  const QuantSpec &q1 = p_[Operand::kQ1X], &q2 = p_[Operand::kQ2W], &q4 = p_[Operand::kQ4Wt],
                  &q6 = p_[Operand::kQ6Xt];
  const int32_t* c4 = idx_.data();
  const int32_t* c8 = idx_.data() + d.k4;
  constexpr QuantIoType kF32 = QuantIoType::kF32;

  // FP4 part over C4 (padded to whole 128-blocks).
  gather_columns_cuda(x, QuantIoType::kBF16, d.n, d.in, c4, d.k4, d.p4, f.x4, s);
  gather_columns_cuda(w_.master, kF32, d.out, d.in, c4, d.k4, d.p4, f.w4, s);
  quantize({f.x4, kF32, d.n, d.p4}, q1, rnd(QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0),
           view_of(f.q1, d.n, d.p4, q1), f.amax + 0, f.x4_hat, s);
  quantize({f.w4, kF32, d.out, d.p4}, q2, rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0),
           view_of(f.q2, d.out, d.p4, q2), f.amax + 1, f.w4_hat, s);

  // FP8 part over C8 (padded to 32).
  gather_columns_cuda(x, QuantIoType::kBF16, d.n, d.in, c8, d.k8, d.p8, f.x8, s);
  gather_columns_cuda(w_.master, kF32, d.out, d.in, c8, d.k8, d.p8, f.w8, s);
  const Mxfp8DeviceView x8q{f.x8_codes, f.x8_scales, d.n, d.p8}, w8q{f.w8_codes, f.w8_scales, d.out, d.p8};
  quantize_mxfp8_cuda({f.x8, kF32, d.n, d.p8}, x8q, nullptr, s);
  quantize_mxfp8_cuda({f.w8, kF32, d.out, d.p8}, w8q, nullptr, s);
  dequantize_mxfp8_cuda(x8q, f.x8_hat, kF32, s);
  dequantize_mxfp8_cuda(w8q, f.w8_hat, kF32, s);

  // Y over both parts in one GEMM: [X4^ | X8^] [W4^ | W8^]^T.
  const int64_t kc = d.p4 + d.p8;
  concat_columns_bf16_cuda(f.x4_hat, d.p4, f.x8_hat, d.p8, d.n, f.x_cat, s);
  concat_columns_bf16_cuda(f.w4_hat, d.p4, f.w8_hat, d.p8, d.out, f.w_cat, s);
  gemm_.gemm(false, true, n, static_cast<int>(d.out), static_cast<int>(kc), 1.0f,
             reinterpret_cast<bf16*>(f.x_cat), static_cast<int>(kc), reinterpret_cast<bf16*>(f.w_cat),
             static_cast<int>(kc), 0.0f, y, static_cast<int>(d.out), s);
  if (ctx.inference) return;  // evaluation, generation: no backward operands (Q6 and X8^T run along n)

  // Q4 from W^ in channel order (both parts), transposed.
  scatter_columns_cuda(f.w4_hat, d.p4, d.out, c4, d.k4, f.w_hat, d.in, false, s);
  scatter_columns_cuda(f.w8_hat, d.p8, d.out, c8, d.k8, f.w_hat, d.in, false, s);
  transpose_cuda(f.w_hat, kF32, d.out, d.in, d.in, f.w_hat_t, d.out, s);
  ensure(q4_codes_, static_cast<size_t>(d.in * d.out / 2));
  ensure(q4_scales_, static_cast<size_t>(d.in * d.out / 16));
  ensure(q4_outer_, static_cast<size_t>(nvfp4_outer_count(d.in, d.out, q4.outer)));
  quantize({f.w_hat_t, kF32, d.in, d.out}, q4, rnd(QuantPurpose::kSrQ4, QuantPurpose::kRhtDx, q4.rht_n),
           this->q4(), f.amax + 2, nullptr, s);

  // Q6 over the |C4| real channels along n: X^[:, C4] (aligned) or X[:, C4] (original).
  transpose_cuda(q6.source == QuantSource::kAligned ? f.x4_hat : f.x4, kF32, d.n, d.k4, d.p4, f.x6, d.n, s);
  ensure(q6_codes_, static_cast<size_t>(d.k4 * d.n / 2));
  ensure(q6_scales_, static_cast<size_t>(d.k4 * d.n / 16));
  ensure(q6_outer_, static_cast<size_t>(nvfp4_outer_count(d.k4, d.n, q6.outer)));
  const Nvfp4DeviceView q6v{q6_codes_.data(), q6_scales_.data(), q6_outer_.data(), d.k4, d.n,
                            q6.block,         q6.outer};
  quantize({f.x6, kF32, d.k4, d.n}, q6, rnd(QuantPurpose::kSrQ6, QuantPurpose::kRhtDw, q6.rht_n), q6v,
           f.amax + 3, nullptr, s);

  // dW[:, C8]'s X operand: the forward's FP8 values, transposed and re-quantized along n (padded to 32).
  transpose_cuda(f.x8_hat, kF32, d.n, d.k8, d.p8, f.x8t, d.pn, s);
  ensure(x8t_codes_, static_cast<size_t>(d.k8 * d.pn));
  ensure(x8t_scales_, static_cast<size_t>(d.k8 * d.pn / kMxfp8Block));
  quantize_mxfp8_cuda({f.x8t, kF32, d.k8, d.pn},
                      Mxfp8DeviceView{x8t_codes_.data(), x8t_scales_.data(), d.k8, d.pn}, nullptr, s);
}

Nvfp4DeviceView QuantLinearSplitCuda::q4() {
  const QuantSpec& q4 = p_[Operand::kQ4Wt];
  return Nvfp4DeviceView{q4_codes_.data(), q4_scales_.data(), q4_outer_.data(), d_.in,
                         d_.out,           q4.block,          q4.outer};
}

void QuantLinearSplitCuda::backward_dw(const bf16* dy, const bf16* dyt_q5, int n, uint8_t* workspace) {
  FP4_CHECK(fwd_ws_ != nullptr && d_.n == n, "linear ", spec_.name, ": split backward over ", n,
            " rows without a matching forward");
  const Dims& d = d_;
  const Backward b = carve_backward(workspace, d, nullptr);
  const cudaStream_t s = stream_;
  const QuantSpec& q6 = p_[Operand::kQ6Xt];
  const int out = static_cast<int>(d.out), in = static_cast<int>(d.in), k4 = static_cast<int>(d.k4),
            k8 = static_cast<int>(d.k8), pn = static_cast<int>(d.pn);

  // dW[:, C4] = Q5(dY^T) Q6^T over n, into the first |C4| columns of b.dw.
  const Nvfp4DeviceView q6v{q6_codes_.data(), q6_scales_.data(), q6_outer_.data(), d.k4, d.n,
                            q6.block,         q6.outer};
  dequantize_nvfp4_cuda(q6v, bf16_values(b.q6_values), s);
  gemm_.gemm(false, true, out, k4, n, 1.0f, dyt_q5, n, b.q6_values, n, 0.0f, b.dw, in, s);

  // dW[:, C8] = MX8(dY^T) (no RHT) times the kept FP8 X^T, both along n padded to 32, into the rest.
  transpose_cuda(dy, QuantIoType::kBF16, d.n, d.out, d.out, b.dyt, d.pn, s);
  const Mxfp8DeviceView dyt8{b.dyt_codes, b.dyt_scales, d.out, d.pn};
  quantize_mxfp8_cuda({b.dyt, QuantIoType::kF32, d.out, d.pn}, dyt8, nullptr, s);
  dequantize_mxfp8_cuda(dyt8, b.a8, QuantIoType::kBF16, s);
  dequantize_mxfp8_cuda(Mxfp8DeviceView{x8t_codes_.data(), x8t_scales_.data(), d.k8, d.pn}, b.b8,
                        QuantIoType::kBF16, s);
  gemm_.gemm(false, true, out, k8, pn, 1.0f, b.a8, pn, b.b8, pn, 0.0f, b.dw + k4, in, s);

  // W.grad[:, C4 then C8] += b.dw.
  scatter_columns_cuda(b.dw, d.in, d.out, idx_.data(), d.in, w_.grad, d.in, true, s);
}

size_t QuantLinearSplitCuda::kept_bytes() const {
  return q4_codes_.bytes() + q4_scales_.bytes() + q4_outer_.bytes() + q6_codes_.bytes() + q6_scales_.bytes() +
         q6_outer_.bytes() + x8t_codes_.bytes() + x8t_scales_.bytes() + idx_.bytes();
}

SplitOperands QuantLinearSplitCuda::operands() const {
  FP4_CHECK(fwd_ws_ != nullptr, "linear ", spec_.name, ": no split forward yet");
  const Dims& d = d_;
  const Forward f = carve_forward(fwd_ws_, d, p_, nullptr);
  const QuantSpec &q1 = p_[Operand::kQ1X], &q2 = p_[Operand::kQ2W], &q6 = p_[Operand::kQ6Xt];
  const cudaStream_t s = stream_;
  SplitOperands o;
  o.q1 = fetch_nvfp4(view_of(f.q1, d.n, d.p4, q1), s);
  o.q2 = fetch_nvfp4(view_of(f.q2, d.out, d.p4, q2), s);
  o.x8 = fetch_mxfp8(f.x8_codes, f.x8_scales, d.n, d.p8, s);
  o.w8 = fetch_mxfp8(f.w8_codes, f.w8_scales, d.out, d.p8, s);
  auto* self = const_cast<QuantLinearSplitCuda*>(this);  // the views are read only here
  o.q4 = fetch_nvfp4(self->q4(), s);
  o.q6 = fetch_nvfp4(Nvfp4DeviceView{self->q6_codes_.data(), self->q6_scales_.data(), self->q6_outer_.data(),
                                     d.k4, d.n, q6.block, q6.outer},
                     s);
  o.x8t = fetch_mxfp8(x8t_codes_.data(), x8t_scales_.data(), d.k8, d.pn, s);
  return o;
}

}  // namespace fp4::cuda
