// Helpers shared by the trainer tests: a fresh temp directory per test, error-message matching.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "../error_of.h"
#include "core/error.h"
#include "data/prepare.h"
#include "model/config.h"
#include "model/cpu_engine.h"
#include "model/engine.h"
#include "train/run_config.h"

namespace fp4::testing {

// A new empty directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("fp4_train_test_" + std::to_string(rd()) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A model small enough to train in milliseconds (byte vocabulary).
inline ModelConfig small_model() {
  ModelConfig m = model_preset("tiny");
  m.n_layers = 1;
  m.d_model = 32;
  m.n_heads = 2;
  m.d_ff = 64;
  m.max_seq_len = 64;
  return m;
}

// A run of small_model() on the byte shards in <tmp>/shards (prepare_corpus), written to <tmp>/<run>:
// batch x 32 tokens per micro-batch, lr 3e-3 with 2 warm-up steps over a fixed total_steps schedule, a
// metrics line every step. Tests set what they vary (accumulation, evaluation, checkpoints) on the result.
inline RunConfig small_run_config(const std::filesystem::path& tmp, const std::string& run, int64_t steps,
                                  uint64_t seed, int batch, int64_t total_steps) {
  RunConfig c = default_run_config();
  c.model = small_model();
  c.data.train_dir = (tmp / "shards").string();
  c.data.train_text = "";
  c.data.val_text = "";
  c.data.batch = batch;
  c.data.seq = 32;
  c.optim.lr = 3e-3;
  c.optim.warmup = 2;
  c.optim.total_steps = total_steps;
  c.train.steps = steps;
  c.train.log_every = 1;
  c.train.out_dir = (tmp / run).string();
  c.train.seed = seed;
  return c;
}

// A micro-batch of random tokens (targets are the next tokens of the same draw).
inline Batch random_batch(std::mt19937_64& rng, int batch, int seq, int vocab) {
  Batch b;
  b.batch = batch;
  b.seq = seq;
  for (int r = 0; r < batch; ++r) {
    std::vector<int32_t> row(static_cast<size_t>(seq) + 1);
    for (auto& t : row) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    b.tokens.insert(b.tokens.end(), row.begin(), row.end() - 1);
    b.targets.insert(b.targets.end(), row.begin() + 1, row.end());
  }
  return b;
}

// A CPU engine of small_model() with non-trivial optimizer state: `steps` steps on random tokens.
inline std::unique_ptr<TrainingEngine> trained_cpu_engine(uint64_t seed, int steps) {
  auto engine = make_cpu_engine(small_model(), Recipe{}, seed);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < steps; ++i) {
    const std::vector<Batch> micro = {random_batch(rng, 2, 8, 257)};
    engine->train_step(micro, StepHyper{});
  }
  return engine;
}

// Pseudo-English documents from a small random vocabulary: learnable, different on every run.
inline void write_corpus(const std::filesystem::path& dir, std::mt19937_64& rng, int docs,
                         int words_per_doc) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> vocab;
  for (int i = 0; i < 40; ++i) {
    std::string w;
    for (int n = static_cast<int>(rng() % 6 + 2); n > 0; --n) w += static_cast<char>('a' + rng() % 26);
    vocab.push_back(w);
  }
  for (int d = 0; d < docs; ++d) {
    std::ofstream out(dir / ("doc" + std::to_string(d) + ".txt"));
    for (int w = 0; w < words_per_doc; ++w)
      out << vocab[rng() % vocab.size()] << (w % 12 == 11 ? ".\n" : " ");
  }
}

// <root>/text/{train,val}/*.txt and their byte-tokenized shards in <root>/shards.
inline void prepare_corpus(const std::filesystem::path& root) {
  std::mt19937_64 rng(std::random_device{}());
  write_corpus(root / "text/train", rng, 6, 1500);
  write_corpus(root / "text/val", rng, 1, 800);
  PrepareOptions o;
  o.inputs = {root / "text/train"};
  o.val_inputs = {root / "text/val"};
  o.tokenizer = "bytes";
  o.out_dir = root / "shards";
  o.threads = 1;
  prepare_shards(o);
}

}  // namespace fp4::testing
