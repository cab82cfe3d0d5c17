// Data parallelism on the GPU with one rank (a second rank on the same GPU is refused by NCCL): the
// NCCL communicator, the sharded AdamW step, the bucketed reduce-scatter (overlapped with the backward
// or after it), the all-gather and the gathered checkpoint must leave the CUDA engine's training
// bit-identical to the plain engine's. Multi-GPU runs: scripts/dist_gpu_check.sh.
// Every comparison names the recipe, shape, step and the first differing element, so one GPU run says
// where a difference enters; DistCuda.PlainEnginesOfOneSeedAreBitIdentical checks the premise of the
// others (the engine itself is reproducible at these shapes) on its own.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "dist/nccl_communicator.h"
#include "model/cuda/cuda_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

Batch random_batch(std::mt19937_64& rng, int rows, int seq, int vocab) {
  Batch b;
  b.batch = rows;
  b.seq = seq;
  for (int i = 0; i < rows * seq; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    b.targets.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
  }
  return b;
}

// Every parameter's values (or gradients) in engine order.
using Tensors = std::vector<std::pair<std::string, std::vector<float>>>;

Tensors read_all(const TrainingEngine& e, bool gradients) {
  const auto* probe = dynamic_cast<const GradientProbe*>(&e);
  EXPECT_NE(probe, nullptr);
  Tensors out;
  for (const auto& p : e.parameters()) {
    std::vector<float> x(static_cast<size_t>(p.numel()));
    if (gradients && probe != nullptr)
      probe->read_gradient(p.name, x);
    else
      e.read_parameter(p.name, x);
    out.emplace_back(p.name, std::move(x));
  }
  return out;
}

std::string show(float x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g (%a)", static_cast<double>(x), static_cast<double>(x));
  return buf;
}

// "" when a and b hold the same bits; otherwise how many elements differ, in which parameters (in
// engine order, so the gradient bucket is visible), and the first differing element with both values.
std::string first_difference(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " tensors";
  size_t differ = 0, total = 0;
  std::string names, first;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& x = a[i].second;
    const auto& y = b[i].second;
    total += x.size();
    if (x.size() != y.size())
      return a[i].first + ": " + std::to_string(x.size()) + " vs " + std::to_string(y.size());
    size_t here = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      if (std::memcmp(&x[j], &y[j], sizeof(float)) == 0) continue;
      if (first.empty())
        first = a[i].first + "[" + std::to_string(j) + "] = " + show(x[j]) + " vs " + show(y[j]);
      ++here;
    }
    if (here > 0)
      names += " " + a[i].first + "(" + std::to_string(here) + "/" + std::to_string(x.size()) + ")";
    differ += here;
  }
  if (differ == 0) return "";
  return std::to_string(differ) + " of " + std::to_string(total) + " elements differ; first: " + first +
         "; in:" + names;
}

int64_t parameter_count(const TrainingEngine& e) {
  int64_t n = 0;
  for (const auto& p : e.parameters()) n += p.numel();
  return n;
}

void set_overlap(TrainingEngine& e, bool on) {
  auto* o = dynamic_cast<GradientOverlap*>(&e);
  ASSERT_NE(o, nullptr);
  o->set_overlap(on);
  ASSERT_EQ(o->overlap(), on);
}

void log_line(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
}

// Same loss and norm bits, same gradients (as the step left them) and same parameters after it;
// returns whether all were the same.
bool expect_same_step(const StepStats& a, const StepStats& b, const TrainingEngine& ea,
                      const TrainingEngine& eb, const std::string& what) {
  const std::string grads = first_difference(read_all(ea, true), read_all(eb, true));
  const std::string values = first_difference(read_all(ea, false), read_all(eb, false));
  EXPECT_EQ(a.loss, b.loss) << what << ": loss";
  EXPECT_EQ(a.grad_norm, b.grad_norm) << what << ": grad_norm";
  EXPECT_EQ(a.tokens, b.tokens) << what << ": tokens";
  EXPECT_EQ(grads, "") << what << ": gradients";
  EXPECT_EQ(values, "") << what << ": parameters";
  return a.loss == b.loss && a.grad_norm == b.grad_norm && a.tokens == b.tokens && grads.empty() &&
         values.empty();
}

