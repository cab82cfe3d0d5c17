// The NVFP4 linear layer of fp4train on its own (docs/LIBRARY.md): load a recipe preset, take the policy it
// gives a linear, run forward and backward on the CPU reference layer, and compare with the same layer in
// FP32. Build target `example_quant_linear_layer`; ctest runs it and it exits non-zero when a property it
// prints does not hold.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "nn/quant_linear.h"
#include "recipe/recipe_io.h"

namespace {

// y = x w^T for x [n x in], w [out x in], in double.
std::vector<double> matmul_nt(const std::vector<float>& x, const std::vector<float>& w, int n, int in,
                              int out) {
  std::vector<double> y(static_cast<size_t>(n) * out, 0.0);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(x[size_t(i * in + k)]) * w[size_t(o * in + k)];
      y[size_t(i * out + o)] = s;
    }
  return y;
}

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i)
    num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / den);
}

}  // namespace

int main() {
  // One linear of 256 inputs and 384 outputs over 128 tokens (block128 recipes need 128-multiples).
  const int n = 128, in = 256, out = 384;
  std::mt19937_64 g(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(n) * in), w(size_t(out) * in), dy(size_t(n) * out);
  for (float& v : x) v = normal(g);
  for (float& v : w) v = 0.05f * normal(g);
  for (float& v : dy) v = normal(g);
  const std::vector<double> y_exact = matmul_nt(x, w, n, in, out);

  bool ok = true;
  for (const char* preset : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    const fp4::Recipe recipe = fp4::load_recipe(preset);
    // The policy of the first block's attention projection in a 2-block model (recipes can keep blocks in
    // BF16).
    const fp4::LinearPolicy policy = recipe.policy_for(0, 2, fp4::LinearKind::kAttnOut);
    fp4::QuantLinearCpu layer(policy, in, out, /*layer_id*/ 1, "example");
    fp4::QuantContext ctx;
    ctx.seed = 42;
    std::vector<float> y(size_t(n) * out), dx(size_t(n) * in), dw(size_t(out) * in, 0.f);
    layer.forward(x.data(), w.data(), y.data(), n, ctx);
    layer.backward(dy.data(), dx.data(), dw.data(), n, /*accumulate_dx*/ false);
    const double err = relative_error(y, y_exact);
    std::printf("%-17s forward relative error %.4f, %lld bytes kept for the backward (FP32 X and W: %d)\n",
                preset, err, static_cast<long long>(layer.saved_bytes()), 4 * (n * in + out * in));
    // bf16 on the CPU reference: FP32 arithmetic; NVFP4: 10-15% relative error of each output on random data.
    ok = ok && (std::string(preset) == "bf16" ? err < 1e-5 : err > 1e-3 && err < 0.2);
    ok = ok && std::isfinite(dx[0]) && std::isfinite(dw[0]);
  }
  std::printf(ok ? "ok\n" : "FAILED\n");
  return ok ? 0 : 1;
}
