// Memory of the CUDA model (run on a GPU): the activation arena keeps a block's linear inputs per layer only
// for linears whose backward reads them (BF16); quantized linears keep their packed X^T, so their inputs
// share one transient buffer, and their transients overlay the logits. These tests check the layout
// arithmetic, that buffers alive at the same time never overlap, that an NVFP4 model's arena is smaller
// than the BF16 one, that poisoning what a quantized model no longer keeps changes no gradient, and that
// non-finite activations are still named.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/cuda/activation_arena.h"
#include "model/cuda/batch_upload.h"
#include "model/cuda/cuda_engine.h"
#include "model/cuda/cuda_olmo2.h"
#include "model/olmo2.h"
#include "nn/cuda/device_params.h"
#include "nn/cuda/linear_cuda.h"
#include "ops/cuda/cuda_stream.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using cuda::bf16;

uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Batch random_batch(std::mt19937& rng, const ModelConfig& cfg, int b, int t) {
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, std::vector<int32_t>(static_cast<size_t>(b) * t),
              std::vector<int32_t>(static_cast<size_t>(b) * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = tok(rng);
  return batch;
}

std::vector<cuda::SavedInputs> all_layers(const ModelConfig& cfg, bool saved) {
  return std::vector<cuda::SavedInputs>(static_cast<size_t>(cfg.n_layers),
                                        cuda::SavedInputs{saved, saved, saved});
}

// Bytes of the inputs one layer saves for n rows.
size_t input_bytes(const ModelConfig& cfg, const cuda::SavedInputs& s, size_t n) {
  return ((s.x + s.h) * static_cast<size_t>(cfg.d_model) + s.act * static_cast<size_t>(cfg.d_ff)) * n *
         sizeof(bf16);
}

double gib(size_t bytes) {
  return static_cast<double>(bytes) / (1 << 30);
}

// ------------------------------------------------------------------ layout arithmetic (no allocation)

TEST(ActivationArena, UnsavedInputsShrinkItByExactlyTheirBytes) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const char* name : {"tiny", "olmo2-70m", "olmo2-370m"}) {
    const ModelConfig cfg = model_preset(name);
    // The benchmark's shape, then random ones (128-row multiples keep every piece 256-byte aligned).
    std::vector<std::pair<int, int>> shapes = {{16, 2048}};
    std::uniform_int_distribution<int> bd(1, 8), td(1, 2);
    for (int i = 0; i < 3; ++i) shapes.emplace_back(bd(rng), 128 * td(rng));
    for (const auto& [b, t] : shapes) {
      if (t > cfg.max_seq_len) continue;
      SCOPED_TRACE(std::string(name) + " " + std::to_string(b) + " x " + std::to_string(t));
      const size_t n = static_cast<size_t>(b) * t;
      const cuda::ArenaNeeds needs{size_t{1} << 20, 0};
      const size_t all = cuda::ActivationArena(cfg, all_layers(cfg, true)).bytes_for(b, t, needs);
      const size_t none = cuda::ActivationArena(cfg, all_layers(cfg, false)).bytes_for(b, t, needs);
      EXPECT_EQ(all - none, cfg.n_layers * input_bytes(cfg, {true, true, true}, n));
      // One random layer saves a random subset of its inputs: exactly those bytes come back.
      auto mixed = all_layers(cfg, false);
      std::uniform_int_distribution<int> pick(0, cfg.n_layers - 1), bit(0, 1);
      cuda::SavedInputs& m = mixed[static_cast<size_t>(pick(rng))];
      m = cuda::SavedInputs{bit(rng) == 1, bit(rng) == 1, bit(rng) == 1};
      EXPECT_EQ(cuda::ActivationArena(cfg, mixed).bytes_for(b, t, needs) - none, input_bytes(cfg, m, n));
      // The linears' workspace costs nothing while it fits over the logits; beyond, exactly its excess.
      const cuda::ActivationArena quant(cfg, all_layers(cfg, false));
      const size_t logits = n * static_cast<size_t>(cfg.vocab_size) * sizeof(bf16);
      const size_t fits = std::uniform_int_distribution<size_t>(1, logits)(rng);
      EXPECT_EQ(quant.bytes_for(b, t, {needs.attn_workspace_bytes, fits}), none);
      const size_t excess = 256 * std::uniform_int_distribution<size_t>(1, 1000)(rng);
      EXPECT_EQ(quant.bytes_for(b, t, {needs.attn_workspace_bytes, logits + excess}), none + excess);
      if (b == 16 && t == 2048)
        std::cout << "[" << name << ", 16 x 2048] activation arena with every linear input saved " << gib(all)
                  << " GiB, with none " << gib(none) << " GiB: " << gib(all - none) << " GiB less\n";
    }
  }
  const ModelConfig tiny = model_preset("tiny");
  const std::string msg =
      error_of([&] { cuda::ActivationArena(tiny, all_layers(model_preset("olmo2-70m"), true)); });
  EXPECT_NE(msg.find("saved-input entries"), std::string::npos) << msg;
}

