// Data parallelism on the GPU with one rank (a second rank on the same GPU is refused by NCCL): the
// NCCL communicator, the sharded AdamW step, the bucketed reduce-scatter (overlapped with the backward
// or after it), the all-gather and the gathered checkpoint must leave the CUDA engine's training
// bit-identical to the plain engine's. Multi-GPU runs: scripts/dist_gpu_check.sh.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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

void expect_same_parameters(const TrainingEngine& a, const TrainingEngine& b, const std::string& what) {
  for (const auto& p : a.parameters()) {
    std::vector<float> x(static_cast<size_t>(p.numel())), y(x.size());
    a.read_parameter(p.name, x);
    b.read_parameter(p.name, y);
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what << ": " << p.name;
  }
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

void log_line(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

TEST(DistCuda, OneRankNcclTrainingIsBitIdenticalToThePlainEngine) {
  const uint64_t seed = std::random_device{}();
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layers = 3;
  for (const char* recipe_name : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
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
      for (int m = 0; m <= step % 3; ++m) micro.push_back(random_batch(rng, 3, 64, cfg.vocab_real));
      const StepStats a = plain->train_step(micro, h);
      const StepStats b = on->train_step(micro, h);
      const StepStats c = off->train_step(micro, h);
      EXPECT_EQ(a.loss, b.loss) << recipe_name << " step " << step;
      EXPECT_EQ(a.loss, c.loss) << recipe_name << " step " << step;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << recipe_name << " step " << step;
      EXPECT_EQ(a.grad_norm, c.grad_norm) << recipe_name << " step " << step;
      EXPECT_EQ(a.tokens, b.tokens);
    }
    expect_same_parameters(*plain, *on, std::string(recipe_name) + " overlap on");
    expect_same_parameters(*plain, *off, std::string(recipe_name) + " overlap off");
    // The gathered checkpoint is the plain one, and it loads back into a data-parallel engine.
    const auto sa = plain->save_state(), sb = on->save_state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].name, sb[i].name);
      EXPECT_TRUE(sa[i].bytes == sb[i].bytes) << sa[i].name;
    }
    on->load_state(sa);
    std::vector<Batch> micro = {random_batch(rng, 4, 64, cfg.vocab_real)};
    EXPECT_EQ(plain->train_step(micro, h).loss, on->train_step(micro, h).loss);
    expect_same_parameters(*plain, *on, std::string(recipe_name) + " after load_state");
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
      case CommType::kF32: launch(static_cast<float*>(data), count, stream); break;
      case CommType::kF64: launch(static_cast<double*>(data), count, stream); break;
      case CommType::kI64: launch(static_cast<int64_t*>(data), count, stream); break;
    }
  }
  void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void* stream) override {
    ASSERT_EQ(ranges.size(), 1u);
    ++reductions_;
    launch(data + ranges[0].begin, ranges[0].size(), stream);
  }
  void all_gather(float*, std::span<const IndexRange> ranges, void*) override { ASSERT_EQ(ranges.size(), 1u); }
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
      SCOPED_TRACE(std::string(recipe_name) + ", spin " + std::to_string(spin_ns) + " ns");
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
      for (int step = 0; step < 3; ++step) {
        std::vector<Batch> micro;
        for (int m = 0; m < 3; ++m) micro.push_back(random_batch(rng, 2, 48, cfg.vocab_real));
        const StepStats a = on->train_step(micro, h);
        const StepStats b = off->train_step(micro, h);
        EXPECT_EQ(a.loss, b.loss) << "step " << step;
        EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
        // One reduction per bucket and step, however many micro-batches.
        EXPECT_EQ(twin_on.reductions(), buckets * (step + 1));
        EXPECT_EQ(twin_off.reductions(), buckets * (step + 1));
      }
      expect_same_parameters(*on, *off, "twin overlap on vs off");
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
  const std::vector<Batch> micro = {random_batch(rng, 2, 64, cfg.vocab_real), random_batch(rng, 2, 64, cfg.vocab_real)};
  StepHyper h;
  auto* probe = dynamic_cast<GradientProbe*>(plain.get());
  ASSERT_NE(probe, nullptr);
  probe->compute_gradients(micro);
  twin_engine->train_step(micro, h);
  auto* twin_probe = dynamic_cast<GradientProbe*>(twin_engine.get());
  for (const auto& p : plain->parameters()) {
    std::vector<float> g(static_cast<size_t>(p.numel())), t(g.size());
    probe->read_gradient(p.name, g);
    twin_probe->read_gradient(p.name, t);
    ASSERT_EQ(std::memcmp(g.data(), t.data(), g.size() * sizeof(float)), 0) << p.name;
  }
}

}  // namespace
}  // namespace fp4
