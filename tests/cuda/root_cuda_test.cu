// ROOT / Q-Root on the GPU (optim/cuda/device_root.h) against the CPU RootOptimizer (optim/root_optimizer.h):
// the same matrices and gradients give bit-identical momenta, clipping thresholds and AdamW parts, and
// updates within the FP32 GEMMs' summation-order tolerance; Q-Root's first Newton-Schulz operands are the
// CPU quantizer's bytes; failures are refused as the CPU refuses them, leaving the state unchanged; the CUDA
// engine trains with root, root-bf16 and tetrajet-v2-qroot and its checkpoint moves to the CPU engine and
// back.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../unit/model/engine_parameters.h"
#include "core/error.h"
#include "dist/shard_plan.h"
#include "model/config.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "model/engine_common.h"
#include "model/state_index.h"
#include "nn/cuda/device_params.h"
#include "numerics/philox.h"
#include "numerics/quantize.h"
#include "optim/cuda/device_root.h"
#include "optim/root_optimizer.h"
#include "optimizer_test_util.h"
#include "recipe/recipe_io.h"
#include "staged_thread_comm.h"

namespace fp4 {
namespace {

using testing::error_of;
using testing::expect_same_floats;
using testing::expect_same_state;
using testing::fresh_seed;
using testing::random_batch;
using testing::small64_config;

// ROOT matrices: tall, wide, square, off the 16-grid (37 x 53, no weight decay), one whose gradient stays
// zero and one with a huge gradient value; AdamW parameters: the embedding and the head (by name), a norm
// gain.
ParameterSet make_params(std::mt19937& rng) {
  ParameterSet ps;
  ps.add("embed", {40, 16}, false, ParamInit::kNormal);
  ps.add("tall", {96, 40}, true, ParamInit::kNormal);
  ps.add("wide", {24, 200}, true, ParamInit::kNormal);
  ps.add("square", {64, 64}, true, ParamInit::kNormal);
  ps.add("odd", {37, 53}, false, ParamInit::kNormal);
  ps.add("norm", {64}, false, ParamInit::kOnes);
  ps.add("zero_grad", {32, 48}, true, ParamInit::kNormal);
  ps.add("huge", {48, 32}, true, ParamInit::kNormal);
  ps.add("lm_head", {40, 16}, true, ParamInit::kNormal);
  ps.allocate();
  std::normal_distribution<float> n(0.0f, 0.02f);
  for (auto& x : ps.values()) x = n(rng);
  return ps;
}

// Fresh Gaussian gradients at a different scale per tensor; zeros for zero_grad; in huge, one value of
// 1e30 (its U is far above the 0.99-quantile) and one of -3e25.
void fill_grads(ParameterSet& ps, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int i = 0; i < ps.size(); ++i) {
    const float s = std::pow(10.0f, static_cast<float>(i % 4) - 2.0f);
    for (auto& x : ps.grad(i)) x = ps.at(i).info.name == "zero_grad" ? 0.0f : s * n(rng);
  }
  auto h = ps.grad(ps.require("huge"));
  h[100] = 1e30f;
  h[1000] = -3e25f;
}

StepHyper hyper() {
  StepHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  h.grad_clip = 0.0f;  // the engines clip before the optimizer: compare the optimizers on the raw gradients
  return h;
}

void upload_grads(cuda::DeviceParams& dp, ParameterSet& ps) {
  cuda::copy_to_device(dp.grads(), ps.grads().data(), ps.grads().size() * sizeof(float), nullptr);
}

std::vector<float> device_value(const cuda::DeviceParams& dp, int i) {
  std::vector<float> v(static_cast<size_t>(dp.at(i).info.numel()));
  dp.read_value(i, v);
  return v;
}

std::vector<float> host_value(const ParameterSet& ps, int i) {
  return {ps.value(i).begin(), ps.value(i).end()};
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

std::vector<float> floats_of(const StateTensor& t) {
  std::vector<float> out(t.bytes.size() / 4);
  std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

struct RootCase {
  const char* name;
  NsPrecision precision;
  Rounding rounding;
  // Per step and matrix, dW = the step's change of W from the same W on both sides.
  // FP32: max |dW_gpu - dW_cpu| <= tol max |dW_cpu|. Two FP32 NS runs that differ only in the GEMMs'
  // summation order differ by at most 5.3e-6 of max |X| on these shapes (30 samples each, against a
  // reversed-order loop); tol = 1e-4 leaves a 19x margin and is far below a wrong step.
  // NVFP4: |dW_gpu - dW_cpu|_F <= tol |dW_cpu|_F. The same experiment with NVFP4 operands agrees to 2e-6
  // in most runs, but in 1-7% of them a different FP32 rounding of A or P changes an FP4 rounding
  // decision (or the tensor scale) and the runs separate by up to 0.15 of |X|_F, i.e. by NVFP4's own
  // noise. tol = 0.5 bounds that; an unrelated X of the same norm is ~1.4 away. The tight check of
  // Q-Root is CudaQRootTrace: every operand's bytes and every product on the device's own values.
  // BF16 (root-bf16): |dW_gpu - dW_cpu|_F <= tol |dW_cpu|_F. Both sides round the same operands, but an
  // FP32 summation-order difference next to a BF16 rounding boundary flips that operand's rounding and NS
  // amplifies it: at most 0.024 of |X|_F on these shapes (scripts/experiments/ns_summation_order.py);
  // tol = 0.1. The check that the device's operands are BF16 is CudaNewtonSchulz
  // (newton_schulz_cuda_test.cu).
  double tol;
  bool frobenius;
  // kQAdamW ("+q-adamw"): the embedding, head and gains by DeviceQAdamW, whose bytes are the CPU's.
  RootRest rest = RootRest::kAdamW;
};

class CudaRootSteps : public ::testing::TestWithParam<RootCase> {};

TEST_P(CudaRootSteps, FiveStepsFollowTheCpuRoot) {
  const RootCase c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ParameterSet ps = make_params(rng);
  cuda::DeviceParams dp(ps, nullptr);
  RootOptions opt;
  opt.rounding = c.rounding;
  opt.rest = c.rest;
  RootOptimizer cpu(ps, OptimizerPlacement{}, seed, c.precision, opt);
  cuda::DeviceRoot gpu(dp, nullptr, seed, c.precision, opt);
  EXPECT_EQ(gpu.name(), cpu.name());
  ASSERT_EQ(gpu.root_parameters(), cpu.root_parameters());
  ASSERT_EQ(gpu.adamw_parameters(), cpu.adamw_parameters());
  ASSERT_EQ(gpu.root_parameters().size(), 6u);
  // (Q-AdamW's packed moments are counted in buffers of their own layout on each side: compared by bytes.)
  if (c.rest == RootRest::kAdamW) EXPECT_EQ(gpu.state_bytes(), cpu.state_bytes());
  expect_same_state(cpu.save_state(ps), gpu.save_state(dp), "the zero state");
  const StepHyper h = hyper();
  const std::vector<std::string> roots = cpu.root_parameters();
  for (int step = 1; step <= 5; ++step) {
    const std::string where = "step " + std::to_string(step);
    fill_grads(ps, rng);
    upload_grads(dp, ps);
    const std::vector<float> before(ps.values().begin(), ps.values().end());
    // Step 4 clips (the 1e30 value makes the norm ~1e30): the device scales g by the clipping factor as
    // the engines do; the CPU optimizer gets the gradients scaled as the CPU engine scales them.
    StepHyper hs = h;
    if (step == 4) hs.grad_clip = 1e29f;
    gpu.queue_step(dp, hs, nullptr);
    std::vector<double> sumsq;
    const cuda::StepControl ctl = gpu.read_control(sumsq);
    ASSERT_EQ(ctl.skip, 0) << where;
    if (step == 4) {
      double norm = 0;
      for (float g : ps.grads()) norm += static_cast<double>(g) * g;
      norm = std::sqrt(norm);
      EXPECT_NEAR(ctl.clip_coef, 1e29 / norm, 1e-6 * (1e29 / norm)) << where;
      ASSERT_LT(ctl.clip_coef, 1.0f) << where;
    } else {
      ASSERT_EQ(ctl.clip_coef, 1.0f) << where;
    }
    if (ctl.clip_coef != 1.0f)
      for (float& g : ps.grads()) g *= ctl.clip_coef;
    cpu.step(ps, h);
    gpu.commit_step();
    ASSERT_EQ(gpu.step_count(), cpu.step_count());

    // The clipping thresholds are the CPU's bits (exact order statistics), the clipped counts its counts.
    const std::vector<RootStepInfo> want_info = cpu.last_step_info(), got_info = gpu.last_step_info();
    ASSERT_EQ(want_info.size(), got_info.size());
    for (size_t k = 0; k < want_info.size(); ++k) {
      EXPECT_TRUE(same_bits(want_info[k].clip_eps, got_info[k].clip_eps))
          << where << " " << roots[k] << ": eps " << got_info[k].clip_eps << ", the CPU's "
          << want_info[k].clip_eps;
      EXPECT_EQ(want_info[k].clipped, got_info[k].clipped) << where << " " << roots[k];
      if (roots[k] != "zero_grad") EXPECT_GT(got_info[k].clipped, 0) << where << " " << roots[k];
    }
    EXPECT_LT(got_info[5].clip_eps, 1e3f) << where << ": the huge value must be clipped away";

    for (int i = 0; i < ps.size(); ++i) {
      const std::string& name = ps.at(i).info.name;
      const std::vector<float> want = host_value(ps, i), got = device_value(dp, i);
      const auto k = std::find(roots.begin(), roots.end(), name);
      if (k == roots.end()) {  // AdamW (or Q-AdamW): the device's is the CPU's bit for bit
        expect_same_floats(want, got, where + " AdamW parameter " + name);
        continue;
      }
      // The step's change of W from the same W, on both sides.
      const size_t off = static_cast<size_t>(ps.at(i).offset);
      double dmax = 0, err = 0, wmax = 0, dfro = 0, efro = 0;
      for (size_t j = 0; j < want.size(); ++j) {
        const double dc = static_cast<double>(before[off + j]) - want[j];
        const double dg = static_cast<double>(before[off + j]) - got[j];
        dmax = std::max(dmax, std::abs(dc));
        err = std::max(err, std::abs(dg - dc));
        wmax = std::max(wmax, std::abs(static_cast<double>(before[off + j])));
        dfro += dc * dc;
        efro += (dg - dc) * (dg - dc);
      }
      EXPECT_GT(dmax, 0.0) << where << " " << name << " did not move";
      // Plus two ulps of W: the final subtraction rounds on both sides.
      const double ulps = 2.0 * wmax * std::ldexp(1.0, -23);
      if (c.frobenius)
        EXPECT_LE(std::sqrt(efro),
                  c.tol * std::sqrt(dfro) + ulps * std::sqrt(static_cast<double>(want.size())))
            << where << " " << name << ": |dW_gpu - dW_cpu|_F = " << std::sqrt(efro)
            << ", |dW_cpu|_F = " << std::sqrt(dfro);
      else
        EXPECT_LE(err, c.tol * dmax + ulps)
            << where << " " << name << ": max |dW_gpu - dW_cpu| = " << err << ", max |dW_cpu| = " << dmax;
      // The BF16 copy the GEMMs read follows the new W.
      std::vector<__nv_bfloat16> b16(got.size());
      cuda::copy_to_host(b16.data(), dp.value_bf16(i), b16.size() * sizeof(__nv_bfloat16), nullptr);
      for (size_t j = 0; j < b16.size(); ++j)
        if (__bfloat162float(b16[j]) != __bfloat162float(__float2bfloat16_rn(got[j]))) {
          ADD_FAILURE() << where << ": BF16 copy of " << name << "[" << j << "] is stale";
          break;
        }
      // The next step starts from the same W on both sides, so each step is compared on its own.
      dp.write_value(i, want);
    }
    // Momenta (elementwise, no GEMM) and AdamW moments: the CPU's bytes, in the CPU's tensor names.
    expect_same_state(cpu.save_state(ps), gpu.save_state(dp), where);
    const std::vector<StateTensor> cpu_state = cpu.save_state(ps);  // the index points into it
    const StateIndex index(cpu_state);
    for (size_t k = 0; k < roots.size(); ++k) {
      const std::vector<float> want = floats_of(
          index.require(kRootMomentPrefix + roots[k], "F32", ps.at(ps.require(roots[k])).info.shape));
      std::vector<float> got(want.size());
      gpu.read_momentum(static_cast<int>(k), got);
      expect_same_floats(want, got, where + " momentum of " + roots[k]);
    }
  }

  // A CPU state loads into a device optimizer, which then takes the CPU's sixth step. Optimizers load from
  // an engine's state, which holds the parameter values too (the AdamW part checks the whole AdamW layout).
  const std::vector<StateTensor> state = cpu.save_state(ps);
  std::vector<StateTensor> engine_state;
  for (int i = 0; i < ps.size(); ++i)
    engine_state.push_back(f32_state_tensor(ps.at(i).info.name, ps.at(i).info.shape, ps.value(i)));
  engine_state.insert(engine_state.end(), state.begin(), state.end());
  cuda::DeviceParams dp2(ps, nullptr);
  cuda::DeviceRoot other(dp2, nullptr, seed, c.precision, opt);
  other.load_state(StateIndex(engine_state), dp2);
  EXPECT_EQ(other.step_count(), 5);
  expect_same_state(state, other.save_state(dp2), "CPU state loaded on the device");
  fill_grads(ps, rng);
  upload_grads(dp2, ps);
  cpu.step(ps, h);
  other.queue_step(dp2, h, nullptr);
  std::vector<double> sumsq;
  other.read_control(sumsq);
  other.commit_step();
  expect_same_state(cpu.save_state(ps), other.save_state(dp2), "step 6 after the load");
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, CudaRootSteps,
    ::testing::Values(RootCase{"root", NsPrecision::kFp32, Rounding::kRtn, 1e-4, false},
                      RootCase{"q_root", NsPrecision::kNvfp4, Rounding::kRtn, 0.5, true},
                      RootCase{"q_root_sr", NsPrecision::kNvfp4, Rounding::kSr, 0.5, true},
                      RootCase{"root_bf16", NsPrecision::kBf16, Rounding::kRtn, 0.1, true},
                      RootCase{"q_root_q_adamw", NsPrecision::kNvfp4, Rounding::kRtn, 0.5, true,
                               RootRest::kQAdamW}),
    [](const auto& info) { return std::string(info.param.name); });

// Lanes (DeviceRoot spreads the matrices over streams) change no bit: one lane and three (unevenly over the
// six matrices, lane 0 the caller's stream) give the same weights, BF16 copies and state after three steps,
// at each precision, with Q-Root's SR and a clipped step, on the caller's own non-blocking stream.
TEST(CudaRootLanes, AnyNumberOfLanesGivesTheSameBits) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  cuda::Stream stream(cudaStreamNonBlocking, 0);
  for (NsPrecision precision : {NsPrecision::kFp32, NsPrecision::kBf16, NsPrecision::kNvfp4}) {
    SCOPED_TRACE(ns_precision_name(precision));
    std::mt19937 rng(seed);
    ParameterSet ps = make_params(rng);
    RootOptions opt;
    opt.rounding = Rounding::kSr;
    cuda::DeviceParams one_dp(ps, stream.get()), three_dp(ps, stream.get());
    cuda::DeviceRoot one(one_dp, stream.get(), seed, precision, opt, 1);
    cuda::DeviceRoot three(three_dp, stream.get(), seed, precision, opt, 3);
    for (int step = 1; step <= 3; ++step) {
      fill_grads(ps, rng);
      StepHyper h = hyper();
      if (step == 2) h.grad_clip = 1e29f;  // the 1e30 gradient value: a clipped step
      std::vector<double> sumsq;
      for (auto [dp, opt_gpu] : {std::pair{&one_dp, &one}, std::pair{&three_dp, &three}}) {
        cuda::copy_to_device(dp->grads(), ps.grads().data(), ps.grads().size() * sizeof(float), stream.get());
        opt_gpu->queue_step(*dp, h, nullptr);
        ASSERT_EQ(opt_gpu->read_control(sumsq).skip, 0) << "step " << step;
        opt_gpu->commit_step();
      }
      for (int i = 0; i < one_dp.size(); ++i)
        expect_same_floats(device_value(one_dp, i), device_value(three_dp, i),
                           "step " + std::to_string(step) + " " + one_dp.at(i).info.name);
      std::vector<uint16_t> a(ps.values().size()), b(a.size());  // the BF16 copies' bits
      cuda::copy_to_host(a.data(), one_dp.values_bf16(), a.size() * 2, stream.get());
      cuda::copy_to_host(b.data(), three_dp.values_bf16(), b.size() * 2, stream.get());
      EXPECT_EQ(a, b) << "BF16 values, step " << step;
      expect_same_state(one.save_state(one_dp), three.save_state(three_dp), "step " + std::to_string(step));
    }
  }
  std::mt19937 rng(seed);
  ParameterSet ps = make_params(rng);
  cuda::DeviceParams dp(ps, nullptr);
  EXPECT_NE(error_of([&] {
              cuda::DeviceRoot(dp, nullptr, seed, NsPrecision::kFp32, RootOptions{}, 0);
            }).find("lanes must be >= 1, got 0"),
            std::string::npos);
}

// The CPU's X of a ROOT step from momentum m and gradient g (first NS input): root_step's arithmetic,
// then newton_schulz's normalization into the wide, 16-padded orientation.
std::vector<float> cpu_first_x(const std::vector<float>& m, std::span<const float> g, int64_t rows,
                               int64_t cols, const RootOptions& opt, int64_t rp, int64_t cp) {
  const size_t n = g.size();
  std::vector<float> u(n);
  for (size_t i = 0; i < n; ++i) {
    const float mn = opt.momentum * m[i] + g[i];
    u[i] = opt.nesterov ? g[i] + opt.momentum * mn : mn;
  }
  clip_to_abs_quantile(u, opt.clip_quantile);
  double sq = 0.0;
  for (float v : u) sq += static_cast<double>(v) * v;
  const float inv = static_cast<float>(1.0 / (std::sqrt(sq) + 1e-7f));
  const bool tall = rows > cols;
  std::vector<float> x(static_cast<size_t>(rp * cp), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[(tall ? j : i) * cp + (tall ? i : j)] = u[i * cols + j] * inv;
  return x;
}

// |got - sum_t x_t y_t| for an FP32 dot product of k terms computed in any order, plus `extra`: within
// k 2^-23 sum |x_t y_t| (each product and partial sum rounds once, by at most 2^-24 relative).
void expect_dot(double got, double exact, double abs_sum, int64_t k, double extra, const std::string& what) {
  const double bound = static_cast<double>(k) * std::ldexp(1.0, -23) * abs_sum + extra + 1e-30;
  if (std::abs(got - exact) > bound)
    ADD_FAILURE() << what << ": " << got << ", exact " << exact << " (bound " << bound << ")";
}

std::vector<float> dequantized(const Nvfp4Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
  dequantize(t, out.data());
  return out;
}

class CudaQRootTrace : public ::testing::TestWithParam<Rounding> {};

// Three steps, one traced matrix each (tall 96 x 40, off-grid 37 x 53, wide 24 x 200), every NS step:
// X_0 is the CPU's X bit for bit; each of the four NVFP4 operands is quantize_nvfp4's bytes for the
// device's input with the CPU's Philox stream; X^T is X transposed and A exactly symmetric; A, P and the
// next iterate are the FP32 products of the device's dequantized operands to FP32 rounding; and the new W
// is the CPU's update formula applied to the final iterate, bit for bit.
TEST_P(CudaQRootTrace, EveryNsStepIsTheCpuArithmeticOnTheDevicesOperands) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ParameterSet ps = make_params(rng);
  cuda::DeviceParams dp(ps, nullptr);
  RootOptions opt;
  opt.rounding = GetParam();
  opt.precision = NsPrecision::kNvfp4;
  RootOptimizer cpu(ps, OptimizerPlacement{}, seed, NsPrecision::kNvfp4, opt);
  cuda::DeviceRoot gpu(dp, nullptr, seed, NsPrecision::kNvfp4, opt);
  const std::vector<std::string> roots = gpu.root_parameters();
  const int traced[3] = {0, 3, 1};
  const StepHyper h = hyper();
  const NsCoefficients k = kQRootNsCoefficients;
  for (int step = 0; step < 3; ++step) {
    const int p = ps.require(roots[static_cast<size_t>(traced[step])]);
    const ParameterInfo& info = ps.at(p).info;
    const int64_t rows = info.shape[0], cols = info.shape[1];
    const std::string where = "step " + std::to_string(step + 1) + " " + info.name;
    fill_grads(ps, rng);
    upload_grads(dp, ps);
    const std::vector<StateTensor> cpu_state = cpu.save_state(ps);
    const std::vector<float> m =
        floats_of(StateIndex(cpu_state).require(kRootMomentPrefix + info.name, "F32", info.shape));
    const std::vector<float> w_before = device_value(dp, p);
    cuda::NsTrace trace;
    gpu.trace_ns(traced[step], &trace);
    gpu.queue_step(dp, h, nullptr);
    std::vector<double> sumsq;
    ASSERT_EQ(gpu.read_control(sumsq).skip, 0);
    gpu.commit_step();
    cpu.step(ps, h);

    const int64_t r = trace.r, c = trace.c;
    ASSERT_EQ(r, (std::min(rows, cols) + 15) / 16 * 16) << where;
    ASSERT_EQ(c, (std::max(rows, cols) + 15) / 16 * 16) << where;
    ASSERT_EQ(trace.inputs.size(), static_cast<size_t>(opt.ns_steps)) << where;
    expect_same_floats(cpu_first_x(m, ps.grad(p), rows, cols, opt, r, c), trace.inputs[0][0], where + " X_0");
    const uint64_t stream = make_stream(static_cast<uint32_t>(p), static_cast<uint32_t>(step), 0x52);
    const BlockShape block[4] = {BlockShape::k1x16, BlockShape::k16x16, BlockShape::k1x16, BlockShape::k1x16};
    const int64_t q_rows[4] = {r, r, r, c}, q_cols[4] = {c, r, r, r};
    for (int s = 0; s < opt.ns_steps; ++s) {
      const std::string ws = where + " NS step " + std::to_string(s);
      const auto& in = trace.inputs[static_cast<size_t>(s)];
      const auto& ops = trace.operands[static_cast<size_t>(s)];
      for (int o = 0; o < 4; ++o) {
        QuantSpec spec;
        spec.format = QuantFormat::kNvfp4;
        spec.block = block[o];
        spec.outer = OuterScale::kTensor;
        spec.rounding = opt.rounding;
        QuantRandomness rnd;
        rnd.sr = RngStream{seed, stream * 64 + static_cast<uint64_t>(4 * s + o)};
        const Nvfp4Tensor want = quantize_nvfp4(in[o].data(), q_rows[o], q_cols[o], spec, rnd);
        const Nvfp4Tensor& got = ops[o];
        const std::string what = ws + " operand " + std::to_string(o);
        EXPECT_EQ(got.rows, want.rows) << what;
        EXPECT_EQ(got.cols, want.cols) << what;
        EXPECT_TRUE(got.codes == want.codes) << what << ": codes differ";
        EXPECT_TRUE(got.scales == want.scales) << what << ": scales differ";
        EXPECT_TRUE(got.outer_scales == want.outer_scales) << what << ": tensor scale differs";
        EXPECT_TRUE(same_bits(got.amax, want.amax))
            << what << ": amax " << got.amax << ", the CPU's " << want.amax;
      }
      const std::vector<float>& x = in[0];
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j)
          ASSERT_TRUE(same_bits(in[3][j * r + i], x[i * c + j])) << ws << " X^T";
      const std::vector<float> xq = dequantized(ops[0]), aq = dequantized(ops[1]), pq = dequantized(ops[2]),
                               xtq = dequantized(ops[3]);
      const std::vector<float>& a = in[1];
      const std::vector<float>& poly = in[2];
      const std::vector<float>& next =
          s + 1 < opt.ns_steps ? trace.inputs[static_cast<size_t>(s) + 1][0] : trace.result;
      ASSERT_EQ(next.size(), x.size()) << ws;
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < r; ++j) {
          ASSERT_TRUE(same_bits(a[i * r + j], a[j * r + i])) << ws << " A symmetric";
          double dot = 0, mag = 0;  // A = X^ X^^T
          for (int64_t t = 0; t < c; ++t) {
            dot += static_cast<double>(xq[i * c + t]) * xq[j * c + t];
            mag += std::abs(static_cast<double>(xq[i * c + t]) * xq[j * c + t]);
          }
          expect_dot(a[i * r + j], dot, mag, c, 0.0,
                     ws + " A[" + std::to_string(i) + "," + std::to_string(j) + "]");
          double a2 = 0, mag2 = 0;  // P = b A + c A^ A^
          for (int64_t t = 0; t < r; ++t) {
            a2 += static_cast<double>(aq[i * r + t]) * aq[t * r + j];
            mag2 += std::abs(static_cast<double>(aq[i * r + t]) * aq[t * r + j]);
          }
          const double ba = static_cast<double>(k.b) * a[i * r + j], ca2 = static_cast<double>(k.c) * a2;
          expect_dot(poly[i * r + j], ba + ca2, std::abs(static_cast<double>(k.c)) * mag2, r,
                     std::ldexp(1.0, -22) * (std::abs(ba) + std::abs(ca2)),
                     ws + " P[" + std::to_string(i) + "," + std::to_string(j) + "]");
        }
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {
          double dot = 0, mag = 0;  // next = a X + P^ (X^T)^^T
          for (int64_t t = 0; t < r; ++t) {
            dot += static_cast<double>(pq[i * r + t]) * xtq[j * r + t];
            mag += std::abs(static_cast<double>(pq[i * r + t]) * xtq[j * r + t]);
          }
          const double ax = static_cast<double>(k.a) * x[i * c + j];
          expect_dot(next[i * c + j], ax + dot, mag, r, std::ldexp(1.0, -22) * (std::abs(ax) + std::abs(dot)),
                     ws + " next[" + std::to_string(i) + "," + std::to_string(j) + "]");
        }
      if (::testing::Test::HasFailure()) return;  // one NS step's report is enough
    }
    // W <- W - lr (scale X + wd W) from the final iterate, elementwise as the CPU (no GEMM): bit for bit.
    const bool tall = rows > cols;
    const float scale = opt.update_scale * std::sqrt(static_cast<float>(std::max(rows, cols)));
    const float wd = info.weight_decay ? h.weight_decay : 0.0f;
    std::vector<float> want(w_before.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const float xv = tall ? trace.result[j * c + i] : trace.result[i * c + j];
        const float w = w_before[i * cols + j];
        want[i * cols + j] = w - h.lr * (scale * xv + wd * w);
      }
    expect_same_floats(want, device_value(dp, p), where + " W after the step");
  }
}

