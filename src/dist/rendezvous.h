// TCP rendezvous of a data-parallel job: rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank
// connects, and rank 0 hands them one byte blob (NCCL's unique id, 128 bytes, when NCCL comes).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "dist/dist_env.h"

namespace fp4 {

// Every rank of env's job calls this; rank 0 passes the blob (other ranks' blob is ignored) and all
// ranks return rank 0's blob. Returns only once rank 0 has heard every rank acknowledge it. Throws
// fp4::Error naming the address, port and rank when the job does not assemble within timeout (a
// rank missing, a port taken, a peer of another job), or when a peer breaks the protocol.
std::vector<uint8_t> rendezvous_broadcast(const DistEnv& env, std::span<const uint8_t> blob,
                                          std::chrono::milliseconds timeout);

}  // namespace fp4
