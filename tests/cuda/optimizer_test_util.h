// Helpers of the device-optimizer tests (q_adamw_cuda_test.cu, root_cuda_test.cu): seeds, error messages,
// bit-for-bit comparisons of values and checkpoint states, and the small model their engine tests train.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/engine.h"

namespace fp4::testing {

// A fresh seed per call, or FP4_TEST_SEED's value to replay a failure (the traces print the seed).
inline uint32_t fresh_seed() {
  if (const char* s = std::getenv("FP4_TEST_SEED")) return static_cast<uint32_t>(std::stoull(s));
  static std::random_device rd;
  return rd();
}

// The fp4::Error message f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Bit-for-bit equal values (NaN payloads and signed zeros included); the first difference is reported.
inline void expect_same_floats(const std::vector<float>& want, const std::vector<float>& got,
                               const std::string& where) {
  ASSERT_EQ(want.size(), got.size()) << where;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], 4) != 0) {
      ADD_FAILURE() << where << ": element " << i << " is " << got[i] << ", the CPU has " << want[i];
      return;
    }
}

// Names, dtypes, shapes and bytes of two states, in order; the first differing byte is reported.
inline void expect_same_state(const std::vector<StateTensor>& want, const std::vector<StateTensor>& got,
                              const std::string& where) {
  ASSERT_EQ(want.size(), got.size()) << where;
  for (size_t t = 0; t < want.size(); ++t) {
    ASSERT_EQ(want[t].name, got[t].name) << where;
    EXPECT_EQ(want[t].dtype, got[t].dtype) << where << " " << want[t].name;
    EXPECT_EQ(want[t].shape, got[t].shape) << where << " " << want[t].name;
    ASSERT_EQ(want[t].bytes.size(), got[t].bytes.size()) << where << " " << want[t].name;
    for (size_t b = 0; b < want[t].bytes.size(); ++b)
      if (want[t].bytes[b] != got[t].bytes[b]) {
        ADD_FAILURE() << where << ": " << want[t].name << " byte " << b << " is " << int(got[t].bytes[b])
                      << ", the CPU wrote " << int(want[t].bytes[b]);
        break;
      }
  }
}

// Two layers of head_dim 64 (the fused attention kernels), vocabulary 512.
inline ModelConfig small64_config() {
  ModelConfig cfg;
  cfg.name = "small64";
  cfg.n_layers = 2;
  cfg.d_model = 256;
  cfg.n_heads = 4;
  cfg.d_ff = 512;
  cfg.vocab_size = 512;
  cfg.vocab_real = 500;
  cfg.max_seq_len = 128;
  validate(cfg);
  return cfg;
}

// b rows of t uniform random tokens and targets from the model's real vocabulary.
inline Batch random_batch(std::mt19937& rng, const ModelConfig& cfg, int b, int t) {
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, std::vector<int32_t>(static_cast<size_t>(b) * t),
              std::vector<int32_t>(static_cast<size_t>(b) * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = tok(rng);
  return batch;
}

// Next-token targets of one random batch, which a small model memorizes in a few steps.
inline Batch next_token_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) batch.tokens.push_back(tok(rng));
  for (int r = 0; r < b; ++r)
    for (int i = 0; i < t; ++i)
      batch.targets.push_back(i + 1 < t ? batch.tokens[static_cast<size_t>(r * t + i + 1)] : -1);
  return batch;
}

// A device optimizer's engine state `saved` (written by `gpu`) loads into the CPU engine, which saves the
// same bytes, then into `back` (a fresh CUDA engine of the same seed), which saves them again and takes the
// same next step on `batch` as `gpu`. A data-parallel set-up without a communicator is then refused with
// a message holding `dp_refusal`.
inline void expect_state_moves_to_the_cpu_and_back(TrainingEngine& gpu, TrainingEngine& cpu,
                                                   std::unique_ptr<TrainingEngine> back,
                                                   const std::vector<StateTensor>& saved, const Batch& batch,
                                                   const StepHyper& h, const std::string& dp_refusal) {
  cpu.load_state(saved);
  const std::vector<StateTensor> via_cpu = cpu.save_state();
  expect_same_state(saved, via_cpu, "CUDA -> CPU -> save");
  back->load_state(via_cpu);
  expect_same_state(saved, back->save_state(), "CPU -> CUDA -> save");
  const StepStats s1 = gpu.train_step({&batch, 1}, h), s2 = back->train_step({&batch, 1}, h);
  EXPECT_EQ(s1.loss, s2.loss);
  expect_same_state(gpu.save_state(), back->save_state(), "one step after the reload");
  const std::string refusal = error_of([&] { gpu.set_data_parallel(DataParallel{}); });
  EXPECT_NE(refusal.find(dp_refusal), std::string::npos) << refusal;
}

}  // namespace fp4::testing
