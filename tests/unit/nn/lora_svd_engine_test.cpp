// LoRA-SVD in the CPU engine: the tiny model trains with tetrajet-v2-lorasvd, the factors start as each
// weight's top-r part, a realignment resets the factors' AdamW moments and keeps W_res's (and W_eff), and
// resuming from a checkpoint before, at or after a realignment repeats the run bit for bit, and data-parallel
// ranks realign alike.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../model/engine_training_util.h"
#include "../optim/thread_comm.h"
#include "core/error.h"
#include "dist/shard_plan.h"
#include "model/cpu_engine.h"
#include "nn/lora_svd.h"
#include "optim/root.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using testing::all_parameters;
using testing::next_token_batch;
uint32_t fresh_seed() {
  return testing::logged_seed();
}

Recipe lora_recipe(int realign_every, int rank = 16) {
  return load_recipe("tetrajet-v2-lorasvd", {"lora_svd.realign_every=" + std::to_string(realign_every),
                                             "lora_svd.rank=" + std::to_string(rank)});
}

std::vector<float> read(const TrainingEngine& e, const std::string& name) {
  for (const auto& p : e.parameters())
    if (p.name == name) {
      std::vector<float> v(size_t(p.numel()));
      e.read_parameter(name, v);
      return v;
    }
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

std::vector<float> state_f32(const std::vector<StateTensor>& state, const std::string& name) {
  for (const StateTensor& t : state)
    if (t.name == name) {
      std::vector<float> v(t.bytes.size() / 4);
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      return v;
    }
  ADD_FAILURE() << "no state tensor " << name;
  return {};
}

// W_res + L2 L1 (beta 1) of linear `w` [out x in] with rank r, in double.
std::vector<double> effective(const TrainingEngine& e, const std::string& w, int out, int in, int r) {
  const std::vector<float> res = read(e, w), l1 = read(e, w + ".lora_l1"), l2 = read(e, w + ".lora_l2");
  std::vector<double> eff(res.begin(), res.end());
  for (int i = 0; i < out; ++i)
    for (int j = 0; j < r; ++j)
      for (int c = 0; c < in; ++c)
        eff[size_t(i * in + c)] += double(l2[size_t(i * r + j)]) * l1[size_t(j * in + c)];
  return eff;
}

TEST(LoraSvdEngine, TinyModelTrainsWithThePreset) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("tetrajet-v2-lorasvd", {"lora_svd.realign_every=10"});
  EXPECT_EQ(recipe.lora_svd.rank, 32);
  auto engine = make_cpu_engine(cfg, recipe, seed);
  int factors = 0;
  for (const auto& p : engine->parameters())
    if (p.name.ends_with(".lora_l1") || p.name.ends_with(".lora_l2")) ++factors;
  EXPECT_EQ(factors, 2 * 4 * cfg.n_layers);  // every quantized linear of every block
  const std::vector<Batch> mb = {next_token_batch(cfg, 4, 64, seed)};
  StepHyper hyper;
  hyper.lr = 3e-3f;
  double first = 0, last = 0;
  for (int step = 1; step <= 30; ++step) {  // realigns after steps 10, 20 and 30
    const StepStats s = engine->train_step(mb, hyper);
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    if (step == 1) first = s.loss;
    last = s.loss;
  }
  std::cout << "tetrajet-v2-lorasvd: loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);
}

TEST(LoraSvdEngine, FactorsStartAsTheTopPartOfEachWeight) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const int r = 16;
  auto engine = make_cpu_engine(cfg, lora_recipe(100, r), seed);
  const std::string w = "blocks.1.mlp.w_down";  // [d x ff]
  const int out = cfg.d_model, in = cfg.d_ff;
  const std::vector<float> res = read(*engine, w), l2 = read(*engine, w + ".lora_l2");
  // W_res has nothing left in col(L2), and the factors are not zero.
  const std::vector<float> u = cholesky_qr2(l2.data(), out, r);
  double inside = 0, total = 0, l2sq = 0;
  for (int j = 0; j < r; ++j)
    for (int c = 0; c < in; ++c) {
      double d = 0;
      for (int i = 0; i < out; ++i) d += double(u[size_t(i * r + j)]) * res[size_t(i * in + c)];
      inside += d * d;
    }
  for (float v : res) total += double(v) * v;
  for (float v : l2) l2sq += double(v) * v;
  EXPECT_LT(std::sqrt(inside), 1e-4 * std::sqrt(total));
  EXPECT_GT(l2sq, 0.0);
}

