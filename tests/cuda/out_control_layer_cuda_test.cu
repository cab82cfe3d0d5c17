// OutControl's layer on the device against the CPU reference (quant_linear_split.cpp): with a frozen
// channel set the split layer's quantized operands are byte-identical to the CPU layer's and its
// outputs and gradients agree within the BF16 GEMM tolerance; the device calibration sums match the
// CPU's and freeze the same channels (ties to the lower index).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "nn/cuda/quant_linear_cuda.h"
#include "nn/out_control.h"
#include "nn/quant_linear.h"
#include "numerics/formats.h"
#include "ops/cuda/cuda_stream.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using cuda::bf16;

std::vector<float> bf16_values(size_t n, std::mt19937& rng, float std) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to_bf16(d(rng));
  return v;
}

std::vector<uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16_bits_rne(v[i]);
  return b;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// `count` distinct channels of [0, in), channel 0 and in-1 among them (the edges of the gathers).
std::vector<int32_t> planted_channels(int in, int count, std::mt19937& rng) {
  std::vector<int32_t> all(static_cast<size_t>(in));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  std::vector<int32_t> out = {0, in - 1};
  out.insert(out.end(), all.begin() + 1, all.begin() + (count - 1));
  std::sort(out.begin(), out.end());
  return out;
}