// The premise of every bit-identity below: two CUDA engines of one seed give the same bits on the same
// micro-batches, and one engine gives the same gradient twice, at the shapes the tests use (48 and 64
// tokens a row: one attention key tile; 96, 128 and 192 rows: whole and partial 128-row quantizer tiles).
// A failure here is the engine's (or a kernel's), not the data-parallel path's: the message says which
// recipe and shape, and whether it is run to run (the same engine) or between instances.
TEST(DistCuda, PlainEnginesOfOneSeedAreBitIdentical) {
  const uint64_t seed = std::random_device{}();
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layers = 3;
  for (const char* recipe_name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    // Token counts are multiples of 128 (block128 scaling runs along the tokens in the weight gradient);
    // T <= 64 keeps the attention backward to one key tile, so its dQ sums are reproducible.
    for (const auto& [rows, seq] : {std::pair{2, 64}, std::pair{8, 48}, std::pair{4, 64}}) {
      const std::string what = std::string(recipe_name) + ", " + std::to_string(rows) + " x " +
                               std::to_string(seq) + ", seed " + std::to_string(seed);
      const Recipe recipe = load_recipe(recipe_name);
      auto a = make_cuda_engine(cfg, recipe, seed, 0);
      auto b = make_cuda_engine(cfg, recipe, seed, 0);
      auto* pa = dynamic_cast<GradientProbe*>(a.get());
      auto* pb = dynamic_cast<GradientProbe*>(b.get());
      ASSERT_TRUE(pa != nullptr && pb != nullptr);
      std::mt19937_64 rng(seed);
      const std::vector<Batch> one = {random_batch(rng, rows, seq, cfg.vocab_real)};
      const StepStats ga = pa->compute_gradients(one);
      const Tensors grads_a = read_all(*a, true);
      const StepStats gb = pb->compute_gradients(one);
      EXPECT_EQ(ga.loss, gb.loss) << what << ": loss, engine a vs b";
      EXPECT_EQ(first_difference(grads_a, read_all(*b, true)), "") << what << ": gradients, engine a vs b";
      const StepStats ga2 = pa->compute_gradients(one);
      EXPECT_EQ(ga.loss, ga2.loss) << what << ": loss, engine a run to run";
      EXPECT_EQ(first_difference(grads_a, read_all(*a, true)), "")
          << what << ": gradients, engine a run to run";
      StepHyper h;
      h.lr = 3e-3f;
      for (int step = 0; step < 2; ++step) {
        const std::vector<Batch> micro = {random_batch(rng, rows, seq, cfg.vocab_real),
                                          random_batch(rng, rows, seq, cfg.vocab_real)};
        const StepStats sa = a->train_step(micro, h);
        const StepStats sb = b->train_step(micro, h);
        expect_same_step(sa, sb, *a, *b, what + ", train step " + std::to_string(step));
      }
    }
  }
}

