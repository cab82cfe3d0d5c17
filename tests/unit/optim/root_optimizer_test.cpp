// RootOptimizer ("root", "q-root", and the "+q-adamw" forms): routing by root_eligible, each ROOT matrix
// stepped exactly as root_step with the StepHyper's lr / weight decay, the rest exactly as AdamW (or as
// Q-AdamW), save/load bit for bit, whole-tensor ZeRO-1 shards equal to one process, and clear refusals (a
// shard cutting a tensor, bad hyper-parameters, another optimizer's state).
#include "optim/root_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "model/engine_common.h"
#include "model/state_index.h"
#include "optim/adamw.h"
#include "thread_comm.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

uint64_t fresh_seed() {
  static std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
  std::printf("[ seed ] %llu\n", static_cast<unsigned long long>(s));
  return s;
}

// A model-like set: embedding, a fused matrix, a gain vector without decay, a small matrix, the head,
// and a 3-D tensor (not a matrix: AdamW's). Random values and gradients.
ParameterSet make_params(std::mt19937_64& rng) {
  ParameterSet ps;
  ps.add("embed", {40, 32}, false, ParamInit::kNormal);
  ps.add("blocks.0.attn.wqkv", {96, 32}, true, ParamInit::kNormal);
  ps.add("blocks.0.attn_norm", {32}, false, ParamInit::kOnes);
  ps.add("blocks.0.mlp.w_down", {32, 48}, true, ParamInit::kNormal);
  ps.add("blocks.0.odd", {2, 3, 4}, true, ParamInit::kNormal);
  ps.add("blocks.0.nodecay", {16, 32}, false, ParamInit::kNormal);
  ps.add("lm_head", {40, 32}, true, ParamInit::kNormal);
  ps.allocate();
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (float& v : ps.values()) v = d(rng);
  for (float& g : ps.grads()) g = d(rng);
  return ps;
}

void new_grads(ParameterSet& ps, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (float& g : ps.grads()) g = d(rng);
}

// What an engine saves: the parameter values (AdamW's state check reads them too) and the optimizer's.
std::vector<StateTensor> engine_state(const Optimizer& opt, const ParameterSet& ps) {
  std::vector<StateTensor> out;
  for (int i = 0; i < ps.size(); ++i)
    out.push_back(f32_state_tensor(ps.at(i).info.name, ps.at(i).info.shape, ps.value(i)));
  for (auto& t : opt.save_state(ps)) out.push_back(std::move(t));
  return out;
}

StepHyper hyper() {
  StepHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  return h;
}

TEST(RootOptimizer, RoutingFollowsRootEligible) {
  auto rng = std::mt19937_64(fresh_seed());
  const ParameterSet ps = make_params(rng);
  RootOptimizer opt(ps, {}, 1, NsPrecision::kFp32);
  std::vector<std::string> want_root, want_adam;
  for (int i = 0; i < ps.size(); ++i)
    (root_eligible(ps.at(i).info) ? want_root : want_adam).push_back(ps.at(i).info.name);
  EXPECT_EQ(opt.root_parameters(), want_root);
  EXPECT_EQ(opt.adamw_parameters(), want_adam);
  EXPECT_EQ(opt.root_parameters(),
            (std::vector<std::string>{"blocks.0.attn.wqkv", "blocks.0.mlp.w_down", "blocks.0.nodecay"}));
  // ROOT keeps one FP32 moment, AdamW two, for exactly their own parameters.
  int64_t root_n = 0, adam_n = 0;
  for (int i = 0; i < ps.size(); ++i)
    (root_eligible(ps.at(i).info) ? root_n : adam_n) += ps.at(i).info.numel();
  EXPECT_EQ(opt.state_bytes(), 4 * root_n + 8 * adam_n);
  EXPECT_EQ(opt.name(), "root");
  EXPECT_EQ(RootOptimizer(ps, {}, 1, NsPrecision::kNvfp4).name(), "q-root");
  EXPECT_EQ(RootOptimizer(ps, {}, 1, NsPrecision::kBf16).name(), "root-bf16");
  // With Q-AdamW for the rest: the same routing, the rest's state packed (under a fifth of AdamW's).
  RootOptions q;
  q.rest = RootRest::kQAdamW;
  const RootOptimizer qopt(ps, {}, 1, NsPrecision::kNvfp4, q);
  EXPECT_EQ(qopt.name(), "q-root+q-adamw");
  EXPECT_EQ(qopt.root_parameters(), want_root);
  EXPECT_EQ(qopt.adamw_parameters(), want_adam);
  EXPECT_GT(qopt.state_bytes(), 4 * root_n);
  EXPECT_LT(qopt.state_bytes() - 4 * root_n, 8 * adam_n / 5);
  for (const char* name :
       {"root", "root-bf16", "q-root", "root+q-adamw", "root-bf16+q-adamw", "q-root+q-adamw"}) {
    const auto choice = parse_root_optimizer_name(name);
    ASSERT_TRUE(choice.has_value()) << name;
    EXPECT_EQ(root_optimizer_name(choice->precision, choice->rest), name);
    EXPECT_EQ(make_optimizer(name, ps, {}, 1)->name(), name);
  }
  for (const char* name : {"q-adamw", "q-root+adamw", "q-root+", "+q-adamw", "Q-ROOT"})
    EXPECT_FALSE(parse_root_optimizer_name(name).has_value()) << name;
}

