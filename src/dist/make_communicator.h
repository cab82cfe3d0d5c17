// The communicator of a data-parallel job: TCP between host buffers for the CPU engine, NCCL between
// GPUs for the CUDA engine.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/dist_env.h"

namespace fp4 {

struct CommTimeouts {
  std::chrono::milliseconds setup{std::chrono::minutes(5)};
  std::chrono::milliseconds op{std::chrono::minutes(30)};  // a rank saving or evaluating holds the rest
};

// FP4_DIST_TIMEOUT (seconds, > 0) overrides both; throws fp4::Error naming it when it is not a number.
CommTimeouts comm_timeouts_from_env();

// device_memory: the engine's buffers live on a GPU (NCCL); otherwise host memory (TCP).
std::unique_ptr<Communicator> make_communicator(const DistEnv& env, bool device_memory,
                                                const std::function<void(const std::string&)>& log);

}  // namespace fp4