TEST(LoraSvdEngine, RealignmentResetsTheFactorMomentsAndKeepsTheRest) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const int r = 16;
  auto realigned = make_cpu_engine(cfg, lora_recipe(3, r), seed);
  auto plain = make_cpu_engine(cfg, lora_recipe(1000, r), seed);  // the same run without the realignment
  StepHyper hyper;
  hyper.lr = 2e-3f;
  for (int s = 0; s < 3; ++s) {
    const std::vector<Batch> mb = {next_token_batch(cfg, 2, 64, seed + uint32_t(s))};
    realigned->train_step(mb, hyper);
    plain->train_step(mb, hyper);
  }
  const auto a = realigned->save_state(), b = plain->save_state();
  for (int l = 0; l < cfg.n_layers; ++l)
    for (const char* lin : {"attn.wqkv", "attn.wo", "mlp.w_gate_up", "mlp.w_down"}) {
      const std::string w = "blocks." + std::to_string(l) + "." + lin;
      for (const char* m : {"adamw.m.", "adamw.v."}) {
        EXPECT_EQ(state_f32(a, m + w), state_f32(b, m + w)) << m << w << " (W_res moments kept)";
        for (const std::string& f : {w + ".lora_l1", w + ".lora_l2"}) {
          const std::vector<float> ma = state_f32(a, m + f), mb = state_f32(b, m + f);
          EXPECT_TRUE(std::all_of(ma.begin(), ma.end(), [](float v) { return v == 0.0f; })) << m << f;
          EXPECT_FALSE(std::all_of(mb.begin(), mb.end(), [](float v) { return v == 0.0f; })) << m << f;
        }
      }
    }
  // The realignment changed the factors but not W_eff (up to FP32 rounding).
  const std::string w = "blocks.0.attn.wqkv";
  const int out = 3 * cfg.d_model, in = cfg.d_model;
  EXPECT_NE(read(*realigned, w + ".lora_l1"), read(*plain, w + ".lora_l1"));
  const std::vector<double> ea = effective(*realigned, w, out, in, r), eb = effective(*plain, w, out, in, r);
  for (size_t i = 0; i < ea.size(); ++i) ASSERT_NEAR(ea[i], eb[i], 1e-6 * (1 + std::fabs(eb[i]))) << i;
}

TEST(LoraSvdEngine, ResumeIsBitExactAcrossARealignment) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = lora_recipe(3, 8);  // realigns after steps 3 and 6
  std::vector<std::vector<Batch>> data;
  for (int s = 0; s < 7; ++s) data.push_back({next_token_batch(cfg, 2, 64, seed + uint32_t(s))});
  StepHyper hyper;
  hyper.lr = 2e-3f;
  testing::expect_resume_bit_exact(cfg, recipe, seed, data, hyper, {2, 3, 4});  // before, at, after the first
}

// Two ZeRO-1 ranks (threads): the realignment runs on every rank alike (parameters bit-identical across
// ranks afterwards), each rank zeroes the factors' moments of its shard, and W_res's moments survive. With
// AdamW on the 64-element plan, and with Q-Root (the factors and W_res are ROOT matrices) on the whole-tensor
// plan the trainer builds for it.
TEST(LoraSvdEngine, DataParallelRanksRealignAlike) {
  for (const char* optimizer : {"adamw", "q-root"}) {
    SCOPED_TRACE(optimizer);
    const bool root = std::string(optimizer) == "q-root";
    const uint32_t seed = fresh_seed();
    const ModelConfig cfg = model_preset("tiny");
    Recipe recipe = lora_recipe(2, 8);
    recipe.optimizer = optimizer;
    std::vector<std::vector<Batch>> data;
    for (int s = 0; s < 3; ++s) data.push_back({next_token_batch(cfg, 4, 64, seed + uint32_t(s))});
    std::vector<std::vector<float>> params(2);
    std::vector<std::vector<StateTensor>> states(2);
    std::vector<std::vector<IndexRange>> shards_seen(2);
    test::run_threads(2, [&](Communicator& comm) {
      auto e = make_cpu_engine(cfg, recipe, seed);
      const ShardPlan plan =
          root ? make_tensor_shard_plan(e->parameters(), 2, root_step_costs(e->parameters()))
               : make_shard_plan(e->parameters(), 2);
      std::vector<IndexRange> shards;
      for (const RankShard& r : plan.ranks) shards.push_back({r.begin, r.end});
      e->set_data_parallel({&comm, shards});
      StepHyper hyper;
      hyper.lr = 2e-3f;
      for (int s = 0; s < 2; ++s) e->train_step(data[size_t(s)], hyper);  // realigns after step 2
      const auto r = size_t(comm.rank());
      states[r] = e->save_state();  // collective: the moments of both shards
      params[r] = all_parameters(*e);
      shards_seen[r] = shards;
    });
    ASSERT_EQ(params[0].size(), params[1].size());
    EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0);
    // The shard boundary falls inside the parameter list: both ranks own some factor moments.
    EXPECT_GT(shards_seen[0][0].size(), 0);
    EXPECT_GT(shards_seen[0][1].size(), 0);
    const std::vector<std::string> moments =
        root ? std::vector<std::string>{"root.m."} : std::vector<std::string>{"adamw.m.", "adamw.v."};
    for (int l = 0; l < cfg.n_layers; ++l)
      for (const char* lin : {"attn.wqkv", "attn.wo", "mlp.w_gate_up", "mlp.w_down"}) {
        const std::string w = "blocks." + std::to_string(l) + "." + lin;
        for (const std::string& m : moments) {
          const std::vector<float> keep = state_f32(states[0], m + w);
          EXPECT_FALSE(std::all_of(keep.begin(), keep.end(), [](float v) { return v == 0.0f; })) << m << w;
          for (const std::string& f : {w + ".lora_l1", w + ".lora_l2"}) {
            const std::vector<float> z = state_f32(states[0], m + f);
            EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](float v) { return v == 0.0f; })) << m << f;
          }
        }
      }
  }
}

TEST(LoraSvdEngine, ARankTooLargeForALayerIsNamed) {
  const ModelConfig cfg =
      model_preset("tiny");  // d_model 128: the first linear is blocks.0.attn.wqkv [384 x 128]
  try {
    make_cpu_engine(cfg, lora_recipe(10, 128), 1);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.attn.wqkv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lora_svd.rank 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4