INSTANTIATE_TEST_SUITE_P(Roundings, CudaQRootTrace, ::testing::Values(Rounding::kRtn, Rounding::kSr),
                         [](const auto& info) { return info.param == Rounding::kSr ? "sr" : "rtn"; });

// DeviceRoot on ZeRO-1 shards of whole tensors, 2 and 3 ranks as threads of one process on one GPU (a
// host-staged device communicator): every rank gets the same gradients (as after the engines'
// reduce-scatter) and steps only its own tensors; after the values are gathered, every parameter equals one
// process's DeviceRoot bit for bit, and so does the state every rank saves (each tensor broadcast from its
// owner). The state of 3 ranks then loads into 2 ranks, whose next step is the single process's. With
// "+q-adamw" the other tensors' Q-AdamW shards (whole tensors) do the same.
class CudaRootShards : public ::testing::TestWithParam<RootChoice> {};

TEST_P(CudaRootShards, WholeTensorShardsOnThreadRanksMatchOneProcess) {
  const NsPrecision prec = GetParam().precision;
  RootOptions opts;
  opts.rest = GetParam().rest;
  const uint64_t seed = fresh_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const ParameterSet ps0 = make_params(rng);  // 9 tensors
  const auto grads_of_step = [&](int step) {
    ParameterSet g = ps0;
    std::mt19937 r(static_cast<uint32_t>(seed) + 7919u * static_cast<uint32_t>(step));
    fill_grads(g, r);
    return std::vector<float>(g.grads().begin(), g.grads().end());
  };
  const auto shards_at = [&](const std::vector<int>& first) {
    std::vector<IndexRange> out;
    const auto at = [&](int t) { return t < ps0.size() ? ps0.at(t).offset : ps0.numel(); };
    for (size_t q = 0; q + 1 < first.size(); ++q) out.push_back({at(first[q]), at(first[q + 1])});
    return out;
  };
  const StepHyper h = hyper();

  // One process: steps 1-4, the state after step 3 kept.
  cuda::DeviceParams dp1(ps0, nullptr);
  cuda::DeviceRoot one(dp1, nullptr, seed, prec, opts);
  std::vector<std::vector<float>> values_after(5);
  std::vector<StateTensor> state3, state4;
  std::vector<double> norms(5);
  for (int step = 1; step <= 4; ++step) {
    const std::vector<float> g = grads_of_step(step);
    cuda::copy_to_device(dp1.grads(), g.data(), g.size() * sizeof(float), nullptr);
    one.queue_step(dp1, h, nullptr);
    std::vector<double> sumsq;
    norms[static_cast<size_t>(step)] = one.read_control(sumsq).grad_norm;
    one.commit_step();
    values_after[static_cast<size_t>(step)].resize(static_cast<size_t>(dp1.numel()));
    cuda::copy_to_host(values_after[static_cast<size_t>(step)].data(), dp1.values(),
                       dp1.numel() * sizeof(float), nullptr);
    if (step == 3) state3 = one.save_state(dp1);
  }
  state4 = one.save_state(dp1);

  // `world` ranks over shards `first`, from `start` (values and, if given, a state) for steps [from, to].
  const auto run = [&](const std::vector<int>& first, const std::vector<float>& start,
                       const std::vector<StateTensor>* state, int from, int to, const std::string& what) {
    const std::vector<IndexRange> shards = shards_at(first);
    const int world = static_cast<int>(shards.size());
    std::vector<std::vector<StateTensor>> saved(static_cast<size_t>(world));
    std::vector<std::vector<float>> values(static_cast<size_t>(world));
    std::string failure;
    std::mutex mu;
    test::run_threads<test::StagedThreadComm>(world, [&](Communicator& comm) {
      try {
        ParameterSet ps = ps0;
        std::copy(start.begin(), start.end(), ps.values().begin());
        cuda::DeviceParams dp(ps, nullptr);
        cuda::DeviceRoot gpu(dp, nullptr, seed, prec, opts);
        gpu.set_shard(dp, shards, &comm);
        EXPECT_EQ(gpu.shard().begin, shards[static_cast<size_t>(comm.rank())].begin);
        if (state) {
          std::vector<StateTensor> with_values;
          for (int i = 0; i < ps.size(); ++i)
            with_values.push_back(f32_state_tensor(ps.at(i).info.name, ps.at(i).info.shape, ps.value(i)));
          with_values.insert(with_values.end(), state->begin(), state->end());
          gpu.load_state(StateIndex(with_values), dp);
        }
        for (int step = from; step <= to; ++step) {
          const std::vector<float> g = grads_of_step(step);
          cuda::copy_to_device(dp.grads(), g.data(), g.size() * sizeof(float), nullptr);
          gpu.queue_step(dp, h, nullptr);
          std::vector<double> sumsq;
          const cuda::StepControl ctl = gpu.read_control(sumsq);
          EXPECT_EQ(ctl.skip, 0) << what << ", step " << step;
          EXPECT_NEAR(ctl.grad_norm, norms[static_cast<size_t>(step)],
                      1e-12 * norms[static_cast<size_t>(step)])
              << what << ", step " << step << ": the job's norm";
          gpu.commit_step();
          comm.all_gather(dp.values(), shards, nullptr);
        }
        std::vector<float> v(static_cast<size_t>(dp.numel()));
        cuda::copy_to_host(v.data(), dp.values(), v.size() * sizeof(float), nullptr);
        std::vector<StateTensor> st = gpu.save_state(dp);  // collective
        const std::lock_guard<std::mutex> lock(mu);
        values[static_cast<size_t>(comm.rank())] = std::move(v);
        saved[static_cast<size_t>(comm.rank())] = std::move(st);
      } catch (const Error& e) {
        const std::lock_guard<std::mutex> lock(mu);
        failure = e.what();
      }
    });
    EXPECT_EQ(failure, "") << what;
    const std::vector<StateTensor>& want_state = to == 3 ? state3 : state4;
    for (int q = 0; q < world; ++q) {
      const std::string who = what + ", rank " + std::to_string(q);
      expect_same_floats(values_after[static_cast<size_t>(to)], values[static_cast<size_t>(q)],
                         who + ": values");
      expect_same_state(want_state, saved[static_cast<size_t>(q)], who + ": saved state");
    }
    return saved.empty() ? std::vector<StateTensor>{} : saved[0];
  };
  const std::vector<float> start(ps0.values().begin(), ps0.values().end());
  run({0, 4, 9}, start, nullptr, 1, 3, "2 ranks");
  const std::vector<StateTensor> from3 = run({0, 2, 6, 9}, start, nullptr, 1, 3, "3 ranks");
  run({0, 5, 9}, values_after[3], &from3, 4, 4, "3 ranks' state resumed on 2");
}