TEST(DistCuda, OneRankNcclTrainingIsBitIdenticalToThePlainEngine) {
  const uint64_t seed = std::random_device{}();
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layers = 3;
  for (const char* recipe_name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    const std::string where = std::string(recipe_name) + ", seed " + std::to_string(seed);
    const Recipe recipe = load_recipe(recipe_name);
    auto plain = make_cuda_engine(cfg, recipe, seed, 0);
    auto on = make_cuda_engine(cfg, recipe, seed, 0);
    auto off = make_cuda_engine(cfg, recipe, seed, 0);
    DistEnv env;
    env.launched = true;  // world 1: no sockets, NCCL with one rank
    NcclCommunicator comm_on(env, std::chrono::seconds(60), std::chrono::seconds(60), log_line);
    NcclCommunicator comm_off(env, std::chrono::seconds(60), std::chrono::seconds(60), log_line);
    ASSERT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
    const int64_t numel = parameter_count(*on);
    on->set_data_parallel({&comm_on, {{0, numel}}});
    off->set_data_parallel({&comm_off, {{0, numel}}});
    set_overlap(*on, true);
    set_overlap(*off, false);

    std::mt19937_64 rng(seed);
    StepHyper h;
    h.lr = 3e-3f;
    h.grad_clip = 0.5f;  // clipping active: the norm goes through the all-reduce
    for (int step = 0; step < 4; ++step) {
      // 1 to 3 micro-batches: accumulation must reduce only after the last one.
      std::vector<Batch> micro;
      for (int m = 0; m <= step % 3; ++m) micro.push_back(random_batch(rng, 4, 64, cfg.vocab_real));
      const StepStats a = plain->train_step(micro, h);
      const StepStats b = on->train_step(micro, h);
      const StepStats c = off->train_step(micro, h);
      const std::string at = where + ", step " + std::to_string(step) + " (" + std::to_string(micro.size()) +
                             " micro-batches of 4 x 64)";
      // One NCCL rank reduces in place without changing a bit: the gradients stay the plain engine's.
      const bool same_on = expect_same_step(a, b, *plain, *on, at + ", plain vs overlap on");
      const bool same_off = expect_same_step(a, c, *plain, *off, at + ", plain vs overlap off");
      if (!same_on || !same_off) break;  // the first step that differs is the one to read
    }
    // The gathered checkpoint is the plain one, and it loads back into a data-parallel engine.
    const auto sa = plain->save_state(), sb = on->save_state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].name, sb[i].name);
      EXPECT_TRUE(sa[i].bytes == sb[i].bytes) << where << ": checkpoint tensor " << sa[i].name;
    }
    on->load_state(sa);
    std::vector<Batch> micro = {random_batch(rng, 4, 64, cfg.vocab_real)};
    const StepStats a = plain->train_step(micro, h);
    const StepStats b = on->train_step(micro, h);
    expect_same_step(a, b, *plain, *on, where + ", after load_state");
  }
}

// Doubles n elements in place, after spinning for about spin_ns (a slow "network").
template <typename T>
__global__ void slow_double_kernel(T* data, int64_t n, int64_t spin_ns) {
  if (spin_ns > 0 && threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < spin_ns * 2) {  // ~2 cycles per ns on a Hopper SM clock
    }
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[i] = data[i] + data[i];
}

// A device communicator of one rank that plays a job of two ranks with identical data ("twins"):
// every sum doubles. Unlike one NCCL rank (whose in-place reductions do nothing), it changes the
// gradients on the device, and it can be slow, so a reduction that started before its bucket's
// gradients were final, ran once per micro-batch, or finished after the optimizer read the gradients
// changes the result. It counts the bucket reductions.
class TwinCommunicator final : public Communicator {
 public:
  explicit TwinCommunicator(int64_t spin_ns) : spin_ns_(spin_ns) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "twin"; }
  bool device_memory() const override { return true; }

  void all_reduce_sum(void* data, int64_t count, CommType type, void* stream) override {
    switch (type) {
      case CommType::kF32:
        launch(static_cast<float*>(data), count, stream);
        break;
      case CommType::kF64:
        launch(static_cast<double*>(data), count, stream);
        break;
      case CommType::kI64:
        launch(static_cast<int64_t*>(data), count, stream);
        break;
    }
  }
  void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void* stream) override {
    ASSERT_EQ(ranges.size(), 1u);
    ++reductions_;
    launch(data + ranges[0].begin, ranges[0].size(), stream);
  }
  void all_gather(float*, std::span<const IndexRange> ranges, void*) override {
    ASSERT_EQ(ranges.size(), 1u);
  }
  void host_all_reduce_sum(void* data, int64_t count, CommType type) override {
    for (int64_t i = 0; i < count; ++i) {
      if (type == CommType::kF32) static_cast<float*>(data)[i] *= 2;
      if (type == CommType::kF64) static_cast<double*>(data)[i] *= 2;
      if (type == CommType::kI64) static_cast<int64_t*>(data)[i] *= 2;
    }
  }
  void barrier(void*) override {}
  int reductions() const { return reductions_; }

 private:
  template <typename T>
  void launch(T* data, int64_t n, void* stream) {
    if (n == 0) return;
    slow_double_kernel<<<64, 256, 0, static_cast<cudaStream_t>(stream)>>>(data, n, spin_ns_);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  int64_t spin_ns_;
  int reductions_ = 0;
};

