// Single-host launcher: starts one process per GPU with the torchrun-style environment that
// dist_env_from_process() reads, and supervises them as one job.
#pragma once

#include <string>
#include <vector>

namespace fp4 {

struct LaunchOptions {
  int nprocs = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;               // 0: a loopback port the kernel reports free
  std::vector<std::string> command;  // program (looked up on PATH) and its arguments
};

// Runs nprocs copies of command, each with RANK = LOCAL_RANK = its index, WORLD_SIZE = nprocs,
// MASTER_ADDR, MASTER_PORT and NCCL_NVLS_ENABLE=0 added to this process's environment
// (CUDA_VISIBLE_DEVICES untouched: rank i uses device LOCAL_RANK). SIGINT and SIGTERM sent to the
// launcher are passed on to every child. Waits for all children. Returns 0 when every child exits
// 0; otherwise the first failing child's exit code (128 + N when killed by signal N), after
// printing which rank failed to stderr and sending SIGTERM to the children still running.
// Throws fp4::Error for bad options or when the command cannot be executed.
int launch_local(const LaunchOptions& options);

}  // namespace fp4
