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
  uint16_t *x4, *x8;       // BF16 [n x p4], [n x p8]: the gathered input columns
  float *w4, *w8;          // FP32 [out x p4], [out x p8]: the gathered master columns
  uint16_t* x4_hat;        // BF16 [n x p4]: dequant(Q1), the GEMM operand
  float* w4_hat;           // [out x p4]
  float *x8_hat, *w8_hat;  // [n x p8], [out x p8]
  Packed q1, q2;
  uint8_t *x8_codes, *x8_scales, *w8_codes, *w8_scales;
  uint16_t *x_cat, *w_cat;  // BF16 [n x (p4 + p8)], [out x (p4 + p8)]
  float *w_hat, *w_hat_t;   // [out x in], [in x out]
};

template <typename D>
Forward carve_forward(uint8_t* base, const D& d, const LinearPolicy& p, size_t* bytes) {
  Carver c(base);
  Forward f{};
  const auto sz = [](int64_t a, int64_t b) { return static_cast<size_t>(a * b); };
  f.amax = c.take<float>(4);
  f.x4 = c.take<uint16_t>(sz(d.n, d.p4));
  f.x8 = c.take<uint16_t>(sz(d.n, d.p8));
  f.w4 = c.take<float>(sz(d.out, d.p4));
  f.w8 = c.take<float>(sz(d.out, d.p8));
  f.x4_hat = c.take<uint16_t>(sz(d.n, d.p4));
  f.w4_hat = c.take<float>(sz(d.out, d.p4));
  f.x8_hat = c.take<float>(sz(d.n, d.p8));
  f.w8_hat = c.take<float>(sz(d.out, d.p8));
  f.q1 = take_packed(c, d.n, d.p4, p[Operand::kQ1X]);
  f.q2 = take_packed(c, d.out, d.p4, p[Operand::kQ2W]);
  f.x8_codes = c.take<uint8_t>(sz(d.n, d.p8));
  f.x8_scales = c.take<uint8_t>(sz(d.n, d.p8 / kMxfp8Block));
  f.w8_codes = c.take<uint8_t>(sz(d.out, d.p8));
  f.w8_scales = c.take<uint8_t>(sz(d.out, d.p8 / kMxfp8Block));
  f.x_cat = c.take<uint16_t>(sz(d.n, d.p4 + d.p8));
  f.w_cat = c.take<uint16_t>(sz(d.out, d.p4 + d.p8));
  f.w_hat = c.take<float>(sz(d.out, d.in));
  f.w_hat_t = c.take<float>(sz(d.in, d.out));
  if (bytes) *bytes = c.used();
  return f;
}

// The backward's transients.
struct Backward {
  bf16 *a8, *b8, *q6_values;  // [out x pn]: MX8(dY^T) values; [k8 x pn]; [k4 x n]
  float* dw;                  // [out x in]: dW[:, C4] then dW[:, C8]
};

template <typename D>
Backward carve_backward(uint8_t* base, const D& d, size_t* bytes) {
  Carver c(base);
  Backward b{};
  const auto sz = [](int64_t a, int64_t x) { return static_cast<size_t>(a * x); };
  b.a8 = c.take<bf16>(sz(d.out, d.pn));
  b.b8 = c.take<bf16>(sz(d.k8, d.pn));
  b.q6_values = c.take<bf16>(sz(d.k4, d.n));
  b.dw = c.take<float>(sz(d.out, d.in));
  if (bytes) *bytes = c.used();
  return b;
}

