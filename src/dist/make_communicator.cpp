#include "dist/make_communicator.h"

#include <cstdlib>

#include "core/error.h"
#include "dist/nccl_communicator.h"
#include "dist/tcp_communicator.h"

namespace fp4 {

CommTimeouts comm_timeouts_from_env() {
  CommTimeouts t;
  const char* v = std::getenv("FP4_DIST_TIMEOUT");
  if (!v || !*v) return t;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  FP4_CHECK(end && *end == '\0' && s > 0, "environment variable FP4_DIST_TIMEOUT='", v,
            "' is not a positive number of seconds");
  t.setup = t.op = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  return t;
}

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, bool device_memory,
                                                const std::function<void(const std::string&)>& log) {
  const CommTimeouts t = comm_timeouts_from_env();
  if (device_memory) return std::make_unique<NcclCommunicator>(env, t.setup, t.op, log);
  return std::make_unique<TcpCommunicator>(env, t.setup, t.op);
}

}  // namespace fp4
