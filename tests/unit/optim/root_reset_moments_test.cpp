// RootOptimizer::reset_moments (LoRA-SVD's realignment under root / q-root): exactly the elements inside the
// given flat-buffer ranges lose their state, whether ROOT (momentum) or AdamW (m and v) holds it, and every
// other element's state is untouched, for ranges that cut through parameters and span several.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "model/engine_common.h"
#include "optim/root_optimizer.h"

namespace fp4 {
namespace {

ParameterSet make_params(std::mt19937_64& rng) {
  ParameterSet ps;
  ps.add("embed", {40, 32}, false, ParamInit::kNormal);                // AdamW
  ps.add("blocks.0.attn.wqkv", {96, 32}, true, ParamInit::kNormal);    // ROOT
  ps.add("blocks.0.attn_norm", {32}, false, ParamInit::kOnes);         // AdamW
  ps.add("blocks.0.attn.wqkv.l1", {8, 32}, true, ParamInit::kNormal);  // ROOT
  ps.add("blocks.0.attn.wqkv.l2", {96, 8}, true, ParamInit::kNormal);  // ROOT
  ps.add("lm_head", {40, 32}, true, ParamInit::kNormal);               // AdamW
  ps.allocate();
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (float& v : ps.values()) v = d(rng);
  return ps;
}

// Every state value per flat-buffer element of the parameters: ROOT's momentum, or AdamW's (m, v).
std::vector<std::vector<float>> state_per_element(const Optimizer& opt, const ParameterSet& ps) {
  const std::vector<StateTensor> state = opt.save_state(ps);
  std::vector<std::vector<float>> out(static_cast<size_t>(ps.numel()));
  for (const std::string prefix : {"root.m.", "adamw.m.", "adamw.v."})
    for (const StateTensor& t : state) {
      if (t.name.rfind(prefix, 0) != 0) continue;
      const Parameter& p = ps.at(ps.require(t.name.substr(prefix.size())));
      for (int64_t e = 0; e < p.info.numel(); ++e) {
        float v;
        std::memcpy(&v, t.bytes.data() + e * 4, 4);
        out[static_cast<size_t>(p.offset + e)].push_back(v);
      }
    }
  return out;
}

TEST(RootResetMoments, ZeroesExactlyTheRangesInRootAndAdamWParts) {
  const uint64_t seed = std::random_device{}();
  std::printf("[ seed ] %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (const NsPrecision precision : {NsPrecision::kFp32, NsPrecision::kNvfp4}) {
    ParameterSet ps = make_params(rng);
    RootOptimizer opt(ps, OptimizerPlacement{}, seed, precision);
    std::normal_distribution<float> d(0.0f, 0.5f);
    for (int step = 0; step < 2; ++step) {
      for (float& g : ps.grads()) g = d(rng);
      opt.step(ps, StepHyper{});
    }
    const auto before = state_per_element(opt, ps);
    for (const auto& s : before) ASSERT_FALSE(s.empty());
    // Whole factors (what LoRA-SVD passes), a range cutting through the embedding and into a ROOT matrix,
    // a range inside the norm gain, an empty range and one past the end.
    const int64_t embed_end = ps.at(0).info.numel();
    const Parameter& l1 = ps.at(ps.require("blocks.0.attn.wqkv.l1"));
    const Parameter& l2 = ps.at(ps.require("blocks.0.attn.wqkv.l2"));
    const Parameter& norm = ps.at(ps.require("blocks.0.attn_norm"));
    std::uniform_int_distribution<int64_t> cut(1, embed_end - 1);
    const std::vector<IndexRange> ranges = {{l1.offset, l1.offset + l1.info.numel()},
                                            {l2.offset, l2.offset + l2.info.numel()},
                                            {cut(rng), embed_end + 50},
                                            {norm.offset + 3, norm.offset + 7},
                                            {10, 10},
                                            {ps.numel(), ps.numel() + 5}};
    opt.reset_moments(ranges);
    const auto after = state_per_element(opt, ps);
    int64_t zeroed = 0;
    for (int64_t e = 0; e < ps.numel(); ++e) {
      bool inside = false;
      for (const IndexRange& r : ranges) inside |= e >= r.begin && e < r.end;
      const auto& a = after[static_cast<size_t>(e)];
      if (inside) {
        for (float v : a) ASSERT_EQ(v, 0.0f) << "element " << e;
        ++zeroed;
      } else {
        ASSERT_EQ(a, before[static_cast<size_t>(e)]) << "element " << e << " outside the ranges changed";
      }
    }
    EXPECT_GT(zeroed, l1.info.numel() + l2.info.numel());
  }
}

}  // namespace
}  // namespace fp4