// quantize_nvfp4_cuda with its tensor amax first (when the spec has one) and optional values.
void quantize(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& r,
              const Nvfp4DeviceView& out, float* amax, const DequantOutput& values, cudaStream_t s) {
  if (spec.outer == OuterScale::kTensor) amax_nvfp4_cuda(x, spec, r, amax, s);
  quantize_nvfp4_cuda(x, spec, r, out, amax, nullptr, values, s);
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

DequantOutput values_out(void* p, QuantIoType t) {
  return DequantOutput{p, t, true};
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
  constexpr QuantIoType kF32 = QuantIoType::kF32, kBF16 = QuantIoType::kBF16;

  // Both channel sets of X (BF16, as it comes: the quantizers' values are those of FP32 copies) and of the
  // master, each source read once; C4 padded to whole 128-blocks, C8 to 32.
  gather_column_sets_cuda(x, kBF16, d.n, d.in, idx_.data(), d.k4, d.p4, f.x4, d.k8, d.p8, f.x8, s);
  gather_column_sets_cuda(w_.master, kF32, d.out, d.in, idx_.data(), d.k4, d.p4, f.w4, d.k8, d.p8, f.w8, s);

  // FP4 part: Q1 of X[:, C4] with its BF16 values for the GEMM, and in training Q6 = X[:, C4]^T along n
  // from the same pass (the fused dual quantizer; its padding rows k4..p4 are zeros, never read).
  const DeviceInput x4{f.x4, kBF16, d.n, d.p4};
  const QuantRandomness r1 = rnd(QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0);
  const Nvfp4DeviceView q1v = view_of(f.q1, d.n, d.p4, q1);
  if (ctx.inference) {
    quantize(x4, q1, r1, q1v, f.amax + 0, values_out(f.x4_hat, kBF16), s);
  } else {
    ensure(q6_codes_, static_cast<size_t>(d.p4 * d.n / 2));
    ensure(q6_scales_, static_cast<size_t>(d.p4 * d.n / 16));
    ensure(q6_outer_, static_cast<size_t>(nvfp4_outer_count(d.p4, d.n, q6.outer)));
    const DualOperand rows{q1, r1, q1v, f.amax + 0, nullptr};
    const DualOperand cols{q6, rnd(QuantPurpose::kSrQ6, QuantPurpose::kRhtDw, q6.rht_n), q6_view(d.p4),
                           f.amax + 3, nullptr};
    if (q1.outer == OuterScale::kTensor || q6.outer == OuterScale::kTensor)
      amax_dual_cuda(x4, rows, cols, f.amax + 0, f.amax + 3, s);
    quantize_dual_cuda(x4, rows, cols, values_out(f.x4_hat, kBF16), s);
  }
  quantize({f.w4, kF32, d.out, d.p4}, q2, rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0),
           view_of(f.q2, d.out, d.p4, q2), f.amax + 1, values_out(f.w4_hat, kF32), s);

  // FP8 part over C8.
  const Mxfp8DeviceView x8q{f.x8_codes, f.x8_scales, d.n, d.p8}, w8q{f.w8_codes, f.w8_scales, d.out, d.p8};
  quantize_mxfp8_cuda({f.x8, kBF16, d.n, d.p8}, x8q, nullptr, s);
  quantize_mxfp8_cuda({f.w8, kF32, d.out, d.p8}, w8q, nullptr, s);
  dequantize_mxfp8_cuda(x8q, f.x8_hat, kF32, s);
  dequantize_mxfp8_cuda(w8q, f.w8_hat, kF32, s);

  // Y over both parts in one GEMM: [X4^ | X8^] [W4^ | W8^]^T.
  const int64_t kc = d.p4 + d.p8;
  concat_columns_bf16_cuda(f.x4_hat, kBF16, d.p4, f.x8_hat, kF32, d.p8, d.n, f.x_cat, s);
  concat_columns_bf16_cuda(f.w4_hat, kF32, d.p4, f.w8_hat, kF32, d.p8, d.out, f.w_cat, s);
  gemm_.gemm(false, true, n, static_cast<int>(d.out), static_cast<int>(kc), 1.0f,
             reinterpret_cast<bf16*>(f.x_cat), static_cast<int>(kc), reinterpret_cast<bf16*>(f.w_cat),
             static_cast<int>(kc), 0.0f, y, static_cast<int>(d.out), s);
  if (ctx.inference) return;  // evaluation, generation: no backward operands (Q6 and X8^T run along n)

  // Q4 from W^ in channel order (both parts), transposed.
  const int32_t* c4 = idx_.data();
  const int32_t* c8 = idx_.data() + d.k4;
  scatter_columns_cuda(f.w4_hat, d.p4, d.out, c4, d.k4, f.w_hat, d.in, false, s);
  scatter_columns_cuda(f.w8_hat, d.p8, d.out, c8, d.k8, f.w_hat, d.in, false, s);
  transpose_cuda(f.w_hat, kF32, d.out, d.in, d.in, f.w_hat_t, d.out, s);
  ensure(q4_codes_, static_cast<size_t>(d.in * d.out / 2));
  ensure(q4_scales_, static_cast<size_t>(d.in * d.out / 16));
  ensure(q4_outer_, static_cast<size_t>(nvfp4_outer_count(d.in, d.out, q4.outer)));
  quantize({f.w_hat_t, kF32, d.in, d.out}, q4, rnd(QuantPurpose::kSrQ4, QuantPurpose::kRhtDx, q4.rht_n),
           this->q4(), f.amax + 2, DequantOutput{}, s);

  // dW[:, C8]'s X operand: the forward's FP8 values re-quantized along n (padded to 32), read transposed.
  ensure(x8t_codes_, static_cast<size_t>(d.k8 * d.pn));
  ensure(x8t_scales_, static_cast<size_t>(d.k8 * d.pn / kMxfp8Block));
  quantize_mxfp8_transposed_cuda({f.x8_hat, kF32, d.n, d.p8},
                                 Mxfp8DeviceView{x8t_codes_.data(), x8t_scales_.data(), d.k8, d.pn},
                                 DequantOutput{}, nullptr, s);
}

