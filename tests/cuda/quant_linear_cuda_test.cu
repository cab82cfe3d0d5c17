// QuantLinearCuda against QuantLinearCpu: the same policy, weights, inputs (BF16-representable, so both
// layers quantize identical values) and quantization context. The quantized operands are bit-identical by
// construction (shared per-block functions and quant_randomness); the outputs differ only by the CUDA path's
// BF16 rounding of dequantized operands (<= 2^-8 relative per element) and GEMM summation order.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "nn/cuda/quant_linear_cuda.h"
#include "nn/quant_linear.h"
#include "numerics/formats.h"
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

class QuantLinearCudaVsCpu : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantLinearCudaVsCpu, OutputsAndGradientsMatchTheCpuLayer) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(std::string(GetParam()) + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n = 256, in = 384, out = 256;
  const Recipe recipe = load_recipe(GetParam());
  const QuantContext ctx{seed, 0x105};
  const auto x = bf16_values(size_t(n) * in, rng, 1.0f);
  const auto w = bf16_values(size_t(out) * in, rng, 0.05f);
  const auto dy = bf16_values(size_t(n) * out, rng, 0.01f);

  // CPU reference.
  QuantLinearCpu cpu(recipe.linear, in, out, 9, "ref");
  std::vector<float> y_ref(size_t(n) * out), dx_ref(size_t(n) * in), dw_ref(size_t(out) * in, 0.0f);
  cpu.forward(x.data(), w.data(), y_ref.data(), n, ctx);
  cpu.backward(dy.data(), dx_ref.data(), dw_ref.data(), n, false);

  // CUDA layer.
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  DeviceBuffer<float> w_master(w.size()), w_grad(w.size()), dx_f32(dx_ref.size());
  DeviceBuffer<uint16_t> w_bf16(w.size()), x_d(x.size()), y_d(y_ref.size()), dy_d(dy.size());
  w_master.upload(w.data(), w.size());
  w_bf16.upload(to_bits(w).data(), w.size());
  x_d.upload(to_bits(x).data(), x.size());
  dy_d.upload(to_bits(dy).data(), dy.size());
  ASSERT_EQ(cudaMemset(w_grad.data(), 0, w_grad.bytes()), cudaSuccess);
  cuda::GemmRunner gemm;
  const cuda::DeviceWeight weight{w_master.data(), reinterpret_cast<const bf16*>(w_bf16.data()),
                                  w_grad.data()};
  LinearSpec spec{"test.linear", in, out, recipe.linear, recipe.name, 9, &ctx};
  auto layer = cuda::make_quant_linear_cuda(spec, weight, gemm, stream);
  layer->forward(reinterpret_cast<const bf16*>(x_d.data()), reinterpret_cast<bf16*>(y_d.data()), n);
  cuda::LinearGradOut gout;
  gout.f32_out = dx_f32.data();
  layer->backward(reinterpret_cast<const bf16*>(dy_d.data()), gout, n);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<uint16_t> y_bits(y_ref.size());
  y_d.download(y_bits.data(), y_bits.size());
  std::vector<float> y(y_ref.size()), dx(dx_ref.size()), dw(dw_ref.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = bf16_bits_to_float(y_bits[i]);
  dx_f32.download(dx.data(), dx.size());
  w_grad.download(dw.data(), dw.size());
  cudaStreamDestroy(stream);

  const double ey = rel_err(y, y_ref), edx = rel_err(dx, dx_ref), edw = rel_err(dw, dw_ref);
  std::cout << "[" << GetParam() << "] relative error y " << ey << ", dX " << edx << ", dW " << edw << "\n";
  EXPECT_LT(ey, 1e-2);
  EXPECT_LT(edx, 2e-2);
  EXPECT_LT(edw, 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Recipes, QuantLinearCudaVsCpu, ::testing::Values("nvidia-nvfp4", "tetrajet-v2-base"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace fp4
