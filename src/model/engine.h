// TrainingEngine: the contract between the trainer (data, schedule, logging, checkpoints) and a
// compute backend (the CPU reference engine, the CUDA engine). The trainer never touches layers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "model/config.h"

namespace fp4 {

// One micro-batch: tokens and next-token targets, both [batch][seq] row-major. A target < 0 is ignored.
struct Batch {
  int batch = 0;
  int seq = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

// Optimizer hyper-parameters of one step (the trainer's schedule fills lr).
struct StepHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // not applied to embeddings, norms (see ParameterInfo::weight_decay)
  float grad_clip = 1.0f;     // max global L2 norm; <= 0 disables clipping
};

struct StepStats {
  double loss = 0;       // mean cross-entropy + z-loss over all target tokens of the step
  double ce_loss = 0;    // mean cross-entropy alone
  double grad_norm = 0;  // global L2 norm before clipping
  int64_t tokens = 0;    // target tokens counted
};

struct ParameterInfo {
  std::string name;           // e.g. "blocks.0.attn.wqkv"
  std::vector<int64_t> shape;
  bool weight_decay = true;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// A named piece of state for checkpoints: parameters, optimizer moments, counters. dtype is a
// safetensors dtype string ("F32", "BF16", "U8", "I64"), so quantized optimizer states fit too.
struct StateTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// One rank of a data-parallel job (ZeRO-1). comm outlives the engine's use of it; shards[q] is the range
// of the flat parameter buffer (parameters() order, each tensor's elements row-major, no gaps) whose
// optimizer state rank q keeps (dist/shard_plan.h makes them).
struct DataParallel {
  Communicator* comm = nullptr;
  std::vector<IndexRange> shards;
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string device_name() const = 0;  // "cpu", "cuda:0 (NVIDIA H200)", ...

  // One optimizer step over the micro-batches (gradient accumulation): forward, backward, global
  // norm clipping, AdamW. Throws fp4::Error naming the layer if the loss or a gradient is not finite.
  virtual StepStats train_step(std::span<const Batch> micro_batches, const StepHyper& hyper) = 0;

  // Mean loss (cross-entropy, no z-loss) and token count over a batch, no gradients.
  virtual StepStats evaluate(const Batch& batch) = 0;

  // Logits of the last position of each row of tokens [batch][seq]: out is [batch][vocab_size].
  // Padded ids (>= vocab_real) are never predicted: their logits are -inf, as the loss treats them.
  virtual void last_logits(const Batch& batch, std::span<float> out) = 0;

  virtual std::vector<ParameterInfo> parameters() const = 0;
  virtual void read_parameter(const std::string& name, std::span<float> out) const = 0;
  virtual void write_parameter(const std::string& name, std::span<const float> in) = 0;

  // Everything needed to resume bit for bit: parameters, optimizer state, step counters.
  virtual std::vector<StateTensor> save_state() const = 0;
  // Throws fp4::Error naming the tensor when a name is missing or a shape/dtype disagrees.
  virtual void load_state(const std::vector<StateTensor>& state) = 0;

  // Makes this engine rank comm->rank() of a data-parallel job, before its first step or load_state.
  // Then train_step takes this rank's slice of every micro-batch: the loss is normalised by the
  // target count of all ranks together, gradients are summed over ranks bucket by bucket
  // (reduce-scatter to the owners), the clipping norm covers every rank's shard, each rank updates its
  // own shard (optimizer state for it alone) and the parameters are all-gathered; the returned
  // statistics are the job's, equal on every rank. save_state() and load_state() stay world-size free
  // (full tensors): saving gathers the shards and is collective, loading keeps this rank's range.
  // evaluate() and last_logits() stay local. Engines without data parallelism throw fp4::Error.
  virtual void set_data_parallel(const DataParallel& dp) {
    (void)dp;
    FP4_THROW("engine ", device_name(), " does not support data-parallel training");
  }
};

}  // namespace fp4