// ------------------------------------------------------------------ overlays on a real allocation

struct Piece {
  std::string what;
  uintptr_t lo = 0, hi = 0;
};

template <typename T>
Piece piece(std::string what, const T* p, size_t count) {
  const auto lo = reinterpret_cast<uintptr_t>(p);
  return Piece{std::move(what), lo, lo + count * sizeof(T)};
}

// Everything alive in one phase must occupy disjoint bytes.
void expect_disjoint(std::vector<Piece> pieces, const std::string& phase) {
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.lo == p.hi; }),
               pieces.end());
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.lo < b.lo; });
  for (size_t i = 0; i + 1 < pieces.size(); ++i)
    EXPECT_LE(pieces[i].hi, pieces[i + 1].lo)
        << phase << ": " << pieces[i].what << " overlaps " << pieces[i + 1].what;
}

TEST(ActivationArena, BuffersAliveAtTheSameTimeNeverOverlap) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const char* name : {"tiny", "olmo2-30m"}) {
    const ModelConfig cfg = model_preset(name);
    const size_t d = cfg.d_model, ff = cfg.d_ff;
    for (int trial = 0; trial < 4; ++trial) {
      std::bernoulli_distribution coin(0.5);
      std::vector<cuda::SavedInputs> saved(static_cast<size_t>(cfg.n_layers));
      for (auto& s : saved) s = cuda::SavedInputs{coin(rng), coin(rng), coin(rng)};
      const int b = std::uniform_int_distribution<int>(1, 3)(rng),
                t = 64 * std::uniform_int_distribution<int>(1, 4)(rng);
      const size_t n = static_cast<size_t>(b) * t,
                   logits = n * static_cast<size_t>(cfg.vocab_size) * sizeof(bf16);
      // A workspace smaller or larger than the logits.
      const size_t ws = std::uniform_int_distribution<size_t>(1, 2 * logits)(rng);
      const size_t attn_ws = std::uniform_int_distribution<size_t>(0, 1 << 16)(rng);
      cuda::ActivationArena arena(cfg, saved);
      const cuda::Activations& a = arena.ensure(b, t, {attn_ws, ws});
      EXPECT_EQ(arena.capacity_bytes(), arena.bytes_for(b, t, {attn_ws, ws}));
      std::vector<Piece> layers;
      bool any_unsaved = false;
      for (size_t l = 0; l < a.layers.size(); ++l) {
        const auto& la = a.layers[l];
        const std::string pre = "blocks." + std::to_string(l) + ".";
        for (auto [kept, p, count, what] :
             {std::tuple{la.saved.x, la.x, n * d, "x"}, std::tuple{la.saved.h, la.h, n * d, "h"},
              std::tuple{la.saved.act, la.act, n * ff, "act"}}) {
          if (kept) {
            layers.push_back(piece(pre + what, p, count));
            EXPECT_NE(p, a.transient_input) << pre << what;
          } else {
            EXPECT_EQ(p, a.transient_input) << pre << what;
            any_unsaved = true;
          }
        }
        layers.push_back(piece(pre + "qkv", la.qkv, n * 3 * d));
        layers.push_back(piece(pre + "qkv_rot", la.qkv_rot, n * 3 * d));
        layers.push_back(piece(pre + "rstd_q", la.rstd_q, n));
        layers.push_back(piece(pre + "rstd_k", la.rstd_k, n));
        layers.push_back(piece(pre + "att", la.att, n * d));
        layers.push_back(piece(pre + "lse", la.lse, n * static_cast<size_t>(cfg.n_heads)));
        layers.push_back(piece(pre + "y_attn", la.y_attn, n * d));
        layers.push_back(piece(pre + "rstd_attn", la.rstd_attn, n));
        layers.push_back(piece(pre + "gu", la.gu, n * 2 * ff));
        layers.push_back(piece(pre + "y_mlp", la.y_mlp, n * d));
        layers.push_back(piece(pre + "rstd_mlp", la.rstd_mlp, n));
      }
      EXPECT_EQ(a.transient_input != nullptr, any_unsaved);
      ASSERT_NE(a.linear_workspace, nullptr);
      EXPECT_EQ(a.linear_workspace_bytes, ws);
      const Piece workspace = piece("linear workspace", static_cast<const uint8_t*>(a.linear_workspace), ws);
      const Piece transient =
          piece("transient input", a.transient_input, any_unsaved ? n * std::max(d, ff) : 0);
      const Piece res = piece("res", a.res, n * d), xf = piece("xf", a.xf, n * d),
                  rstd_f = piece("rstd_f", a.rstd_f, n);

      auto forward = layers;
      for (const Piece& p : {res, piece("mid", a.mid, n * d), xf, rstd_f, transient, workspace})
        forward.push_back(p);
      expect_disjoint(forward, "forward");
      auto loss = layers;
      for (const Piece& p :
           {res, xf, rstd_f, piece("logits", a.logits, n * cfg.vocab_size), piece("row_loss", a.row_loss, n),
            piece("row_ce", a.row_ce, n), piece("dres[1]", a.dres[1], n * d)})
        loss.push_back(p);
      expect_disjoint(loss, "loss");
      auto backward = layers;
      for (const Piece& p :
           {res, xf, rstd_f, workspace, piece("dres[0]", a.dres[0], n * d),
            piece("dres[1]", a.dres[1], n * d), piece("dmid", a.dmid, n * d), piece("dy", a.dy, n * d),
            piece("dact", a.dact, n * ff), piece("dgu", a.dgu, n * 2 * ff), piece("datt", a.datt, n * d),
            piece("dqkv", a.dqkv, n * 3 * d),
            piece("norm scratch", a.norm_scratch,
                  cuda::norm_backward_scratch_floats(static_cast<int>(n), static_cast<int>(2 * d))),
            piece("attention workspace", static_cast<const uint8_t*>(a.attn_workspace), attn_ws)})
        backward.push_back(p);
      expect_disjoint(backward, "backward");
      expect_disjoint({xf, piece("last_x", a.last_x, static_cast<size_t>(b) * d),
                       piece("last_logits", a.last_logits, static_cast<size_t>(b) * cfg.vocab_size)},
                      "last_logits");
      // Everything lies inside one allocation of the arena's capacity.
      std::vector<Piece> every = backward;
      every.insert(every.end(), forward.begin(), forward.end());
      every.insert(every.end(), loss.begin(), loss.end());
      every.push_back(piece("last_logits", a.last_logits, static_cast<size_t>(b) * cfg.vocab_size));
      uintptr_t lo = UINTPTR_MAX, hi = 0;
      for (const Piece& p : every)
        if (p.lo != p.hi) lo = std::min(lo, p.lo), hi = std::max(hi, p.hi);
      EXPECT_LE(hi - lo, arena.capacity_bytes());
    }
  }
}

