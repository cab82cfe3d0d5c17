// Branching a run from another run's checkpoint (`fp4train train --init-from DIR`): the new run starts
// with the checkpoint's weights, optimizer state, data position, step and token count, and may change
// what the branch is for (the LR schedule's length and decay, and the recipe), nothing else. The WSD
// experiments (docs/RESULTS.md) train one stable run per recipe and branch several decays from it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/run_config.h"

namespace fp4 {

// The training-identity keys (run_config.h) a branch may change: the schedule's kind, length and decay
// (optim.schedule, optim.schedule_steps, optim.final_ratio, optim.decay_fraction, optim.decay_shape) and
// the recipe (recipe.name, recipe.overrides.*). Model, data, batch, the optimizer's other settings,
// warm-up and seed must stay: the branch continues the same training.
bool branch_may_change(const std::string& identity_key);

// identity_differences(source, branch) that a branch may not make ("model.d_model: 256 -> 384").
std::vector<std::string> forbidden_branch_differences(const RunConfig& source, const RunConfig& branch);

// Reads the checkpoint to branch from: `from` is a checkpoint directory (it holds manifest.json) or a run
// directory (its latest checkpoint). Throws fp4::Error naming the directory when there is none, when the
// branch's config changes a forbidden key (listing them) or when the checkpoint is at or past
// branch.train.steps (nothing left to train).
Checkpoint load_branch_checkpoint(const std::filesystem::path& from, const RunConfig& branch);

// Starts the branch's metrics.jsonl: the source run's records through the checkpoint's step (so the
// branch's curves start at step 0), then one {"type": "init_from", "step", "checkpoint"} record.
// `metrics` must not exist yet; a source without metrics.jsonl gives just the init_from record.
void start_branch_metrics(const std::filesystem::path& metrics, const Checkpoint& ckpt);

}  // namespace fp4
