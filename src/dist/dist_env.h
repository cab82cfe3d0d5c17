// The process's place in a data-parallel job, read from the torchrun / Slurm environment variables.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace fp4 {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // selects the GPU on this node
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // True when a launcher set RANK/WORLD_SIZE (or Slurm's forms), even for a job of one process: the
  // trainer then takes the data-parallel path (communicator, sharded optimizer) for any world size.
  bool launched = false;
};

// Looks up one environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// RANK, WORLD_SIZE, LOCAL_RANK (torchrun) or SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (srun), the
// torchrun names winning; MASTER_ADDR and MASTER_PORT. With neither RANK nor WORLD_SIZE (nor their
// Slurm forms) set the process is a single-process job with the defaults above. Throws fp4::Error
// naming the variable that is missing, not an integer, or inconsistent with the others.
DistEnv parse_dist_env(const EnvLookup& lookup);

// parse_dist_env over this process's environment.
DistEnv dist_env_from_process();

}  // namespace fp4