Nvfp4DeviceView QuantLinearSplitCuda::q4() {
  const QuantSpec& q4 = p_[Operand::kQ4Wt];
  return Nvfp4DeviceView{q4_codes_.data(), q4_scales_.data(), q4_outer_.data(), d_.in,
                         d_.out,           q4.block,          q4.outer};
}

Nvfp4DeviceView QuantLinearSplitCuda::q6_view(int64_t rows) {
  const QuantSpec& q6 = p_[Operand::kQ6Xt];
  return Nvfp4DeviceView{q6_codes_.data(), q6_scales_.data(), q6_outer_.data(), rows, d_.n,
                         q6.block,         q6.outer};
}

void QuantLinearSplitCuda::backward_dw(const bf16* dy, const bf16* dyt_q5, int n, uint8_t* workspace) {
  FP4_CHECK(fwd_ws_ != nullptr && d_.n == n, "linear ", spec_.name, ": split backward over ", n,
            " rows without a matching forward");
  const Dims& d = d_;
  const Backward b = carve_backward(workspace, d, nullptr);
  const cudaStream_t s = stream_;
  const int out = static_cast<int>(d.out), in = static_cast<int>(d.in), k4 = static_cast<int>(d.k4),
            k8 = static_cast<int>(d.k8), pn = static_cast<int>(d.pn);

  // dW[:, C4] = Q5(dY^T) Q6^T over n, into the first |C4| columns of b.dw (Q6's first k4 rows are the real
  // channels).
  dequantize_nvfp4_cuda(q6_view(d.k4), values_out(b.q6_values, QuantIoType::kBF16), s);
  gemm_.gemm(false, true, out, k4, n, 1.0f, dyt_q5, n, b.q6_values, n, 0.0f, b.dw, in, s);

  // dW[:, C8] = MX8(dY^T) (no RHT; its values straight from dY, no transposed copy) times the kept FP8 X^T,
  // both along n padded to 32, into the rest.
  quantize_mxfp8_transposed_cuda({dy, QuantIoType::kBF16, d.n, d.out},
                                 Mxfp8DeviceView{nullptr, nullptr, d.out, d.pn},
                                 values_out(b.a8, QuantIoType::kBF16), nullptr, s);
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
  const QuantSpec &q1 = p_[Operand::kQ1X], &q2 = p_[Operand::kQ2W];
  const cudaStream_t s = stream_;
  SplitOperands o;
  o.q1 = fetch_nvfp4(view_of(f.q1, d.n, d.p4, q1), s);
  o.q2 = fetch_nvfp4(view_of(f.q2, d.out, d.p4, q2), s);
  o.x8 = fetch_mxfp8(f.x8_codes, f.x8_scales, d.n, d.p8, s);
  o.w8 = fetch_mxfp8(f.w8_codes, f.w8_scales, d.out, d.p8, s);
  auto* self = const_cast<QuantLinearSplitCuda*>(this);  // the views are read only here
  o.q4 = fetch_nvfp4(self->q4(), s);
  o.q6 = fetch_nvfp4(self->q6_view(d.k4), s);
  o.x8t = fetch_mxfp8(x8t_codes_.data(), x8t_scales_.data(), d.k8, d.pn, s);
  return o;
}

}  // namespace fp4::cuda