// ------------------------------------------------------------------ the model on the device

using cuda::Stream;

// A CudaOlmo2 with its parameter store, as the engine builds it (same initial values for the same seed).
struct Rig {
  Stream stream;
  cuda::GemmRunner gemm;
  cuda::BatchUploader uploader{stream.get()};
  std::unique_ptr<cuda::DeviceParams> params;
  std::unique_ptr<cuda::CudaOlmo2> model;
  DeviceBuffer<double> sums{2};

  Rig(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed) {
    Olmo2Model host(cfg, Recipe{});
    host.init_parameters(seed);
    params = std::make_unique<cuda::DeviceParams>(host.params(), stream.get());
    model = std::make_unique<cuda::CudaOlmo2>(cfg, recipe, *params, gemm, stream.get());
    model->quant_context().seed = seed;
  }
  ~Rig() { cudaStreamSynchronize(stream.get()); }

  void forward(const Batch& batch) {
    const auto up = uploader.upload({&batch, 1}, false, false);
    model->quant_context().call = uint64_t{1} << 8;
    model->forward(up[0]);
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }

  // Forward, loss and backward from zero gradients. after_forward / after_loss may overwrite what is dead
  // by then. Returns the flat gradients, then the two loss sums.
  std::vector<double> gradients(const Batch& batch,
                                const std::function<void(const cuda::Activations&)>& after_forward,
                                const std::function<void(const cuda::Activations&)>& after_loss) {
    params->zero_grads();
    const auto up = uploader.upload({&batch, 1}, true, true);
    FP4_CUDA_CHECK(cudaMemsetAsync(sums.data(), 0, sums.bytes(), stream.get()));
    model->quant_context().call = uint64_t{1} << 8;
    model->forward(up[0]);
    if (after_forward) after_forward(*model->activations());
    model->loss(up[0], true, 1.0f / static_cast<float>(batch.tokens.size()), sums.data());
    if (after_loss) after_loss(*model->activations());
    model->backward(up[0]);
    std::vector<float> g(static_cast<size_t>(params->numel()));
    cuda::copy_to_host(g.data(), params->grads(), g.size() * sizeof(float), stream.get());
    double s[2];
    cuda::copy_to_host(s, sums.data(), sizeof(s), stream.get());
    std::vector<double> out(g.begin(), g.end());
    out.push_back(s[0]);
    out.push_back(s[1]);
    return out;
  }

