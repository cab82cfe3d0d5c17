#include "train/init_from.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "train/file_io.h"

namespace fp4 {
namespace fs = std::filesystem;

bool branch_may_change(const std::string& key) {
  static const std::vector<std::string> kAllowed = {"optim.schedule",    "optim.schedule_steps",
                                                    "optim.final_ratio", "optim.decay_fraction",
                                                    "optim.decay_shape", "recipe.name"};
  return std::find(kAllowed.begin(), kAllowed.end(), key) != kAllowed.end() ||
         key.rfind("recipe.overrides.", 0) == 0;
}

std::vector<std::string> forbidden_branch_differences(const RunConfig& source, const RunConfig& branch) {
  std::vector<std::string> out;
  for (const std::string& d : identity_differences(source, branch))
    if (!branch_may_change(d.substr(0, d.find(':')))) out.push_back(d);
  return out;
}

Checkpoint load_branch_checkpoint(const fs::path& from, const RunConfig& branch) {
  fs::path dir = from;
  if (!fs::exists(from / "manifest.json")) {
    FP4_CHECK(fs::is_directory(from), "--init-from ", from.string(), ": no such directory");
    const auto latest = latest_checkpoint(from);
    FP4_CHECK(latest, "--init-from ", from.string(),
              ": neither a checkpoint directory (manifest.json) nor a run directory with a checkpoint");
    dir = *latest;
  }
  Checkpoint ckpt = load_checkpoint(dir);
  const fs::path trainer_file = dir / "trainer.json";
  FP4_CHECK(ckpt.trainer.contains("config"), trainer_file.string(), ": no run config stored");
  const RunConfig source = run_config_from_json(ckpt.trainer["config"], trainer_file.string());
  const auto forbidden = forbidden_branch_differences(source, branch);
  if (!forbidden.empty()) {
    std::string list;
    for (const auto& d : forbidden) list += "\n  " + d;
    FP4_THROW("--init-from ", dir.string(), ": a branch may change only the LR schedule's length and decay ",
              "and the recipe, but the config differs in:", list);
  }
  FP4_CHECK(ckpt.step() < branch.train.steps, "--init-from ", dir.string(), ": the checkpoint is at step ",
            ckpt.step(), ", at or past train.steps = ", branch.train.steps, ": nothing left to train");
  return ckpt;
}

void start_branch_metrics(const fs::path& metrics, const Checkpoint& ckpt) {
  FP4_CHECK(!fs::exists(metrics), metrics.string(), " exists: a branch starts a new run directory");
  const int64_t step = ckpt.step();
  std::string kept;
  const fs::path source = ckpt.dir.parent_path().parent_path() / "metrics.jsonl";  // <run>/checkpoints/step_N
  if (fs::exists(source)) {
    std::istringstream in(read_file(source));
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
        continue;
      if (j["step"].get<int64_t>() <= step) kept += line + "\n";
    }
  }
  kept +=
      nlohmann::json{{"type", "init_from"}, {"step", step}, {"checkpoint", fs::absolute(ckpt.dir).string()}}
          .dump() +
      "\n";
  write_file_atomically(metrics, kept);
}

}  // namespace fp4