// "+q-adamw": the ROOT matrices step exactly as with AdamW for the rest, and the other tensors exactly as a
// Q-AdamW over the whole set steps them (the selection keeps each tensor's SR key and its own amax), bit
// for bit over three steps; the state holds Q-AdamW's tensors of the other parameters only.
TEST(RootOptimizer, QAdamWRestStepsAsRootAndQAdamW) {
  for (const NsPrecision prec : {NsPrecision::kFp32, NsPrecision::kNvfp4}) {
    SCOPED_TRACE(root_optimizer_name(prec));
    const uint64_t seed = fresh_seed();
    auto rng = std::mt19937_64(seed);
    ParameterSet ps = make_params(rng);
    ParameterSet with_adam = ps, with_q = ps;
    RootOptions q;
    q.rest = RootRest::kQAdamW;
    RootOptimizer opt(ps, {}, seed, prec, q);
    RootOptimizer root_ref(with_adam, {}, seed, prec);  // its ROOT matrices are the reference
    QAdamW q_ref(with_q, {}, seed);                     // its other tensors are the reference
    for (int s = 0; s < 3; ++s) {
      if (s) {
        new_grads(ps, rng);
        std::copy(ps.grads().begin(), ps.grads().end(), with_adam.grads().begin());
        std::copy(ps.grads().begin(), ps.grads().end(), with_q.grads().begin());
      }
      opt.step(ps, hyper());
      root_ref.step(with_adam, hyper());
      q_ref.step(with_q, hyper());
      for (int i = 0; i < ps.size(); ++i) {
        const ParameterSet& want = root_eligible(ps.at(i).info) ? with_adam : with_q;
        ASSERT_TRUE(std::equal(ps.value(i).begin(), ps.value(i).end(), want.value(i).begin()))
            << "step " << s << " " << ps.at(i).info.name;
      }
    }
    const std::vector<StateTensor> state = engine_state(opt, ps);
    const StateIndex index(state);
    EXPECT_TRUE(index.has("root.m.blocks.0.attn.wqkv"));
    EXPECT_TRUE(index.has("qadamw.m.codes.embed"));
    EXPECT_TRUE(index.has("qadamw.v.mean.blocks.0.attn_norm"));
    EXPECT_TRUE(index.has("qadamw.step"));
    EXPECT_FALSE(index.has("qadamw.m.codes.blocks.0.attn.wqkv"));
    EXPECT_FALSE(index.has("adamw.m.embed"));
    EXPECT_FALSE(index.has("adamw.step"));
  }
}