  void set_value(const std::string& name, size_t element, float v) {
    const int i = params->require(name);
    std::vector<float> w(static_cast<size_t>(params->at(i).info.numel()));
    params->read_value(i, w);
    w[element] = v;
    params->write_value(i, w);
  }
};

Recipe recipe_named(const std::string& name, std::vector<int> bf16_layers = {}) {
  Recipe r = load_recipe(name);
  r.bf16_layers = std::move(bf16_layers);
  return r;
}

// Packed bytes of one NVFP4 [rows x cols] operand: 4-bit codes, one E4M3 scale per 16, outer scales.
size_t packed_bytes(size_t rows, size_t cols, OuterScale outer) {
  return rows * cols / 2 + rows * cols / 16 +
         (outer == OuterScale::kTensor ? 1 : rows * cols / 128) * sizeof(float);
}

TEST(CudaOlmo2Memory, Nvfp4ArenaIsSmallerThanBf16ByTheLinearInputs) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // olmo2-30m's proportions (GPT-2 vocabulary: the logits dwarf the linears' workspace).
  const ModelConfig cfg = model_preset("olmo2-30m");
  const Batch batch = random_batch(rng, cfg, 2, 128 * std::uniform_int_distribution<int>(1, 4)(rng));
  const size_t n = batch.tokens.size(), d = cfg.d_model, ff = cfg.d_ff;
  const size_t per_layer = input_bytes(cfg, {true, true, true}, n);

  Rig bf(cfg, Recipe{}, seed);
  bf.forward(batch);
  const auto rb = bf.model->memory_report();
  std::cout << "[" << cfg.name << ", bf16, " << n << " rows] " << bf.model->memory_summary() << "\n";
  EXPECT_EQ(rb.saved_input_bytes, cfg.n_layers * per_layer);
  EXPECT_EQ(rb.linear_workspace_bytes, 0u);
  EXPECT_EQ(rb.linear_kept_bytes, 0u);

  const std::vector<std::pair<size_t, size_t>> linears = {
      {d, 3 * d}, {d, d}, {d, 2 * ff}, {ff, d}};  // (in, out)
  for (const char* name : {"nvidia-nvfp4", "tetrajet-v2-base"}) {
    const Recipe recipe = recipe_named(name);
    Rig q(cfg, recipe, seed);
    q.forward(batch);
    const auto rq = q.model->memory_report();
    std::cout << "[" << cfg.name << ", " << name << ", " << n << " rows] " << q.model->memory_summary()
              << "\n";
    EXPECT_EQ(rq.saved_input_bytes, 0u) << name;
    EXPECT_GT(rq.linear_workspace_bytes, 0u) << name;
    EXPECT_LT(rq.linear_workspace_bytes, n * cfg.vocab_size * sizeof(bf16)) << name;
    // The workspace hides under the logits and the transient input under the backward buffers: the arena
    // shrinks by exactly the inputs the BF16 model keeps.
    EXPECT_LT(rq.arena_bytes, rb.arena_bytes) << name;
    EXPECT_EQ(rb.arena_bytes - rq.arena_bytes, cfg.n_layers * per_layer) << name;
    // What the quantized linears keep instead: Q6 = X^T packed, and Q4 = W^T (aligned) or the 16x16 Q2.
    const LinearPolicy& p = recipe.linear;
    size_t kept_x = 0, kept_w = 0;
    for (const auto& [in, out] : linears) {
      kept_x += packed_bytes(in, n, p[Operand::kQ6Xt].outer);
      kept_w += p[Operand::kQ4Wt].source == QuantSource::kReuse
                    ? packed_bytes(out, in, p[Operand::kQ2W].outer)
                    : packed_bytes(in, out, p[Operand::kQ4Wt].outer);
    }
    EXPECT_EQ(rq.linear_kept_bytes, cfg.n_layers * (kept_x + kept_w)) << name;
    // The packed X^T of all four linears (4.5 bits and block128 scales an element) costs less than the
    // three BF16 inputs they replace.
    EXPECT_LT(cfg.n_layers * kept_x, rb.saved_input_bytes) << name;
  }
  // Layers kept in BF16 save their inputs again, and only theirs.
  Rig mixed(cfg, recipe_named("tetrajet-v2-base", {-1}), seed);
  mixed.forward(batch);
  const auto rm = mixed.model->memory_report();
  EXPECT_EQ(rm.saved_input_bytes, per_layer);
  EXPECT_TRUE(mixed.model->activations()->layers.back().saved.x);
  EXPECT_FALSE(mixed.model->activations()->layers.front().saved.x);
}