// Columns idx of x [rows x cols], zero-padded to `padded` columns (the CPU split's gather).
std::vector<float> gather(const std::vector<float>& x, int64_t rows, int64_t cols,
                          const std::vector<int32_t>& idx, int64_t padded) {
  std::vector<float> out(static_cast<size_t>(rows * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < idx.size(); ++j) out[size_t(r * padded) + j] = x[size_t(r * cols + idx[j])];
  return out;
}

void expect_same_bytes(const Nvfp4Tensor& gpu, const Nvfp4Tensor& cpu, const char* what) {
  ASSERT_EQ(gpu.rows, cpu.rows) << what;
  ASSERT_EQ(gpu.cols, cpu.cols) << what;
  EXPECT_TRUE(gpu.codes == cpu.codes) << what << ": codes differ";
  EXPECT_TRUE(gpu.scales == cpu.scales) << what << ": scales differ";
  EXPECT_TRUE(gpu.outer_scales == cpu.outer_scales) << what << ": outer scales differ";
}

void expect_same_bytes(const Mxfp8Tensor& gpu, const Mxfp8Tensor& cpu, const char* what) {
  ASSERT_EQ(gpu.rows, cpu.rows) << what;
  ASSERT_EQ(gpu.cols, cpu.cols) << what;
  EXPECT_TRUE(gpu.codes == cpu.codes) << what << ": codes differ";
  EXPECT_TRUE(gpu.scales == cpu.scales) << what << ": scales differ";
}

using cuda::Stream;

// A CUDA layer on host data, uploaded once.
struct DeviceLayer {
  DeviceLayer(const LinearSpec& spec, const std::vector<float>& w, cudaStream_t stream)
      : w_master(w.size()), w_grad(w.size()), w_bf16(w.size()) {
    w_master.upload(w.data(), w.size());
    w_bf16.upload(to_bits(w).data(), w.size());
    EXPECT_EQ(cudaMemset(w_grad.data(), 0, w_grad.bytes()), cudaSuccess);
    const cuda::DeviceWeight weight{w_master.data(), reinterpret_cast<const bf16*>(w_bf16.data()),
                                    w_grad.data()};
    layer = cuda::make_quant_linear_cuda(spec, weight, gemm, stream);
    oc = dynamic_cast<cuda::OutControlLinear*>(layer.get());
    EXPECT_NE(oc, nullptr);
  }
  // y [n x out] of x [n x in] (BF16-representable host values).
  std::vector<float> forward(const std::vector<float>& x, int n, int out) {
    DeviceBuffer<uint16_t> xd(x.size()), yd(size_t(n) * out);
    xd.upload(to_bits(x).data(), x.size());
    layer->forward(reinterpret_cast<const bf16*>(xd.data()), reinterpret_cast<bf16*>(yd.data()), n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> bits(size_t(n) * out);
    yd.download(bits.data(), bits.size());
    std::vector<float> y(bits.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = bf16_bits_to_float(bits[i]);
    return y;
  }
  // dX (FP32) of dy; W.grad accumulates.
  std::vector<float> backward(const std::vector<float>& dy, int n, int in) {
    DeviceBuffer<uint16_t> dyd(dy.size());
    DeviceBuffer<float> dx(size_t(n) * in);
    dyd.upload(to_bits(dy).data(), dy.size());
    cuda::LinearGradOut gout;
    gout.f32_out = dx.data();
    layer->backward(reinterpret_cast<const bf16*>(dyd.data()), gout, n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(size_t(n) * in);
    dx.download(out.data(), out.size());
    return out;
  }
  std::vector<float> grad() const {
    std::vector<float> g(w_grad.size());
    w_grad.download(g.data(), g.size());
    return g;
  }
  DeviceBuffer<float> w_master, w_grad;
  DeviceBuffer<uint16_t> w_bf16;
  cuda::GemmRunner gemm;
  std::unique_ptr<cuda::LinearCuda> layer;
  cuda::OutControlLinear* oc = nullptr;
};

Recipe out_control_recipe() {
  return load_recipe("tetrajet-v2-base", {"out_control.enabled=true", "out_control.round_to=16",
                                          "out_control.calib_start=1", "out_control.calib_steps=2"});
}

struct Shape {
  int n, in, out, k8;
};

class OutControlCudaLayer : public ::testing::TestWithParam<Shape> {};

TEST_P(OutControlCudaLayer, SplitOperandsAreByteIdenticalAndResultsMatchTheCpuLayer) {
  const Shape sh = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed) + " in " + std::to_string(sh.in) + " k8 " +
               std::to_string(sh.k8));
  std::mt19937 rng(seed);
  const int n = sh.n, in = sh.in, out = sh.out;
  const Recipe recipe = out_control_recipe();
  const LinearPolicy& p = recipe.linear;
  OutControl registry(recipe.out_control);
  QuantContext ctx{seed, 0x305, &registry, nullptr};

  // Inputs with planted outlier channels (x40), frozen as C8.
  auto x = bf16_values(size_t(n) * in, rng, 1.0f);
  const auto w = bf16_values(size_t(out) * in, rng, 0.05f);
  const auto dy = bf16_values(size_t(n) * out, rng, 0.01f);
  const std::vector<int32_t> c8 = planted_channels(in, sh.k8, rng);
  for (int r = 0; r < n; ++r)
    for (int32_t c : c8) x[size_t(r) * in + c] = round_to_bf16(40.0f * x[size_t(r) * in + c]);

  Stream stream;
  const LinearSpec spec{"test.linear", in, out, p, recipe.name, 9, &ctx};
  DeviceLayer gpu(spec, w, stream.get());
  OutChannels* ch = gpu.oc->out_channels();
  ASSERT_NE(ch, nullptr);
  ch->restore_frozen(c8, 0.5);
  const std::vector<int32_t> c4 = ch->c4();

  QuantLinearCpu cpu(p, in, out, 9, "test.linear");
  cpu.set_out_channels(ch);
  cpu.keep_forward_values(true);
  std::vector<float> y_ref(size_t(n) * out), dx_ref(size_t(n) * in), dw_ref(size_t(out) * in, 0.0f);
  cpu.forward(x.data(), w.data(), y_ref.data(), n, ctx);

  const std::vector<float> y = gpu.forward(x, n, out);
  const cuda::SplitOperands ops = gpu.oc->split_operands();

  // Forward operands: the CPU split's quantizers on the gathered columns, and their values are the
  // CPU layer's X^ and W^ in channel order.
  const int64_t p4 = (int64_t(c4.size()) + 127) / 128 * 128, p8 = (int64_t(c8.size()) + 31) / 32 * 32;
  const auto x4 = gather(x, n, in, c4, p4), w4 = gather(w, out, in, c4, p4);
  const Nvfp4Tensor q1 =
      quantize_nvfp4(x4.data(), n, p4, p[Operand::kQ1X],
                     quant_randomness(p, ctx, 9, QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0));
  const Nvfp4Tensor q2 =
      quantize_nvfp4(w4.data(), out, p4, p[Operand::kQ2W],
                     quant_randomness(p, ctx, 9, QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0));
  const Mxfp8Tensor x8 = quantize_mxfp8(gather(x, n, in, c8, p8).data(), n, p8);
  const Mxfp8Tensor w8 = quantize_mxfp8(gather(w, out, in, c8, p8).data(), out, p8);
  expect_same_bytes(ops.q1, q1, "Q1(X[:, C4])");
  expect_same_bytes(ops.q2, q2, "Q2(W[:, C4])");
  expect_same_bytes(ops.x8, x8, "MX8(X[:, C8])");
  expect_same_bytes(ops.w8, w8, "MX8(W[:, C8])");
  {
    std::vector<float> v4(size_t(n) * p4), v8(size_t(n) * p8), u4(size_t(out) * p4), u8(size_t(out) * p8);
    dequantize(q1, v4.data());
    dequantize(x8, v8.data());
    dequantize(q2, u4.data());
    dequantize(w8, u8.data());
    const auto& xh = cpu.last_x_hat();
    const auto& wh = cpu.last_w_hat();
    for (int r = 0; r < n; ++r) {
      for (size_t j = 0; j < c4.size(); ++j) ASSERT_EQ(v4[size_t(r * p4) + j], xh[size_t(r) * in + c4[j]]);
      for (size_t j = 0; j < c8.size(); ++j) ASSERT_EQ(v8[size_t(r * p8) + j], xh[size_t(r) * in + c8[j]]);
    }
    for (int r = 0; r < out; ++r) {
      for (size_t j = 0; j < c4.size(); ++j) ASSERT_EQ(u4[size_t(r * p4) + j], wh[size_t(r) * in + c4[j]]);
      for (size_t j = 0; j < c8.size(); ++j) ASSERT_EQ(u8[size_t(r * p8) + j], wh[size_t(r) * in + c8[j]]);
    }
  }
  // Backward operands the layers keep.
  expect_same_bytes(ops.q4, cpu.saved_q4().packed(), "Q4(W^T)");
  expect_same_bytes(ops.q6, cpu.saved_q6().packed(), "Q6(X[:, C4]^T)");
  expect_same_bytes(ops.x8t, cpu.saved_x8t(), "MX8(X[:, C8]^T)");

  cpu.backward(dy.data(), dx_ref.data(), dw_ref.data(), n, false);
  const std::vector<float> dx = gpu.backward(dy, n, in);
  const std::vector<float> dw = gpu.grad();
  // dW per channel set, so the small C8 part is judged on its own.
  std::vector<float> dw8(size_t(out) * c8.size()), dw8_ref(dw8.size());
  for (int r = 0; r < out; ++r)
    for (size_t j = 0; j < c8.size(); ++j) {
      dw8[r * c8.size() + j] = dw[size_t(r) * in + c8[j]];
      dw8_ref[r * c8.size() + j] = dw_ref[size_t(r) * in + c8[j]];
    }
  const double ey = rel_err(y, y_ref), edx = rel_err(dx, dx_ref), edw = rel_err(dw, dw_ref),
               edw8 = rel_err(dw8, dw8_ref);
  std::cout << "[out_control split, in " << in << "] relative error y " << ey << ", dX " << edx << ", dW "
            << edw << ", dW[:, C8] " << edw8 << "\n";
  EXPECT_LT(ey, 1e-2);
  EXPECT_LT(edx, 2e-2);
  EXPECT_LT(edw, 2e-2);
  EXPECT_LT(edw8, 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OutControlCudaLayer,
                         ::testing::Values(Shape{256, 384, 256, 48}, Shape{256, 128, 384, 16},
                                           Shape{384, 640, 128, 64}),
                         [](const auto& info) {
                           return "in" + std::to_string(info.param.in) + "_c8_" +
                                  std::to_string(info.param.k8);
                         });

TEST(OutControlCudaCalibration, DeviceSumsMatchTheCpuSumsAndFreezeTheSameChannels) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n = 256, in = 384, out = 128;
  const Recipe recipe = out_control_recipe();  // window: steps 1 and 2
  const int count = outlier_channel_count(in, recipe.out_control.ratio, 16);
  ASSERT_EQ(count, 48);
  OutControl gpu_registry(recipe.out_control), cpu_registry(recipe.out_control);
  QuantContext ctx{seed, 0, &gpu_registry, nullptr};
  const auto w = bf16_values(size_t(out) * in, rng, 0.05f);
  Stream stream;
  DeviceLayer gpu(LinearSpec{"test.linear", in, out, recipe.linear, recipe.name, 3, &ctx}, w, stream.get());
  OutChannels* gch = gpu.oc->out_channels();
  OutChannels* cch = cpu_registry.add("test.linear", in);
  QuantLinearCpu cpu(recipe.linear, in, out, 3, "test.linear");
  cpu.set_out_channels(cch);

  // count - 1 clear outliers; then two identical columns just below them: an exact tie on both sides,
  // which the lower index must win.
  const std::vector<int32_t> planted = planted_channels(in, count + 1, rng);
  const int32_t tie_a = planted[size_t(count) - 1], tie_b = planted[size_t(count)];
  std::vector<float> y(size_t(n) * out);
  auto batch = [&] {
    auto x = bf16_values(size_t(n) * in, rng, 1.0f);
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < count - 1; ++k) {
        float& v = x[size_t(r) * in + planted[size_t(k)]];
        v = round_to_bf16(v * (8.0f + k % 5));
      }
      x[size_t(r) * in + tie_a] = round_to_bf16(3.0f * x[size_t(r) * in + tie_a]);
      x[size_t(r) * in + tie_b] = x[size_t(r) * in + tie_a];
    }
    return x;
  };

  // A forward outside the window is not measured.
  gpu.forward(batch(), n, out);
  gpu.oc->collect_out_control_sums();
  EXPECT_TRUE(gch->step_sums().empty());

  std::optional<OutControlReport> gpu_report, cpu_report;
  for (int step = 1; step <= 2; ++step) {
    gpu_registry.begin_step(step);
    cpu_registry.begin_step(step);
    for (int mb = 0; mb < 2; ++mb) {  // two micro-batches a step
      ctx.call = (uint64_t(step) << 8) | uint64_t(mb);
      const auto x = batch();
      gpu.forward(x, n, out);
      cpu.forward(x.data(), w.data(), y.data(), n, ctx);
    }
    gpu.oc->collect_out_control_sums();
    const auto gs = gch->step_sums(), cs = cch->step_sums();
    ASSERT_EQ(gs.size(), size_t(2 * in));
    ASSERT_EQ(cs.size(), gs.size());
    for (size_t i = 0; i < gs.size(); ++i) ASSERT_NEAR(gs[i], cs[i], 1e-12 * std::abs(cs[i])) << "sum " << i;
    EXPECT_EQ(gs[size_t(tie_a)], gs[size_t(tie_b)]) << "identical columns, identical device sums";
    gpu_report = gpu_registry.end_step(step);
    cpu_report = cpu_registry.end_step(step);
    ASSERT_EQ(gpu_report.has_value(), step == 2);
  }
  ASSERT_TRUE(gch->frozen() && cch->frozen());
  EXPECT_EQ(gch->c8(), cch->c8());
  std::vector<int32_t> expected(planted.begin(), planted.begin() + (count - 1));
  expected.push_back(tie_a);  // the lower index of the tie
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(gch->c8(), expected);
  EXPECT_NEAR(gch->share(), cch->share(), 1e-12);
  ASSERT_EQ(gpu_report->layers.size(), size_t(1));
  EXPECT_EQ(gpu_report->layers[0].channels, count);

  // After the freeze the layer runs the split and measures nothing more.
  gpu_registry.begin_step(3);
  gpu.forward(batch(), n, out);
  gpu.oc->collect_out_control_sums();
  EXPECT_TRUE(gch->step_sums().empty());
}

}  // namespace
}  // namespace fp4