// Two steps of the optimizer equal root_step per matrix and AdamW on a copy, bit for bit.
TEST(RootOptimizer, StepsMatchRootStepAndAdamW) {
  for (const NsPrecision prec : {NsPrecision::kFp32, NsPrecision::kNvfp4, NsPrecision::kBf16}) {
    const uint64_t seed = fresh_seed();
    auto rng = std::mt19937_64(seed);
    ParameterSet ps = make_params(rng);
    ParameterSet ref = ps;
    RootOptimizer opt(ps, {}, seed, prec);
    AdamW adam(ref);
    std::vector<std::vector<float>> moms;
    for (int i = 0; i < ref.size(); ++i) moms.emplace_back(static_cast<size_t>(ref.at(i).info.numel()), 0.0f);
    RootOptions ro;
    ro.precision = prec;
    for (int s = 0; s < 2; ++s) {
      if (s) {
        new_grads(ps, rng);
        std::copy(ps.grads().begin(), ps.grads().end(), ref.grads().begin());
      }
      const std::vector<float> before(ref.values().begin(), ref.values().end());
      opt.step(ps, hyper());
      adam.step(ref, hyper());  // right for the AdamW parameters; ROOT ones are redone below
      for (int i = 0; i < ref.size(); ++i) {
        const auto& info = ref.at(i).info;
        if (!root_eligible(info)) continue;
        auto w = ref.value(i);
        std::copy(before.begin() + ref.at(i).offset, before.begin() + ref.at(i).offset + info.numel(),
                  w.begin());
        root_step(w, ref.grad(i), moms[static_cast<size_t>(i)], info.shape[0], info.shape[1], hyper().lr,
                  info.weight_decay ? hyper().weight_decay : 0.0f, ro, info.name);
      }
      ASSERT_EQ(std::vector<float>(ps.values().begin(), ps.values().end()),
                std::vector<float>(ref.values().begin(), ref.values().end()))
          << "step " << s << " " << root_optimizer_name(prec);
    }
    EXPECT_EQ(opt.step_count(), 2);
    EXPECT_EQ(opt.last_step_info().size(), 3u);
    for (const auto& inf : opt.last_step_info()) EXPECT_GT(inf.clipped, 0);  // p99 clips about 1%
  }
}

// Q-Root and root-bf16 (the state's tensors are root's; the precision is the recipe's optimizer field,
// stored with the checkpoint's recipe).
TEST(RootOptimizer, SaveLoadResumesBitForBit) {
  for (const auto& [prec, rest] :
       {std::pair{NsPrecision::kNvfp4, RootRest::kAdamW}, std::pair{NsPrecision::kBf16, RootRest::kAdamW},
        std::pair{NsPrecision::kNvfp4, RootRest::kQAdamW}}) {
    SCOPED_TRACE(root_optimizer_name(prec, rest));
    const uint64_t seed = fresh_seed();
    auto rng = std::mt19937_64(seed);
    ParameterSet ps = make_params(rng);
    RootOptions opts;
    opts.rest = rest;
    RootOptimizer a(ps, {}, seed, prec, opts);
    for (int s = 0; s < 3; ++s) {
      a.step(ps, hyper());
      new_grads(ps, rng);
    }
    const auto state = engine_state(a, ps);
    const StateIndex index(state);
    EXPECT_TRUE(index.has("root.m.blocks.0.attn.wqkv"));
    EXPECT_EQ(index.has("adamw.m.embed"), rest == RootRest::kAdamW);
    EXPECT_EQ(index.has("qadamw.m.codes.embed"), rest == RootRest::kQAdamW);
    EXPECT_FALSE(index.has("adamw.m.blocks.0.attn.wqkv"));
    EXPECT_FALSE(index.has("root.m.embed"));
    ParameterSet pb = ps;
    RootOptimizer b(pb, {}, seed + 1, prec, opts);  // the SR seed comes from the state
    b.load_state(index, pb);
    EXPECT_EQ(b.step_count(), 3);
    for (int s = 0; s < 3; ++s) {
      a.step(ps, hyper());
      b.step(pb, hyper());
      new_grads(ps, rng);
      std::copy(ps.grads().begin(), ps.grads().end(), pb.grads().begin());
    }
    EXPECT_EQ(std::vector<float>(ps.values().begin(), ps.values().end()),
              std::vector<float>(pb.values().begin(), pb.values().end()));
    const auto sa = a.save_state(ps), sb = b.save_state(pb);
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].bytes, sb[i].bytes) << sa[i].name;
  }
}