// Poisoning (NaN bytes) what a quantized model no longer keeps, once it is dead, changes no gradient bit: the
// shared transient input after the forward, the linears' workspace (over the logits) after the loss.
TEST(CudaOlmo2Memory, PoisoningTheTransientBuffersChangesNoGradient) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");  // the fallback attention: bit-reproducible
  const Batch batch = random_batch(rng, cfg, 2, 64 * std::uniform_int_distribution<int>(1, 4)(rng));
  for (const auto& [name, bf16_layers] : std::vector<std::pair<const char*, std::vector<int>>>{
           {"nvidia-nvfp4", {}}, {"tetrajet-v2-base", {}}, {"tetrajet-v2-base", {1}}}) {
    SCOPED_TRACE(std::string(name) + (bf16_layers.empty() ? "" : " with block 1 in BF16"));
    Rig rig(cfg, recipe_named(name, bf16_layers), seed);
    const auto clean = rig.gradients(batch, nullptr, nullptr);
    const size_t n = batch.tokens.size();
    const auto poisoned = rig.gradients(
        batch,
        [&](const cuda::Activations& a) {
          ASSERT_NE(a.transient_input, nullptr);
          const size_t bytes = n * static_cast<size_t>(std::max(cfg.d_model, cfg.d_ff)) * sizeof(bf16);
          FP4_CUDA_CHECK(cudaMemsetAsync(a.transient_input, 0xff, bytes, rig.stream.get()));
        },
        [&](const cuda::Activations& a) {
          ASSERT_NE(a.linear_workspace, nullptr);
          FP4_CUDA_CHECK(
              cudaMemsetAsync(a.linear_workspace, 0xff, a.linear_workspace_bytes, rig.stream.get()));
        });
    ASSERT_EQ(poisoned.size(), clean.size());
    size_t differ = 0, nonfinite = 0;
    for (size_t i = 0; i < clean.size(); ++i) {
      differ += poisoned[i] != clean[i];
      nonfinite += !std::isfinite(poisoned[i]);
    }
    EXPECT_EQ(differ, 0u);
    EXPECT_EQ(nonfinite, 0u);
    EXPECT_GT(clean.back(), 0.0);  // a real loss
    // The unsaved inputs of block 1 in BF16 are per layer again.
    if (!bf16_layers.empty()) EXPECT_TRUE(rig.model->activations()->layers[1].saved.h);
  }
}

// The names of non-finite activations, as the CPU model gives them, with a note where the CUDA model judged
// an input it no longer keeps by the output of the quantized linear that read it.
TEST(CudaOlmo2Memory, NonFiniteActivationsAreStillNamed) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");
  const Batch batch = random_batch(rng, cfg, 1, 128);
  const size_t d = cfg.d_model;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::string param;
    size_t element;
    std::string note;  // where the quantized model looks instead
  };
  const std::vector<Case> cases = {
      {"embed", static_cast<size_t>(batch.tokens[5]) * d + 3, "judged by blocks.0.attn.wqkv's output"},
      {"blocks.0.attn_norm", 7, "judged by blocks.0.mlp.w_gate_up's output"},
      {"blocks.0.mlp_norm", 11, "judged by blocks.1.attn.wqkv's output"},
      {"blocks.1.mlp_norm", 2, ""}};  // the last block's output is the FP32 residual stream, always kept
  for (const char* name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    const Recipe recipe = recipe_named(name);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(name) + ", NaN in " + c.param);
      Olmo2Model cpu(cfg, recipe);
      cpu.init_parameters(seed);
      cpu.quant_context().seed = seed;
      cpu.params().value(cpu.params().require(c.param))[c.element] = nan;
      cpu.forward(batch.tokens.data(), batch.batch, batch.seq);
      const std::string want = cpu.first_nonfinite_activation();
      ASSERT_FALSE(want.empty());

      Rig rig(cfg, recipe, seed);
      rig.set_value(c.param, c.element, nan);
      rig.forward(batch);
      const std::string got = rig.model->first_nonfinite_activation();
      const bool quantized = recipe.linear.quantized();
      EXPECT_EQ(got, want + (quantized && !c.note.empty() ? " (not kept: " + c.note + ")" : ""));
    }
    Rig clean(cfg, recipe, seed);
    clean.forward(batch);
    EXPECT_EQ(clean.model->first_nonfinite_activation(), "") << name;
  }
}