TEST(DistCuda, OverlappedReductionsWaitForTheirBucketAndTheOptimizerWaitsForThem) {
  const uint64_t seed = std::random_device{}();
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layers = 4;
  const int buckets = cfg.n_layers + 2;  // head, blocks, embedding
  for (const char* recipe_name : {"bf16", "tetrajet-v2-base"}) {
    // 0: as fast as the device allows; 200 us per reduction: slower than a tiny block's backward.
    for (const int64_t spin_ns : {int64_t{0}, int64_t{200000}}) {
      const Recipe recipe = load_recipe(recipe_name);
      auto on = make_cuda_engine(cfg, recipe, seed, 0);
      auto off = make_cuda_engine(cfg, recipe, seed, 0);
      TwinCommunicator twin_on(spin_ns), twin_off(spin_ns);
      const int64_t numel = parameter_count(*on);
      on->set_data_parallel({&twin_on, {{0, numel}}});
      off->set_data_parallel({&twin_off, {{0, numel}}});
      set_overlap(*on, true);
      set_overlap(*off, false);
      std::mt19937_64 rng(seed ^ static_cast<uint64_t>(spin_ns));
      StepHyper h;
      h.lr = 3e-3f;
      h.grad_clip = 1e9f;  // the gradient's size reaches the weights (not only its direction)
      const std::string where = std::string(recipe_name) + ", spin " + std::to_string(spin_ns) +
                                " ns, seed " + std::to_string(seed);
      for (int step = 0; step < 3; ++step) {
        std::vector<Batch> micro;
        for (int m = 0; m < 3; ++m) micro.push_back(random_batch(rng, 8, 48, cfg.vocab_real));
        const StepStats a = on->train_step(micro, h);
        const StepStats b = off->train_step(micro, h);
        // One reduction per bucket and step, however many micro-batches.
        EXPECT_EQ(twin_on.reductions(), buckets * (step + 1)) << where << ", step " << step << ", overlap on";
        EXPECT_EQ(twin_off.reductions(), buckets * (step + 1))
            << where << ", step " << step << ", overlap off";
        // The gradients as the twin left them (doubled once) and the updated weights.
        if (!expect_same_step(a, b, *on, *off,
                              where + ", step " + std::to_string(step) + ", overlap on vs off"))
          break;  // the first step that differs is the one to read
      }
    }
  }
}

// Each bucket is reduced once, over the gradient of all micro-batches: the twin's token count is
// doubled, so its loss scaling is exactly half the plain engine's, and one doubling afterwards gives
// the plain gradient bit for bit. A reduction per micro-batch (x4 on the first) or one that started
// before the bucket's last gradient was added would not.
TEST(DistCuda, OverlappedStepLeavesTheReducedGradient) {
  const uint64_t seed = std::random_device{}();
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layers = 2;
  const Recipe recipe = load_recipe("bf16");
  auto plain = make_cuda_engine(cfg, recipe, seed, 0);
  auto twin_engine = make_cuda_engine(cfg, recipe, seed, 0);
  TwinCommunicator twin(200000);
  twin_engine->set_data_parallel({&twin, {{0, parameter_count(*twin_engine)}}});
  set_overlap(*twin_engine, true);
  std::mt19937_64 rng(seed);
  const std::vector<Batch> micro = {random_batch(rng, 2, 64, cfg.vocab_real),
                                    random_batch(rng, 2, 64, cfg.vocab_real)};
  StepHyper h;
  auto* probe = dynamic_cast<GradientProbe*>(plain.get());
  ASSERT_NE(probe, nullptr);
  probe->compute_gradients(micro);
  twin_engine->train_step(micro, h);
  EXPECT_EQ(first_difference(read_all(*plain, true), read_all(*twin_engine, true)), "")
      << "plain gradient vs the twin's after an overlapped step, seed " << seed;
}

}  // namespace
}  // namespace fp4