TEST(RootOptimizer, BadStatesAreRefusedBeforeAnyChange) {
  const uint64_t seed = fresh_seed();
  auto rng = std::mt19937_64(seed);
  ParameterSet ps = make_params(rng);
  RootOptimizer a(ps, {}, seed, NsPrecision::kFp32);
  a.step(ps, hyper());
  auto state = engine_state(a, ps);
  RootOptimizer b(ps, {}, seed, NsPrecision::kFp32);
  // An AdamW state: no root.step, the message names the field.
  AdamWOptimizer adam(ps, {});
  const std::vector<StateTensor> adam_state = engine_state(adam, ps);
  try {
    b.load_state(StateIndex(adam_state), ps);
    ADD_FAILURE() << "root loaded an adamw state";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("root.step"));
    EXPECT_THAT(e.what(), HasSubstr("'optimizer'"));
  }
  // A missing ROOT moment, and a missing AdamW moment: named, and nothing changes.
  for (const std::string drop : {"root.m.blocks.0.mlp.w_down", "adamw.v.blocks.0.attn_norm"}) {
    std::vector<StateTensor> cut;
    for (const auto& t : state)
      if (t.name != drop) cut.push_back(t);
    try {
      b.load_state(StateIndex(cut), ps);
      ADD_FAILURE() << "loaded a state without " << drop;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(drop));
    }
    EXPECT_EQ(b.step_count(), 0);
    EXPECT_EQ(b.state_bytes(), a.state_bytes());
  }
  // The other parameters' optimizer must be the one that wrote them, both ways, named in the message.
  RootOptions q;
  q.rest = RootRest::kQAdamW;
  RootOptimizer qa(ps, {}, seed, NsPrecision::kFp32, q);
  qa.step(ps, hyper());
  const std::vector<StateTensor> q_state = engine_state(qa, ps);
  using Case = std::tuple<RootOptimizer*, const std::vector<StateTensor>*, const char*>;
  for (const auto& [loader, from, want] :
       {Case{&b, &q_state, "Q-AdamW ('qadamw.step')"}, Case{&qa, &state, "AdamW ('adamw.step')"}}) {
    try {
      loader->load_state(StateIndex(*from), ps);
      ADD_FAILURE() << loader->name() << " loaded the other rest optimizer's state";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(want));
      EXPECT_THAT(e.what(), HasSubstr(loader->name()));
    }
  }
  EXPECT_EQ(b.step_count(), 0);
  EXPECT_EQ(qa.step_count(), 1);
  // A Q-AdamW moment missing: named before anything changes.
  std::vector<StateTensor> cut;
  for (const auto& t : q_state)
    if (t.name != "qadamw.v.scales.lm_head") cut.push_back(t);
  RootOptimizer qb(ps, {}, seed, NsPrecision::kFp32, q);
  try {
    qb.load_state(StateIndex(cut), ps);
    ADD_FAILURE() << "loaded a state without qadamw.v.scales.lm_head";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("qadamw.v.scales.lm_head"));
  }
  EXPECT_EQ(qb.step_count(), 0);
}

// LoRA-SVD zeroes its factors' moments at a realignment: the factors are ROOT matrices, which "+q-adamw"
// zeroes as ROOT does; a range inside a Q-AdamW tensor is refused, naming it, since its moments are packed.
TEST(RootOptimizer, QAdamWRestResetsRootMomentsAndRefusesItsOwn) {
  const uint64_t seed = fresh_seed();
  auto rng = std::mt19937_64(seed);
  ParameterSet ps = make_params(rng), ref = ps;
  RootOptions q;
  q.rest = RootRest::kQAdamW;
  RootOptimizer opt(ps, {}, seed, NsPrecision::kFp32, q), plain(ref, {}, seed, NsPrecision::kFp32, q);
  opt.step(ps, hyper());
  plain.step(ref, hyper());
  const Parameter& w = ps.at(3);  // blocks.0.mlp.w_down, a ROOT matrix
  opt.reset_moments({{w.offset + 10, w.offset + 200}});
  const std::vector<StateTensor> sa = engine_state(opt, ps), sb = engine_state(plain, ref);
  const StateIndex a(sa), b(sb);
  const auto& ma = a.require("root.m.blocks.0.mlp.w_down", "F32", w.info.shape).bytes;
  const auto& mb = b.require("root.m.blocks.0.mlp.w_down", "F32", w.info.shape).bytes;
  for (size_t e = 0; e < static_cast<size_t>(w.info.numel()); ++e) {
    float va, vb;
    std::memcpy(&va, ma.data() + 4 * e, 4);
    std::memcpy(&vb, mb.data() + 4 * e, 4);
    if (e >= 10 && e < 200)
      ASSERT_EQ(va, 0.0f) << e;
    else
      ASSERT_EQ(va, vb) << e;
  }
  EXPECT_EQ(a.require("qadamw.m.codes.embed", "U8", {10, 64}).bytes,
            b.require("qadamw.m.codes.embed", "U8", {10, 64}).bytes);
  try {
    opt.reset_moments({{ps.at(0).offset + 3, ps.at(0).offset + 4}});
    ADD_FAILURE() << "reset a Q-AdamW tensor's moments";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("embed"));
    EXPECT_THAT(e.what(), HasSubstr("128-element tiles"));
  }
}