// The engine re-lends the linears their workspace when the arena grows: a step over a larger batch in between
// leaves the gradients of a batch bit for bit as they were.
TEST(CudaOlmo2Memory, GradientsRepeatAfterTheArenaGrows) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");
  const Batch small = random_batch(rng, cfg, 1, 128), large = random_batch(rng, cfg, 4, 128);
  for (const char* name : {"nvidia-nvfp4", "tetrajet-v2-base"}) {
    auto engine = make_cuda_engine(cfg, load_recipe(name), seed);
    auto* probe = dynamic_cast<GradientProbe*>(engine.get());
    ASSERT_NE(probe, nullptr);
    auto grads = [&] {
      std::vector<float> all;
      for (const auto& p : engine->parameters()) {
        std::vector<float> g(static_cast<size_t>(p.numel()));
        probe->read_gradient(p.name, g);
        all.insert(all.end(), g.begin(), g.end());
      }
      return all;
    };
    const StepStats a = probe->compute_gradients({&small, 1});
    const auto ga = grads();
    const StepStats l = probe->compute_gradients({&large, 1});
    EXPECT_TRUE(std::isfinite(l.loss)) << name;
    const StepStats b = probe->compute_gradients({&small, 1});
    EXPECT_EQ(b.loss, a.loss) << name;
    EXPECT_EQ(b.grad_norm, a.grad_norm) << name;
    EXPECT_TRUE(grads() == ga) << name;
  }
}

// A lent workspace too small for the rows is refused, naming the layer.
TEST(CudaOlmo2Memory, QuantizedLinearRefusesATooSmallWorkspace) {
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("tetrajet-v2-base");
  const int in = cfg.d_model, out = cfg.d_ff, n = 128;
  DeviceBuffer<float> master(static_cast<size_t>(in) * out), grad(master.size());
  DeviceBuffer<bf16> value(master.size()), x(static_cast<size_t>(n) * in), y(static_cast<size_t>(n) * out);
  FP4_CUDA_CHECK(cudaMemset(master.data(), 0, master.bytes()));
  FP4_CUDA_CHECK(cudaMemset(x.data(), 0, x.bytes()));
  const QuantContext ctx{1, 0};
  const LinearSpec spec{"test.w", in, out, recipe.linear, recipe.name, 3, &ctx};
  cuda::GemmRunner gemm;
  auto layer = cuda::make_linear_cuda(spec, cuda::DeviceWeight{master.data(), value.data(), grad.data()},
                                      gemm, nullptr);
  EXPECT_FALSE(layer->backward_reads_input());
  const size_t need = layer->workspace_bytes(n);
  EXPECT_GT(need, layer->workspace_bytes(n / 2));
  DeviceBuffer<uint8_t> small(need - 256);
  layer->lend_workspace(small.data(), small.size());
  const std::string msg = error_of([&] { layer->forward(x.data(), y.data(), n); });
  EXPECT_NE(msg.find("test.w"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lent workspace"), std::string::npos) << msg;
  DeviceBuffer<uint8_t> enough(need);
  layer->lend_workspace(enough.data(), enough.size());
  layer->forward(x.data(), y.data(), n);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_GT(layer->kept_bytes(), 0u);

  const LinearSpec plain{"test.bf16", in, out, LinearPolicy{}, "bf16", 3, &ctx};
  auto bf = cuda::make_linear_cuda(plain, cuda::DeviceWeight{master.data(), value.data(), grad.data()}, gemm,
                                   nullptr);
  EXPECT_TRUE(bf->backward_reads_input());
  EXPECT_EQ(bf->workspace_bytes(n), 0u);
  EXPECT_EQ(bf->kept_bytes(), 0u);
}

}  // namespace
}  // namespace fp4