TEST(CudaRootShardsRefusals, AShardThatCutsATensorIsRefused) {
  std::mt19937 rng(5);
  const ParameterSet ps = make_params(rng);
  const int64_t cut = ps.at(ps.require("wide")).offset + 16;
  std::vector<std::string> msgs(2);
  test::run_threads<test::StagedThreadComm>(2, [&](Communicator& comm) {
    try {
      cuda::DeviceParams dp(ps, nullptr);
      cuda::DeviceRoot gpu(dp, nullptr, 1, NsPrecision::kFp32);
      gpu.set_shard(dp, {{0, cut}, {cut, ps.numel()}}, &comm);
    } catch (const Error& e) {
      msgs[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  for (const std::string& m : msgs) {
    EXPECT_NE(m.find("cuts parameter wide"), std::string::npos) << m;
    EXPECT_NE(m.find("whole tensors"), std::string::npos) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaRootShards,
                         ::testing::Values(RootChoice{NsPrecision::kFp32, RootRest::kAdamW},
                                           RootChoice{NsPrecision::kBf16, RootRest::kAdamW},
                                           RootChoice{NsPrecision::kNvfp4, RootRest::kAdamW},
                                           RootChoice{NsPrecision::kNvfp4, RootRest::kQAdamW}),
                         [](const auto& info) {
                           std::string n = root_optimizer_name(info.param.precision, info.param.rest);
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return c == '-' || c == '+'; }, '_');
                           return n;
                         });

// Everything an optimizer holds, for "nothing changed" checks.
struct Snapshot {
  std::vector<std::vector<float>> values;
  std::vector<StateTensor> state;
};

Snapshot snapshot(const cuda::DeviceParams& dp, const cuda::DeviceRoot& gpu) {
  Snapshot s;
  for (int i = 0; i < dp.size(); ++i) s.values.push_back(device_value(dp, i));
  s.state = gpu.save_state(dp);
  return s;
}

TEST(CudaRoot, NonFiniteGradientSkipsAndFailuresAreRefusedLikeTheCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const StepHyper h = hyper();
  std::vector<double> sumsq;
  {
    // A NaN gradient: nothing is updated (the engine then throws naming the parameter).
    ParameterSet ps = make_params(rng);
    cuda::DeviceParams dp(ps, nullptr);
    cuda::DeviceRoot gpu(dp, nullptr, seed, NsPrecision::kFp32);
    fill_grads(ps, rng);
    ps.grad(ps.require("square"))[17] = std::nanf("");
    upload_grads(dp, ps);
    const Snapshot before = snapshot(dp, gpu);
    gpu.queue_step(dp, h, nullptr);
    EXPECT_EQ(gpu.read_control(sumsq).skip, 1);
    const Snapshot after = snapshot(dp, gpu);
    for (int i = 0; i < dp.size(); ++i)
      expect_same_floats(before.values[i], after.values[i], "after a NaN gradient");
    expect_same_state(before.state, after.state, "after a NaN gradient");
  }
  {
    // A diverging quintic (X <- 3 X: |X|_F^2 = 3^10 min(r, c)): the first ROOT matrix fails on both sides,
    // naming it, and nothing changes.
    RootOptions opt;
    opt.coefficients = NsCoefficients{3.0f, 0.0f, 0.0f};
    ParameterSet ps = make_params(rng);
    cuda::DeviceParams dp(ps, nullptr);
    RootOptimizer cpu(ps, OptimizerPlacement{}, seed, NsPrecision::kFp32, opt);
    cuda::DeviceRoot gpu(dp, nullptr, seed, NsPrecision::kFp32, opt);
    fill_grads(ps, rng);
    upload_grads(dp, ps);
    const std::vector<float> cpu_before(ps.values().begin(), ps.values().end());
    const std::string cpu_msg = error_of([&] { cpu.step(ps, h); });
    EXPECT_NE(cpu_msg.find("tall: ROOT's Newton-Schulz diverged"), std::string::npos) << cpu_msg;
    EXPECT_TRUE(std::equal(cpu_before.begin(), cpu_before.end(), ps.values().begin()));
    const Snapshot before = snapshot(dp, gpu);
    gpu.queue_step(dp, h, nullptr);
    const std::string msg = error_of([&] { gpu.read_control(sumsq); });
    EXPECT_NE(msg.find("tall: ROOT's Newton-Schulz diverged"), std::string::npos) << msg;
    const Snapshot after = snapshot(dp, gpu);
    for (int i = 0; i < dp.size(); ++i)
      expect_same_floats(before.values[i], after.values[i], "after divergence");
    expect_same_state(before.state, after.state, "after divergence");
    EXPECT_EQ(gpu.step_count(), 0);
  }
  {
    // No clipping (quantile 1) and a gradient of 3e38 in "square": U overflows to inf, so NS's input is
    // not finite. tall and wide (before it) are stepped; square, the matrices after it and AdamW are not.
    RootOptions opt;
    opt.clip_quantile = 1.0;
    ParameterSet ps = make_params(rng);
    cuda::DeviceParams dp(ps, nullptr);
    RootOptimizer cpu(ps, OptimizerPlacement{}, seed, NsPrecision::kFp32, opt);
    cuda::DeviceRoot gpu(dp, nullptr, seed, NsPrecision::kFp32, opt);
    fill_grads(ps, rng);
    ps.grad(ps.require("square"))[5] = 3e38f;
    upload_grads(dp, ps);
    const std::string cpu_msg = error_of([&] { cpu.step(ps, h); });
    EXPECT_NE(cpu_msg.find("non-finite"), std::string::npos) << cpu_msg;
    const Snapshot before = snapshot(dp, gpu);
    gpu.queue_step(dp, h, nullptr);
    const std::string msg = error_of([&] { gpu.read_control(sumsq); });
    EXPECT_NE(msg.find("square: ROOT's Newton-Schulz input [64 x 64] has non-finite values"),
              std::string::npos)
        << msg;
    const Snapshot after = snapshot(dp, gpu);
    for (int i = 0; i < dp.size(); ++i) {
      const std::string& name = dp.at(i).info.name;
      const bool stepped = name == "tall" || name == "wide";
      EXPECT_EQ(before.values[i] != after.values[i], stepped) << name;
      // The CPU agrees on which parameters moved.
      const std::vector<float> cpu_now = host_value(ps, i);
      EXPECT_EQ(cpu_now != before.values[i], stepped) << name << " (CPU)";
    }
    const StateIndex was(before.state), now(after.state);
    for (const char* name : {"square", "odd", "zero_grad", "huge"}) {
      const std::string t = kRootMomentPrefix + std::string(name);
      EXPECT_EQ(was.require(t, "F32", ps.at(ps.require(name)).info.shape).bytes,
                now.require(t, "F32", ps.at(ps.require(name)).info.shape).bytes)
          << name;
    }
  }
}

struct EngineCase {
  const char* name;
  const char* model;   // "tiny" (head size 32) or "small64" (head size 64)
  const char* recipe;  // preset
  const char* optimizer;
};

class CudaRootEngine : public ::testing::TestWithParam<EngineCase> {};

TEST_P(CudaRootEngine, TrainsAndItsStateMovesToTheCpuEngineAndBack) {
  const EngineCase c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = std::string(c.model) == "tiny" ? model_preset("tiny") : small64_config();
  const Recipe recipe = load_recipe(c.recipe, {std::string("optimizer=") + c.optimizer});
  ASSERT_EQ(recipe.optimizer, c.optimizer);
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  const std::vector<Batch> pool = {random_batch(rng, cfg, 2, 64), random_batch(rng, cfg, 2, 64)};
  StepHyper h;
  h.lr = 3e-3f;
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    const StepStats s = gpu->train_step({&pool[static_cast<size_t>(step) % 2], 1}, h);
    std::cout << "[" << c.name << ", cuda] step " << step << " loss " << s.loss << " grad norm "
              << s.grad_norm << "\n";
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    losses.push_back(s.loss);
  }
  // The CPU engine goes from 5.6 to 1.1 (root, bf16) and 1.4 (tetrajet-v2-qroot) on tiny in these 20 steps.
  EXPECT_LT(losses.back(), losses.front() - 1.0);
  EXPECT_LT(losses[19], losses[17]);

  // The state has the CPU engine's tensors (names, dtypes, shapes, in order) ...
  const std::vector<StateTensor> saved = gpu->save_state();
  auto cpu = make_cpu_engine(cfg, recipe, seed + 1);
  const std::vector<StateTensor> fresh = cpu->save_state();
  ASSERT_EQ(saved.size(), fresh.size());
  bool has_root = false;
  for (size_t t = 0; t < saved.size(); ++t) {
    ASSERT_EQ(saved[t].name, fresh[t].name);
    EXPECT_EQ(saved[t].dtype, fresh[t].dtype) << saved[t].name;
    EXPECT_EQ(saved[t].shape, fresh[t].shape) << saved[t].name;
    EXPECT_EQ(saved[t].bytes.size(), fresh[t].bytes.size()) << saved[t].name;
    has_root = has_root || saved[t].name.rfind(kRootMomentPrefix, 0) == 0;
  }
  EXPECT_TRUE(has_root);
  // ... loads into the CPU engine's RootOptimizer and back into a fresh CUDA engine. (Data parallelism is
  // not refused by name any more: ROOT shards whole tensors; without a communicator it is refused.)
  testing::expect_state_moves_to_the_cpu_and_back(*gpu, *cpu, make_cuda_engine(cfg, recipe, seed), saved,
                                                  pool[0], h, "device communicator");
}

// The CUDA engine with ROOT data-parallel on the trainer's plan (whole tensors, balanced by root_step_costs):
// two ranks as threads on one GPU (host-staged communicator, reductions not overlapped), each fed the same
// micro-batch, so each rank's gradient is half the single engine's and their sum is its gradient exactly;
// after 3 steps every parameter equals the single engine's bit for bit, and the gathered checkpoint is its
// checkpoint.
TEST(CudaRootEngineShards, TwoThreadRanksOnTheTrainersPlanMatchOneEngine) {
  for (const char* optimizer : {"root", "q-root", "q-root+q-adamw"}) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(optimizer) + ", seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const ModelConfig cfg = model_preset("tiny");
    const Recipe recipe = load_recipe("bf16", {std::string("optimizer=") + optimizer});
    const Batch batch = random_batch(rng, cfg, 2, 64);
    StepHyper h;
    h.lr = 3e-3f;
    auto one = make_cuda_engine(cfg, recipe, seed);
    for (int step = 0; step < 3; ++step) one->train_step({&batch, 1}, h);
    const std::vector<float> want = testing::all_parameters(*one);
    const std::vector<StateTensor> want_state = one->save_state();
    std::vector<std::vector<float>> got(2);
    std::vector<std::vector<StateTensor>> got_state(2);
    std::string failure;
    std::mutex mu;
    test::run_threads<test::StagedThreadComm>(2, [&](Communicator& comm) {
      try {
        auto e = make_cuda_engine(cfg, recipe, seed);
        const ShardPlan plan = make_tensor_shard_plan(e->parameters(), 2, root_step_costs(e->parameters()));
        DataParallel dp{&comm, {}};
        for (const auto& r : plan.ranks) dp.shards.push_back({r.begin, r.end});
        e->set_data_parallel(dp);
        dynamic_cast<GradientOverlap&>(*e).set_overlap(false);
        for (int step = 0; step < 3; ++step) e->train_step({&batch, 1}, h);
        std::vector<float> v = testing::all_parameters(*e);
        std::vector<StateTensor> st = e->save_state();  // collective
        const std::lock_guard<std::mutex> lock(mu);
        got[static_cast<size_t>(comm.rank())] = std::move(v);
        got_state[static_cast<size_t>(comm.rank())] = std::move(st);
      } catch (const Error& err) {
        const std::lock_guard<std::mutex> lock(mu);
        failure = err.what();
      }
    });
    ASSERT_EQ(failure, "");
    for (int q = 0; q < 2; ++q) {
      expect_same_floats(want, got[static_cast<size_t>(q)], "rank " + std::to_string(q) + ": parameters");
      expect_same_state(want_state, got_state[static_cast<size_t>(q)],
                        "rank " + std::to_string(q) + ": state");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, CudaRootEngine,
    ::testing::Values(EngineCase{"root_tiny_bf16", "tiny", "bf16", "root"},
                      EngineCase{"qroot_small64", "small64", "tetrajet-v2-qroot", "q-root"},
                      EngineCase{"root_bf16_tiny", "tiny", "bf16", "root-bf16"},
                      EngineCase{"root_small64_tetrajet", "small64", "tetrajet-v2-base", "root"},
                      EngineCase{"qroot_qadamw_small64", "small64", "tetrajet-v2-qroot", "q-root+q-adamw"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fp4