// Shards of whole tensors: rank q holds the tensors [first[q], first[q + 1]) of ps (first.back() = size).
std::vector<IndexRange> tensor_shards(const ParameterSet& ps, const std::vector<int>& first) {
  std::vector<IndexRange> out;
  const auto at = [&](int t) { return t < ps.size() ? ps.at(t).offset : ps.numel(); };
  for (size_t q = 0; q + 1 < first.size(); ++q) out.push_back({at(first[q]), at(first[q + 1])});
  return out;
}

struct ShardedRun {
  std::vector<float> values;
  std::vector<StateTensor> state;  // rank 0's gathered state (every rank's must be the same)
};

// `steps` steps from ps's values (and `from`, if given) on len(first) - 1 thread ranks, each stepping its
// own tensors, then the values gathered as the engines do; gradients are drawn from (seed, step).
ShardedRun run_sharded(const ParameterSet& ps0, NsPrecision prec, RootRest rest, uint64_t seed,
                       const std::vector<int>& first, int first_step, int steps,
                       const std::vector<StateTensor>* from) {
  const int world = static_cast<int>(first.size()) - 1;
  ShardedRun out;
  std::vector<std::vector<uint8_t>> rank_states(static_cast<size_t>(world));
  std::string failure;
  std::mutex mu;
  test::run_threads(world, [&](Communicator& comm) {
    try {
      ParameterSet ps = ps0;
      const std::vector<IndexRange> shards = tensor_shards(ps, first);
      RootOptions opts;
      opts.rest = rest;
      RootOptimizer opt(ps, OptimizerPlacement{&comm, shards}, seed, prec, opts);
      if (from) opt.load_state(StateIndex(*from), ps);
      for (int s = first_step; s < first_step + steps; ++s) {
        auto rng = std::mt19937_64(seed + 1000 + static_cast<uint64_t>(s));
        new_grads(ps, rng);
        opt.step(ps, hyper());
        comm.all_gather(ps.values().data(), shards);
      }
      std::vector<StateTensor> st = opt.save_state(ps);
      std::vector<uint8_t> bytes;
      for (const auto& t : st) bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
      const std::lock_guard<std::mutex> lock(mu);
      rank_states[static_cast<size_t>(comm.rank())] = std::move(bytes);
      if (comm.rank() == 0) {
        out.values.assign(ps.values().begin(), ps.values().end());
        for (int i = 0; i < ps.size(); ++i)
          out.state.push_back(f32_state_tensor(ps.at(i).info.name, ps.at(i).info.shape, ps.value(i)));
        for (auto& t : st) out.state.push_back(std::move(t));
      }
    } catch (const Error& e) {
      const std::lock_guard<std::mutex> lock(mu);
      failure = e.what();
    }
  });
  if (!failure.empty()) ADD_FAILURE() << failure;
  for (int q = 1; q < world; ++q)
    EXPECT_EQ(rank_states[static_cast<size_t>(q)], rank_states[0]) << "rank " << q;
  return out;
}

