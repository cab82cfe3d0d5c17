// The process's place in a data-parallel job, read from the variables of its launcher (torchrun, mpirun,
// srun).
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
  // True when a launcher set RANK/WORLD_SIZE (or another launcher's forms), even for a job of one process:
  // the trainer then takes the data-parallel path (communicator, sharded optimizer) for any world size.
  bool launched = false;
};

// Looks up one environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Rank, world size and local rank from the first launcher that set its rank or size variable: torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK), Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK), MPICH's
// mpiexec or PMI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID), Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID); all three from that launcher. MASTER_ADDR and MASTER_PORT in every case. With none set
// the process is a single-process job with the defaults above. Throws fp4::Error naming the variable that
// is missing, not an integer, or inconsistent with the others.
DistEnv parse_dist_env(const EnvLookup& lookup);

// parse_dist_env over this process's environment.
DistEnv dist_env_from_process();

}  // namespace fp4