// ROOT under ZeRO-1 with whole-tensor shards: every rank steps its own tensors exactly as one process does
// (the host communicator's sums are exact here, the gradients being given), so 1, 2, 3 and 8 ranks (some of
// them empty) give the same values and the same saved state bit for bit, and a state saved by 3 ranks resumes
// on 2 and on 1 as the uninterrupted run.
TEST(RootOptimizer, WholeTensorShardsMatchOneRankAndResumeOnOtherWorldSizes) {
  for (const auto& [prec, rest] :
       {std::pair{NsPrecision::kFp32, RootRest::kAdamW}, std::pair{NsPrecision::kBf16, RootRest::kAdamW},
        std::pair{NsPrecision::kNvfp4, RootRest::kAdamW},
        std::pair{NsPrecision::kNvfp4, RootRest::kQAdamW}}) {
    SCOPED_TRACE(root_optimizer_name(prec, rest));
    const uint64_t seed = fresh_seed();
    auto rng = std::mt19937_64(seed);
    const ParameterSet ps = make_params(rng);  // 7 tensors
    const ShardedRun one = run_sharded(ps, prec, rest, seed, {0, 7}, 0, 4, nullptr);
    const auto same = [&](const ShardedRun& r, const char* what) {
      EXPECT_EQ(r.values, one.values) << what;
      ASSERT_EQ(r.state.size(), one.state.size()) << what;
      for (size_t i = 0; i < r.state.size(); ++i)
        EXPECT_EQ(r.state[i].bytes, one.state[i].bytes) << what << ": " << r.state[i].name;
    };
    same(run_sharded(ps, prec, rest, seed, {0, 3, 7}, 0, 4, nullptr), "2 ranks");
    same(run_sharded(ps, prec, rest, seed, {0, 2, 5, 7}, 0, 4, nullptr), "3 ranks");
    same(run_sharded(ps, prec, rest, seed, {0, 1, 1, 2, 3, 4, 5, 7, 7}, 0, 4, nullptr), "8 ranks, two empty");
    const ShardedRun half = run_sharded(ps, prec, rest, seed, {0, 2, 5, 7}, 0, 2, nullptr);
    ParameterSet mid = ps;
    std::copy(half.values.begin(), half.values.end(), mid.values().begin());
    same(run_sharded(mid, prec, rest, seed, {0, 4, 7}, 2, 2, &half.state), "3 ranks, resumed on 2");
    same(run_sharded(mid, prec, rest, seed, {0, 7}, 2, 2, &half.state), "3 ranks, resumed on 1");
  }
}

TEST(RootOptimizer, RefusesShardsThatCutATensorAndBadHyper) {
  auto rng = std::mt19937_64(fresh_seed());
  ParameterSet ps = make_params(rng);
  std::vector<std::string> msgs(2);
  const int64_t cut = ps.at(1).offset + 5;  // inside blocks.0.attn.wqkv
  test::run_threads(2, [&](Communicator& comm) {
    OptimizerPlacement place{&comm, {{0, cut}, {cut, ps.numel()}}};
    try {
      RootOptimizer opt(ps, place, 1, NsPrecision::kFp32);
    } catch (const Error& e) {
      msgs[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  for (const auto& m : msgs) {
    EXPECT_THAT(m, HasSubstr("cuts parameter blocks.0.attn.wqkv"));
    EXPECT_THAT(m, HasSubstr("optimizer 'root'"));
    EXPECT_THAT(m, HasSubstr("whole tensors"));
  }
  RootOptions bad;
  bad.clip_quantile = 1.5;
  EXPECT_THROW(RootOptimizer(ps, {}, 1, NsPrecision::kFp32, bad), Error);
  RootOptimizer opt(ps, {}, 1, NsPrecision::kFp32);
  const std::vector<float> before(ps.values().begin(), ps.values().end());
  StepHyper h = hyper();
  h.lr = -1.0f;
  EXPECT_THROW(opt.step(ps, h), Error);
  h = hyper();
  h.weight_decay = std::nanf("");
  EXPECT_THROW(opt.step(ps, h), Error);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_EQ(std::vector<float>(ps.values().begin(), ps.values().end()), before);
  EXPECT_THROW(make_optimizer("Root", ps, {}, 1), Error);
  EXPECT_EQ(make_optimizer("q-root", ps, {}, 1)->name(), "q-root");
  EXPECT_EQ(make_optimizer("root-bf16", ps, {}, 1)->name(), "root-bf16");
  EXPECT_TRUE(is_known_optimizer("root-bf16"));
  EXPECT_THROW(make_optimizer("root-fp16", ps, {}, 1), Error);
  EXPECT_TRUE(is_known_optimizer("root"));
  EXPECT_FALSE(is_known_optimizer("muon"));
}

}  // namespace
}  // namespace fp4
